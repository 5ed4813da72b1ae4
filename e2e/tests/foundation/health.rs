//! Every binary serves health and the common metrics, waits for its CRDs and the API server instead of
//! exiting, and refuses leader-election timings that could let two replicas lead.

use super::*;

/// The common metric names every binary exports.
const COMMON_METRICS: [&str; 8] = [
    "crossplane_rs_reconcile_total",
    "crossplane_rs_reconcile_duration_seconds",
    "crossplane_rs_reconcile_in_flight",
    "crossplane_rs_objects_pending",
    "crossplane_rs_kube_api_requests_total",
    "crossplane_rs_leader",
    "crossplane_rs_leader_stand_downs_total",
    "crossplane_rs_leader_not_leading_seconds_total",
];

#[tokio::test]
async fn every_binary_serves_health_and_the_common_metrics() {
    for name in BINARIES {
        // Each as its shipped ServiceAccount: the start-up CRD check and the
        // watches must work with its deploy/ role alone.
        // The object-provider this binary's seed test starts serves the
        // Objects' conversion webhook; this one would take it over and go.
        let args: &[&str] = if name == "object-provider" {
            &["--serve-webhook=false"]
        } else {
            &[]
        };
        let mut bin = Running::start(name, &impersonating_kubeconfig(name), args);
        bin.wait_healthy(Duration::from_secs(30)).await;
        // Ready once it found its CRDs; its controllers (and their series,
        // at zero) exist once it leads, which it does at once without
        // --leader-elect.
        wait(Duration::from_secs(30), "/readyz to say it leads", || async {
            matches!(e2e::http_get(bin.addr, "/readyz"), Some((200, body)) if body == "ok: leading")
                .then_some(())
        })
        .await;
        let metrics = wait(
            Duration::from_secs(10),
            "the controllers' series",
            || async {
                let metrics = bin.metrics();
                metrics
                    .contains("crossplane_rs_reconcile_total{")
                    .then_some(metrics)
            },
        )
        .await;
        for metric in COMMON_METRICS {
            assert!(
                metrics.contains(metric),
                "{name}'s /metrics lacks {metric}:\n{metrics}"
            );
        }
        // Prometheus text format: HELP and TYPE lines before the samples.
        assert!(
            metrics.contains("# TYPE crossplane_rs_reconcile_total counter"),
            "{metrics}"
        );
        assert!(
            leads(&metrics),
            "{name} without --leader-elect leads: {metrics}"
        );
    }
}

#[tokio::test]
async fn a_binary_waits_for_its_crds_and_the_api_server_and_never_exits_for_them() {
    let plane = testenv::control_plane();
    // The remote cluster has no crossplane-rs CRDs: the scheduler says
    // which and how to install them, answers /healthz (a kubelet leaves it
    // running) and /readyz says it waits.
    let mut bin = Running::start("scheduler", &plane.remote.kubeconfig_path, &[]);
    bin.wait_live(Duration::from_secs(30)).await;
    let log = wait(
        Duration::from_secs(30),
        "the scheduler to say what it waits for",
        || {
            let log = bin.log();
            async move { log.contains("kubectl apply -f crds/").then_some(log) }
        },
    )
    .await;
    assert!(
        log.contains("CRD (kubernetesapplications.workload.crossplane.io) is not installed"),
        "{log}"
    );
    assert!(
        matches!(http_get(bin.addr, "/readyz"), Some((503, body)) if body.contains("waiting for the API server")),
        "{:?}",
        http_get(bin.addr, "/readyz")
    );
    // Still waiting after several more looks (pauses double up to 5 s):
    // not exited, and nothing reconciled.
    let looks = |b: &Running| b.log().matches("waiting for the API server").count();
    let probes = |b: &Running| {
        metric_sum(
            &b.metrics(),
            "crossplane_rs_kube_api_requests_total",
            &[("cluster", "control")],
        )
    };
    let before = probes(&bin);
    wait(
        Duration::from_secs(30),
        "the scheduler to look three more times",
        || {
            let now = probes(&bin);
            async move { (now >= before + 3.0).then_some(()) }
        },
    )
    .await;
    assert!(
        bin.child.try_wait().ok().flatten().is_none(),
        "exited:\n{}",
        bin.log()
    );
    // Said when it began waiting, then once per 30 s: not at every look.
    assert!(looks(&bin) <= 2, "said at every look:\n{}", bin.log());
    assert_eq!(
        metric_sum(&bin.metrics(), "crossplane_rs_reconcile_total", &[]),
        0.0
    );

    // An API server that does not answer at start (a proxy that accepts and
    // never answers) is waited for too; once it answers, the binary starts
    // in the same process.
    let (proxy, via_proxy) = Proxy::in_front_of(&plane.control.kubeconfig_path).await;
    proxy.cut();
    let mut waiting = Running::start("scheduler", &via_proxy, &[]);
    waiting.wait_live(Duration::from_secs(30)).await;
    assert!(matches!(http_get(waiting.addr, "/readyz"), Some((503, _))));
    wait(
        Duration::from_secs(60),
        "the scheduler to say the API server does not answer",
        || {
            let log = waiting.log();
            async move { log.contains("waiting for the API server").then_some(()) }
        },
    )
    .await;
    proxy.heal();
    let healed = Instant::now();
    wait(
        Duration::from_secs(60),
        "the scheduler to start once the API server answers",
        || {
            let ready = http_get(waiting.addr, "/readyz");
            async move { matches!(ready, Some((200, _))).then_some(()) }
        },
    )
    .await;
    assert!(waiting.child.try_wait().ok().flatten().is_none(), "exited");
    eprintln!(
        "start-up: ready {:?} after the API server answered again",
        healed.elapsed()
    );
}

#[tokio::test]
async fn a_renew_deadline_not_shorter_than_the_lease_is_refused_at_start() {
    let plane = testenv::control_plane();
    let mut bin = Running::start(
        "scheduler",
        &plane.control.kubeconfig_path,
        &[
            "--leader-elect",
            "--leader-election-lease-duration",
            "10s",
            "--leader-election-renew-deadline",
            "10s",
        ],
    );
    let status = wait(Duration::from_secs(30), "the scheduler to exit", || {
        let done = bin.child.try_wait().ok().flatten();
        async move { done }
    })
    .await;
    assert!(!status.success());
    let log = bin.log();
    assert!(
        log.contains("--leader-election-renew-deadline 10s must be") && log.contains("at most 9s"),
        "the scheduler should say which flag is unsafe and what is allowed:\n{log}"
    );
}
