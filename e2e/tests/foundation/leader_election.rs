//! Leader election: a standby takes over when the leader dies, stops, or is cut off (and the cut-off
//! leader stands by in the same process); a standby never reconciles.

use super::*;

#[tokio::test]
async fn a_standby_replica_takes_over_the_lease_within_20s_of_the_leader_dying() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "leader").await;
    let args = |id: &'static str| {
        vec![
            "--leader-elect",
            "--leader-election-namespace",
            ns.as_str(),
            "--identity",
            id,
            "--leader-election-lease-duration",
            "10s",
        ]
    };
    let kubeconfig = &plane.control.kubeconfig_path;
    let mut first = Running::start("scheduler", kubeconfig, &args("replica-a"));
    let mut second = Running::start("scheduler", kubeconfig, &args("replica-b"));
    first.wait_healthy(Duration::from_secs(30)).await;
    second.wait_healthy(Duration::from_secs(30)).await;
    let leases: Api<Lease> = Api::namespaced(client, &ns);
    let holder = |leases: Api<Lease>| async move {
        leases
            .get_opt("crossplane-rs-scheduler")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    };
    // Exactly one replica leads, and it is the Lease's holder. (Under load a
    // Lease can change hands between two reads, so this waits for a
    // consistent view rather than sampling once; two leaders at once would
    // never become consistent.)
    let leader = wait(
        Duration::from_secs(30),
        "exactly one replica to lead, holding the Lease",
        || {
            let leases = leases.clone();
            let (a, b) = (first.metrics(), second.metrics());
            async move {
                let h = holder(leases).await?;
                let (a_leads, b_leads) = (leads(&a), leads(&b));
                match (h.as_str(), a_leads, b_leads) {
                    ("replica-a", true, false) | ("replica-b", false, true) => Some(h),
                    _ => None,
                }
            }
        },
    )
    .await;
    let (leading, standby) = if leader == "replica-a" {
        (&mut first, &mut second)
    } else {
        (&mut second, &mut first)
    };
    let expected = if leader == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    leading.kill();
    let started = std::time::Instant::now();
    wait(
        Duration::from_secs(20),
        "the standby replica to take over the Lease",
        || {
            let leases = leases.clone();
            async move { holder(leases).await.filter(|h| h == expected) }
        },
    )
    .await;
    wait(
        Duration::from_secs(5),
        "the new leader to report it leads",
        || async { leads(&standby.metrics()).then_some(()) },
    )
    .await;
    eprintln!(
        "leader election: takeover after SIGKILL took {:?}",
        started.elapsed()
    );
}

/// Flags for a replica of a workload binary under leader election in `ns`
/// (its Lease lives there), watching `ns`.
fn elected<'a>(ns: &'a str, identity: &'a str, lease_duration: &'a str) -> Vec<&'a str> {
    vec![
        "--leader-elect",
        "--leader-election-namespace",
        ns,
        "--identity",
        identity,
        "--leader-election-lease-duration",
        lease_duration,
        "--watch-namespace",
        ns,
    ]
}

/// Who holds the scheduler's Lease in the namespace of `leases`.
async fn scheduler_lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("crossplane-rs-scheduler")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Asks a binary to stop gracefully (SIGTERM), as Kubernetes does.
fn terminate(bin: &Running) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &bin.child.id().to_string()])
        .status();
    assert!(
        matches!(&status, Ok(s) if s.success()),
        "kill -TERM {}: {status:?}",
        bin.name
    );
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_stops_before_the_standby_leads() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "splitbrain").await;
    // replica-a reaches the API server only through a proxy this test owns.
    let (proxy, via_proxy) = Proxy::in_front_of(&plane.control.kubeconfig_path).await;
    let mut leader = Running::start("scheduler", &via_proxy, &elected(&ns, "replica-a", "6s"));
    leader.wait_healthy(Duration::from_secs(30)).await;
    wait_leads(leader.addr, "replica-a", Duration::from_secs(30)).await;
    let mut standby = Running::start(
        "scheduler",
        &plane.control.kubeconfig_path,
        &elected(&ns, "replica-b", "6s"),
    );
    standby.wait_healthy(Duration::from_secs(30)).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-a")
    );
    assert!(!leads_now(standby.addr), "replica-b leads beside replica-a");

    // The API server stops answering replica-a: its connections close, new
    // ones hang. Sample both replicas until replica-b leads.
    proxy.cut();
    let cut = Instant::now();
    let mut seen = Vec::new();
    let mut leader_stopped = None;
    // Sampled every 50 ms: often enough to see both lead at once, and to
    // tell replica-a stopping from replica-b starting.
    let taken_over = poll(
        Duration::from_secs(60),
        Duration::from_millis(50),
        "replica-b to take over",
        || {
            let a = leads_now(leader.addr);
            let b = leads_now(standby.addr);
            let at = cut.elapsed();
            seen.push(format!("{at:?}: replica-a leads {a}, replica-b leads {b}"));
            assert!(
                !(a && b),
                "both replicas lead {at:?} after replica-a was cut off:\n{}\nreplica-a's log:\n{}",
                seen.join("\n"),
                leader.log()
            );
            if !a && leader_stopped.is_none() {
                leader_stopped = Some(at);
            }
            std::future::ready(b.then_some(at))
        },
    )
    .await;
    let standby_leads = match taken_over {
        Ok((at, _)) => at,
        Err(out) => panic!(
            "{}:\n{}\nreplica-b's log:\n{}",
            out.message(None),
            seen.join("\n"),
            standby.log()
        ),
    };
    let leader_stopped = leader_stopped.unwrap();
    assert!(
        leader_stopped < standby_leads,
        "replica-a stopped leading {leader_stopped:?} after the cut, not before replica-b led ({standby_leads:?}):\n{}",
        seen.join("\n")
    );
    // replica-a did not exit: it stood down, saying why, counted it, and
    // answers /healthz (a kubelet would not restart it).
    assert!(
        leader.child.try_wait().ok().flatten().is_none(),
        "replica-a exited:\n{}",
        leader.log()
    );
    let log = leader.log();
    assert!(
        log.contains("stopped leading") && log.contains("renew deadline"),
        "replica-a's log should say it stopped leading at its renew deadline:\n{log}"
    );
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-b")
    );
    // The API server answers replica-a again: it stands by while replica-b
    // leads (it says so on /readyz), and takes over in the same process
    // once replica-b stops.
    proxy.heal();
    wait(
        Duration::from_secs(30),
        "replica-a to answer /readyz as a standby",
        || {
            let ready = http_get(leader.addr, "/readyz");
            async move {
                matches!(&ready, Some((200, body)) if body.contains("not leading")).then_some(())
            }
        },
    )
    .await;
    let metrics = leader.metrics();
    assert_eq!(
        metric_sum(&metrics, "crossplane_rs_leader_stand_downs_total", &[]),
        1.0,
        "{metrics}"
    );
    assert!(!leads(&metrics), "replica-a leads beside replica-b");
    assert!(matches!(http_get(leader.addr, "/healthz"), Some((200, _))));
    terminate(&standby);
    let released = Instant::now();
    wait_leads(leader.addr, "replica-a, again", Duration::from_secs(30)).await;
    let led_again = released.elapsed();
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-a")
    );
    assert!(
        leader.child.try_wait().ok().flatten().is_none(),
        "replica-a restarted"
    );
    eprintln!(
        "leader election: cut-off leader stopped after {leader_stopped:?}, standby led after {standby_leads:?}; the first replica led again in the same process {led_again:?} after the second stopped"
    );
}

#[tokio::test]
async fn a_standby_never_reconciles_until_it_leads() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "standby").await;
    let kubeconfig = &plane.control.kubeconfig_path;
    let args = |id| {
        let mut a = elected(&ns, id, "10s");
        a.extend(["--poll-interval", "1s"]);
        a
    };
    let mut first = Running::start("scheduler", kubeconfig, &args("replica-a"));
    first.wait_healthy(Duration::from_secs(30)).await;
    wait_leads(first.addr, "replica-a", Duration::from_secs(30)).await;
    let mut second = Running::start("scheduler", kubeconfig, &args("replica-b"));
    second.wait_healthy(Duration::from_secs(30)).await;

    // Work: a cluster whose Secret is missing. The leader says so and looks
    // again every second.
    workloads::cluster(&client, &ns, "first", json!({}), None).await;
    wait_cluster_ready(&client, &ns, "first", "False").await;
    let reconciles =
        |bin: &Running| metric_sum(&bin.metrics(), "crossplane_rs_reconcile_total", &[]);
    let done = reconciles(&first);
    wait(
        Duration::from_secs(30),
        "the leader to reconcile three more times",
        || {
            let now = reconciles(&first);
            async move { (now >= done + 3.0).then_some(()) }
        },
    )
    .await;

    // Meanwhile the standby only looked at its Lease (and, at start-up, listed
    // its kinds to check their CRDs): no reconcile, no watch, no write.
    let metrics = second.metrics();
    assert!(!leads(&metrics), "replica-b leads beside replica-a");
    assert_eq!(
        metric_sum(&metrics, "crossplane_rs_reconcile_total", &[]),
        0.0,
        "the standby reconciled:\n{metrics}"
    );
    for verb in ["create", "update", "patch", "delete", "watch"] {
        assert_eq!(
            metric_sum(
                &metrics,
                "crossplane_rs_kube_api_requests_total",
                &[("verb", verb)]
            ),
            0.0,
            "the standby sent {verb} requests:\n{metrics}"
        );
    }
    assert!(
        metric_sum(
            &metrics,
            "crossplane_rs_kube_api_requests_total",
            &[("verb", "get")]
        ) > 0.0,
        "the standby never looked at its Lease:\n{metrics}"
    );

    // The leader dies: the standby takes over and does the work.
    first.kill();
    wait_leads(second.addr, "replica-b", Duration::from_secs(30)).await;
    workloads::cluster(&client, &ns, "second", json!({}), None).await;
    wait_cluster_ready(&client, &ns, "second", "False").await;
    assert!(reconciles(&second) > 0.0);
}

#[tokio::test]
async fn a_leader_stopped_gracefully_hands_the_lease_over_at_once() {
    let plane = testenv::control_plane();
    let client = plane.control.client().await;
    let ns = plane.control.namespace(&client, "handover").await;
    let kubeconfig = &plane.control.kubeconfig_path;
    let mut first = Running::start("scheduler", kubeconfig, &elected(&ns, "replica-a", "15s"));
    first.wait_healthy(Duration::from_secs(30)).await;
    wait_leads(first.addr, "replica-a", Duration::from_secs(30)).await;
    let mut second = Running::start("scheduler", kubeconfig, &elected(&ns, "replica-b", "15s"));
    second.wait_healthy(Duration::from_secs(30)).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-a")
    );

    // A graceful stop (SIGTERM, as Kubernetes sends) releases the Lease: the
    // standby leads long before the 15s lease would have run out.
    terminate(&first);
    let stopped = Instant::now();
    wait_leads(second.addr, "replica-b", Duration::from_secs(30)).await;
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "replica-b led {took:?} after replica-a stopped gracefully: that is waiting for a 15s lease to run out, not a hand-over\nreplica-a's log:\n{}",
        first.log()
    );
    assert_eq!(
        scheduler_lease_holder(&leases).await.as_deref(),
        Some("replica-b")
    );
    let status = wait(Duration::from_secs(10), "replica-a to exit", || {
        let exited = first.child.try_wait().ok().flatten();
        async move { exited }
    })
    .await;
    assert!(status.success(), "a graceful stop exits 0, not {status}");
    eprintln!("leader election: graceful hand-over took {took:?}");
}
