//! The resource-controller is event-driven: it runs with the default
//! --poll-interval (a 10-minute safety resync), yet a remote object's status
//! change reaches its KubernetesApplicationResource, and a drift edit of the
//! remote object is put back, within 2 s; each resource costs the request
//! budget of the design (create: finalizer patch, apply, status write, plus
//! reading and applying each propagated Secret; template update: apply and
//! status write; delete: a finalizer patch and one delete per remote object),
//! and reconciles while nothing changed cost no request at all, a restart
//! of the controller included.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use e2e::{Running, metric_sum, objects::WRITES, wait, wait::wait_every, workloads::*};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use types::{
    compute::v1alpha1::KubernetesCluster, workload::v1alpha1::KubernetesApplicationResource,
};

/// The promise: a remote change is reflected (or undone) within this.
const WITHIN: Duration = Duration::from_secs(2);

/// A KubernetesApplicationResource already scheduled to `cluster`.
async fn resource(client: &Client, ns: &str, name: &str, template: Value, secrets: &[&str]) {
    let secrets: Vec<Value> = secrets.iter().map(|s| json!({"name": s})).collect();
    let body = json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplicationResource",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterRef": {"name": "target"}, "secrets": secrets, "template": template},
    });
    apply_json(client, ns, "kubernetesapplicationresources", &body).await;
}

fn configmap(rns: &str, name: &str, v: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": rns}, "data": {"k": v}})
}

/// Polls `check` every 25 ms until it holds, and prints how long it has
/// been since `since`; fails once `WITHIN` has passed since `since`.
async fn within_two_seconds<F, Fut>(since: Instant, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    // Looked at every 25 ms: the time printed is the latency measured.
    wait_every(
        WITHIN.saturating_sub(since.elapsed()),
        Duration::from_millis(25),
        &format!("{what} within {WITHIN:?} of the change"),
        check,
    )
    .await;
    eprintln!("{what}: {:?}", since.elapsed());
}

/// Requests the controller's reconciles made: to both clusters, by every
/// verb but list and watch. Lists and watches are the informers' and the
/// shared watches' own traffic, on their own schedule whatever reconciles
/// do: the API server may end a new watch with 410 Expired ("too old
/// resource version"; seen here of the informers a second after they
/// started, in about one run in ten), and the watch lists and watches
/// again after a backoff, which can fall into any measurement. Reconciles
/// never list or watch (they read caches, or get one object); that no
/// resource starts a watch of its own is [`open_watches`]'s to show.
fn requests(r: &Running) -> f64 {
    let m = r.metrics();
    let all = metric_sum(&m, "crossplane_rs_kube_api_requests_total", &[]);
    let watching: f64 = ["list", "watch"]
        .iter()
        .map(|verb| {
            metric_sum(
                &m,
                "crossplane_rs_kube_api_requests_total",
                &[("verb", verb)],
            )
        })
        .sum();
    all - watching
}

/// How many shared watches of remote objects are open.
fn open_watches(r: &Running) -> f64 {
    metric_sum(
        &r.metrics(),
        "crossplane_rs_shared_watches",
        &[("controller", "kubernetesapplicationresource")],
    )
}

/// Requests by `verb` to the remote cluster (every cluster but the
/// control one), from the metrics text `m`.
fn remote_requests(m: &str, verb: &str) -> f64 {
    let count =
        |labels: &[(&str, &str)]| metric_sum(m, "crossplane_rs_kube_api_requests_total", labels);
    count(&[("verb", verb)]) - count(&[("cluster", "control"), ("verb", verb)])
}

fn request_lines(r: &Running) -> String {
    r.metrics()
        .lines()
        .filter(|l| l.starts_with("crossplane_rs_kube_api_requests_total"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Wakes every resource of cluster "target" (a change to the cluster) and
/// waits until at least `n` more reconciles have run; answers how many
/// requests they cost, and how many shared watches failed meanwhile.
async fn wake_all(client: &Client, ns: &str, r: &Running, n: f64, round: u32) -> Idle {
    // What a reconcile still running does belongs to what came before.
    wait(WAIT, "no reconcile to be running", || {
        let idle = r.in_flight("kubernetesapplicationresource") == 0.0;
        async move { idle.then_some(()) }
    })
    .await;
    let before = (
        requests(r),
        r.reconciles("kubernetesapplicationresource"),
        watch_failures(r),
        request_lines(r),
    );
    Api::<KubernetesCluster>::namespaced(client.clone(), ns)
        .patch(
            "target",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": round.to_string()}}})),
        )
        .await
        .unwrap();
    wait(WAIT, "the woken resources to be reconciled", || {
        let done = r.reconciles("kubernetesapplicationresource") >= before.1 + n;
        async move { done.then_some(()) }
    })
    .await;
    Idle {
        requests: requests(r) - before.0,
        watch_failures: watch_failures(r) - before.2,
        before: before.3,
    }
}

/// What reconciles with nothing to do cost.
struct Idle {
    requests: f64,
    /// Shared watches that failed meanwhile: until one lists again, reads
    /// of what it watches go to the server, as they must.
    watch_failures: f64,
    /// The request counters before the reconciles, to show which moved.
    before: String,
}

impl Idle {
    /// Nothing, unless a shared watch failed meanwhile (printed); the
    /// requests a failed watch excuses.
    fn assert_nothing(&self, r: &Running, what: &str) -> f64 {
        if self.watch_failures > 0.0 {
            eprintln!(
                "{what}: {} shared watch(es) failed meanwhile; {} reads went to the server",
                self.watch_failures, self.requests
            );
            return self.requests;
        }
        let log = r.log();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        assert_eq!(
            self.requests,
            0.0,
            "{what}: reconciles with nothing to do made requests; before them:\n{}\nafter:\n{}\nthe controller's last lines:\n{}",
            self.before,
            request_lines(r),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        0.0
    }
}

fn watch_failures(r: &Running) -> f64 {
    metric_sum(
        &r.metrics(),
        "crossplane_rs_shared_watch_failures_total",
        &[("controller", "kubernetesapplicationresource")],
    )
}

/// Waits until every shared watch of remote objects has sent its watch
/// request, and no reconcile is running. A shared watch starts (a list,
/// then a watch) in its own task after the reconcile that first read
/// through it, which may already have written its status: without this,
/// those two requests fall into whichever measurement comes next. A
/// reconcile woken meanwhile (by the first watch's list) may have found the
/// other watch not listed yet and asked the server. Its GET waits in the
/// client's request queue and is counted when sent, while watches send
/// through a client of their own: under load the GET can leave after the
/// watch started and be counted as an idle reconcile's request. So that
/// reconcile must have ended too; every reconcile that starts later reads
/// listed caches.
async fn watches_started(r: &Running) {
    wait(
        WAIT,
        "the shared watches to send their watch requests",
        || {
            let m = r.metrics();
            let open = metric_sum(
                &m,
                "crossplane_rs_shared_watches",
                &[("controller", "kubernetesapplicationresource")],
            );
            let watches = remote_requests(&m, "watch");
            let idle = r.in_flight("kubernetesapplicationresource") == 0.0;
            async move { (open > 0.0 && watches >= open && idle).then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn a_remote_status_change_and_a_drift_edit_are_seen_within_two_seconds() {
    // The resource-controller as deployed: no --poll-interval flag (the
    // 10-minute default).
    let OneTarget {
        client,
        remote,
        ns,
        rns,
        controller,
    } = OneTarget::start("events", &[]).await;
    // No controller writes a LoadBalancer Service's status here (no cloud):
    // the test does, as another field manager.
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": rns},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "selector": {"app": "web"}}});
    resource(&client, &ns, "svc", service, &[]).await;
    resource(&client, &ns, "cm", configmap(&rns, "settings", "v"), &[]).await;
    wait_res_state(&client, &ns, "svc", "Submitted").await;
    wait_res_state(&client, &ns, "cm", "Submitted").await;

    // The remote status changes: status.remote shows it.
    let status = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}});
    Api::<Service>::namespaced(remote.clone(), &rns)
        .patch_status(
            "web",
            &PatchParams::apply("e2e-status").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    let changed = Instant::now();
    within_two_seconds(changed, "remote status to status.remote", || async {
        get_res(&client, &ns, "svc")
            .await
            .and_then(|r| r.status?.remote)
            .is_some_and(|s| s["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.7")
    })
    .await;

    // Someone else changes the remote ConfigMap: it is put back.
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &rns);
    let drift = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
        "data": {"k": "drift"}});
    let drifted = cms
        .patch(
            "settings",
            &PatchParams::apply("intruder").force(),
            &Patch::Apply(&drift),
        )
        .await
        .unwrap();
    assert_eq!(drifted.data.unwrap()["k"], "drift");
    let edited = Instant::now();
    within_two_seconds(edited, "drift edit put back", || async {
        cms.get("settings")
            .await
            .ok()
            .and_then(|c| c.data)
            .is_some_and(|d| d["k"] == "v")
    })
    .await;
    assert!(
        controller
            .metrics()
            .contains("crossplane_rs_shared_watches{controller=\"kubernetesapplicationresource\"}"),
        "{}",
        controller.metrics()
    );
}

/// Waits until a resource's status describes its current generation.
async fn wait_observed(client: &Client, ns: &str, name: &str) {
    wait(
        WAIT,
        &format!("{name} to describe its generation"),
        || async {
            let r = get_res(client, ns, name).await?;
            (r.status?.observed_generation == r.metadata.generation).then_some(())
        },
    )
    .await;
}

/// Creates the local Secret "creds" and a resource `name` of a ConfigMap
/// that propagates it; waits until it is Submitted.
async fn submitted_with_a_secret(client: &Client, ns: &str, rns: &str, name: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"}, "stringData": {"password": "p"}}))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    resource(client, ns, name, configmap(rns, name, "1"), &["creds"]).await;
    wait_res_state(client, ns, name, "Submitted").await;
}

#[tokio::test]
async fn each_resource_costs_its_request_budget_and_idle_reconciles_cost_nothing() {
    let OneTarget {
        client,
        remote,
        ns,
        rns,
        controller,
    } = OneTarget::start("budget", &[]).await;
    // A first resource connects to the cluster and starts the shared
    // watches of ConfigMaps and of propagated Secrets there.
    submitted_with_a_secret(&client, &ns, &rns, "warm").await;
    watches_started(&controller).await;
    wake_all(&client, &ns, &controller, 1.0, 0)
        .await
        .assert_nothing(&controller, "after the first resource");
    // Every later resource of the cluster reads through these watches.
    let watches = open_watches(&controller);

    // Create: finalizer patch, apply, status write; per Secret a read of
    // the local Secret and one write of its copy.
    let before = requests(&controller);
    resource(
        &client,
        &ns,
        "measured",
        configmap(&rns, "measured", "1"),
        &["creds"],
    )
    .await;
    wait_res_state(&client, &ns, "measured", "Submitted").await;
    let excused = wake_all(&client, &ns, &controller, 2.0, 1)
        .await
        .assert_nothing(&controller, "after a create");
    let created = requests(&controller) - before - excused;
    eprintln!("create: {created} requests");
    assert_eq!(
        open_watches(&controller),
        watches,
        "a resource started a watch"
    );
    assert!(
        created <= 3.0 + 2.0,
        "create cost {created} requests:\n{}",
        request_lines(&controller)
    );
    let copy = Api::<Secret>::namespaced(remote.clone(), &rns)
        .get("measured-creds")
        .await
        .unwrap();
    assert_eq!(copy.data.unwrap()["password"].0, b"p");

    // Template update: apply and status write.
    let before = requests(&controller);
    resource(
        &client,
        &ns,
        "measured",
        configmap(&rns, "measured", "2"),
        &["creds"],
    )
    .await;
    wait_observed(&client, &ns, "measured").await;
    let excused = wake_all(&client, &ns, &controller, 2.0, 2)
        .await
        .assert_nothing(&controller, "after an update");
    let updated = requests(&controller) - before - excused;
    eprintln!("update: {updated} requests");
    assert!(
        updated <= 2.0,
        "update cost {updated} requests:\n{}",
        request_lines(&controller)
    );
    let cm = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .get("measured")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["k"], "2");

    // Delete: a delete per remote object (the Secret's copy too) and the
    // finalizer patch.
    let before = requests(&controller);
    delete_and_wait_gone::<KubernetesApplicationResource>(
        &client,
        &ns,
        "measured",
        "the resource to be gone",
    )
    .await;
    let excused = wake_all(&client, &ns, &controller, 1.0, 3)
        .await
        .assert_nothing(&controller, "after a delete");
    let deleted = requests(&controller) - before - excused;
    eprintln!("delete: {deleted} requests");
    assert!(
        deleted <= 3.0 + 1.0,
        "delete cost {deleted} requests:\n{}",
        request_lines(&controller)
    );
    for gone in [
        Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .get_opt("measured")
            .await
            .unwrap()
            .is_none(),
        Api::<Secret>::namespaced(remote.clone(), &rns)
            .get_opt("measured-creds")
            .await
            .unwrap()
            .is_none(),
    ] {
        assert!(gone, "a remote object outlived its resource");
    }
}

/// Writes to the remote cluster, by any verb.
fn remote_writes(r: &Running) -> f64 {
    let m = r.metrics();
    WRITES.iter().map(|verb| remote_requests(&m, verb)).sum()
}

#[tokio::test]
async fn a_restarted_controller_finds_its_remote_objects_as_it_left_them_and_writes_nothing() {
    let OneTarget {
        client,
        ns,
        rns,
        controller,
        ..
    } = OneTarget::start("restart", &[]).await;
    submitted_with_a_secret(&client, &ns, &rns, "kept").await;

    // Restarted, it finds the ConfigMap and the Secret's copy already there
    // when its watches first list them: a list of a built-in kind leaves
    // apiVersion and kind out of its items, and the objects must still be
    // seen as what this controller wrote.
    drop(controller);
    let kubeconfig = impersonating_kubeconfig("resource-controller");
    let mut controller = Running::start(
        "resource-controller",
        &kubeconfig,
        &["--watch-namespace", &ns],
    );
    controller.wait_healthy(Duration::from_secs(30)).await;
    // Its first reconcile read both from the server (nothing listed yet);
    // the watches' lists then woke it again.
    watches_started(&controller).await;
    wake_all(&client, &ns, &controller, 1.0, 0)
        .await
        .assert_nothing(&controller, "after the restart");
    assert_eq!(
        remote_writes(&controller),
        0.0,
        "the restarted controller wrote what had not changed:\n{}",
        request_lines(&controller)
    );
}
