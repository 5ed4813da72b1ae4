//! The faults themselves, and the audit log's account of who wrote what.

use super::*;

/// Remote ConfigMaps deleted by hand while the API server is down: of
/// Objects, and of applications.
const DELETED: [&str; 6] = ["cm-50", "cm-51", "cm-52", "cm-53", "app-7-0", "app-8-2"];

/// How long the API server stays down, and etcd paused.
const API_DOWN: Duration = Duration::from_secs(20);

const ETCD_PAUSED: Duration = Duration::from_secs(15);

/// Within how long of the API server answering again every controller
/// leads and has looked at everything once more.
const RESUMED_WITHIN: Duration = Duration::from_secs(10);

/// How long objects may take to converge when no fault is in the way.
const WAIT: Duration = Duration::from_secs(180);

/// A blocking look (kubectl, a scrape through the node) from async code.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// The controller that runs two replicas here.
const PAIRED: &str = "object-provider";

/// Every controller pod now (PAIRED's two), with restart counts.
fn controller_pods() -> Vec<Pod> {
    let list: Value =
        serde_json::from_str(&kubectl(&["get", "pods", "-n", NS, "-o", "json"])).unwrap();
    let mut pods = Vec::new();
    for p in list["items"].as_array().unwrap() {
        let Some(binary) = BINARIES
            .iter()
            .find(|b| p["metadata"]["labels"]["app.kubernetes.io/name"] == **b)
        else {
            continue;
        };
        if p.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        pods.push(Pod {
            binary,
            name: p["metadata"]["name"].as_str().unwrap().to_owned(),
            restarts: p
                .pointer("/status/containerStatuses/0/restartCount")
                .and_then(Value::as_i64)
                .unwrap_or(-1),
            ip: p["status"]["podIP"].as_str().unwrap_or_default().to_owned(),
        });
    }
    pods
}

/// Waits until no controller leads (each stood down); returns how long it
/// took from `since`.
fn wait_all_stood_down(pods: &[Pod], since: Instant) -> Duration {
    loop {
        let leading: Vec<&str> = pods
            .iter()
            .filter(|p| p.leads())
            .map(|p| p.name.as_str())
            .collect();
        if leading.is_empty() {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "still leading 30 s into the fault: {leading:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The longest of `times`.
fn slowest(times: &BTreeMap<String, Duration>) -> Duration {
    times.values().max().copied().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_stopped_and_etcd_paused_cost_no_restart_and_work_resumes_within_seconds() {
    let plane = testenv::control_plane_with(testenv::Options {
        audit: true,
        node: true,
        ..testenv::Options::default()
    });
    blocking(shipped);
    let _dump = DumpLogs;
    let client = plane.control.client().await;
    let remote = plane.remote.client().await;
    let ns = plane.control.namespace(&client, "outage").await;
    let rns = remote_ns(&remote, "outage").await;
    let id = testenv::unique_name("o");
    let pods_kubeconfig = remote_kubeconfig_for_pods();
    let pc = own_config_with(&client, "outage", &pods_kubeconfig).await;
    cluster(
        &client,
        &ns,
        &id,
        json!({"pool": id}),
        Some(&pods_kubeconfig),
    )
    .await;
    let edits = Edits {
        id: id.clone(),
        pc,
        ns: ns.clone(),
        rns: rns.clone(),
    };
    let names = edits.remote_names();
    edits.all(&client, "1").await;
    wait(WAIT, "every remote ConfigMap made", || async {
        let n = configmaps_with(&remote, &rns, &names, "1").await;
        (n == names.len()).then_some(()).ok_or(format!("{n} made"))
    })
    .await;

    // Two replicas of PAIRED: one leads, one stands by. From here on the
    // audit log is read.
    blocking(|| {
        kubectl(&["scale", "deployment", PAIRED, "-n", NS, "--replicas=2"]);
        wait_pods(PAIRED, 2);
    });
    let audit_log = plane.control.audit_log.clone().unwrap();
    let audit_from = testenv::audit::end(&audit_log).unwrap();
    let pods = blocking(controller_pods);
    assert_eq!(pods.len(), BINARIES.len() + 1, "{pods:?}");
    let started = Instant::now();
    let paired: Vec<Pod> = pods
        .iter()
        .filter(|p| p.binary == PAIRED)
        .cloned()
        .collect();
    let sampler = Sampler::start(paired, started);
    let mut rounds = 0;
    let churning = Churn::start(&client, &edits);
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Fault 1: the control API server stopped for 20 s. Meanwhile a few
    // remote ConfigMaps are deleted by hand.
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &rns);
    rounds += churning.stop().await;
    let down = Instant::now();
    plane.stop_apiserver(&plane.control).unwrap();
    for name in DELETED {
        cms.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let stood_down = blocking(|| wait_all_stood_down(&pods, down));
    for p in &pods {
        assert_eq!(
            blocking(|| p.healthz()),
            200,
            "{} does not answer /healthz while standing by",
            p.name
        );
    }
    let before = blocking(|| counted_reconciles(&pods));
    tokio::time::sleep(API_DOWN.saturating_sub(down.elapsed())).await;
    blocking(|| plane.start_apiserver(&plane.control).unwrap());
    let back = Instant::now();
    let after_api = blocking(|| resumed(&pods, &before, back));
    let repaired = {
        let cms = cms.clone();
        wait(
            Duration::from_secs(60),
            "the deleted ConfigMaps made again",
            || {
                let cms = cms.clone();
                async move {
                    let mut left = Vec::new();
                    for name in DELETED {
                        if cms.get_opt(name).await.unwrap().is_none() {
                            left.push(name);
                        }
                    }
                    left.is_empty()
                        .then_some(())
                        .ok_or(format!("missing {left:?}"))
                }
            },
        )
        .await;
        back.elapsed()
    };
    eprintln!(
        "API server down {:?}: all stood down {stood_down:?} into it; after it answered: {after_api:?}; deleted ConfigMaps made again {repaired:?}",
        API_DOWN
    );

    // Fault 2: etcd paused for 15 s (both API servers hang).
    let churning = Churn::start(&client, &edits);
    tokio::time::sleep(Duration::from_secs(3)).await;
    rounds += churning.stop().await;
    let paused = Instant::now();
    plane.pause_etcd().unwrap();
    let stood_down_etcd = blocking(|| wait_all_stood_down(&pods, paused));
    let before = blocking(|| counted_reconciles(&pods));
    tokio::time::sleep(ETCD_PAUSED.saturating_sub(paused.elapsed())).await;
    plane.resume_etcd().unwrap();
    let back = Instant::now();
    let after_etcd = blocking(|| resumed(&pods, &before, back));
    eprintln!(
        "etcd paused {ETCD_PAUSED:?}: all stood down {stood_down_etcd:?} into it; after it went on: {after_etcd:?}"
    );

    let (both, samples) = sampler.finish();

    // Nothing lost, duplicated or stuck: a last edit reaches every remote
    // ConfigMap, and there are exactly as many as objects make.
    edits.all(&client, "last").await;
    wait(WAIT, "the last edit on every remote ConfigMap", || async {
        let n = configmaps_with(&remote, &rns, &names, "last").await;
        (n == names.len())
            .then_some(())
            .ok_or(format!("{n} of {}", names.len()))
    })
    .await;
    // (kube-controller-manager puts kube-root-ca.crt in every namespace.)
    let made = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|cm| cm.metadata.name.as_deref() != Some("kube-root-ca.crt"))
        .count();
    assert_eq!(made, names.len(), "remote ConfigMaps in {rns}");

    // No restart, no pod replaced; each binary stood down at both faults.
    let now = blocking(controller_pods);
    for p in &pods {
        let same = now.iter().find(|n| n.name == p.name);
        assert_eq!(
            same.map(|n| n.restarts),
            Some(p.restarts),
            "{} restarted or was replaced (now {now:?}); its log:\n{}",
            p.name,
            blocking(|| log_tail(p.binary, 40))
        );
    }
    for b in BINARIES {
        let downs = sum_of(&pods, b, "crossplane_rs_leader_stand_downs_total", &[]);
        assert!(
            downs >= 2.0,
            "{b} stood down {downs} times, not at each fault"
        );
        // Its pods stood by ~13 s of the API server's 20 s and ~8 s of
        // etcd's 15 s (each after the renew deadline), and since they
        // started for as long as they did not lead.
        let least = pods
            .iter()
            .filter(|p| p.binary == b)
            .filter_map(Pod::metrics)
            .map(|m| metric_sum(&m, "crossplane_rs_leader_not_leading_seconds_total", &[]))
            .fold(f64::INFINITY, f64::min);
        assert!(
            least >= 15.0,
            "a {b} pod says it did not lead for only {least} s"
        );
    }
    assert!(
        both.is_empty(),
        "both {PAIRED} pods led at once ({} of {samples} samples): {both:?}",
        both.len()
    );
    let writes = never_interleaved(&audit_log, audit_from);
    eprintln!(
        "outage: {rounds} rounds of edits; no restart; {samples} samples of the two {PAIRED} pods, never both leading; {writes}"
    );
    for (what, times) in [("API server", &after_api), ("etcd", &after_etcd)] {
        assert!(
            slowest(times) <= RESUMED_WITHIN,
            "after the {what} fault, not every controller led and looked at everything within {RESUMED_WITHIN:?}: {times:?}"
        );
    }
    assert!(
        repaired <= RESUMED_WITHIN,
        "the deleted ConfigMaps were made again {repaired:?} after the API server answered"
    );

    // Clean up: one replica again; the objects go.
    blocking(|| {
        kubectl(&["scale", "deployment", PAIRED, "-n", NS, "--replicas=1"]);
        wait_pods(PAIRED, 1);
    });
    Api::<Object>::all(client.clone())
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{LABEL}={id}")),
        )
        .await
        .unwrap();
    let _ = pod_of(PAIRED);
}

/// Waits until `binary` has `n` Ready pods and nothing else of it.
fn wait_pods(binary: &str, n: usize) {
    e2e::wait::wait_blocking(
        Duration::from_secs(120),
        &format!("{n} Ready {binary} pods"),
        || {
            let out = kubectl(&[
                "get",
                "pods",
                "-n",
                NS,
                "-l",
                &format!("app.kubernetes.io/name={binary}"),
                "-o",
                "jsonpath={range .items[*]}{.metadata.deletionTimestamp}/{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
            ]);
            let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
            (lines.len() == n && lines.iter().all(|l| *l == "/True"))
                .then_some(())
                .ok_or(out)
        },
        || kubectl(&["get", "pods", "-n", NS, "-o", "wide"]),
    );
}

/// One successful request of PAIRED's ServiceAccount in the audit log.
struct Write {
    /// When the API server received it (RFC 3339, microseconds: sorts).
    at: String,
    /// The pod that sent it (its bound token says).
    pod: String,
    /// A write of its Lease (taking or renewing it), or of anything else.
    lease: bool,
    what: String,
}

/// PAIRED's successful writes since `from` in the audit log.
fn writes_of_paired(log: &std::path::Path, from: u64) -> Vec<Write> {
    use std::io::{BufRead as _, Seek as _};
    let mut file = std::fs::File::open(log).unwrap();
    file.seek(std::io::SeekFrom::Start(from)).unwrap();
    let user = format!("system:serviceaccount:{NS}:{PAIRED}");
    let mut writes = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let Ok(e) = serde_json::from_str::<Value>(&line.unwrap()) else {
            continue;
        };
        let verb = e["verb"].as_str().unwrap_or_default();
        if e["stage"] != "ResponseComplete"
            || e["user"]["username"] != user.as_str()
            || !["create", "update", "patch", "delete"].contains(&verb)
            || e["responseStatus"]["code"].as_i64().unwrap_or(0) >= 300
        {
            continue;
        }
        let pod = e["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!pod.is_empty(), "no pod name in the audit event: {e}");
        let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
        let name = e["objectRef"]["name"].as_str().unwrap_or_default();
        writes.push(Write {
            at: e["requestReceivedTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            pod,
            lease: resource == "leases" && name == format!("crossplane-rs-{PAIRED}"),
            what: format!("{verb} {resource}/{name}"),
        });
    }
    writes.sort_by(|a, b| a.at.cmp(&b.at));
    writes
}

/// Asserts that PAIRED's two pods never acted at once: in the order the
/// API server received them, each pod's writes (anything but its Lease)
/// come in runs, and a run of one pod after a write of the other begins
/// only after this pod wrote the Lease (took it) since that write. Says
/// what it saw.
fn never_interleaved(log: &std::path::Path, from: u64) -> String {
    let writes = writes_of_paired(log, from);
    let mut last_act: Option<&Write> = None;
    // Per pod, when it last wrote the Lease.
    let mut leased: BTreeMap<&str, &str> = BTreeMap::new();
    let mut handovers = 0;
    let mut acts = 0;
    let mut by_pod: BTreeMap<&str, usize> = BTreeMap::new();
    for w in &writes {
        if w.lease {
            leased.insert(&w.pod, &w.at);
            continue;
        }
        acts += 1;
        *by_pod.entry(&w.pod).or_default() += 1;
        if let Some(prev) = last_act
            && prev.pod != w.pod
        {
            let took = leased.get(w.pod.as_str()).copied().unwrap_or_default();
            assert!(
                took > prev.at.as_str(),
                "{} wrote ({} at {}) after {} had ({} at {}) with no Lease write of its own between: both acted at once",
                w.pod,
                w.what,
                w.at,
                prev.pod,
                prev.what,
                prev.at
            );
            handovers += 1;
        }
        last_act = Some(w);
    }
    assert!(
        acts > 0,
        "no write of {PAIRED} in the audit log: the check proves nothing"
    );
    format!(
        "audit log: {acts} writes of {PAIRED} by pod {by_pod:?}, {handovers} handovers, none interleaved"
    )
}
