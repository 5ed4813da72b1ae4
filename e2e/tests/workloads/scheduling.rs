//! Scheduling and admission: pending until a Ready cluster matches, held back while the
//! resource-controller is behind.

use super::*;

#[tokio::test]
async fn no_matching_cluster_is_pending_until_a_ready_one_appears() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "pending").await;
    let rns = remote_ns(&remote, "pending").await;
    let _c = Controllers::start(&ns).await;
    // A cluster without its Secret and one with a broken kubeconfig: both
    // match, neither is Ready, neither is chosen.
    cluster(
        &client,
        &ns,
        "no-secret",
        json!({"env": "prod", "tier": "gold"}),
        None,
    )
    .await;
    cluster(
        &client,
        &ns,
        "bad-kubeconfig",
        json!({"env": "prod", "tier": "gold"}),
        Some("this is not a kubeconfig"),
    )
    .await;
    cluster(
        &client,
        &ns,
        "other",
        json!({"env": "dev"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let selector = json!({"matchLabels": {"env": "prod"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]});
    apply_app(
        &client,
        &ns,
        app(
            "web",
            &ns,
            selector,
            json!([configmap_template(
                "web-config",
                &rns,
                "web",
                json!({"a": "1"})
            )]),
        ),
    )
    .await;

    // Until the cluster controller has looked at both clusters, the message
    // says their readiness is not yet known: wait for what it found.
    let pending = wait(
        WAIT,
        "the Pending message to name both unready clusters and why",
        || async {
            let a = get_app(&client, &ns, "web").await?;
            let msg = condition(&a.status.as_ref()?.conditions, "Scheduled")?
                .message
                .clone()?;
            (state_of_app(&a) == "Pending"
                && msg.contains("not Ready")
                && !msg.contains("not yet known"))
            .then_some(msg)
        },
    )
    .await;
    assert!(
        pending.contains("matches clusterSelector env=prod,tier in (gold)"),
        "{pending}"
    );
    assert!(pending.contains("other: labels do not match"), "{pending}");
    assert!(
        pending.contains("no-secret: not Ready (connection Secret"),
        "{pending}"
    );
    assert!(pending.contains("bad-kubeconfig: not Ready ("), "{pending}");
    for (name, needle) in [
        ("no-secret", "not found: create it"),
        ("bad-kubeconfig", "does not hold a valid kubeconfig"),
    ] {
        let out = plane.control.kubectl(&[
            "-n",
            &ns,
            "get",
            "kubernetescluster",
            name,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].message}",
        ]);
        let msg = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            msg.contains(needle),
            "{name}'s Ready message should say {needle:?}: {msg}"
        );
    }

    // A matching Ready cluster appears: scheduled at once.
    cluster(
        &client,
        &ns,
        "gold",
        json!({"env": "prod", "tier": "gold"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let a = wait_app_state(&client, &ns, "web", "Submitted").await;
    assert_eq!(a.status.unwrap().cluster_ref.unwrap().name, "gold");
    let cm = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["a"], "1");

    // Spread: a second application goes to the emptier matching cluster,
    // ties broken by name; a scheduled application never moves.
    cluster(
        &client,
        &ns,
        "gold-b",
        json!({"env": "prod", "tier": "gold"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    wait(WAIT, "gold-b to be Ready", || async {
        let out = plane.control.kubectl(&[
            "-n",
            &ns,
            "get",
            "kubernetescluster",
            "gold-b",
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        ]);
        (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
    })
    .await;
    let sel = json!({"matchLabels": {"tier": "gold"}});
    apply_app(&client, &ns, app("second", &ns, sel.clone(), json!([]))).await;
    let second = wait_app_state(&client, &ns, "second", "Submitted").await;
    assert_eq!(second.status.unwrap().cluster_ref.unwrap().name, "gold-b");
    assert_eq!(
        get_app(&client, &ns, "web")
            .await
            .unwrap()
            .status
            .unwrap()
            .cluster_ref
            .unwrap()
            .name,
        "gold"
    );
}

/// Resources made long before the resource-controller can take them only
/// load the control API server: past --max-waiting-resources, a new
/// application's resources wait, and the application says why; they are
/// made once the resource-controller has caught up.
#[tokio::test]
async fn a_new_application_waits_while_the_resource_controller_is_behind() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "backlog").await;
    let rns = remote_ns(&remote, "backlog").await;
    let mut scheduler = start("scheduler", &ns);
    let mut application = start_with(
        "application-controller",
        &ns,
        &["--max-waiting-resources", "3"],
    );
    for r in [&mut scheduler, &mut application] {
        r.wait_healthy(Duration::from_secs(30)).await;
    }
    cluster(
        &client,
        &ns,
        "target",
        json!({"backlog": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let templates = |prefix: &str, n: usize| {
        json!(
            (0..n)
                .map(|i| configmap_template(
                    &format!("{prefix}-{i}"),
                    &rns,
                    &format!("{prefix}-{i}"),
                    json!({"v": "1"})
                ))
                .collect::<Vec<_>>()
        )
    };
    let selector = json!({"matchLabels": {"backlog": "1"}});
    // No resource-controller yet: the first application's 4 resources wait
    // for it, which is more than 3.
    apply_app(
        &client,
        &ns,
        app("first", &ns, selector.clone(), templates("first", 4)),
    )
    .await;
    let resources = Api::<KubernetesApplicationResource>::namespaced(client.clone(), &ns);
    wait(WAIT, "the first application's 4 resources", || async {
        (resources
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .len()
            == 4)
            .then_some(())
    })
    .await;
    // Its progress is written within the window (the first look may wait).
    wait(WAIT, "the first application's counts", || async {
        let a = get_app(&client, &ns, "first").await?;
        (a.status?.desired_resources == Some(4)).then_some(())
    })
    .await;
    apply_app(
        &client,
        &ns,
        app("second", &ns, selector, templates("second", 2)),
    )
    .await;
    let waiting = wait(WAIT, "the second application to say it waits", || async {
        let a = get_app(&client, &ns, "second").await?;
        let ready = condition(&a.status.as_ref()?.conditions, "Ready")?;
        (ready.reason.as_deref() == Some("WaitingForResourceController")).then_some(a)
    })
    .await;
    assert_eq!(state_of_app(&waiting), "Scheduled");
    let ready = condition(&waiting.status.as_ref().unwrap().conditions, "Ready").unwrap();
    assert!(
        ready
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("--max-waiting-resources"),
        "{ready:?}"
    );
    // While it waits it is looked at again, and neither makes a resource nor
    // writes its status again (counted, not timed).
    let patches = || {
        e2e::metric_sum(
            &application.metrics(),
            "crossplane_rs_kube_api_requests_total",
            &[("cluster", "control"), ("verb", "patch")],
        )
    };
    let looks = || {
        e2e::metric_sum(
            &application.metrics(),
            "crossplane_rs_reconcile_total",
            &[("controller", "kubernetesapplication")],
        )
    };
    let (patched, looked) = (patches(), looks());
    wait(WAIT, "three more looks at the applications", || async {
        (looks() >= looked + 3.0).then_some(())
    })
    .await;
    assert_eq!(patches(), patched, "a waiting application writes nothing");
    let items = resources.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(items.len(), 4, "no resource of the second application yet");
    // The resource-controller catches up: the second application's resources
    // are made and submitted.
    let mut resource = start("resource-controller", &ns);
    resource.wait_healthy(Duration::from_secs(30)).await;
    wait_app_state(&client, &ns, "first", "Submitted").await;
    let second = wait_app_state(&client, &ns, "second", "Submitted").await;
    assert_eq!(second.status.unwrap().submitted_resources, Some(2));
}
