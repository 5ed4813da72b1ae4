//! Lost races are retried quietly, and --max-reconcile-rate bounds a burst.

use super::*;

/// A finalizer of the test's own, which it adds and removes with the same
/// guarded patch the controllers use.
const RACER: &str = "e2e.crossplane-rs.io/racer";

/// Toggles RACER on application `name` as fast as the API server allows
/// until `stop`, then removes it. Every toggle changes the application's
/// finalizers and resourceVersion, so a controller's write guarded by an
/// older read loses the race.
async fn race(
    api: Api<KubernetesApplication>,
    name: String,
    stop: Arc<AtomicBool>,
    racing: Arc<AtomicUsize>,
) {
    let mut counted = false;
    while !stop.load(Ordering::SeqCst) {
        let Ok(Some(app)) = api.get_opt(&name).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let toggled = if runtime::finalizers::has(&app, RACER) {
            runtime::finalizers::remove(&api, &app, RACER).await
        } else {
            runtime::finalizers::add(&api, &app, RACER).await
        };
        if toggled.is_ok() && !counted {
            counted = true;
            racing.fetch_add(1, Ordering::SeqCst);
        }
    }
    loop {
        let app = api.get(&name).await.unwrap();
        if runtime::finalizers::remove(&api, &app, RACER).await.is_ok() {
            return;
        }
    }
}

#[tokio::test]
async fn lost_races_on_finalizers_and_status_are_retried_quietly() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "races").await;
    let rns = remote_ns(&remote, "races").await;
    let c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let kc = Api::<KubernetesCluster>::namespaced(client.clone(), &ns);
    wait(WAIT, "the cluster to be Ready", || async {
        let c = kc.get("target").await.unwrap();
        let conds = c.status.map(|s| s.conditions).unwrap_or_default();
        condition(&conds, "Ready")
            .is_some_and(|r| r.status == "True")
            .then_some(())
    })
    .await;

    // A second writer races the scheduler (whose decision is a status write
    // at the resourceVersion it read) and the application-controller (whose
    // finalizer patch tests the list it read) on every application.
    // The applications select a label no cluster has yet, so none is
    // scheduled before its racer runs; once every racer is writing, the
    // cluster gets the label and the scheduler places all of them while
    // they change under it (left to chance, the scheduler could place each
    // one before its racer's first write, and sometimes did).
    let apps = Api::<KubernetesApplication>::namespaced(client.clone(), &ns);
    let stop = Arc::new(AtomicBool::new(false));
    let racing = Arc::new(AtomicUsize::new(0));
    let mut racers = Vec::new();
    for i in 0..HEALTHY {
        let name = format!("app-{i}");
        let t = configmap_template(
            &format!("cm-{i}"),
            &rns,
            &format!("cm-{i}"),
            json!({"v": "1"}),
        );
        apply_app(
            &client,
            &ns,
            app(
                &name,
                &ns,
                json!({"matchLabels": {"c": "racing"}}),
                json!([t]),
            ),
        )
        .await;
        racers.push(tokio::spawn(race(
            apps.clone(),
            name,
            stop.clone(),
            racing.clone(),
        )));
    }
    wait(WAIT, "every racer writing", || async {
        (racing.load(Ordering::SeqCst) == HEALTHY).then_some(())
    })
    .await;
    kc.patch(
        "target",
        &kube::api::PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"c": "racing"}}})),
    )
    .await
    .unwrap();
    // Race until both controllers lost at least one, or for 30 s.
    let conflicts = |m: &str| {
        metric_sum(
            m,
            "crossplane_rs_reconcile_total",
            &[("result", "conflict")],
        )
    };
    let raced = poll(
        Duration::from_secs(30),
        EVERY,
        "both controllers to lose a race",
        || {
            std::future::ready(
                conflicts(&c.scheduler.metrics()) > 0.0
                    && conflicts(&c.application.metrics()) > 0.0,
            )
        },
    )
    .await;
    // Not yet is no failure here: the counts are asserted below.
    if let Err(out) = raced {
        eprintln!("{}", out.message(None));
    }
    stop.store(true, Ordering::SeqCst);
    for r in racers {
        r.await.unwrap();
    }

    // Every application gets where it was going.
    wait_count(WAIT, "applications Submitted", HEALTHY, || async {
        apps.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|a| state_of_app(a) == "Submitted")
            .count()
    })
    .await;

    // None of the races was reported as a failure: no error metric, no
    // Warning event; and they did happen.
    let (sched, appc) = (c.scheduler.metrics(), c.application.metrics());
    eprintln!(
        "races lost: scheduler {}, application-controller {}",
        conflicts(&sched),
        conflicts(&appc)
    );
    for (binary, m) in [("scheduler", &sched), ("application-controller", &appc)] {
        let errors: Vec<&str> = m
            .lines()
            .filter(|l| l.starts_with("crossplane_rs_reconcile_errors_total{"))
            .collect();
        assert!(errors.is_empty(), "{binary} counted errors: {errors:?}");
    }
    let warnings: Vec<String> = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        // Said while no cluster had the label yet: the staging, not a race.
        .filter(|e| e.reason.as_deref() != Some("NoMatchingCluster"))
        .map(|e| format!("{:?}: {:?}", e.reason, e.message))
        .collect();
    assert!(warnings.is_empty(), "Warning events: {warnings:?}");
    assert!(
        conflicts(&sched) > 0.0,
        "the scheduler never lost a race:\n{sched}"
    );
    assert!(
        conflicts(&appc) > 0.0,
        "the application-controller never lost a race:\n{appc}"
    );
}

#[tokio::test]
async fn max_reconcile_rate_bounds_a_burst_of_reconciles() {
    const RATE: f64 = 10.0;
    const APPS: usize = 40;
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let ns = plane.control.namespace(&client, "rate").await;
    let mut scheduler = Running::start(
        "scheduler",
        &impersonating_kubeconfig("scheduler"),
        &["--watch-namespace", &ns, "--max-reconcile-rate", "10"],
    );
    scheduler.wait_healthy(Duration::from_secs(30)).await;
    let dump = DumpLog(&scheduler);
    let reconciles = |m: &str| {
        metric_sum(
            m,
            "crossplane_rs_reconcile_total",
            &[("controller", "scheduling")],
        )
    };
    assert_eq!(reconciles(&scheduler.metrics()), 0.0);

    // A burst: 40 applications at once, with no cluster to go to, so each
    // is reconciled (and marked Pending) as soon as the scheduler may.
    let burst = Instant::now();
    for i in 0..APPS {
        apply_app(
            &client,
            &ns,
            app(
                &format!("app-{i}"),
                &ns,
                json!({"matchLabels": {"none": "x"}}),
                json!([]),
            ),
        )
        .await;
    }
    // At no moment may the count exceed what the bucket allows since the
    // burst began: a full bucket (RATE) plus RATE per second.
    let apps = Api::<KubernetesApplication>::namespaced(client.clone(), &ns);
    // Sampled every 100 ms: each sample is a check of the bucket.
    let samples = std::cell::RefCell::new(Vec::new());
    wait_every(
        Duration::from_secs(60),
        Duration::from_millis(100),
        &format!("all {APPS} applications Pending"),
        || async {
            let n = reconciles(&scheduler.metrics());
            let t = burst.elapsed();
            samples.borrow_mut().push((t, n));
            assert!(
                n <= RATE * t.as_secs_f64() + RATE + 1.0,
                "{n} reconciles {t:?} after the burst began, over --max-reconcile-rate 10; samples: {:?}",
                samples.borrow()
            );
            let pending = apps
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|a| state_of_app(a) == "Pending")
                .count();
            (pending == APPS)
                .then_some(())
                .ok_or(format!("only {pending} of {APPS} Pending {t:?} after the burst began"))
        },
    )
    .await;
    // Every application was reconciled, so the bucket was really drained:
    // the burst took at least (APPS - RATE) / RATE seconds.
    let took = burst.elapsed();
    assert!(
        took >= Duration::from_secs_f64((APPS as f64 - RATE) / RATE),
        "{APPS} reconciles in {took:?}"
    );
    drop(dump);
}
