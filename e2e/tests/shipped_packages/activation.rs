//! Crossplane v2's managed resource activation, with the newest
//! provider-kubernetes release `hack/` builds (its package declares the
//! SafeStart capability), built and pushed by upstream's own CLI: with no
//! ManagedResourceActivationPolicy its managed kinds are
//! ManagedResourceDefinitions without CRDs while its runtime runs; a policy
//! naming one kind makes exactly that CRD; a namespaced Object becomes
//! Ready; setting its MRD Inactive is refused while the Object exists.

use super::*;

/// The managed-resource kinds of provider-kubernetes (its ProviderConfig
/// kinds stay CRDs).
const MANAGED: [&str; 4] = [
    "objects.kubernetes.crossplane.io",
    "observedobjectcollections.kubernetes.crossplane.io",
    "objects.kubernetes.m.crossplane.io",
    "observedobjectcollections.kubernetes.m.crossplane.io",
];
const ACTIVATED: &str = "objects.kubernetes.m.crossplane.io";

fn established(o: &Value) -> Option<(String, String)> {
    o.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Established")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                format!(
                    "{}: {}",
                    c["reason"].as_str().unwrap_or_default(),
                    c["message"].as_str().unwrap_or_default()
                ),
            )
        })
}

#[test]
fn a_safe_start_provider_serves_only_the_kinds_a_policy_activates() {
    let _group = kubernetes_group();
    let s = shipped();
    e2e::shipped::remove_object_provider();
    let version = e2e::upstream::provider_kubernetes_versions()
        .last()
        .cloned()
        .unwrap();
    let reference = format!(
        "{}/crossplane-contrib/provider-kubernetes:{version}",
        s.registry.address
    );
    e2e::upstream::build_and_push(&version, &reference, &s.ca_file, &s.work);
    let meta = std::fs::read_to_string(testenv::bin_dir().unwrap().join(format!(
        "provider-kubernetes-{version}-package/crossplane.yaml"
    )))
    .unwrap();
    assert!(meta.contains("SafeStart"), "{version} declares SafeStart");

    // No policy: the one deploy/ makes at start (--activation=*, as
    // upstream's chart) is removed.
    kubectl(&["delete", "mrap", "default", "--ignore-not-found"]);
    let name = "provider-kubernetes-safe-start";
    apply(&provider_yaml(name, &reference, ""));
    wait_blocking(
        Duration::from_secs(300),
        "the SafeStart Provider Installed and Healthy, its runtime running",
        || provider_healthy(name),
        explain,
    );
    for mrd in MANAGED {
        let m = get_json(&["mrd", mrd]).unwrap_or_else(|| panic!("no MRD {mrd}"));
        assert_eq!(m["spec"]["state"], "Inactive", "{m:#}");
        let (status, why) = established(&m).unwrap_or_default();
        assert_eq!(status, "False", "{mrd}: {why}");
        assert!(
            get_json(&["crd", mrd]).is_none(),
            "an Inactive MRD has a CRD: {mrd}"
        );
    }
    // Its ProviderConfig kinds stay CRDs.
    for crd in [
        "providerconfigs.kubernetes.crossplane.io",
        "providerconfigs.kubernetes.m.crossplane.io",
        "clusterproviderconfigs.kubernetes.m.crossplane.io",
    ] {
        assert!(get_json(&["crd", crd]).is_some(), "{crd}");
        assert!(get_json(&["mrd", crd]).is_none(), "{crd} is no MRD");
    }
    let pods = kubectl(&[
        "get",
        "pods",
        "-n",
        RUNTIMES,
        "-l",
        &format!("pkg.crossplane.io/provider={name}"),
        "-o",
        "jsonpath={.items[*].status.phase}",
    ]);
    assert!(pods.contains("Running"), "the runtime runs: {pods}");
    // Its runtime has no rights on a kind that is not served.
    let runtime_sa = format!("system:serviceaccount:{RUNTIMES}:{name}");
    let can =
        |verb: &str, resource: &str| e2e::kubectl::can_i(&runtime_sa, &[verb, resource, "-A"]);
    assert!(!can("list", ACTIVATED), "rights on an Inactive kind");
    assert!(can("list", "providerconfigs.kubernetes.m.crossplane.io"));
    // What trace shows a user.
    let viewer = e2e::trace::viewer(&testenv::control_plane_with_node().control, true, &[]);
    let tree = e2e::trace::json(&viewer, &[&format!("provider/{name}")]);
    for mrd in MANAGED {
        let node = e2e::trace::node(&tree, "ManagedResourceDefinition", mrd);
        assert_eq!(node["status"]["state"], "Inactive", "{tree:#}");
    }

    // A policy naming one kind makes exactly that CRD.
    apply(&format!(
        "apiVersion: apiextensions.crossplane.io/v1alpha1\nkind: ManagedResourceActivationPolicy\nmetadata:\n  name: namespaced-objects\nspec:\n  activate:\n  - {ACTIVATED}\n"
    ));
    wait_blocking(
        Duration::from_secs(60),
        "the activated MRD Established, its CRD served, the policy listing it",
        || {
            let m = get_json(&["mrd", ACTIVATED])?;
            let crd = get_json(&["crd", ACTIVATED])?;
            let p = get_json(&["mrap", "namespaced-objects"])?;
            (m["spec"]["state"] == "Active"
                && established(&m)?.0 == "True"
                && crd.to_string().contains("\"Established\"")
                && p["status"]["activated"] == serde_json::json!([ACTIVATED]))
            .then_some(())
        },
        explain,
    );
    wait_blocking(
        Duration::from_secs(30),
        "the runtime granted the activated kind",
        || can("update", ACTIVATED),
        explain,
    );
    for mrd in MANAGED.iter().filter(|m| **m != ACTIVATED) {
        assert!(!can("list", mrd), "rights on the Inactive {mrd}");
        assert!(get_json(&["crd", mrd]).is_none(), "{mrd} was not activated");
        assert_eq!(
            get_json(&["mrd", mrd]).unwrap()["spec"]["state"],
            "Inactive"
        );
    }
    let owners = get_json(&["crd", ACTIVATED]).unwrap()["metadata"]["ownerReferences"].clone();
    assert_eq!(owners[0]["kind"], "ManagedResourceDefinition", "{owners}");
    assert_eq!(owners[0]["controller"], true, "{owners}");

    // A namespaced Object becomes Ready.
    let ns = testenv::unique_name("safe-start");
    kubectl(&["create", "namespace", &ns]);
    apply(&format!(
        "apiVersion: kubernetes.m.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata:\n  name: injected\n  namespace: {ns}\nspec:\n  credentials:\n    source: InjectedIdentity\n"
    ));
    let object = testenv::unique_name("cm");
    apply(&format!(
        "apiVersion: kubernetes.m.crossplane.io/v1alpha1\nkind: Object\nmetadata:\n  name: {object}\n  namespace: {ns}\nspec:\n  providerConfigRef:\n    kind: ProviderConfig\n    name: injected\n  forProvider:\n    manifest:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata:\n        namespace: {ns}\n      data:\n        written-by: provider-kubernetes\n"
    ));
    wait_blocking(
        Duration::from_secs(120),
        "the namespaced Object Ready and Synced, its ConfigMap made",
        || {
            let o = get_json(&["objects.kubernetes.m.crossplane.io", &object, "-n", &ns])?;
            let ready = condition(&o, "Ready").is_some_and(|c| c.0 == "True");
            let synced = condition(&o, "Synced").is_some_and(|c| c.0 == "True");
            (ready && synced && get_json(&["configmap", &object, "-n", &ns]).is_some())
                .then_some(())
        },
        || {
            format!(
                "{}\n{}",
                kubectl_try(&[
                    "get",
                    "objects.kubernetes.m.crossplane.io",
                    "-A",
                    "-o",
                    "yaml"
                ])
                .1,
                explain()
            )
        },
    );

    // Deactivation is refused while the Object exists, naming it. (The
    // policy goes first: while it names the MRD it would activate it
    // again.)
    kubectl(&["delete", "mrap", "namespaced-objects"]);
    kubectl(&[
        "patch",
        "mrd",
        ACTIVATED,
        "--type=merge",
        "-p",
        r#"{"spec":{"state":"Inactive"}}"#,
    ]);
    let refused = wait_blocking(
        Duration::from_secs(60),
        "the MRD saying its deactivation waits for the Object",
        || {
            let m = get_json(&["mrd", ACTIVATED])?;
            let (status, why) = established(&m)?;
            (status == "True" && why.starts_with("DeactivationRefused")).then_some(why)
        },
        explain,
    );
    assert!(refused.contains(&format!("{ns}/{object}")), "{refused}");
    assert!(get_json(&["crd", ACTIVATED]).is_some(), "the CRD stays");
    assert!(
        get_json(&["objects.kubernetes.m.crossplane.io", &object, "-n", &ns]).is_some(),
        "the Object stays"
    );
    let events = kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        &format!("involvedObject.name={ACTIVATED},reason=DeactivationRefused"),
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains(&object),
        "a Warning event names it: {events}"
    );

    // Once the Object is gone, so is the CRD.
    kubectl(&[
        "delete",
        "objects.kubernetes.m.crossplane.io",
        &object,
        "-n",
        &ns,
        "--wait=true",
        "--timeout=120s",
    ]);
    wait_blocking(
        Duration::from_secs(60),
        "the CRD of the deactivated MRD gone",
        || {
            let m = get_json(&["mrd", ACTIVATED])?;
            (get_json(&["crd", ACTIVATED]).is_none() && established(&m)?.0 == "False").then_some(())
        },
        explain,
    );

    // The Provider goes with its MRDs and CRDs (once its ProviderConfig,
    // a custom resource of it, is gone).
    kubectl(&[
        "delete",
        "providerconfigs.kubernetes.m.crossplane.io",
        "injected",
        "-n",
        &ns,
        "--wait=true",
        "--timeout=60s",
    ]);
    delete_provider_with(name, &MANAGED);
}
