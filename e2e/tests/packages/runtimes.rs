//! A Provider's runtime: shaped by DeploymentRuntimeConfigs, and shown by trace.

use super::*;

#[test]
fn runtime_configs_shape_the_runtime_and_a_bad_one_is_named() {
    let e = env();
    let unique = testenv::unique_name("rc");
    let g = group("rc");
    let crds_files = [test_crd(&g, "Valve")];
    let crds = crds_of(&crds_files);
    let pause = testenv::image::PAUSE_IMAGE;
    let reference = format!("{}/test/{unique}:v1", e.registry.address);
    let digest = xpkg_push(&package_dir("rc", "v1", &crds), &reference, Some(pause));
    let name = format!("{unique}-p");
    let rev = format!("{name}-{}", short(&digest));
    // A runtime config with its own shape: two replicas, an env var, a
    // sidecar, and a ServiceAccount the operator made.
    let sa = format!("{unique}-shared");
    apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {sa}, namespace: {RUNTIMES}, annotations: {{team: platform}}}}\n"
    ));
    let config = |replicas: u32| {
        format!(
            "apiVersion: pkg.crossplane.io/v1beta1\nkind: DeploymentRuntimeConfig\nmetadata: {{name: {unique}}}\nspec:\n  deploymentTemplate:\n    spec:\n      replicas: {replicas}\n      selector: {{}}\n      template:\n        spec:\n          containers:\n          - name: sidecar\n            image: {pause}\n            imagePullPolicy: IfNotPresent\n          - name: package-runtime\n            env: [{{name: FOO, value: bar}}]\n  serviceAccountTemplate:\n    metadata: {{name: {sa}}}\n"
        )
    };
    apply(&config(2));
    let runtime_ref = |n: &str, kind: &str| {
        format!(
            "  runtimeConfigRef: {{apiVersion: pkg.crossplane.io/v1beta1, kind: {kind}, name: {n}}}\n"
        )
    };
    apply(&provider_yaml(
        &name,
        &reference,
        &runtime_ref(&unique, "DeploymentRuntimeConfig"),
    ));
    wait_provider_healthy(&name, Duration::from_secs(90));
    let dep = deployment_of(&rev).unwrap();
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(dep["spec"]["replicas"], 2);
    assert_eq!(pod["containers"][0]["name"], "package-runtime");
    assert_eq!(pod["containers"][0]["image"], pause);
    assert_eq!(pod["containers"][1]["name"], "sidecar");
    let env_names: Vec<&str> = pod["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    // The config's variable first, then the package-manager's own (what
    // upstream's runtimes read about themselves and their TLS Secrets).
    assert_eq!(
        env_names,
        [
            "FOO",
            "POD_NAMESPACE",
            "PROVIDER_NAME",
            "REVISION_NAME",
            "REVISION_UID",
            "TLS_SERVER_CERTS_DIR",
            "TLS_CLIENT_CERTS_DIR",
            "WEBHOOK_TLS_CERT_DIR",
        ]
    );
    assert_eq!(pod["serviceAccountName"], sa.as_str());
    let shared = get_json(&["serviceaccount", &sa, "-n", RUNTIMES]).unwrap();
    assert!(
        shared["metadata"].get("ownerReferences").is_none(),
        "a named ServiceAccount was taken over: {shared}"
    );
    assert_eq!(shared["metadata"]["annotations"]["team"], "platform");

    // Editing the config rolls out.
    apply(&config(1));
    wait_blocking(
        Duration::from_secs(60),
        "the edited replicas rolled out",
        || (deployment_of(&rev)?["spec"]["replicas"] == 1).then_some(()),
        explain_packages,
    );

    // Switching to the default config drops the old settings: the runtime
    // runs as the Provider's own ServiceAccount again.
    apply(&provider_yaml(
        &name,
        &reference,
        &runtime_ref("default", "DeploymentRuntimeConfig"),
    ));
    wait_blocking(
        Duration::from_secs(60),
        "the default config's runtime",
        || {
            let d = deployment_of(&rev)?;
            let pod = &d["spec"]["template"]["spec"];
            (pod["containers"].as_array()?.len() == 1 && pod["serviceAccountName"] == name.as_str())
                .then_some(())
        },
        explain_packages,
    );
    wait_provider_healthy(&name, Duration::from_secs(90));
    let before = deployment_of(&rev).unwrap()["spec"]["template"].clone();
    // The seed's `default`, applied verbatim, renders the same pods.
    let seed = testenv::repo_root().join("examples/seeds/004-deploymentruntimeconfig-default.yaml");
    kubectl(&["apply", "-f", seed.to_str().unwrap()]);
    wait_blocking(
        Duration::from_secs(30),
        "the seed's default label on the runtime Deployment",
        || (deployment_of(&rev)?["metadata"]["labels"]["example"] == "label").then_some(()),
        explain_packages,
    );
    assert_eq!(
        deployment_of(&rev).unwrap()["spec"]["template"],
        before,
        "the seed's default changed the pods"
    );

    // A missing config, and one of a kind this runtime cannot use, are
    // named.
    apply(&provider_yaml(
        &name,
        &reference,
        &runtime_ref("nope", "DeploymentRuntimeConfig"),
    ));
    wait_provider_condition(
        &name,
        "Healthy",
        "False",
        &["DeploymentRuntimeConfig nope", "does not exist"],
        Duration::from_secs(30),
    );
    apply(&provider_yaml(
        &name,
        &reference,
        &runtime_ref("cloud", "CloudRunRuntimeConfig"),
    ));
    wait_provider_condition(
        &name,
        "Healthy",
        "False",
        &["CloudRunRuntimeConfig cloud", "cannot use"],
        Duration::from_secs(30),
    );
    apply(&provider_yaml(&name, &reference, ""));
    wait_provider_healthy(&name, Duration::from_secs(90));

    // A runtime image the node cannot pull: the pods' reason is surfaced.
    let broken_ref = format!("{}/test/{unique}-broken:v1", e.registry.address);
    xpkg_push(
        &package_dir("broken", "v1", &[]),
        &broken_ref,
        Some(&format!("{}/test/no-such-image:v1", e.registry.address)),
    );
    let broken = format!("{unique}-broken");
    apply(&provider_yaml(&broken, &broken_ref, ""));
    let p = wait_blocking(
        Duration::from_secs(90),
        "the pull failure named",
        || {
            let p = provider(&broken)?;
            let (s, m) = condition(&p, "Healthy")?;
            (s == "False" && (m.contains("ErrImagePull") || m.contains("ImagePullBackOff")))
                .then_some(m)
        },
        explain_packages,
    );
    eprintln!("packages: an unpullable runtime is reported as: {p}");
    for n in [&name, &broken] {
        delete_provider(n);
    }
    for n in [&name, &broken] {
        wait_provider_gone(n);
    }
    assert!(
        get_json(&["serviceaccount", &sa, "-n", RUNTIMES]).is_some(),
        "the operator's ServiceAccount was deleted"
    );
    assert!(deployment_of(&rev).is_none());
}

/// `crossplane-rs trace provider/NAME` as a user of crossplane-view (and
/// the runtimes Role in crossplane-rs-runtimes): a Healthy Provider shows its
/// active revision, the CRD it controls, its runtime Deployment and pod,
/// and the roles and binding the rbac-manager rendered, each with its
/// status; a Provider whose runtime image is not in the registry shows the
/// pull error at its pod. Without the runtimes Role the runtime is a node
/// saying what to bind, and the rest still prints. A missing Provider is a
/// one-line error.
#[test]
fn trace_shows_a_provider_its_runtime_and_roles_and_names_a_pull_error_at_the_pod() {
    let e = env();
    let unique = testenv::unique_name("trace");
    let g = group("trace");
    let crd_files = [test_crd(&g, "Dial")];
    let crds = crds_of(&crd_files);
    let reference = format!("{}/test/{unique}:v1", e.registry.address);
    let digest = xpkg_push(
        &package_dir("trace", "v1", &crds),
        &reference,
        Some(testenv::image::PAUSE_IMAGE),
    );
    let name = format!("{unique}-p");
    let rev = format!("{name}-{}", short(&digest));
    apply(&provider_yaml(&name, &reference, ""));
    wait_provider_healthy(&name, Duration::from_secs(90));
    let control = &testenv::control_plane_with_node().control;
    let viewer = e2e::trace::viewer(control, true, &[]);
    // The RBACReady revision and a Ready pod may trail Healthy by moments.
    let tree = wait_blocking(
        Duration::from_secs(60),
        "the trace to show the runtime's pod Ready",
        || {
            let tree = e2e::trace::json(&viewer, &[&format!("provider/{name}")]);
            e2e::trace::of_kind(&tree, "Pod")
                .iter()
                .any(|p| p["status"]["ready"] == "True")
                .then_some(tree)
        },
        explain_packages,
    );
    assert_eq!(tree["kind"], "Provider");
    assert_eq!(tree["apiVersion"], "pkg.crossplane.io/v1");
    assert_eq!(tree["status"]["ready"], "True", "{tree:#}");
    assert_eq!(tree["status"]["state"], "Installed=True", "{tree:#}");
    let revision = e2e::trace::node(&tree, "ProviderRevision", &rev);
    assert_eq!(revision["status"]["state"], "Active", "{revision:#}");
    assert_eq!(revision["status"]["ready"], "True", "{revision:#}");
    let mrd = e2e::trace::node(revision, "ManagedResourceDefinition", &format!("dials.{g}"));
    assert_eq!(mrd["status"]["state"], "Active", "{mrd:#}");
    assert_eq!(mrd["status"]["ready"], "True", "{mrd:#}");
    let crd = e2e::trace::node(mrd, "CustomResourceDefinition", &format!("dials.{g}"));
    assert_eq!(crd["status"]["ready"], "True", "{crd:#}");
    assert_eq!(crd["status"]["state"], "controlled", "{crd:#}");
    let deployment = e2e::trace::node(revision, "Deployment", &rev);
    assert_eq!(deployment["namespace"], RUNTIMES);
    assert_eq!(deployment["status"]["ready"], "True", "{deployment:#}");
    let pods = e2e::trace::of_kind(deployment, "Pod");
    assert_eq!(pods.len(), 1, "{deployment:#}");
    assert_eq!(pods[0]["status"]["state"], "Running", "{deployment:#}");
    for role in ["system", "aggregate-to-edit", "aggregate-to-view"] {
        e2e::trace::node(
            revision,
            "ClusterRole",
            &format!("crossplane:provider:{rev}:{role}"),
        );
    }
    e2e::trace::node(
        revision,
        "ClusterRoleBinding",
        &format!("crossplane:provider:{rev}:system"),
    );
    assert!(
        e2e::trace::forbidden(&tree).is_empty(),
        "crossplane-view and the runtimes Role should read it all:\n{tree:#}"
    );
    for n in e2e::trace::nodes(&tree) {
        assert!(
            n["conditions"].is_array() && n["children"].is_array(),
            "{n:#}"
        );
    }
    // The tree names every node.
    let text = e2e::trace::text(&viewer, &[&format!("provider/{name}")]);
    for shown in [
        format!("Provider/{name}"),
        format!("ProviderRevision/{rev}"),
        format!("CustomResourceDefinition/dials.{g}"),
        format!("Deployment/{rev}"),
        format!("Pod/{}", pods[0]["name"].as_str().unwrap()),
    ] {
        assert!(text.contains(&shown), "{shown} missing from:\n{text}");
    }
    assert!(text.contains("└─ ") && text.contains("├─ "), "{text}");
    eprintln!("packages: crossplane-rs trace provider/{name}:\n{text}");

    // Without the runtimes Role: the runtime is forbidden, the rest prints.
    let narrow = e2e::trace::viewer(control, false, &[]);
    let tree = e2e::trace::json(&narrow, &[&format!("provider/{name}")]);
    e2e::trace::node(&tree, "CustomResourceDefinition", &format!("dials.{g}"));
    let refused = e2e::trace::forbidden(&tree);
    assert!(
        refused.iter().any(|n| n["kind"] == "Deployment"
            && n["status"]["message"].as_str().is_some_and(
                |m| m.contains("forbidden: deployments.apps in crossplane-rs-runtimes")
            )),
        "{tree:#}"
    );

    // A runtime image the registry does not have: the pod says so.
    let broken_ref = format!("{}/test/{unique}-broken:v1", e.registry.address);
    xpkg_push(
        &package_dir("broken", "v1", &[]),
        &broken_ref,
        Some(&format!("{}/test/no-such-image:v1", e.registry.address)),
    );
    let broken = format!("{unique}-broken");
    apply(&provider_yaml(&broken, &broken_ref, ""));
    let pod = wait_blocking(
        Duration::from_secs(90),
        "the trace to show the pod's pull error",
        || {
            let tree = e2e::trace::json(&viewer, &["providers", &broken]);
            e2e::trace::of_kind(&tree, "Pod")
                .into_iter()
                .find(|p| {
                    p["status"]["state"] == "ErrImagePull"
                        || p["status"]["state"] == "ImagePullBackOff"
                })
                .cloned()
        },
        explain_packages,
    );
    assert_eq!(pod["status"]["ready"], "False", "{pod:#}");
    assert!(
        pod["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no-such-image")),
        "{pod:#}"
    );
    let wide = e2e::trace::text(&viewer, &[&format!("provider/{broken}"), "-o", "wide"]);
    assert!(
        wide.contains("no-such-image") && wide.contains("NAMESPACE"),
        "{wide}"
    );
    eprintln!("packages: crossplane-rs trace provider/{broken} -o wide:\n{wide}");

    // Bad input: a one-line error and a non-zero exit.
    for (args, says) in [
        (&["provider/no-such-provider"][..], "not found"),
        (&["widget/x"][..], "unknown type"),
    ] {
        let out = e2e::trace::run(&viewer, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains(says) && err.trim().lines().count() == 1,
            "{err}"
        );
    }
    for n in [&name, &broken] {
        delete_provider(n);
    }
    for n in [&name, &broken] {
        wait_provider_gone(n);
    }
}

#[test]
fn an_image_config_picks_the_runtime_config_unless_the_provider_names_its_own() {
    let e = env();
    let unique = testenv::unique_name("icrc");
    let pause = testenv::image::PAUSE_IMAGE;
    let prefix = format!("{}/icrc-{unique}/", e.registry.address);
    let push = |name: &str, kind: &str| {
        let g = group(name);
        let reference = format!("{prefix}{name}:v1");
        let digest = xpkg_push(
            &package_dir(name, "v1", &crds_of(&[test_crd(&g, kind)])),
            &reference,
            Some(pause),
        );
        (reference, digest)
    };
    let (picked_ref, picked_digest) = push("picked", "Knob");
    let (own_ref, own_digest) = push("own", "Lever");
    let config = |name: &str, value: &str| {
        format!(
            "apiVersion: pkg.crossplane.io/v1beta1\nkind: DeploymentRuntimeConfig\nmetadata: {{name: {name}}}\nspec:\n  deploymentTemplate:\n    spec:\n      selector: {{}}\n      template:\n        spec:\n          containers:\n          - name: package-runtime\n            env: [{{name: CONFIGURED_BY, value: {value}}}]\n"
        )
    };
    let (by_image, by_provider) = (format!("{unique}-image"), format!("{unique}-own"));
    apply(&config(&by_image, "image-config"));
    apply(&config(&by_provider, "provider"));
    let image_config = format!("{unique}-runtime");
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1beta1\nkind: ImageConfig\nmetadata: {{name: {image_config}}}\nspec:\n  matchImages:\n  - prefix: \"{prefix}\"\n  runtime:\n    configRef:\n      name: {by_image}\n"
    ));
    let (picked, own) = (format!("{unique}-picked"), format!("{unique}-own"));
    apply(&provider_yaml(&picked, &picked_ref, ""));
    apply(&provider_yaml(
        &own,
        &own_ref,
        &format!("  runtimeConfigRef: {{name: {by_provider}}}\n"),
    ));
    wait_provider_healthy(&picked, Duration::from_secs(90));
    wait_provider_healthy(&own, Duration::from_secs(90));
    let configured_by = |revision: &str| {
        deployment_of(revision).unwrap()["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "CONFIGURED_BY")
            .map(|v| v["value"].as_str().unwrap_or_default().to_owned())
    };
    let picked_rev = format!("{picked}-{}", short(&picked_digest));
    let own_rev = format!("{own}-{}", short(&own_digest));
    // The runtime Deployment carries the picked DeploymentRuntimeConfig's
    // overlay, and the revision says which ImageConfig picked it.
    assert_eq!(configured_by(&picked_rev).as_deref(), Some("image-config"));
    let rev = get_json(&["providerrevisions.pkg.crossplane.io", &picked_rev]).unwrap();
    let applied = rev["status"]["appliedImageConfigRefs"].to_string();
    assert!(
        applied.contains(&image_config) && applied.contains("ConfigureRuntime"),
        "{applied}"
    );
    // A Provider's own runtimeConfigRef wins over the ImageConfig.
    assert_eq!(configured_by(&own_rev).as_deref(), Some("provider"));
    let rev = get_json(&["providerrevisions.pkg.crossplane.io", &own_rev]).unwrap();
    assert!(
        !rev["status"]["appliedImageConfigRefs"]
            .to_string()
            .contains("ConfigureRuntime"),
        "{rev:#}"
    );
    for p in [&picked, &own] {
        delete_provider(p);
        wait_provider_gone(p);
    }
    kubectl(&["delete", "imageconfig", &image_config]);
}
