//! Shared watches, used directly against the real
//! remote cluster: many dependents reading many objects of one kind cost one
//! list and one watch, reads are then answered from memory, a change wakes
//! exactly the dependent that read the object, a watch stops with its last
//! reader, a cluster that never answers reads as Unknown (never Absent), and
//! cached objects carry no managedFields.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::BTreeMap,
    pin::Pin,
    time::{Duration, Instant},
};

use e2e::{
    metric_sum,
    proxy::Proxy,
    stall::{Mode, Stalled},
    wait,
};
use futures::{FutureExt as _, Stream, StreamExt as _};
use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Secret},
};
use kube::{
    Api, Client,
    api::{GroupVersionKind, ObjectMeta, PostParams},
    discovery::ApiResource,
    runtime::reflector::ObjectRef,
};
use runtime::{
    Metrics,
    remote::{RemoteClients, RemoteCluster, ResolveError},
    watches::{Cached, Scope, Target, Watches},
};

const CONTROLLER: &str = "e2e-watches";
/// The longest a change may take to wake its dependent (the target).
const WAKE: Duration = Duration::from_secs(2);

type Woken = Pin<Box<dyn Stream<Item = ObjectRef<ConfigMap>> + Send>>;

/// A Secret holding `kubeconfig` under `kubeconfig`, as a KubernetesCluster's
/// or ProviderConfig's would.
fn secret(kubeconfig: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("creds".into()),
            namespace: Some("default".into()),
            uid: Some(testenv::unique_name("uid")),
            resource_version: Some("1".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "kubeconfig".to_owned(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// The cluster behind `kubeconfig` through a remote client (as the
/// controllers build it), its requests counted in `metrics` under `name`.
fn cluster(metrics: &Metrics, name: &str, kubeconfig: &str) -> RemoteCluster {
    let _ = rustls::crypto::ring::default_provider().install_default();
    RemoteClients::new(metrics.clone(), false)
        .for_secret(name, &secret(kubeconfig), "kubeconfig")
        .unwrap()
}

/// Requests counted in `metrics` for `cluster` (its metrics label), by verb.
fn requests(metrics: &Metrics, cluster: &str, verb: &str) -> f64 {
    metric_sum(
        &metrics.render(),
        "crossplane_rs_kube_api_requests_total",
        &[("cluster", cluster), ("verb", verb)],
    )
}

/// One test's view: its own metrics, remote client, watches and namespace.
struct Fixture {
    metrics: Metrics,
    remote: RemoteCluster,
    watches: Watches<ConfigMap>,
    woken: Woken,
    /// An uncounted client of the remote cluster, for setting things up.
    admin: Client,
    ns: String,
}

impl Fixture {
    async fn new(prefix: &str) -> Self {
        let plane = testenv::control_plane();
        let metrics = Metrics::new().unwrap();
        let remote = cluster(&metrics, "remote", &plane.remote.kubeconfig);
        let (watches, woken) = Watches::new(CONTROLLER, &metrics);
        let admin = plane.remote.client().await;
        let ns = plane.remote.namespace(&admin, prefix).await;
        Self {
            metrics,
            remote,
            watches,
            woken: Box::pin(woken),
            admin,
            ns,
        }
    }

    /// Creates ConfigMap `name` labelled for this test's watch.
    async fn configmap(&self, name: &str, labelled: bool) {
        let labels =
            labelled.then(|| BTreeMap::from([("e2e-watches".to_owned(), self.ns.clone())]));
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels,
                ..Default::default()
            },
            data: Some(BTreeMap::from([("v".to_owned(), "1".to_owned())])),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(self.admin.clone(), &self.ns)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }

    /// ConfigMap `name`, read through the watch of every ConfigMap labelled
    /// for this test.
    fn labelled(&self, name: &str) -> Target {
        Target {
            cluster: self.remote.clone(),
            resource: ApiResource::erase::<ConfigMap>(&()),
            namespace: Some(self.ns.clone()),
            name: name.into(),
            scope: Scope::Kind {
                labels: Some(format!("e2e-watches={}", self.ns)),
            },
        }
    }

    /// ConfigMap `name`, read through a watch of that one object.
    fn single(&self, name: &str) -> Target {
        Target {
            scope: Scope::Object,
            ..self.labelled(name)
        }
    }

    /// One reconcile of `dependent` that reads `target`.
    fn read(&self, dependent: &str, target: &Target) -> Cached {
        let mut session = self.watches.session(dep(dependent));
        let answer = session.read(target);
        session.commit();
        answer
    }

    /// Reads until every (dependent, target) is Present.
    async fn read_until_present(&self, reads: &[(String, Target)]) {
        wait(Duration::from_secs(20), "every read to be Present", || {
            let all = reads
                .iter()
                .all(|(d, t)| matches!(self.read(d, t), Cached::Present(_)));
            async move { all.then_some(()) }
        })
        .await;
    }

    /// Requests the remote client made, by verb.
    fn requests(&self, verb: &str) -> f64 {
        requests(&self.metrics, "remote", verb)
    }

    fn open_watches(&self) -> f64 {
        metric_sum(
            &self.metrics.render(),
            "crossplane_rs_shared_watches",
            &[("controller", CONTROLLER)],
        )
    }

    fn wakeups(&self) -> f64 {
        metric_sum(
            &self.metrics.render(),
            "crossplane_rs_watch_wakeups_total",
            &[("controller", CONTROLLER)],
        )
    }

    /// Forgets the wakes sent so far. Wakes are sent before a read can see
    /// what caused them, so after a read saw it they are all queued.
    fn drain(&mut self) {
        while let Some(Some(_)) = self.woken.next().now_or_never() {}
    }

    /// The next dependent woken, within [`WAKE`].
    async fn next_woken(&mut self) -> String {
        tokio::time::timeout(WAKE, self.woken.next())
            .await
            .unwrap_or_else(|_| panic!("nobody was woken within {WAKE:?}"))
            .expect("the wake stream ended")
            .name
    }

    /// Changes ConfigMap `name` as another user would.
    fn edit(&self, name: &str, value: &str) {
        testenv::control_plane()
            .remote
            .kubectl_ok(&[
                "-n",
                &self.ns,
                "patch",
                "configmap",
                name,
                "--type=merge",
                "-p",
                &format!(r#"{{"data":{{"v":"{value}"}}}}"#),
            ])
            .unwrap();
    }
}

fn dep(name: &str) -> ObjectRef<ConfigMap> {
    ObjectRef::new(name).within("dependents")
}

/// 50 dependents, dep-i reading ConfigMap cm-i.
async fn fifty(f: &Fixture) -> Vec<(String, Target)> {
    for i in 0..50 {
        f.configmap(&format!("cm-{i}"), true).await;
    }
    (0..50)
        .map(|i| (format!("dep-{i}"), f.labelled(&format!("cm-{i}"))))
        .collect()
}

#[tokio::test]
async fn fifty_dependents_share_one_list_and_one_watch_then_read_from_memory() {
    let f = Fixture::new("watches-share").await;
    let reads = fifty(&f).await;
    f.read_until_present(&reads).await;
    // The watch request follows the list at once.
    wait(Duration::from_secs(10), "the watch request", || {
        let sent = f.requests("watch") >= 1.0;
        async move { sent.then_some(()) }
    })
    .await;
    let counts = || ["list", "watch", "get"].map(|v| f.requests(v));
    assert_eq!(counts(), [1.0, 1.0, 0.0], "one list, one watch, no get");
    assert_eq!(f.open_watches(), 1.0);
    // Served from memory: no request at all.
    for (d, t) in &reads {
        match f.read(d, t) {
            Cached::Present(cm) => assert_eq!(cm.metadata.name.as_deref(), Some(t.name.as_str())),
            other => panic!("{d} read {other:?}"),
        }
    }
    assert!(matches!(
        f.read("dep-x", &f.labelled("no-such")),
        Cached::Absent
    ));
    assert_eq!(counts(), [1.0, 1.0, 0.0], "reads sent requests");
}

#[tokio::test]
async fn an_edit_wakes_exactly_the_dependent_that_read_the_object() {
    let mut f = Fixture::new("watches-wake").await;
    let reads = fifty(&f).await;
    f.read_until_present(&reads).await;
    f.drain();
    let before = f.wakeups();

    let start = Instant::now();
    f.edit("cm-7", "2");
    assert_eq!(f.next_woken().await, "dep-7");
    let took = start.elapsed();
    assert!(took < WAKE, "woken after {took:?}");
    // Nobody else: the next edit's wake is the very next one (one watch
    // delivers its events in order), and the counter agrees.
    f.edit("cm-9", "2");
    assert_eq!(f.next_woken().await, "dep-9");
    assert_eq!(f.wakeups() - before, 2.0);
    // The woken dependent reads the change from memory.
    match f.read("dep-7", &f.labelled("cm-7")) {
        Cached::Present(cm) => assert_eq!(cm.data["data"]["v"], "2"),
        other => panic!("{other:?}"),
    }
    assert_eq!(f.requests("get"), 0.0);

    // A deletion wakes its reader too, and then reads Absent.
    Api::<ConfigMap>::namespaced(f.admin.clone(), &f.ns)
        .delete("cm-3", &Default::default())
        .await
        .unwrap();
    assert_eq!(f.next_woken().await, "dep-3");
    assert!(matches!(
        f.read("dep-3", &f.labelled("cm-3")),
        Cached::Absent
    ));
}

#[tokio::test]
async fn a_watch_stops_with_its_last_reader_and_then_wakes_nobody() {
    let mut f = Fixture::new("watches-stop").await;
    for i in 0..5 {
        f.configmap(&format!("a-{i}"), true).await;
    }
    f.configmap("b", false).await;
    let mut reads: Vec<(String, Target)> = (0..5)
        .map(|i| (format!("dep-a{i}"), f.labelled(&format!("a-{i}"))))
        .collect();
    reads.push(("dep-b".into(), f.single("b")));
    f.read_until_present(&reads).await;
    assert_eq!(f.open_watches(), 2.0, "the labelled kind, and one object");

    for i in 0..5 {
        f.watches.release(&dep(&format!("dep-a{i}")));
    }
    assert_eq!(f.open_watches(), 1.0);
    f.drain();
    let before = f.wakeups();
    // A change in the stopped watch, then one in the live watch: the first
    // must wake nobody, so the live one's is the next (and only) wake.
    f.edit("a-0", "2");
    f.edit("b", "2");
    assert_eq!(f.next_woken().await, "dep-b");
    assert_eq!(f.wakeups() - before, 1.0);

    // A reconcile that reads nothing any more, committed, stops the last.
    f.watches.session(dep("dep-b")).commit();
    assert_eq!(f.open_watches(), 0.0);
}

#[tokio::test]
async fn a_cluster_that_never_answers_reads_unknown_never_absent() {
    let metrics = Metrics::new().unwrap();
    let stalled = Stalled::start(Mode::Tls);
    let remote = cluster(&metrics, "stalled", &stalled.kubeconfig());
    let (watches, _woken) = Watches::<ConfigMap>::new(CONTROLLER, &metrics);
    let target = Target {
        cluster: remote,
        resource: ApiResource::erase::<ConfigMap>(&()),
        namespace: Some("default".into()),
        name: "anything".into(),
        scope: Scope::Kind { labels: None },
    };
    let read = || {
        let mut session = watches.session(dep("d"));
        let answer = session.read(&target);
        session.commit();
        answer
    };
    assert!(matches!(read(), Cached::Unknown));
    // The watch did try: its list is held by the stalled server.
    wait(
        Duration::from_secs(10),
        "the list to reach the cluster",
        || {
            let tried = stalled.accepted() >= 1
                && metric_sum(
                    &metrics.render(),
                    "crossplane_rs_kube_api_requests_total",
                    &[("cluster", "stalled"), ("verb", "list")],
                ) >= 1.0;
            async move { tried.then_some(()) }
        },
    )
    .await;
    // The list waits up to runtime::remote::WATCH_READ_TIMEOUT; meanwhile no
    // silence is ever taken for "not there".
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let answer = read();
        assert!(matches!(answer, Cached::Unknown), "{answer:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn cached_objects_keep_everything_but_managed_fields() {
    let f = Fixture::new("watches-fields").await;
    f.configmap("cm", true).await;
    let live = Api::<ConfigMap>::namespaced(f.admin.clone(), &f.ns)
        .get("cm")
        .await
        .unwrap();
    assert!(
        live.metadata.managed_fields.is_some_and(|m| !m.is_empty()),
        "the server keeps managedFields"
    );
    let reads = [
        ("dep-kind".to_owned(), f.labelled("cm")),
        ("dep-object".to_owned(), f.single("cm")),
    ];
    f.read_until_present(&reads).await;
    for (d, t) in &reads {
        let Cached::Present(cm) = f.read(d, t) else {
            panic!("not present")
        };
        assert!(cm.metadata.managed_fields.is_none(), "{:?}", t.scope);
        assert_eq!(cm.metadata.uid, live.metadata.uid);
        assert_eq!(cm.metadata.resource_version, live.metadata.resource_version);
        assert_eq!(cm.metadata.labels, live.metadata.labels);
        assert_eq!(cm.data["data"]["v"], "1");
    }
}

#[tokio::test]
async fn a_quiet_watch_outlives_the_request_timeout() {
    let mut f = Fixture::new("watches-quiet").await;
    f.configmap("cm", true).await;
    let reads = [("dep".to_owned(), f.labelled("cm"))];
    f.read_until_present(&reads).await;
    f.drain();
    // Longer than runtime::remote::READ_TIMEOUT with nothing on the watch.
    tokio::time::sleep(runtime::remote::READ_TIMEOUT + Duration::from_secs(5)).await;
    f.edit("cm", "2");
    assert_eq!(f.next_woken().await, "dep");
    // The first list and watch still serve: a watch cut by the timeout
    // would have failed and listed again.
    assert_eq!(f.requests("list"), 1.0);
    assert_eq!(f.requests("watch"), 1.0);
}

#[tokio::test]
async fn a_watch_whose_cluster_goes_away_wakes_all_its_readers_and_reads_unknown() {
    let plane = testenv::control_plane();
    let mut f = Fixture::new("watches-fail").await;
    let (proxy, kubeconfig) = Proxy::in_front_of(&plane.remote.kubeconfig_path).await;
    let kubeconfig = std::fs::read_to_string(&kubeconfig).unwrap();
    // The same cluster, reached through the proxy.
    f.remote = cluster(&f.metrics, "remote", &kubeconfig);
    for i in 0..3 {
        f.configmap(&format!("cm-{i}"), true).await;
    }
    let reads: Vec<(String, Target)> = (0..3)
        .map(|i| (format!("dep-{i}"), f.labelled(&format!("cm-{i}"))))
        .collect();
    f.read_until_present(&reads).await;
    f.drain();
    let before = f.wakeups();
    // The cluster goes away: its connections close and new ones are
    // refused. (A cluster that hangs instead is noticed when the watch's
    // read timeout expires, as with any informer.)
    drop(proxy);
    let mut woken = Vec::new();
    for _ in 0..3 {
        woken.push(f.next_woken().await);
    }
    woken.sort();
    assert_eq!(woken, ["dep-0", "dep-1", "dep-2"]);
    assert_eq!(f.wakeups() - before, 3.0);
    for (d, t) in &reads {
        let answer = f.read(d, t);
        assert!(matches!(answer, Cached::Unknown), "{d}: {answer:?}");
    }
}

/// Workers that need one kind of a cluster they have not used yet (a
/// controller's first reconciles after a start, one application's many
/// templates) learn it from one discovery request, and later lookups make
/// none; a kind the cluster does not serve is not remembered.
#[tokio::test]
async fn workers_discovering_one_kind_at_once_make_one_request() {
    let plane = testenv::control_plane();
    let metrics = Metrics::new().unwrap();
    let remote = cluster(&metrics, "remote", &plane.remote.kubeconfig);
    let gets = || requests(&metrics, "remote", "get");
    let deployment = GroupVersionKind::gvk("apps", "v1", "Deployment");
    let found = futures::future::join_all((0..8).map(|_| remote.resolve(&deployment))).await;
    for f in found {
        assert_eq!(f.unwrap().0.plural, "deployments");
    }
    assert_eq!(gets(), 1.0, "eight workers at once");
    remote.resolve(&deployment).await.unwrap();
    assert_eq!(gets(), 1.0, "from the cache");
    let missing = GroupVersionKind::gvk("apps", "v1", "NoSuchKind");
    for _ in 0..2 {
        let out = remote.resolve(&missing).await;
        assert!(matches!(out, Err(ResolveError::NotServed(_))), "{out:?}");
    }
    assert_eq!(gets(), 3.0, "a kind not served is asked about again");
}

/// How the connector test's messages name what it connects with.
static WORDING: runtime::managed::Wording = runtime::managed::Wording {
    owner: "KubernetesCluster",
    fix: "fix spec.clusterRef",
    secret: "connection Secret",
    connect: "to",
    read_from: "",
    reasons: runtime::managed::Reasons {
        owner_not_found: "ClusterNotFound",
        secret_not_found: "ConnectionSecretNotFound",
        cannot_connect: "CannotConnectToCluster",
        cannot_read: "CannotReadLocalObject",
    },
};

/// Workers that connect to one cluster at once before its client is made
/// (a controller's first reconciles after a start) read its Secret once;
/// a caller that knows nothing of the Secret reads it every time.
#[tokio::test]
async fn workers_connecting_to_one_cluster_at_once_read_its_secret_once() {
    use runtime::managed::{Connector, Known, SecretKey};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let plane = testenv::control_plane();
    let metrics = Metrics::new().unwrap();
    let admin = plane.control.client().await;
    let ns = plane.control.namespace(&admin, "connect").await;
    let mut creds = secret(&plane.remote.kubeconfig);
    creds.metadata.namespace = Some(ns.clone());
    creds.metadata.uid = None;
    creds.metadata.resource_version = None;
    Api::<Secret>::namespaced(admin, &ns)
        .create(&PostParams::default(), &creds)
        .await
        .unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&plane.control.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let control = runtime::remote::counted_client(config, &metrics).unwrap();
    let connector = Connector::new(
        RemoteClients::new(metrics.clone(), false),
        control,
        &WORDING,
        Duration::from_secs(60),
    );
    let gets = || requests(&metrics, "control", "get");
    let owner = format!("{ns}/cluster");
    let at = SecretKey {
        namespace: &ns,
        name: "creds",
        key: "kubeconfig",
    };
    let connected = futures::future::join_all(
        (0..8).map(|_| connector.connect(&owner, at, Known::Generation(Some(1)))),
    )
    .await;
    assert!(connected.iter().all(Result::is_ok));
    assert_eq!(gets(), 1.0, "eight workers at once");
    for _ in 0..2 {
        connector.connect(&owner, at, Known::Nothing).await.unwrap();
    }
    assert_eq!(gets(), 3.0, "known nothing, read every time");
}
