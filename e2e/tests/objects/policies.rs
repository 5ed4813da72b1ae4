//! Management policies, pausing, drift and external names: what the provider may do to a managed object.

use super::*;

#[tokio::test]
async fn every_row_of_the_management_policy_table_is_honoured() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "policy").await;
    let pc = own_config(&client, "policy").await;
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    // (policy, deletionPolicy, may create/update, may delete)
    let rows = [
        ("Default", "Delete", true, true),
        ("ObserveCreateUpdate", "Delete", true, false),
        ("ObserveDelete", "Delete", false, true),
        ("Observe", "Delete", false, false),
        ("Default", "Orphan", true, false),
        ("ObserveDelete", "Orphan", false, false),
    ];
    for (policy, deletion, create_update, delete) in rows {
        let name = format!("{}-{}", policy.to_lowercase(), deletion.to_lowercase());
        let obj_name = format!("{ns}-{name}");
        if !create_update {
            // Observe-only policies need the object to exist already.
            let cm: ConfigMap =
                serde_json::from_value(configmap(&name, &ns, json!({"v": "theirs"}))).unwrap();
            cms.create(&PostParams::default(), &cm).await.unwrap();
        }
        let extra = json!({"managementPolicy": policy, "deletionPolicy": deletion});
        apply_object(
            &client,
            object(
                &obj_name,
                &pc,
                configmap(&name, &ns, json!({"v": "1"})),
                extra.clone(),
            ),
        )
        .await;
        wait_ready(&client, &obj_name).await;
        let live = remote_cm(&remote, &ns, &name).await.unwrap();
        let expected = if create_update { "1" } else { "theirs" };
        assert_eq!(
            live.data.as_ref().unwrap()["v"],
            expected,
            "{policy}/{deletion}: create"
        );
        // An update to the manifest reaches the target only when allowed.
        let writes = requests(&pc, &WRITES);
        apply_object(
            &client,
            object(
                &obj_name,
                &pc,
                configmap(&name, &ns, json!({"v": "2"})),
                extra,
            ),
        )
        .await;
        if create_update {
            wait(
                WAIT,
                &format!("{policy}: update to reach the target"),
                || async {
                    (remote_cm(&remote, &ns, &name).await?.data?.get("v")? == "2").then_some(())
                },
            )
            .await;
        } else {
            // Three polls of the changed Object, and not one write.
            wait_observations(&pc, observations(&pc), 3).await;
            assert_eq!(
                requests(&pc, &WRITES),
                writes,
                "{policy}: the provider wrote to the target"
            );
            assert_eq!(
                remote_cm(&remote, &ns, &name).await.unwrap().data.unwrap()["v"],
                "theirs",
                "{policy}: no update"
            );
        }
        delete_and_wait_gone(&client, &obj_name).await;
        let left = remote_cm(&remote, &ns, &name).await;
        assert_eq!(
            left.is_none(),
            delete,
            "{policy}/{deletion}: delete allowed = {delete}"
        );
    }
    // Observe with nothing to observe says so.
    apply_object(
        &client,
        object(
            &format!("{ns}-observe-missing"),
            "remote",
            configmap("missing", &ns, json!({})),
            json!({"managementPolicy": "Observe"}),
        ),
    )
    .await;
    wait_synced_false(
        &client,
        &format!("{ns}-observe-missing"),
        "does not exist and managementPolicies [Observe] only observe it",
    )
    .await;
    assert!(remote_cm(&remote, &ns, "missing").await.is_none());
    delete_object(&client, &format!("{ns}-observe-missing")).await;
}

#[tokio::test]
async fn paused_objects_are_left_alone_and_drift_is_put_back() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "drift").await;
    let pc = own_config(&client, "paused").await;
    // A steady Object on the same ProviderConfig: its polls (reads) measure
    // time in poll intervals while the paused one must do nothing.
    let clock = format!("{ns}-clock");
    apply_object(
        &client,
        object(&clock, &pc, configmap("clock", &ns, json!({})), json!({})),
    )
    .await;
    let name = format!("{ns}-drift");
    apply_object(
        &client,
        object(
            &name,
            &pc,
            configmap("cm", &ns, json!({"k": "mine"})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &clock).await;
    wait_ready(&client, &name).await;
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    // Someone edits a field the Object sets: put back, with an event.
    cms.patch(
        "cm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "theirs"}})),
    )
    .await
    .unwrap();
    wait(WAIT, "the drift to be put back", || async {
        (remote_cm(&remote, &ns, "cm").await?.data?.get("k")? == "mine").then_some(())
    })
    .await;
    // The event follows the write that put the field back.
    e2e::wait_event(&client, None, Some(&name), "DriftCorrected").await;

    // Paused: Synced=False ReconcilePaused, and nothing is done.
    Api::<Object>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"crossplane.io/paused": "true"}}})),
        )
        .await
        .unwrap();
    wait(WAIT, "ReconcilePaused", || async {
        let o = get_object(&client, &name).await?;
        (cond(&o, "Synced")?.1 == "ReconcilePaused").then_some(())
    })
    .await;
    cms.patch(
        "cm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "paused-edit"}})),
    )
    .await
    .unwrap();
    // Three polls of the clock later, not one write to the target.
    let writes = requests(&pc, &WRITES);
    wait_observations(&pc, observations(&pc), 3).await;
    assert_eq!(
        requests(&pc, &WRITES),
        writes,
        "a paused Object must not write"
    );
    assert_eq!(
        remote_cm(&remote, &ns, "cm").await.unwrap().data.unwrap()["k"],
        "paused-edit",
        "a paused Object must not act"
    );
    // Deleting while paused does nothing either.
    delete_object(&client, &name).await;
    wait_observations(&pc, observations(&pc), 3).await;
    assert_eq!(
        requests(&pc, &WRITES),
        writes,
        "a paused Object must not delete"
    );
    assert!(
        get_object(&client, &name).await.is_some(),
        "a paused Object is not finalized"
    );
    // Resuming: the deletion proceeds.
    Api::<Object>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"crossplane.io/paused": null}}})),
        )
        .await
        .unwrap();
    wait_object_gone(&client, &name).await;
    assert!(remote_cm(&remote, &ns, "cm").await.is_none());
    delete_object(&client, &clock).await;
}

#[tokio::test]
async fn external_name_is_honoured_and_a_deleted_usage_does_not_block_deletion() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "extname").await;
    let name = format!("{ns}-external");
    let mut body = object(
        &name,
        "remote",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns}, "data": {"a": "b"}}),
        json!({}),
    );
    body["metadata"]["annotations"] = json!({"crossplane.io/external-name": "called-this"});
    apply_object(&client, body).await;
    let o = wait_ready(&client, &name).await;
    assert!(
        remote_cm(&remote, &ns, "called-this").await.is_some(),
        "the managed object carries the external name"
    );
    assert!(remote_cm(&remote, &ns, &name).await.is_none());
    // The Object's use of its ProviderConfig is recorded on the Object
    // itself (a label, no usage record of its own to delete): the config
    // cannot be deleted while the Object uses it, says by whom, and does
    // not block the Object's deletion.
    assert_eq!(
        o.labels().get("kubernetes.crossplane.io/provider-config"),
        Some(&"remote".to_owned())
    );
    let pc = testenv::unique_name("extpc");
    remote_config(&pc);
    let mut moved = object(
        &name,
        &pc,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns}, "data": {"a": "b"}}),
        json!({}),
    );
    moved["metadata"]["annotations"] = json!({"crossplane.io/external-name": "called-this"});
    apply_object(&client, moved).await;
    let pcs = Api::<ProviderConfig>::all(client.clone());
    wait(WAIT, "the config to count its user", || async {
        (pcs.get_opt(&pc).await.ok()??.status?.users? == 1).then_some(())
    })
    .await;
    pcs.delete(&pc, &DeleteParams::default()).await.unwrap();
    let msg = wait(WAIT, "the config to say who uses it", || async {
        let p = pcs.get_opt(&pc).await.ok()??;
        p.status?
            .conditions
            .iter()
            .find(|c| c.type_ == "InUse")
            .and_then(|c| c.message.clone())
    })
    .await;
    assert!(msg.contains(&format!("Object {name}")), "{msg}");
    delete_and_wait_gone(&client, &name).await;
    assert!(remote_cm(&remote, &ns, "called-this").await.is_none());
    wait(WAIT, "the config to go once unused", || async {
        pcs.get_opt(&pc).await.ok()?.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn normalised_values_are_not_drift_and_real_edits_are_put_back() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "normal").await;
    let pc = own_config(&client, "normal").await;
    let secret = format!("{ns}-secret");
    let deployment = format!("{ns}-deployment");
    apply_object(
        &client,
        object(
            &secret,
            &pc,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}, "stringData": {"password": "pa55word"}}),
            json!({}),
        ),
    )
    .await;
    apply_object(
        &client,
        object(
            &deployment,
            &pc,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "namespace": ns},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "d"}},
                    "template": {
                        "metadata": {"labels": {"app": "d"}},
                        "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1", "resources": {"requests": {"cpu": 0.5}}}]},
                    },
                },
            }),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &secret).await;
    wait_ready(&client, &deployment).await;
    let deployments =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(remote.clone(), &ns);
    let cpu = || async {
        deployments
            .get("d")
            .await
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap()["cpu"]
            .0
            .clone()
    };
    assert_eq!(
        cpu().await,
        "500m",
        "the API server normalises the quantity"
    );

    // Three polls of each Object: reads, and not one write.
    let writes = requests(&pc, &WRITES);
    wait_observations(&pc, observations(&pc), 6).await;
    assert_eq!(
        requests(&pc, &WRITES),
        writes,
        "an unchanged managed object was written again"
    );
    for name in [&secret, &deployment] {
        assert!(
            !events_of(&client, name)
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("DriftCorrected")),
            "{name}: DriftCorrected without drift"
        );
    }

    // A real edit by another field manager is put back, with an event.
    let intruder = PatchParams {
        field_manager: Some("intruder".to_owned()),
        ..PatchParams::default()
    };
    deployments
        .patch(
            "d",
            &intruder,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]}}}})),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(remote.clone(), &ns)
        .patch(
            "s",
            &intruder,
            &Patch::Merge(json!({"data": {"password": "dGhlaXJz"}})),
        )
        .await
        .unwrap();
    wait(WAIT, "the cpu request to be put back", || async {
        (cpu().await == "500m").then_some(())
    })
    .await;
    wait(WAIT, "the Secret's value to be put back", || async {
        let s = Api::<Secret>::namespaced(remote.clone(), &ns)
            .get("s")
            .await
            .ok()?;
        (s.data?.get("password")?.0 == b"pa55word").then_some(())
    })
    .await;
    let mut said = Vec::new();
    for name in [&secret, &deployment] {
        let event = wait(WAIT, &format!("{name}: a DriftCorrected event"), || async {
            events_of(&client, name)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("DriftCorrected"))
        })
        .await;
        said.push(event.message.unwrap_or_default());
    }
    // The report names what changed and who changed it, never a value.
    let cpu_path = "spec.template.spec.containers[0].resources.requests.cpu";
    assert!(
        said[1].contains(&format!("{cpu_path} (changed by intruder)")),
        "{}",
        said[1]
    );
    assert!(said[0].contains("(changed by intruder)"), "{}", said[0]);
    for (name, path) in [(&secret, None), (&deployment, Some(cpu_path))] {
        // The event is said during the reconcile; the status lands at its end.
        let report = wait(WAIT, &format!("{name}: status.drift"), || async {
            get_object(&client, name).await?.status?.drift
        })
        .await;
        assert_eq!(report.manager.as_deref(), Some("intruder"), "{name}");
        assert_eq!(report.corrections_in_last_hour, 1, "{name}");
        if let Some(p) = path {
            assert_eq!(report.paths, [p]);
        }
        let shown = serde_json::to_string(&report).unwrap();
        for secret_value in ["pa55word", "dGhlaXJz", "theirs"] {
            assert!(!shown.contains(secret_value), "{shown}");
        }
    }
    for message in &said {
        for secret_value in ["pa55word", "dGhlaXJz", "theirs"] {
            assert!(!message.contains(secret_value), "{message}");
        }
    }
    for name in [&secret, &deployment] {
        delete_and_wait_gone(&client, name).await;
    }
}

#[tokio::test]
async fn a_field_fought_over_is_named_a_drift_loop_with_the_other_manager() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "loop").await;
    let pc = own_config(&client, "loop").await;
    let name = format!("{ns}-loop");
    apply_object(
        &client,
        object(
            &name,
            &pc,
            configmap("cm", &ns, json!({"k": "mine"})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &name).await;
    let before = metric(
        "crossplane_rs_drift_corrections_total",
        &[("kind", "ConfigMap")],
    );
    // Another controller that wants its own value, every time it sees ours.
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    let other = PatchParams {
        field_manager: Some("other-operator".to_owned()),
        ..PatchParams::default()
    };
    let looping = wait(WAIT, "DriftLoop=True", || async {
        let cm = cms.get("cm").await.ok()?;
        if cm
            .data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(String::as_str)
            == Some("mine")
        {
            cms.patch(
                "cm",
                &other,
                &Patch::Merge(json!({"data": {"k": "theirs"}})),
            )
            .await
            .ok()?;
        }
        let o = get_object(&client, &name).await?;
        let (status, _, message) = cond(&o, "DriftLoop")?;
        (status == "True").then_some(message)
    })
    .await;
    assert!(looping.contains("data.k"), "{looping}");
    assert!(
        looping.contains("field manager other-operator"),
        "{looping}"
    );
    let o = get_object(&client, &name).await.unwrap();
    let report = o.status.unwrap().drift.unwrap();
    assert_eq!(report.paths, ["data.k"]);
    assert!(report.corrections_in_last_hour > 5, "{report:?}");
    e2e::wait_event(&client, None, Some(&name), "DriftLoop").await;
    let after = metric(
        "crossplane_rs_drift_corrections_total",
        &[("kind", "ConfigMap")],
    );
    assert!(after >= before + 6, "{before} -> {after}");
    delete_and_wait_gone(&client, &name).await;
}
