//! Bad input gets a condition that says what to fix; the provider keeps working.

use super::*;

#[tokio::test]
async fn bad_input_gets_a_condition_that_says_what_to_fix() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "badobj").await;
    let plane = testenv::control_plane();
    let p = |s: &str| format!("{ns}-{s}");
    apply_object(
        &client,
        object(
            &p("no-kind"),
            "remote",
            json!({"apiVersion": "v1", "metadata": {"name": "x", "namespace": ns}}),
            json!({}),
        ),
    )
    .await;
    apply_object(
        &client,
        object(
            &p("no-apiversion"),
            "remote",
            json!({"kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}}),
            json!({}),
        ),
    )
    .await;
    apply_object(&client, object(&p("unknown-kind"), "remote", json!({"apiVersion": "widgets.example.org/v1", "kind": "Widget", "metadata": {"name": "x", "namespace": ns}}), json!({}))).await;
    apply_object(
        &client,
        object(
            &p("no-config"),
            "does-not-exist",
            configmap("x", &ns, json!({})),
            json!({}),
        ),
    )
    .await;
    apply_object(
        &client,
        object(
            &p("bad-path"),
            "remote",
            configmap("y", &ns, json!({})),
            json!({"references": [{"fromObject": {"apiVersion": "v1", "kind": "Namespace", "name": "default", "fieldPath": "metadata.name"}, "toFieldPath": "spec.forProvider.manifest..name"}]}),
        ),
    )
    .await;
    let cycle = |me: &str, other: &str| json!({"references": [{"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": other}}], "_": me});
    for (me, other) in [(p("cycle-a"), p("cycle-b")), (p("cycle-b"), p("cycle-a"))] {
        let mut extra = cycle(&me, &other);
        extra.as_object_mut().unwrap().remove("_");
        apply_object(
            &client,
            object(&me, "remote", configmap(&me, &ns, json!({})), extra),
        )
        .await;
    }
    // An unreadable kubeconfig and a target that does not answer: a
    // listener that accepts connections and never says a word (a closed
    // port would fail at once and prove nothing about waiting).
    let stalled_addr = e2e::stall::Stalled::start(e2e::stall::Mode::Tcp).addr;
    let dead = plane.remote.kubeconfig.replace(
        plane
            .remote
            .kubeconfig
            .lines()
            .find(|l| l.trim_start().starts_with("server:"))
            .unwrap(),
        &format!("    server: https://{stalled_addr}"),
    );
    for (secret, content) in [
        (p("garbage"), "not a kubeconfig".to_owned()),
        (p("dead"), dead),
    ] {
        let s: Secret = serde_json::from_value(json!({"metadata": {"name": secret, "namespace": "default"}, "stringData": {"kubeconfig": content}})).unwrap();
        Api::<Secret>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
        let out = plane.control.kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&format!("apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {{name: {secret}}}\nspec: {{credentials: {{source: Secret, secretRef: {{namespace: default, name: {secret}, key: kubeconfig}}}}}}\n")),
        );
        assert!(out.status.success());
        apply_object(
            &client,
            object(
                &format!("{secret}-user"),
                &secret,
                configmap("z", &ns, json!({})),
                json!({}),
            ),
        )
        .await;
    }
    let cases = [
        (
            p("no-kind"),
            "spec.forProvider.manifest has no kind: set the kind",
        ),
        (
            p("no-apiversion"),
            "spec.forProvider.manifest has no apiVersion",
        ),
        (
            p("unknown-kind"),
            "does not serve kind Widget in apiVersion widgets.example.org/v1",
        ),
        (p("no-config"), "ProviderConfig does-not-exist not found"),
        (p("bad-path"), "invalid toFieldPath"),
        (p("cycle-a"), "reference cycle:"),
        (
            format!("{}-user", p("garbage")),
            "does not hold a valid kubeconfig",
        ),
        (format!("{}-user", p("dead")), "did not answer"),
    ];
    for (name, needle) in &cases {
        wait_synced_false(&client, name, needle).await;
    }
    // Backoff, not a hot loop: a failing Object is retried a few times.
    let count = |name: String| {
        let client = client.clone();
        async move {
            Api::<Event>::all(client)
                .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                .await
                .unwrap()
                .items
                .iter()
                .map(|e| {
                    e.count.unwrap_or(1) + e.series.as_ref().and_then(|s| s.count).unwrap_or(0)
                })
                .sum::<i32>()
        }
    };
    // Time is measured in polls of a healthy Object on a ProviderConfig of
    // its own: six of them (about 6s), where a hot loop would retry
    // hundreds of times.
    let pc = own_config(&client, "badclock").await;
    apply_object(
        &client,
        object(
            &p("clock"),
            &pc,
            configmap("clock", &ns, json!({})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &p("clock")).await;
    let before = count(p("no-kind")).await;
    wait_observations(&pc, observations(&pc), 6).await;
    let after = count(p("no-kind")).await;
    assert!(
        after - before <= 4,
        "retries must back off: {before} -> {after} in six polls of a healthy Object"
    );
    delete_object(&client, &p("clock")).await;
    // The provider is still alive and well.
    let (addr, metrics) = {
        let provider = provider().lock().unwrap();
        (provider.addr, provider.metrics())
    };
    assert!(matches!(e2e::http_get(addr, "/healthz"), Some((200, _))));
    assert!(
        metrics.contains(
            "crossplane_rs_managed_objects{kind=\"objects.kubernetes.crossplane.io\",ready="
        ),
        "{metrics}"
    );
    // Bad Objects delete cleanly, and the one whose target does not answer
    // is orphaned after the deletion timeout instead of hanging.
    let dead_user = format!("{}-user", p("dead"));
    let deleted_at = Api::<Object>::all(client.clone())
        .delete(&dead_user, &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .and_then(|o| o.metadata.deletion_timestamp)
        .unwrap_or_else(|| panic!("{dead_user} went at once, without its finalizer"))
        .0;
    for (name, _) in &cases {
        delete_object(&client, name).await;
    }
    delete_object(&client, &p("cycle-b")).await;
    for (name, _) in &cases {
        wait_object_gone(&client, name).await;
    }
    let orphaned = events_of(&client, &dead_user)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("ManagedObjectOrphaned"))
        .unwrap_or_else(|| panic!("no ManagedObjectOrphaned event for {dead_user}"));
    let at = orphaned
        .event_time
        .as_ref()
        .map(|t| t.0)
        .or(orphaned.first_timestamp.as_ref().map(|t| t.0))
        .unwrap();
    let after = at.as_millisecond() - deleted_at.as_millisecond();
    // The provider runs with --deletion-timeout 10s.
    assert!(
        after >= 10_000,
        "orphaned {after} ms after the deletion, before --deletion-timeout (10s): {orphaned:?}"
    );
}

#[tokio::test]
async fn a_string_written_over_the_manifest_metadata_is_refused_and_the_provider_keeps_working() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "metastr").await;
    let pid = provider().lock().unwrap().child.id();
    let source = local_cm(&client, "meta", json!({"meta": "not-an-object"})).await;
    let bad = format!("{ns}-bad");
    apply_object(
        &client,
        object(
            &bad,
            "remote",
            configmap("x", &ns, json!({})),
            json!({"references": [{"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": source, "namespace": "default", "fieldPath": "data.meta"}, "toFieldPath": "spec.forProvider.manifest.metadata"}]}),
        ),
    )
    .await;
    let msg = wait_synced_false(&client, &bad, "spec.forProvider.manifest.metadata").await;
    assert!(msg.contains("is not an object"), "{msg}");
    // Still the same, healthy process, and it keeps reconciling: an Object
    // created afterwards becomes Ready.
    let good = format!("{ns}-good");
    apply_object(
        &client,
        object(
            &good,
            "remote",
            configmap("y", &ns, json!({"a": "b"})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &good).await;
    {
        let mut p = provider().lock().unwrap();
        assert!(
            p.child.try_wait().unwrap().is_none(),
            "the provider exited: {}",
            p.log()
        );
        assert_eq!(p.child.id(), pid, "the provider was restarted");
        assert!(matches!(e2e::http_get(p.addr, "/healthz"), Some((200, _))));
        assert!(!p.log().contains("panicked"), "{}", p.log());
    }
    for name in [&bad, &good] {
        delete_and_wait_gone(&client, name).await;
    }
}
