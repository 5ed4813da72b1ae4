//! A control-plane outage costs no restart. The control kube-apiserver is
//! stopped for 20 s, then etcd is paused for 15 s, each while Objects and
//! applications are being edited: every controller stands down in its own
//! process (its pod keeps running, restartCount 0), campaigns again, and
//! when the API server answers it leads again and looks at everything once
//! more, so a remote object deleted during the outage is made again on the
//! first pass. The object-provider runs two replicas: the control API
//! server's audit log shows the writes of its two pods never interleave
//! without a Lease takeover between them, and sampled throughout, both
//! never say they lead at once.
//!
//! The controllers run as users run them: pods of `deploy/` on the test
//! node ([`e2e::shipped`]). The faults are injected into the control plane
//! this test binary owns (testenv's `stop_apiserver`, `pause_etcd`): that
//! is why this test lives alone in its binary.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod faults;

use e2e::{
    kubectl::kubectl,
    metric_sum,
    objects::{configmap, object, own_config_with},
    pods::remote_kubeconfig_for_pods,
    shipped::{NS, log_tail, pod_of, shipped, through_node},
    wait,
    workloads::{app, cluster, configmap_template, configmaps_with, remote_ns, ssa},
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, Patch},
    discovery::ApiResource,
};
use oci::project::BINARIES;
use serde_json::{Value, json};
use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};
use types::kubernetes::v1alpha1::Object;

/// Objects, each managing one remote ConfigMap.
const OBJECTS: usize = 60;

/// Applications, each of TEMPLATES remote ConfigMaps.
const APPS: usize = 10;

const TEMPLATES: usize = 3;

/// Objects and applications edited over and over while the faults last.
const CHURNED: usize = 10;

/// The label that marks this test's Objects.
const LABEL: &str = "e2e.crossplane-rs.io/outage";

/// The controller (kubernetes.crossplane.io) each binary's reconciles of
/// this test's objects count under, and how many objects it has.
const COUNTED: [(&str, &str, usize); 4] = [
    ("object-provider", "object", OBJECTS),
    (
        "resource-controller",
        "kubernetesapplicationresource",
        APPS * TEMPLATES,
    ),
    ("application-controller", "kubernetesapplication", APPS),
    // The scheduler leaves scheduled applications alone; it looks at the
    // cluster (whose Ready it keeps).
    ("scheduler", "kubernetescluster", 1),
];

/// Prints the controllers' logs when the test fails.
struct DumpLogs;

impl Drop for DumpLogs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for b in BINARIES {
                eprintln!("----- {b} log (last 60 lines) -----");
                eprintln!("{}", log_tail(b, 60));
            }
        }
    }
}

/// A controller pod as found before the faults: scraped at its IP through
/// the node, which needs no API server.
#[derive(Clone, Debug)]
struct Pod {
    binary: &'static str,
    name: String,
    restarts: i64,
    ip: String,
}

impl Pod {
    /// Its /metrics, or None when it does not answer.
    fn metrics(&self) -> Option<String> {
        e2e::shipped::metrics_at(&self.ip).ok()
    }

    /// Its /healthz status code (0 when it does not answer).
    fn healthz(&self) -> u16 {
        let node = testenv::control_plane_with_node().node.as_ref().unwrap();
        let answer = through_node(node, &format!("http://{}:8080/healthz", self.ip));
        answer
            .split_once(' ')
            .and_then(|(code, _)| code.parse().ok())
            .unwrap_or(0)
    }

    fn leads(&self) -> bool {
        self.metrics()
            .is_some_and(|m| m.lines().any(|l| l.trim() == "crossplane_rs_leader 1"))
    }
}

/// The sum over `pods` of `binary` of a metric.
fn sum_of(pods: &[Pod], binary: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    pods.iter()
        .filter(|p| p.binary == binary)
        .filter_map(Pod::metrics)
        .map(|m| metric_sum(&m, metric, labels))
        .sum()
}

/// Reconciles of this test's kinds by each counted binary so far.
fn counted_reconciles(pods: &[Pod]) -> BTreeMap<&'static str, f64> {
    COUNTED
        .iter()
        .map(|(binary, controller, _)| {
            (
                *binary,
                sum_of(
                    pods,
                    binary,
                    "crossplane_rs_reconcile_total",
                    &[("controller", controller)],
                ),
            )
        })
        .collect()
}

/// Edits the first CHURNED Objects and applications over and over (data.v
/// = "churn-<round>") until `stop`. The test stops it just before each
/// fault, so what the controllers are busy with when the fault hits is
/// these edits, and no edit sent before the fault lands after it (which
/// would count as a reconcile of the resumed controllers).
async fn churn(client: Client, edit: Edits, stop: Arc<AtomicBool>) -> usize {
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let v = format!("churn-{round}");
        futures::stream::iter(0..CHURNED)
            .map(|i| {
                let (client, edit, v) = (client.clone(), edit.clone(), v.clone());
                async move {
                    let _ = edit.object(&client, i, &v).await;
                    let _ = edit.app(&client, i, &v).await;
                }
            })
            .buffer_unordered(8)
            .collect::<()>()
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    round
}

/// Edits running in the background.
struct Churn {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Churn {
    fn start(client: &Client, edits: &Edits) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(churn(client.clone(), edits.clone(), stop.clone()));
        Self { stop, task }
    }

    /// Stops after the round under way has been answered; how many rounds
    /// there were.
    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// How this test writes its Objects and applications.
#[derive(Clone)]
struct Edits {
    id: String,
    pc: String,
    ns: String,
    rns: String,
}

impl Edits {
    async fn object(&self, client: &Client, i: usize, v: &str) -> Result<(), kube::Error> {
        let mut body = object(
            &format!("{}-{i}", self.id),
            &self.pc,
            configmap(&format!("cm-{i}"), &self.rns, json!({"v": v})),
            json!({}),
        );
        body["metadata"]["labels"] = json!({LABEL: self.id});
        let name = format!("{}-{i}", self.id);
        Api::<Object>::all(client.clone())
            .patch(&name, &ssa(), &Patch::Apply(&body))
            .await
            .map(|_| ())
    }

    async fn app(&self, client: &Client, i: usize, v: &str) -> Result<(), kube::Error> {
        let templates: Vec<Value> = (0..TEMPLATES)
            .map(|t| {
                configmap_template(
                    &format!("{}-{i}-{t}", self.id),
                    &self.rns,
                    &format!("app-{i}-{t}"),
                    json!({"v": v}),
                )
            })
            .collect();
        let body = app(
            &format!("{}-{i}", self.id),
            &self.ns,
            json!({"matchLabels": {"pool": self.id}}),
            json!(templates),
        );
        let ar = ApiResource {
            group: "workload.crossplane.io".into(),
            version: "v1alpha1".into(),
            api_version: "workload.crossplane.io/v1alpha1".into(),
            kind: "KubernetesApplication".into(),
            plural: "kubernetesapplications".into(),
        };
        Api::<DynamicObject>::namespaced_with(client.clone(), &self.ns, &ar)
            .patch(&format!("{}-{i}", self.id), &ssa(), &Patch::Apply(&body))
            .await
            .map(|_| ())
    }

    /// Every Object and application with data.v = `v`.
    async fn all(&self, client: &Client, v: &str) {
        futures::stream::iter(0..OBJECTS.max(APPS))
            .map(|i| {
                let (client, v) = (client.clone(), v.to_owned());
                async move {
                    if i < OBJECTS {
                        self.object(&client, i, &v).await.unwrap();
                    }
                    if i < APPS {
                        self.app(&client, i, &v).await.unwrap();
                    }
                }
            })
            .buffer_unordered(16)
            .collect::<()>()
            .await;
    }

    /// Names of every remote ConfigMap this test's objects make.
    fn remote_names(&self) -> Vec<String> {
        (0..OBJECTS)
            .map(|i| format!("cm-{i}"))
            .chain((0..APPS).flat_map(|i| (0..TEMPLATES).map(move |t| format!("app-{i}-{t}"))))
            .collect()
    }
}

/// Samples whether each of PAIRED's pods leads, every ~100 ms, until
/// dropped; records any moment both do.
struct Sampler {
    both: Arc<Mutex<Vec<String>>>,
    samples: Arc<Mutex<usize>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pods: Vec<Pod>, started: Instant) -> Self {
        let both: Arc<Mutex<Vec<String>>> = Arc::default();
        let samples: Arc<Mutex<usize>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (both, samples, stop) = (both.clone(), samples.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::SeqCst) {
                    let leading: Vec<&str> = pods
                        .iter()
                        .filter(|p| p.leads())
                        .map(|p| p.name.as_str())
                        .collect();
                    if leading.len() > 1 {
                        both.lock()
                            .unwrap()
                            .push(format!("{:?}: {leading:?}", started.elapsed()));
                    }
                    *samples.lock().unwrap() += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Self {
            both,
            samples,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> (Vec<String>, usize) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        let both = self.both.lock().unwrap().clone();
        let samples = *self.samples.lock().unwrap();
        (both, samples)
    }
}

/// What the controllers did once the API server answered again (at
/// `back`): when each binary led again, and when its reconciles of this
/// test's objects (counted from `before`) covered every object once.
fn resumed(
    pods: &[Pod],
    before: &BTreeMap<&'static str, f64>,
    back: Instant,
) -> BTreeMap<String, Duration> {
    let mut led: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut covered: BTreeMap<&str, Duration> = BTreeMap::new();
    let deadline = back + Duration::from_secs(60);
    while led.len() < BINARIES.len() || covered.len() < COUNTED.len() {
        for b in BINARIES {
            if !led.contains_key(b) && pods.iter().any(|p| p.binary == b && p.leads()) {
                led.insert(b, back.elapsed());
            }
        }
        let now = counted_reconciles(pods);
        for (binary, _, n) in COUNTED {
            if !covered.contains_key(binary) && now[binary] >= before[binary] + n as f64 {
                covered.insert(binary, back.elapsed());
            }
        }
        assert!(
            Instant::now() < deadline,
            "a minute after the API server answered: led {led:?}, looked at everything {covered:?} (reconciles {now:?}, before {before:?})"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    led.into_iter()
        .map(|(b, d)| (format!("{b} led"), d))
        .chain(
            covered
                .into_iter()
                .map(|(b, d)| (format!("{b} looked at all"), d)),
        )
        .collect()
}
