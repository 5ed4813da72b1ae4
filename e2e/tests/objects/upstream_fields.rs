//! Upstream's fields do what upstream's provider does with them, or are
//! refused in a condition that names them: never silently ignored.

use super::*;

/// An Object in upstream's shape (`v1alpha2`) named `name`.
fn upstream_object(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
        "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn the_managed_objects_dependents_go_as_its_deletion_propagation_policy_says() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "propagation").await;
    let configmaps = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    for (policy, child_stays) in [("Orphan", true), ("Foreground", false)] {
        let name = format!("{ns}-{}", policy.to_lowercase());
        let parent = format!("parent-{}", policy.to_lowercase());
        apply_object_v1alpha2(
            &client,
            upstream_object(
                &name,
                json!({"providerConfigRef": {"name": "remote"},
                "forProvider": {"manifest": configmap(&parent, &ns, json!({})),
                    "deletionPropagationPolicy": policy}}),
            ),
        )
        .await;
        wait_ready(&client, &name).await;
        // A dependent of the managed object, as a controller would make it.
        let uid = remote_cm(&remote, &ns, &parent)
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap();
        let child = format!("child-{}", policy.to_lowercase());
        let mut dependent: ConfigMap =
            serde_json::from_value(configmap(&child, &ns, json!({}))).unwrap();
        dependent.metadata.owner_references = Some(vec![
            serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": parent, "uid": uid}),
            )
            .unwrap(),
        ]);
        configmaps
            .create(&PostParams::default(), &dependent)
            .await
            .unwrap();

        delete_object(&client, &name).await;
        wait(WAIT, &format!("{parent} deleted ({policy})"), || async {
            remote_cm(&remote, &ns, &parent)
                .await
                .is_none()
                .then_some(())
        })
        .await;
        if child_stays {
            // Orphaned by the garbage collector: kept, its owner removed.
            wait(WAIT, &format!("{child} orphaned"), || async {
                let c = remote_cm(&remote, &ns, &child).await?;
                c.metadata
                    .owner_references
                    .is_none_or(|o| o.is_empty())
                    .then_some(())
            })
            .await;
        } else {
            wait(WAIT, &format!("{child} deleted with its owner"), || async {
                remote_cm(&remote, &ns, &child)
                    .await
                    .is_none()
                    .then_some(())
            })
            .await;
        }
    }
}

#[tokio::test]
async fn upstream_credentials_this_provider_does_not_use_are_named_in_the_condition() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "credentials").await;
    let plane = testenv::control_plane();
    let configs = format!(
        "apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {{name: {ns}-identity}}
spec:
  credentials: {{source: Secret, secretRef: {{namespace: default, name: remote-kubeconfig, key: kubeconfig}}}}
  identity:
    type: GoogleApplicationCredentials
    source: Secret
    secretRef: {{namespace: default, name: gcp-credentials, key: credentials.json}}
---
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {{name: {ns}-environment}}
spec: {{credentials: {{source: Environment, env: {{name: KUBECONFIG}}}}}}
---
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {{name: {ns}-filesystem}}
spec: {{credentials: {{source: Filesystem, fs: {{path: /var/run/secrets/kubernetes.io/serviceaccount/token}}}}}}
"
    );
    let out = plane
        .control
        .kubectl_stdin(&["apply", "-f", "-"], Some(&configs));
    assert!(
        out.status.success(),
        "upstream's ProviderConfigs were refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cases = [
        (
            "identity",
            "identity.type GoogleApplicationCredentials is not supported",
        ),
        (
            "environment",
            "credentials.source Environment is not supported",
        ),
        (
            "filesystem",
            "credentials.source Filesystem is not supported",
        ),
    ];
    for (config, _) in cases {
        apply_object(
            &client,
            object(
                &format!("{ns}-{config}"),
                &format!("{ns}-{config}"),
                configmap(config, &ns, json!({})),
                json!({}),
            ),
        )
        .await;
    }
    for (config, needle) in cases {
        let name = format!("{ns}-{config}");
        wait_synced_false(&client, &name, needle).await;
        let said: Vec<String> = events_of(&client, &name)
            .await
            .into_iter()
            .filter_map(|e| e.message)
            .collect();
        assert!(
            said.iter().any(|m| m.contains(needle)),
            "no event says {needle:?}: {said:?}"
        );
        // Nothing was made with them, and the Object goes.
        delete_object(&client, &name).await;
    }
    for (config, _) in cases {
        let name = format!("{ns}-{config}");
        wait(WAIT, &format!("Object {name} gone"), || async {
            get_object(&client, &name).await.is_none().then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn a_cel_readiness_query_decides_ready_and_a_bad_one_is_a_condition_never_a_crash() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "celquery").await;
    let items = (0..100)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let forever = format!("[{items}].all(a, [{items}].all(b, [{items}].all(c, a + b + c > -1)))");
    // 1 MB (no `&`: the API server stores it escaped, six bytes each).
    let huge = format!(
        "object.data.color == 'blue' {}",
        "|| false ".repeat(1024 * 1024 / 9)
    );
    let cases = [
        ("ready", "object.data.color == 'blue'".to_owned(), None),
        (
            "false",
            "object.data.color == 'red'".to_owned(),
            Some("is false"),
        ),
        (
            "missing",
            "object.status.phase == 'Running'".to_owned(),
            Some("does not have"),
        ),
        ("forever", forever, Some("nests a comprehension")),
        ("huge", huge, Some("bytes long; at most 8192")),
    ];
    let objects = Api::<types::kubernetes::v1alpha2::Object>::all(client.clone());
    for (case, query, _) in &cases {
        let o = serde_json::from_value(upstream_object(
            &format!("{ns}-{case}"),
            json!({"providerConfigRef": {"name": "remote"},
                "readiness": {"policy": "DeriveFromCelQuery", "celQuery": query},
                "forProvider": {"manifest": configmap(case, &ns, json!({"color": "blue"}))}}),
        ))
        .unwrap();
        objects
            .create(&PostParams::default(), &o)
            .await
            .unwrap_or_else(|e| panic!("creating Object {ns}-{case}: {e}"));
    }
    for (case, _, needle) in &cases {
        let name = format!("{ns}-{case}");
        match needle {
            None => {
                wait_ready(&client, &name).await;
            }
            Some(needle) => {
                wait(
                    WAIT,
                    &format!("Object {name} Ready=False saying {needle:?}"),
                    || async {
                        let o = get_object(&client, &name).await?;
                        let (status, _, msg) = cond(&o, "Ready")?;
                        (status == "False" && msg.contains(needle)).then_some(())
                    },
                )
                .await;
            }
        }
    }
    // The provider never stopped, and still works.
    let exited = provider().lock().unwrap().child.try_wait().unwrap();
    assert!(exited.is_none(), "the object-provider exited: {exited:?}");
    for (case, _, _) in &cases {
        delete_object(&client, &format!("{ns}-{case}")).await;
    }
}
