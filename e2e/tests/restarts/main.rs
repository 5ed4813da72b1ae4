//! Slow is not down: a controller restarted with many objects in flight
//! starts up (its own burst of requests, queued behind each other on a busy
//! machine) without taking that burst for its remote cluster not answering.
//! No object leaves Ready (or Submitted), and no cluster-not-answering
//! warning is emitted: for the object-provider with 1000 Objects, and for
//! the resource-controller with 100 applications.
//!
//! The controllers run as users run them: pods of `deploy/` on the test
//! node ([`e2e::shipped`]), configured with operator flags, restarted with
//! `kubectl delete pod` (the Deployment's new pod takes over the Lease).

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod rollout;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use e2e::{
    metric_sum,
    objects::{apply_object_v1alpha2, configmap, object, own_config_with},
    pods::{controller_flags, remote_kubeconfig_for_pods, restart},
    shipped::{log_tail, metrics_of, shipped},
    wait,
    workloads::{
        app, apply_app, clients, cluster, configmap_template, configmaps_with, remote_ns,
        state_of_res,
    },
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use types::{
    kubernetes::v1alpha2::Object,
    workload::v1alpha1::{KubernetesApplication, KubernetesApplicationResource},
};

/// Objects in flight when the provider restarts.
const OBJECTS: usize = 1000;
/// Of those, how many are changed while the new provider starts.
const CHURNED: usize = 200;
/// Requests the test makes at once.
const PARALLEL: usize = 32;
/// How long the Objects may take to become Ready, or to follow a change.
const WAIT: Duration = Duration::from_secs(240);
/// The operator flags the controllers run with (after deploy/'s):
/// --remote-timeout scaled down from its default of 10 s, and 64 workers
/// instead of 8, so that this machine's burst of reconciles (requests
/// queued behind each other inside the controller) lasts several
/// deadlines, as a burst of many more objects on a busier machine would at
/// 10 s. With a breaker that counts slowness as silence, both tests fail with hundreds
/// of TargetNotAnswering warnings.
const ARGS: &[&str] = &["--remote-timeout=1s", "--concurrency=64"];
/// Held by each test from start to end: the two tests take turns. Each
/// loads the one remote API server with its own controller's burst;
/// together, on a two-core machine, the other test's burst made the
/// server queue this one's requests past the scaled-down deadline, which
/// is not what either test is about (a controller taking its own burst for
/// the cluster not answering).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// The label that marks this test's Objects.
const LABEL: &str = "e2e.crossplane-rs.io/restart";

/// Prints a controller pod's log when the test it lives in fails.
struct DumpLog(&'static str);

impl Drop for DumpLog {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- {} log (last 200 lines) -----", self.0);
            eprintln!("{}", log_tail(self.0, 200));
        }
    }
}

/// A blocking look (kubectl, a scrape through the node) from the test's
/// async code.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn is_true(o: &Object, t: &str) -> bool {
    o.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
        .is_some_and(|c| c.status == "True")
}

/// What an Object's Synced and Ready say, when one is not True.
fn not_ready(o: &Object) -> Option<String> {
    if is_true(o, "Synced") && is_true(o, "Ready") {
        return None;
    }
    let conds = o
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    Some(
        conds
            .iter()
            .map(|c| {
                format!(
                    "{}={} {} {}",
                    c.type_,
                    c.status,
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// Applies Objects `first..last` of this test, each managing the remote
/// ConfigMap `cm-<i>` with data.v = `v`.
async fn apply_range(
    client: &Client,
    id: &str,
    pc: &str,
    rns: &str,
    range: std::ops::Range<usize>,
    v: &str,
) {
    futures::stream::iter(range)
        .map(|i| {
            let mut body = object(
                &format!("{id}-{i}"),
                pc,
                configmap(&format!("cm-{i}"), rns, json!({"v": v})),
                json!({}),
            );
            if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.insert("labels".to_owned(), json!({LABEL: id}));
            }
            let client = client.clone();
            // At the stored version: while the one replica restarts, no
            // webhook converts v1alpha1 (a rollout keeps one serving).
            async move { apply_object_v1alpha2(&client, body).await }
        })
        .buffer_unordered(PARALLEL)
        .collect::<()>()
        .await;
}

/// Counts this test's Objects that are Synced and Ready.
async fn ready(objects: &Api<Object>, id: &str) -> usize {
    objects
        .list(&ListParams::default().labels(&format!("{LABEL}={id}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|o| not_ready(o).is_none())
        .count()
}

/// Warning events about this test's objects of `kind` (whose names start
/// with `<id>-`), by reason.
async fn warnings(client: &Client, kind: &str, id: &str) -> BTreeMap<String, usize> {
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default().fields("type=Warning"))
        .await
        .unwrap();
    let mut by_reason = BTreeMap::new();
    for e in events.items {
        let ours = e.involved_object.kind.as_deref() == Some(kind)
            && e.involved_object
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{id}-")));
        if ours {
            *by_reason.entry(e.reason.unwrap_or_default()).or_insert(0) +=
                e.count.unwrap_or(1).max(1) as usize;
        }
    }
    by_reason
}

/// Objects found in a wrong state by a watch, until dropped.
struct Wrong {
    found: Arc<Mutex<Vec<String>>>,
    watching: tokio::task::JoinHandle<()>,
}

impl Wrong {
    /// Watches `api` from now on (returns once the watch has listed),
    /// recording every object `wrong` says something about.
    async fn record<K>(
        api: Api<K>,
        config: watcher::Config,
        wrong: fn(&K) -> Option<String>,
    ) -> Self
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let found: Arc<Mutex<Vec<String>>> = Arc::default();
        let (listed, is_listed) = tokio::sync::oneshot::channel();
        let watching = tokio::spawn({
            let found = found.clone();
            async move {
                let mut listed = Some(listed);
                let mut events = std::pin::pin!(watcher(api, config).default_backoff());
                while let Some(event) = events.try_next().await.unwrap() {
                    match event {
                        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                            if let Some(why) = wrong(&o) {
                                found
                                    .lock()
                                    .unwrap()
                                    .push(format!("{}: {why}", o.name_any()));
                            }
                        }
                        watcher::Event::InitDone => {
                            if let Some(l) = listed.take() {
                                let _ = l.send(());
                            }
                        }
                        _ => {}
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), is_listed)
            .await
            .unwrap()
            .unwrap();
        Self { found, watching }
    }

    fn found(&self) -> Vec<String> {
        self.found.lock().unwrap().clone()
    }
}

impl Drop for Wrong {
    fn drop(&mut self) {
        self.watching.abort();
    }
}

/// Restarts `binary` (`kubectl delete pod`) while `churn` changes objects
/// (it runs while the new pod starts); returns once both are done, with
/// the new pod's log to dump should the test fail from here on.
async fn restart_during(
    binary: &'static str,
    churn: impl std::future::Future<Output = ()> + Send + 'static,
) -> DumpLog {
    let restarted = Instant::now();
    let churn = tokio::spawn(churn);
    let pod = blocking(|| restart(binary));
    churn.await.unwrap();
    eprintln!(
        "restarted: {pod} leading {:?} after the old pod's delete",
        restarted.elapsed()
    );
    DumpLog(binary)
}

/// The reconcile errors of `controller` in `binary`'s pod so far, by
/// category.
fn errors_by_category(binary: &str, controller: &str) -> String {
    let metrics = blocking(|| metrics_of(binary));
    metrics
        .lines()
        .filter(|l| l.starts_with("crossplane_rs_reconcile_errors_total{"))
        .filter(|l| l.contains(&format!("controller=\"{controller}\"")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until `controller` in `binary`'s pod has reconciled `n` times.
async fn wait_reconciled(binary: &str, controller: &str, n: usize) {
    wait(WAIT, &format!("{n} reconciles of {controller}"), || async {
        let done = metric_sum(
            &blocking(|| metrics_of(binary)),
            "crossplane_rs_reconcile_total",
            &[("controller", controller)],
        );
        (done >= n as f64)
            .then_some(())
            .ok_or(format!("{done} reconciles"))
    })
    .await;
}

/// Asserts that since `binary`'s pod started no reconcile of `controller`
/// failed (whatever the reason: slow is neither down nor a failure), that
/// no Warning was emitted since the restart (`warned` against
/// `warned_before`, by reason) and no <prefix>NotAnswering one at all, and
/// that `left` found nothing.
fn nothing_failed(
    binary: &str,
    controller: &str,
    prefix: &str,
    warned: &BTreeMap<String, usize>,
    warned_before: &BTreeMap<String, usize>,
    left: Wrong,
) {
    let metrics = blocking(|| metrics_of(binary));
    let errors = metric_sum(
        &metrics,
        "crossplane_rs_reconcile_errors_total",
        &[("controller", controller)],
    );
    let left = left.found();
    eprintln!(
        "after the restart: reconcile errors {errors}, warnings {warned:?} (before the restart {warned_before:?}), {} left their state",
        left.len()
    );
    assert_eq!(errors, 0.0, "{metrics}");
    let since: BTreeMap<&String, usize> = warned
        .iter()
        .map(|(reason, n)| {
            (
                reason,
                n.saturating_sub(*warned_before.get(reason).unwrap_or(&0)),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(since.is_empty(), "Warnings since the restart: {since:?}");
    let not_answering = format!("{prefix}NotAnswering");
    assert!(!warned.contains_key(&not_answering), "{warned:?}");
    assert!(
        left.is_empty(),
        "left their state: {:?}",
        &left[..left.len().min(20)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_restarted_with_a_thousand_objects_in_flight_fails_none() {
    let _turn = ONE_AT_A_TIME.lock().await;
    const BINARY: &str = "object-provider";
    blocking(|| {
        shipped();
        controller_flags(BINARY, ARGS);
    });
    let (client, remote) = clients().await;
    let rns = remote_ns(&remote, "restart").await;
    let pc = own_config_with(&client, "restart", &remote_kubeconfig_for_pods()).await;
    let id = testenv::unique_name("restart");
    let objects = Api::<Object>::all(client.clone());

    let started = Instant::now();
    apply_range(&client, &id, &pc, &rns, 0..OBJECTS, "1").await;
    {
        let _dump = DumpLog(BINARY);
        wait(WAIT, &format!("{OBJECTS} Objects Ready"), || async {
            let n = ready(&objects, &id).await;
            (n == OBJECTS).then_some(()).ok_or(format!("{n} Ready"))
        })
        .await;
    }
    eprintln!(
        "{OBJECTS} Objects Ready in {:?}; errors on the way: {}",
        started.elapsed(),
        errors_by_category(BINARY, "object")
    );

    // From here on, every change of a Synced or Ready condition away from
    // True is recorded.
    let config = watcher::Config::default().labels(&format!("{LABEL}={id}"));
    let left = Wrong::record(objects.clone(), config, not_ready).await;
    let warned_before = warnings(&client, "Object", &id).await;

    // The restart (`kubectl delete pod`), with a change to some Objects
    // made while the new pod starts.
    let restarted = Instant::now();
    let dump = restart_during(BINARY, {
        let (client, id, pc, rns) = (client.clone(), id.clone(), pc.clone(), rns.clone());
        async move { apply_range(&client, &id, &pc, &rns, 0..CHURNED, "2").await }
    })
    .await;
    let names: Vec<String> = (0..CHURNED).map(|i| format!("cm-{i}")).collect();
    wait(WAIT, &format!("{CHURNED} changed ConfigMaps"), || async {
        let n = configmaps_with(&remote, &rns, &names, "2").await;
        (n == CHURNED).then_some(()).ok_or(format!("{n} changed"))
    })
    .await;
    // Every Object was reconciled by the new provider (its start-up burst,
    // one reconcile per Object listed, is over).
    wait_reconciled(BINARY, "object", OBJECTS).await;
    eprintln!(
        "restarted: {CHURNED} changes applied and every Object reconciled in {:?}",
        restarted.elapsed()
    );
    let warned = warnings(&client, "Object", &id).await;
    nothing_failed(BINARY, "object", "Target", &warned, &warned_before, left);

    // Clean up: the Objects go, with their ConfigMaps.
    objects
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{LABEL}={id}")),
        )
        .await
        .unwrap();
    wait(WAIT, "this test's Objects gone", || async {
        let n = objects
            .list(&ListParams::default().labels(&format!("{LABEL}={id}")))
            .await
            .unwrap()
            .items
            .len();
        (n == 0).then_some(()).ok_or(format!("{n} left"))
    })
    .await;
    drop(dump);
}

/// Applications in flight when the resource-controller restarts.
const APPS: usize = 100;
/// Templates (remote ConfigMaps) per application.
const TEMPLATES: usize = 3;
/// Of the applications, how many are changed while it starts.
const CHURNED_APPS: usize = 20;

/// Applies applications `range`, each with TEMPLATES ConfigMaps whose
/// data.v is `v`, for the clusters labelled pool=`pool`.
async fn apply_apps(
    client: &Client,
    ns: &str,
    rns: &str,
    id: &str,
    range: std::ops::Range<usize>,
    v: &str,
) {
    futures::stream::iter(range)
        .map(|i| {
            let templates: Vec<serde_json::Value> = (0..TEMPLATES)
                .map(|t| {
                    configmap_template(
                        &format!("{id}-{i}-{t}"),
                        rns,
                        &format!("cm-{i}-{t}"),
                        json!({"v": v}),
                    )
                })
                .collect();
            let body = app(
                &format!("{id}-{i}"),
                ns,
                json!({"matchLabels": {"pool": id}}),
                json!(templates),
            );
            let client = client.clone();
            async move { apply_app(&client, ns, body).await }
        })
        .buffer_unordered(PARALLEL)
        .collect::<()>()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_controller_restarted_with_a_hundred_applications_in_flight_fails_none() {
    let _turn = ONE_AT_A_TIME.lock().await;
    const BINARY: &str = "resource-controller";
    blocking(|| {
        shipped();
        controller_flags(BINARY, &[ARGS, &["--poll-interval=1s"]].concat());
    });
    let plane = testenv::control_plane_with_node();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "restart-apps").await;
    let rns = remote_ns(&remote, "restart-apps").await;
    let id = testenv::unique_name("r");
    cluster(
        &client,
        &ns,
        &id,
        json!({"pool": id}),
        Some(&remote_kubeconfig_for_pods()),
    )
    .await;
    let resources = Api::<KubernetesApplicationResource>::namespaced(client.clone(), &ns);
    let all = APPS * TEMPLATES;
    // Done when every resource is Submitted; else how many are, and the
    // first few that are not with their status: what a failed wait shows.
    let all_submitted = || async {
        let items = resources.list(&ListParams::default()).await.unwrap().items;
        let (done, lagging): (Vec<_>, Vec<_>) =
            items.iter().partition(|r| state_of_res(r) == "Submitted");
        if done.len() == all {
            return Ok(());
        }
        let lagging: Vec<String> = lagging
            .iter()
            .take(3)
            .map(|r| {
                format!(
                    "{} (generation {:?}, cluster {:?}, finalizers {:?}, status {})",
                    r.name_any(),
                    r.metadata.generation,
                    r.spec.cluster_ref.as_ref().map(|c| c.name.clone()),
                    r.metadata.finalizers,
                    serde_json::to_string(&r.status).unwrap_or_default()
                )
            })
            .collect();
        Err(format!(
            "{} Submitted; not: {}",
            done.len(),
            lagging.join("; ")
        ))
    };
    let started = Instant::now();
    apply_apps(&client, &ns, &rns, &id, 0..APPS, "1").await;
    {
        let _dump = DumpLog(BINARY);
        wait(WAIT, &format!("{all} resources Submitted"), all_submitted).await;
    }
    eprintln!(
        "{APPS} applications ({all} resources) Submitted in {:?}; errors on the way: {}",
        started.elapsed(),
        errors_by_category(BINARY, "kubernetesapplicationresource")
    );

    // From here on, every resource leaving Submitted is recorded.
    let left = Wrong::record(resources.clone(), watcher::Config::default(), |r| {
        let state = state_of_res(r);
        (state != "Submitted").then(|| format!("state {state:?}"))
    })
    .await;
    let warned_before = warnings(&client, "KubernetesApplicationResource", &id).await;

    // The restart (`kubectl delete pod`), with some applications changed
    // while the new pod starts.
    let restarted = Instant::now();
    let dump = restart_during(BINARY, {
        let (client, ns, rns, id) = (client.clone(), ns.clone(), rns.clone(), id.clone());
        async move { apply_apps(&client, &ns, &rns, &id, 0..CHURNED_APPS, "2").await }
    })
    .await;
    let changed = CHURNED_APPS * TEMPLATES;
    let names: Vec<String> = (0..CHURNED_APPS)
        .flat_map(|i| (0..TEMPLATES).map(move |t| format!("cm-{i}-{t}")))
        .collect();
    wait(WAIT, &format!("{changed} changed ConfigMaps"), || async {
        let n = configmaps_with(&remote, &rns, &names, "2").await;
        (n == changed).then_some(()).ok_or(format!("{n} changed"))
    })
    .await;
    wait_reconciled(BINARY, "kubernetesapplicationresource", all).await;
    eprintln!(
        "restarted: {changed} changes applied and every resource reconciled in {:?}",
        restarted.elapsed()
    );
    let warned = warnings(&client, "KubernetesApplicationResource", &id).await;
    nothing_failed(
        BINARY,
        "kubernetesapplicationresource",
        "Cluster",
        &warned,
        &warned_before,
        left,
    );

    // Clean up: the applications go, with their remote ConfigMaps.
    let apps = Api::<KubernetesApplication>::namespaced(client.clone(), &ns);
    apps.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    wait(WAIT, "this test's applications gone", || async {
        let n = apps.list(&ListParams::default()).await.unwrap().items.len();
        (n == 0).then_some(()).ok_or(format!("{n} left"))
    })
    .await;
    drop(dump);
}
