//! A Provider's life: installed, run, upgraded (make before break) and uninstalled.

use super::*;

/// The kubernetes.crossplane.io CRDs of the repository, as package files.
fn object_provider_crds() -> Vec<(&'static str, String)> {
    [
        "kubernetes.crossplane.io_objects.yaml",
        "kubernetes.crossplane.io_providerconfigs.yaml",
        "kubernetes.crossplane.io_providerconfigusages.yaml",
    ]
    .into_iter()
    .map(|f| {
        (
            f,
            std::fs::read_to_string(testenv::repo_root().join("crds").join(f)).unwrap(),
        )
    })
    .collect()
}

const OBJECT_CRDS: [&str; 3] = [
    "objects.kubernetes.crossplane.io",
    "providerconfigs.kubernetes.crossplane.io",
    "providerconfigusages.kubernetes.crossplane.io",
];

/// What is not yet true of a finished upgrade from `rev1` to `rev2`.
fn upgrade_unmet(rev1: &str, rev2: &str) -> Vec<&'static str> {
    let mut unmet = Vec::new();
    let p = provider("provider-kubernetes").unwrap_or_default();
    let revs = revisions_of("provider-kubernetes");
    if p["status"]["currentRevision"] != rev2 {
        unmet.push("currentRevision is revision 2");
    }
    if condition(&p, "Healthy").is_none_or(|c| c.0 != "True") {
        unmet.push("the Provider Healthy");
    }
    if revs.len() != 2 {
        unmet.push("two revisions");
    }
    if revs
        .first()
        .is_none_or(|r| r["spec"]["desiredState"] != "Inactive")
    {
        unmet.push("revision 1 Inactive");
    }
    if revs
        .get(1)
        .is_none_or(|r| r["spec"]["desiredState"] != "Active" || r["spec"]["revision"] != 2)
    {
        unmet.push("revision 2 Active");
    }
    if get_json(&["deployment", rev1, "-n", RUNTIMES]).is_some() {
        unmet.push("revision 1's Deployment gone");
    }
    unmet
}

#[test]
fn a_provider_package_installs_runs_upgrades_and_uninstalls() {
    let e = env();
    // The package serves the API group of crossplane-rs's own Object
    // provider: the control cluster starts without it and its CRDs, as a
    // user who replaces it would.
    e2e::shipped::remove_object_provider();

    let repository = format!("{}/crossplane-rs/provider-kubernetes", e.registry.address);
    let v1 = package_dir("provider-kubernetes", "v0.1.0", &object_provider_crds());
    let v2 = package_dir("provider-kubernetes", "v0.2.0", &object_provider_crds());
    let d1 = xpkg_push(&v1, &format!("{repository}:v0.1.0"), Some(&e.runtime_image));
    let d2 = xpkg_push(&v2, &format!("{repository}:v0.2.0"), Some(&e.runtime_image));
    assert_ne!(d1, d2);

    // xpkg inspect reads it back from the registry.
    let out = Command::new(testenv::workspace_binary("xpkg"))
        .args(["inspect", &format!("{repository}:v0.1.0"), "--ca-file"])
        .arg(&e.ca_file)
        .output()
        .unwrap();
    let inspected = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{inspected}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        inspected.contains(&d1) && inspected.contains("objects.kubernetes.crossplane.io"),
        "{inspected}"
    );

    // No role is granted by the test: the runtime works, and the
    // package-manager sees the package's custom resources, only through
    // the roles the rbac-manager renders.
    let started = Instant::now();
    apply(&provider_yaml(
        "provider-kubernetes",
        &format!("{repository}:v0.1.0"),
        "",
    ));
    let rev1 = format!("provider-kubernetes-{}", short(&d1));
    let p = wait_provider_healthy("provider-kubernetes", Duration::from_secs(180));
    eprintln!(
        "packages: provider-kubernetes v0.1.0 Healthy {:?} after apply",
        started.elapsed()
    );
    assert_eq!(p["status"]["currentRevision"], rev1.as_str());
    let revs = revisions_of("provider-kubernetes");
    assert_eq!(revs.len(), 1);
    assert_eq!(revs[0]["spec"]["revision"], 1);
    assert_eq!(revs[0]["spec"]["desiredState"], "Active");
    assert_eq!(revs[0]["spec"]["image"], e.runtime_image.as_str());
    // Controlled by the Provider; its MRDs (its managed kinds, Active: the
    // package has no SafeStart) and ProviderConfig CRDs controlled by the
    // revision.
    assert!(
        get_json(&["mrd", OBJECT_CRDS[0]]).is_some(),
        "Objects are a managed kind"
    );
    assert!(
        get_json(&["mrd", OBJECT_CRDS[1]]).is_none(),
        "ProviderConfigs stay CRDs"
    );
    let owner = &revs[0]["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("Provider"), Some(true))
    );
    for crd in OBJECT_CRDS {
        let c = delivered(crd);
        let controller: Vec<&Value> = c["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["controller"] == true)
            .collect();
        assert_eq!(controller.len(), 1, "{crd}");
        assert_eq!(controller[0]["name"], rev1.as_str());
    }
    // The runtime: a Deployment named after the revision, Available on the
    // node, its pod running the pushed image under the Provider's SA (the
    // same for every revision, as its Service is).
    let dep = get_json(&["deployment", &rev1, "-n", RUNTIMES]).unwrap();
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"],
        "provider-kubernetes"
    );
    assert_eq!(
        dep["spec"]["template"]["spec"]["containers"][0]["name"],
        "package-runtime"
    );
    assert!(get_json(&["service", "provider-kubernetes", "-n", RUNTIMES]).is_some());
    assert!(get_json(&["serviceaccount", "provider-kubernetes", "-n", RUNTIMES]).is_some());
    let columns = kubectl(&["get", "providers,providerrevisions"]);
    for col in [
        "INSTALLED",
        "HEALTHY",
        "PACKAGE",
        "REVISION",
        "IMAGE",
        "STATE",
    ] {
        assert!(columns.contains(col), "{col} missing: {columns}");
    }

    // The runtime works: an Object (InjectedIdentity, the control cluster)
    // becomes Ready and its ConfigMap exists.
    let cm = testenv::unique_name("pkg-cm");
    apply(&format!(
        "apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: ProviderConfig\nmetadata: {{name: in-cluster}}\nspec: {{credentials: {{source: InjectedIdentity}}}}\n---\napiVersion: kubernetes.crossplane.io/v1alpha1\nkind: Object\nmetadata: {{name: {cm}}}\nspec:\n  providerConfigRef: {{name: in-cluster}}\n  forProvider:\n    manifest:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: {cm}, namespace: default}}\n      data: {{from: package}}\n"
    ));
    let object_ready = || {
        get_json(&["objects.kubernetes.crossplane.io", &cm])
            .is_some_and(|o| condition(&o, "Ready").is_some_and(|c| c.0 == "True"))
    };
    wait_blocking(
        Duration::from_secs(90),
        "the Object Ready",
        || object_ready().then_some(()),
        explain_packages,
    );
    assert!(get_json(&["configmap", &cm, "-n", "default"]).is_some());
    // What the rbac-manager rendered: the runtime may use its own kinds and
    // nothing of another package or of the cluster's machinery; users get
    // the kinds through crossplane-view and crossplane-edit.
    let runtime_sa = format!("system:serviceaccount:{RUNTIMES}:provider-kubernetes");
    let can = e2e::kubectl::can_i;
    assert!(can(
        &runtime_sa,
        &["create", "objects.kubernetes.crossplane.io"]
    ));
    assert!(can(
        &runtime_sa,
        &["patch", "objects.kubernetes.crossplane.io/status"]
    ));
    for refused in [
        &["create", "providers.pkg.crossplane.io"][..],
        &[
            "create",
            "kubernetesapplications.workload.crossplane.io",
            "-n",
            "default",
        ],
        &["create", "customresourcedefinitions"],
        &["create", "clusterrolebindings"],
        &["delete", "nodes"],
        &["create", "deployments", "-n", "default"],
    ] {
        assert!(
            !can(&runtime_sa, refused),
            "the runtime may {}",
            refused.join(" ")
        );
    }
    let rev = get_json(&[
        "providerrevisions.pkg.crossplane.io",
        &rev1,
        "--show-managed-fields",
    ])
    .unwrap();
    assert_eq!(
        condition(&rev, "RBACReady").map(|c| c.0).as_deref(),
        Some("True"),
        "{rev}"
    );
    // RBACReady is the rbac-manager's alone: the package-manager, which
    // writes the rest of the status, never applies it (it would co-own it
    // and could put back a value it read before the rbac-manager's change).
    let key = r#"k:{"type":"RBACReady"}"#;
    let owners: Vec<&str> = rev["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["fieldsV1"]["f:status"]["f:conditions"].get(key).is_some())
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(owners, ["crossplane-rs/rbac-manager"], "{rev}");
    apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: test-viewer}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crossplane-view}\nsubjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: viewer}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: test-editor}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crossplane-edit}\nsubjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: editor}]\n",
    );
    wait_blocking(
        Duration::from_secs(30),
        "crossplane-view and crossplane-edit to carry the provider's kinds",
        || {
            (can("viewer", &["get", "objects.kubernetes.crossplane.io"])
                && !can("viewer", &["create", "objects.kubernetes.crossplane.io"])
                && can("editor", &["create", "objects.kubernetes.crossplane.io"]))
            .then_some(())
        },
        explain_packages,
    );

    // Upgrade: revision 2 serves, revision 1 goes Inactive and its runtime
    // away; the Object stays Ready.
    let rev2 = format!("provider-kubernetes-{}", short(&d2));
    // The order of binding changes, from a watch: revision 2's binding must
    // come before revision 1's goes.
    let mut watch = e2e::kubectl::control().spawn(&[
        "get",
        "clusterrolebindings",
        "-w",
        "--output-watch-events",
        "-o",
        "jsonpath={.type} {.object.metadata.name}{\"\\n\"}",
    ]);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    {
        use std::io::BufRead as _;
        let seen = seen.clone();
        let out = watch.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                seen.lock().unwrap().push(line);
            }
        });
    }
    apply(&provider_yaml(
        "provider-kubernetes",
        &format!("{repository}:v0.2.0"),
        "",
    ));
    let upgrading = Instant::now();
    // Sampled all through the upgrade: some runtime may always create
    // Objects.
    // Both revisions' runtimes run as the Provider's ServiceAccount; each
    // revision binds its roles to it while it is active.
    let sa = |_rev: &str| format!("system:serviceaccount:{RUNTIMES}:provider-kubernetes");
    let mut samples = Vec::new();
    wait_blocking(
        Duration::from_secs(180),
        "revision 2 serving and revision 1 inactive without a runtime",
        || {
            samples.push(
                can(&sa(&rev1), &["create", "objects.kubernetes.crossplane.io"])
                    || can(&sa(&rev2), &["create", "objects.kubernetes.crossplane.io"]),
            );
            upgrade_unmet(&rev1, &rev2).is_empty().then_some(())
        },
        || {
            format!(
                "unmet: {:?}\n{}",
                upgrade_unmet(&rev1, &rev2),
                explain_packages()
            )
        },
    );
    eprintln!("packages: upgraded in {:?}", upgrading.elapsed());
    assert!(
        samples.iter().all(|ok| *ok),
        "a moment without a bound runtime: {samples:?}"
    );
    let binding = |rev: &str| format!(" crossplane:provider:{rev}:system");
    wait_blocking(
        Duration::from_secs(30),
        "revision 1's binding to go",
        || {
            let seen = seen.lock().unwrap().clone();
            let added = seen
                .iter()
                .position(|l| l.contains("ADDED") && l.ends_with(&binding(&rev2)))?;
            let deleted = seen
                .iter()
                .position(|l| l.contains("DELETED") && l.ends_with(&binding(&rev1)))?;
            Some((added, deleted))
        },
        || format!("{:?}", seen.lock().unwrap()),
    );
    let seen = seen.lock().unwrap().clone();
    let added = seen
        .iter()
        .position(|l| l.contains("ADDED") && l.ends_with(&binding(&rev2)))
        .unwrap();
    let deleted = seen
        .iter()
        .position(|l| l.contains("DELETED") && l.ends_with(&binding(&rev1)))
        .unwrap();
    assert!(
        added < deleted,
        "revision 1 was unbound before revision 2 was bound: {seen:?}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
    for crd in OBJECT_CRDS {
        let c = delivered(crd);
        let refs = c["metadata"]["ownerReferences"].as_array().unwrap().clone();
        let controller: Vec<_> = refs.iter().filter(|o| o["controller"] == true).collect();
        assert_eq!(controller.len(), 1);
        assert_eq!(
            controller[0]["name"],
            rev2.as_str(),
            "{crd} handed to revision 2"
        );
    }
    assert!(object_ready(), "the Object stays Ready across the upgrade");
    // No revision ever reported a conflict with its own Provider.
    let (_, events) = kubectl_try(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        "type=Warning",
        "-o",
        "json",
    ]);
    let events: Value = serde_json::from_str(&events).unwrap();
    let own: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["involvedObject"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("provider-kubernetes"))
        })
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("already controlled by"))
        })
        .collect();
    assert!(
        own.is_empty(),
        "an upgrade reported a conflict with itself: {own:?}"
    );

    // A failing upgrade (a bad package) makes nothing: revision 2 goes on
    // serving, and the Provider says so.
    let bad = format!("{repository}:v0.3.0");
    push_raw(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    );
    apply(&provider_yaml("provider-kubernetes", &bad, ""));
    let p = wait_provider_condition(
        "provider-kubernetes",
        "Healthy",
        "False",
        &[
            &bad,
            "kind ConfigMap",
            &format!("revision {rev2}"),
            "still serving",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(p["status"]["currentRevision"], rev2.as_str());
    assert_eq!(revisions_of("provider-kubernetes").len(), 2);
    assert!(
        object_ready(),
        "the Object stays Ready while the upgrade fails"
    );
    apply(&provider_yaml(
        "provider-kubernetes",
        &format!("{repository}:v0.2.0"),
        "",
    ));
    wait_provider_healthy("provider-kubernetes", Duration::from_secs(30));

    // Deleting the Provider waits for the Object, says so, then removes
    // everything.
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        "provider-kubernetes",
        "--wait=false",
    ]);
    wait_blocking(
        Duration::from_secs(30),
        "the Provider saying which custom resources hold it",
        || {
            let p = provider("provider-kubernetes")?;
            let (_, message) = condition(&p, "Healthy")?;
            (message.contains("waiting for 1 Object") && message.contains(&cm)).then_some(())
        },
        explain_packages,
    );
    assert!(provider("provider-kubernetes").is_some());
    assert!(
        get_json(&["crd", OBJECT_CRDS[0]]).is_some(),
        "CRDs stay while custom resources exist"
    );
    kubectl(&[
        "delete",
        "objects.kubernetes.crossplane.io",
        &cm,
        "--wait=false",
    ]);
    kubectl(&[
        "delete",
        "providerconfig.kubernetes.crossplane.io",
        "in-cluster",
        "--wait=false",
    ]);
    let gone_from = Instant::now();
    wait_blocking(
        Duration::from_secs(60),
        "the Provider, its revisions, CRDs and runtime gone",
        || {
            let gone = provider("provider-kubernetes").is_none()
                && revisions_of("provider-kubernetes").is_empty()
                && OBJECT_CRDS
                    .iter()
                    .all(|c| get_json(&["crd", c]).is_none() && get_json(&["mrd", c]).is_none())
                && get_json(&["deployment", &rev2, "-n", RUNTIMES]).is_none()
                && get_json(&["serviceaccount", "provider-kubernetes", "-n", RUNTIMES]).is_none();
            gone.then_some(())
        },
        explain_packages,
    );
    // The roles go with their revisions (garbage collection).
    wait_blocking(
        Duration::from_secs(30),
        "the revisions' roles gone",
        || {
            [&rev1, &rev2]
                .iter()
                .all(|rev| {
                    get_json(&["clusterrole", &format!("crossplane:provider:{rev}:system")])
                        .is_none()
                })
                .then_some(())
        },
        explain_packages,
    );
    eprintln!(
        "packages: uninstalled {:?} after the last Object went",
        gone_from.elapsed()
    );
    // The test binary's other tests may need the CRDs back.
    testenv::control_plane_with_node()
        .control
        .install_crds()
        .unwrap();
}

#[test]
fn upgrades_that_drop_a_crd_keep_it_while_custom_resources_exist_and_keep_one_inactive_revision() {
    let e = env();
    let unique = testenv::unique_name("dropped");
    let g = group("dropped");
    let kept = test_crd(&g, "Keeper");
    let dropped = test_crd(&g, "Goner");
    let repo = format!("{}/test/{unique}", e.registry.address);
    let both = [kept.clone(), dropped.clone()];
    let only_kept = [kept.clone()];
    let d1 = xpkg_push(
        &package_dir("dropped", "one", &crds_of(&both)),
        &format!("{repo}:v1"),
        None,
    );
    let name = unique.clone();
    apply(&provider_yaml(&name, &format!("{repo}:v1"), ""));
    wait_provider_healthy(&name, Duration::from_secs(60));
    let goner = format!("goners.{g}");
    apply(&format!(
        "apiVersion: {g}/v1alpha1\nkind: Goner\nmetadata: {{name: still-here}}\n"
    ));
    // Two upgrades that drop Goner; with revisionHistoryLimit 1 revision 1
    // is pruned, but it holds Goner while a Goner exists.
    for (tag, version) in [("v2", "two"), ("v3", "three")] {
        xpkg_push(
            &package_dir("dropped", version, &crds_of(&only_kept)),
            &format!("{repo}:{tag}"),
            None,
        );
        apply(&provider_yaml(&name, &format!("{repo}:{tag}"), ""));
        wait_blocking(
            Duration::from_secs(60),
            &format!("{tag} serving"),
            || {
                let p = provider(&name)?;
                let current = p["status"]["currentRevision"].as_str()?.to_owned();
                let r = revisions_of(&name)
                    .into_iter()
                    .find(|r| r["metadata"]["name"] == current.as_str())?;
                (r["metadata"]["annotations"]["pkg.crossplane.io/source"]
                    == format!("{repo}:{tag}").as_str()
                    && condition(&p, "Healthy").is_some_and(|c| c.0 == "True"))
                .then_some(())
            },
            explain_packages,
        );
    }
    let rev1 = format!("{name}-{}", short(&d1));
    let r1 = wait_blocking(
        Duration::from_secs(30),
        "revision 1 pruned but waiting for the Goner",
        || {
            let r = get_json(&["providerrevisions.pkg.crossplane.io", &rev1])?;
            let (_, m) = condition(&r, "Healthy")?;
            (r["metadata"]["deletionTimestamp"].is_string() && m.contains("1 Goner: still-here"))
                .then_some(r)
        },
        explain_packages,
    );
    assert!(
        get_json(&["crd", &goner]).is_some(),
        "the dropped CRD went with a custom resource left: {r1}"
    );
    kubectl(&["delete", &goner, "still-here"]);
    wait_blocking(
        Duration::from_secs(30),
        "the dropped CRD and revision 1 gone",
        || {
            (get_json(&["crd", &goner]).is_none()
                && get_json(&["providerrevisions.pkg.crossplane.io", &rev1]).is_none())
            .then_some(())
        },
        explain_packages,
    );
    assert!(
        get_json(&["crd", &format!("keepers.{g}")]).is_some(),
        "a CRD still delivered went"
    );
    assert_eq!(
        revisions_of(&name).len(),
        2,
        "revisionHistoryLimit 1 keeps one inactive revision"
    );
    delete_provider(&name);
    wait_provider_gone(&name);
}
