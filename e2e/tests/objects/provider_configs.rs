//! ProviderConfigs: protected while in use, and their usage follows each Object's reference.

use super::*;

#[tokio::test]
async fn a_provider_config_in_use_cannot_be_deleted_until_it_is_not() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "inuse").await;
    let plane = testenv::control_plane();
    let pc = testenv::unique_name("pc");
    let out = plane.control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&format!("apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {{name: {pc}}}\nspec: {{credentials: {{source: Secret, secretRef: {{namespace: default, name: remote-kubeconfig, key: kubeconfig}}}}}}\n")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = format!("{ns}-user");
    apply_object(
        &client,
        object(
            &name,
            &pc,
            configmap("cm", &ns, json!({"a": "b"})),
            json!({}),
        ),
    )
    .await;
    wait_ready(&client, &name).await;
    let pcs = Api::<ProviderConfig>::all(client.clone());
    pcs.delete(&pc, &DeleteParams::default()).await.unwrap();
    let msg = wait(WAIT, "the ProviderConfig to say who uses it", || async {
        let p = pcs.get_opt(&pc).await.ok()??;
        p.status?
            .conditions
            .iter()
            .find(|c| c.type_ == "InUse")
            .and_then(|c| c.message.clone())
    })
    .await;
    assert!(
        msg.contains(&format!("in use by 1 Objects: Object {name}")),
        "{msg}"
    );
    assert!(
        pcs.get_opt(&pc).await.unwrap().is_some(),
        "deletion refused while in use"
    );
    delete_and_wait_gone(&client, &name).await;
    wait(WAIT, "the ProviderConfig to go once unused", || async {
        pcs.get_opt(&pc).await.ok()?.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_usage_follows_the_provider_config_ref_both_ways() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "switch").await;
    let (a, b) = (testenv::unique_name("pca"), testenv::unique_name("pcb"));
    remote_config(&a);
    remote_config(&b);
    let pcs = Api::<ProviderConfig>::all(client.clone());
    let name = format!("{ns}-user");
    let on = |config: &str| {
        object(
            &name,
            config,
            configmap("cm", &ns, json!({"a": "b"})),
            json!({}),
        )
    };
    let users = |config: String| {
        let pcs = pcs.clone();
        async move { pcs.get_opt(&config).await.ok()??.status?.users }
    };
    let refused = |config: String| {
        let pcs = pcs.clone();
        let name = name.clone();
        async move {
            let msg = wait(
                WAIT,
                &format!("{config} to refuse its deletion"),
                || async {
                    let p = pcs.get_opt(&config).await.ok()??;
                    p.status?
                        .conditions
                        .iter()
                        .find(|c| c.type_ == "InUse")
                        .and_then(|c| c.message.clone())
                },
            )
            .await;
            assert!(msg.contains(&format!("Object {name}")), "{msg}");
            assert!(pcs.get_opt(&config).await.unwrap().is_some());
        }
    };
    let gone = |config: String| {
        let pcs = pcs.clone();
        async move {
            wait(WAIT, &format!("{config} to go once unused"), || async {
                pcs.get_opt(&config).await.ok()?.is_none().then_some(())
            })
            .await;
        }
    };
    apply_object(&client, on(&a)).await;
    wait_ready(&client, &name).await;
    wait(WAIT, "A to count its user", || async {
        (users(a.clone()).await? == 1).then_some(())
    })
    .await;

    // A → B: B is protected, A is free to go.
    apply_object(&client, on(&b)).await;
    wait(WAIT, "B to count its user", || async {
        (users(b.clone()).await? == 1).then_some(())
    })
    .await;
    pcs.delete(&b, &DeleteParams::default()).await.unwrap();
    refused(b.clone()).await;
    pcs.delete(&a, &DeleteParams::default()).await.unwrap();
    gone(a.clone()).await;

    // B → A (made again): A is protected, B (deleting) goes.
    remote_config(&a);
    apply_object(&client, on(&a)).await;
    wait(WAIT, "A to count its user", || async {
        (users(a.clone()).await? == 1).then_some(())
    })
    .await;
    gone(b.clone()).await;
    pcs.delete(&a, &DeleteParams::default()).await.unwrap();
    refused(a.clone()).await;

    delete_and_wait_gone(&client, &name).await;
    gone(a.clone()).await;
}
