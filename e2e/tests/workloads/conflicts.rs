//! Conflicts and bad templates are reported and contained: the first owner is untouched, a bad
//! template fails alone.

use super::*;

#[tokio::test]
async fn conflicts_are_reported_and_the_first_owner_is_untouched() {
    let Setup {
        plane: _,
        client,
        remote,
        ns,
        rns,
        controllers: _c,
    } = with_target("conflict").await;
    let sel = json!({"matchLabels": {"c": "1"}});

    // Two applications templating a resource with the same name.
    apply_app(
        &client,
        &ns,
        app(
            "first",
            &ns,
            sel.clone(),
            json!([configmap_template(
                "shared",
                &rns,
                "shared",
                json!({"owner": "first"})
            )]),
        ),
    )
    .await;
    wait_app_state(&client, &ns, "first", "Submitted").await;
    apply_app(
        &client,
        &ns,
        app(
            "second",
            &ns,
            sel.clone(),
            json!([configmap_template(
                "shared",
                &rns,
                "other",
                json!({"owner": "second"})
            )]),
        ),
    )
    .await;
    let msg = wait(
        WAIT,
        "the second application to report the conflict",
        || async {
            let a = get_app(&client, &ns, "second").await?;
            let c = condition(&a.status.as_ref()?.conditions, "Synced")?;
            (c.status == "False").then(|| c.message.clone().unwrap_or_default())
        },
    )
    .await;
    assert!(msg.contains(&format!("KubernetesApplicationResource {ns}/shared already exists and is controlled by KubernetesApplication first")), "{msg}");
    let shared = get_res(&client, &ns, "shared").await.unwrap();
    assert_eq!(shared.owner_references()[0].name, "first");
    assert_eq!(shared.spec.template["data"]["owner"], "first");
    assert!(
        Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .get_opt("other")
            .await
            .unwrap()
            .is_none()
    );

    // Two resources templating the same remote object.
    apply_app(
        &client,
        &ns,
        app(
            "third",
            &ns,
            sel.clone(),
            json!([configmap_template(
                "third-cm",
                &rns,
                "shared",
                json!({"owner": "third"})
            )]),
        ),
    )
    .await;
    let third = wait_res_state(&client, &ns, "third-cm", "Failed").await;
    let msg = synced_message(&third);
    assert!(msg.contains(&format!("ConfigMap {rns}/shared already exists in cluster {ns}/target and is not controlled by this resource")), "{msg}");
    let cm = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .get("shared")
        .await
        .unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["owner"], "first");
    assert_eq!(
        cm.annotations()[ANNOTATION_RESOURCE_UID],
        shared.uid().unwrap()
    );
    // An event says so too.
    e2e::wait_event(&client, Some(&ns), None, "RemoteObjectConflict").await;

    // A remote object created by someone else is never touched either.
    let foreign: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "foreign", "namespace": rns}, "data": {"owner": "someone"}}),
    )
    .unwrap();
    Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    apply_app(
        &client,
        &ns,
        app(
            "fourth",
            &ns,
            sel,
            json!([configmap_template(
                "fourth-cm",
                &rns,
                "foreign",
                json!({"owner": "fourth"})
            )]),
        ),
    )
    .await;
    let fourth = wait_res_state(&client, &ns, "fourth-cm", "Failed").await;
    assert!(
        synced_message(&fourth).contains(&format!("has no {ANNOTATION_RESOURCE_UID} annotation"))
    );
    let cm = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .get("foreign")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["owner"], "someone");
    // Deleting the resource that lost must not delete what is not its own.
    delete_and_wait_gone::<KubernetesApplication>(
        &client,
        &ns,
        "fourth",
        "application fourth to be gone",
    )
    .await;
    assert!(
        Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .get_opt("foreign")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_bad_template_fails_alone_and_a_missing_namespace_converges() {
    let Setup {
        plane: _,
        client,
        remote,
        ns,
        rns,
        controllers: _c,
    } = with_target("bad").await;
    let late = testenv::unique_name("late");
    let templates = json!([
        configmap_template("good", &rns, "good", json!({"x": "1"})),
        {"metadata": {"name": "no-kind"}, "spec": {"template": {"apiVersion": "v1", "metadata": {"name": "x", "namespace": rns}}}},
        {"metadata": {"name": "unknown-kind"}, "spec": {"template": {"apiVersion": "widgets.example.org/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": rns}}}},
        configmap_template("late-ns", &late, "late", json!({"x": "2"})),
    ]);
    apply_app(
        &client,
        &ns,
        app("mixed", &ns, json!({"matchLabels": {"c": "1"}}), templates),
    )
    .await;

    let no_kind = wait_res_state(&client, &ns, "no-kind", "Failed").await;
    assert!(
        synced_message(&no_kind).contains("spec.template has no kind: set the kind"),
        "{}",
        synced_message(&no_kind)
    );
    let unknown = wait_res_state(&client, &ns, "unknown-kind", "Failed").await;
    assert!(
        synced_message(&unknown)
            .contains("does not serve kind Widget in apiVersion widgets.example.org/v1"),
        "{}",
        synced_message(&unknown)
    );
    let late_res = wait_res_state(&client, &ns, "late-ns", "Failed").await;
    assert!(
        synced_message(&late_res).contains("its namespace does not exist there yet"),
        "{}",
        synced_message(&late_res)
    );
    wait_res_state(&client, &ns, "good", "Submitted").await;
    let a = wait_app_state(&client, &ns, "mixed", "PartiallySubmitted").await;
    assert_eq!(a.status.as_ref().unwrap().desired_resources, Some(4));
    assert_eq!(a.status.as_ref().unwrap().submitted_resources, Some(1));

    // Retries back off: after a while the failing resource has been tried a
    // handful of times, not hundreds.
    let failures = |name: &'static str| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            Api::<Event>::namespaced(client, &ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| {
                    e.involved_object.name.as_deref() == Some(name)
                        && e.reason.as_deref() == Some("InvalidTemplate")
                })
                .map(|e| e.count.unwrap_or(1) + e.series.and_then(|s| s.count).unwrap_or(0))
                .sum::<i32>()
        }
    };
    let before = failures("no-kind").await;
    assert!(before >= 1, "a Warning event names the failure");
    tokio::time::sleep(Duration::from_secs(6)).await; // observing a rate needs elapsed time
    let after = failures("no-kind").await;
    assert!(
        after - before <= 4,
        "retries must back off: {before} -> {after} events in 6s"
    );

    // The namespace appears: the resource converges on its own.
    let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": late}})).unwrap();
    Api::<Namespace>::all(remote.clone())
        .create(&PostParams::default(), &nsobj)
        .await
        .unwrap();
    wait_res_state(&client, &ns, "late-ns", "Submitted").await;
    let a = wait(WAIT, "SUBMITTED 2", || async {
        let a = get_app(&client, &ns, "mixed").await?;
        (a.status.as_ref()?.submitted_resources == Some(2)).then_some(a)
    })
    .await;
    assert_eq!(state_of_app(&a), "PartiallySubmitted");
}
