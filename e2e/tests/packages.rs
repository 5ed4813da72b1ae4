//! The package manager for real: packages built with `xpkg` and pushed to a
//! CNCF registry (HTTPS, testenv's CA), Providers installed by the six
//! controllers running as pods from `deploy/` (the shipped installation:
//! the local-node overlay plus operator configuration), their runtimes run
//! as pods on the test node, which pulls the runtime image from the same
//! registry.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    process::Command,
    time::{Duration, Instant},
};

use e2e::packages::*;
use serde_json::Value;

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
    // Controlled by the Provider; its CRDs controlled by the revision.
    let owner = &revs[0]["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("Provider"), Some(true))
    );
    for crd in OBJECT_CRDS {
        let c = get_json(&["crd", crd]).unwrap();
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
        let c = get_json(&["crd", crd]).unwrap();
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
                && OBJECT_CRDS.iter().all(|c| get_json(&["crd", c]).is_none())
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

// ---------------------------------------------------------------------
// The cases, each its own test. Each uses its own Provider names and CRD
// groups, so they run side by side.

#[test]
fn every_bad_package_is_refused_with_what_to_fix_and_makes_nothing() {
    let e = env();
    let g = group("bad");
    let (_, crd) = test_crd(&g, "Widget");
    let cases = [
        (
            "other-kind",
            format!(
                "{}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\n",
                meta("p")
            ),
            vec!["document 2 (line 6)", "kind Secret", "is not allowed"],
        ),
        (
            "two-metas",
            format!("{}---\n{}", meta("p"), meta("q")),
            vec!["document 2", "a second meta.pkg.crossplane.io Provider"],
        ),
        (
            "no-meta",
            crd.clone(),
            vec!["has no meta.pkg.crossplane.io/v1 Provider"],
        ),
        (
            "malformed",
            format!("{}---\n{crd}---\nkind: [unclosed\n", meta("p")),
            vec!["malformed YAML", "document 3"],
        ),
    ];
    let mut names = Vec::new();
    for (case, yaml, says) in &cases {
        let reference = format!("{}/test/bad-{case}:v1", e.registry.address);
        let digest = push_raw(&reference, yaml);
        let name = testenv::unique_name(&format!("bad-{case}"));
        apply(&provider_yaml(&name, &reference, ""));
        let mut all = says.clone();
        // The message names the package and the layer.
        all.push(&reference);
        all.push("layer sha256:");
        let p = wait_provider_condition(&name, "Healthy", "False", &all, Duration::from_secs(30));
        assert_eq!(
            condition(&p, "Installed").map(|c| c.0).as_deref(),
            Some("False"),
            "{case}"
        );
        names.push((name, digest));
    }
    // A tag that does not exist.
    let missing = testenv::unique_name("bad-missing");
    let reference = format!("{}/test/nothing-here:v9", e.registry.address);
    apply(&provider_yaml(&missing, &reference, ""));
    wait_provider_condition(
        &missing,
        "Healthy",
        "False",
        &[&reference, "does not exist"],
        Duration::from_secs(30),
    );
    // Nothing was made: no revision, no CRD of the group.
    for (name, _) in &names {
        assert!(revisions_of(name).is_empty(), "{name} made a revision");
    }
    let (_, crds) = kubectl_try(&["get", "crds", "-o", "name"]);
    assert!(!crds.contains(&g), "a bad package installed a CRD: {crds}");
    // A Warning event says what failed, too.
    let (_, events) = kubectl_try(&[
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        &format!("involvedObject.name={}", names[0].0),
        "-o",
        "json",
    ]);
    let events_all = if events.contains("CannotInstallPackage") {
        events
    } else {
        kubectl_try(&["get", "events", "-A", "-o", "json"]).1
    };
    assert!(
        events_all.contains("CannotInstallPackage"),
        "no Warning event: {events_all}"
    );
    for (name, _) in names {
        delete_provider(&name);
    }
    delete_provider(&missing);
}

#[test]
fn a_second_provider_of_the_same_crd_waits_naming_the_owner_and_recovers_alone() {
    let e = env();
    let g = group("shared");
    let crds = [test_crd(&g, "Gadget")];
    let first = testenv::unique_name("first");
    let second = testenv::unique_name("second");
    let d1 = package_dir("first", "v1", &crds_of(&crds));
    let d2 = package_dir("second", "v1", &crds_of(&crds));
    let r1 = format!("{}/test/first:v1", e.registry.address);
    let r2 = format!("{}/test/second:v1", e.registry.address);
    xpkg_push(&d1, &r1, None);
    xpkg_push(&d2, &r2, None);
    apply(&provider_yaml(&first, &r1, ""));
    wait_provider_healthy(&first, Duration::from_secs(60));
    let crd_name = format!("gadgets.{g}");
    let owners_before =
        get_json(&["crd", &crd_name]).unwrap()["metadata"]["ownerReferences"].clone();
    apply(&provider_yaml(&second, &r2, ""));
    let first_rev = revisions_of(&first)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_provider_condition(
        &second,
        "Healthy",
        "False",
        &[&crd_name, "already controlled by", &first_rev, &first],
        Duration::from_secs(30),
    );
    // It changed nothing of the CRD.
    assert_eq!(
        get_json(&["crd", &crd_name]).unwrap()["metadata"]["ownerReferences"],
        owners_before
    );
    // When the first goes, the second installs without anyone touching it.
    delete_provider(&first);
    wait_provider_gone(&first);
    wait_provider_healthy(&second, Duration::from_secs(60));
    let second_rev = revisions_of(&second)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let owners = get_json(&["crd", &crd_name]).unwrap()["metadata"]["ownerReferences"].clone();
    assert_eq!(owners[0]["name"], second_rev.as_str(), "{owners}");
    delete_provider(&second);
}

#[test]
fn an_unreachable_registry_is_reported_and_a_registry_that_comes_up_is_used_without_help() {
    env();
    let plane = testenv::control_plane_with_node();
    let node = plane.node.as_ref().unwrap();
    // A registry that accepts and never answers: the pull times out and
    // says so (the controller does not hang).
    let silent = silent_listener(node.host_ip.into());
    let hung = testenv::unique_name("hung");
    let reference = format!("{silent}/test/hung:v1");
    apply(&provider_yaml(&hung, &reference, ""));
    let p = wait_provider_condition(
        &hung,
        "Healthy",
        "False",
        &[&reference],
        Duration::from_secs(40),
    );
    eprintln!(
        "packages: a silent registry is reported as: {}",
        condition(&p, "Healthy").unwrap().1
    );
    delete_provider(&hung);

    // A closed port, then a registry starts there.
    let port = testenv::registry::Registry::free_port(node).unwrap();
    let late = testenv::unique_name("late");
    let reference = format!("{}:{port}/test/late:v1", node.host_ip);
    apply(&provider_yaml(&late, &reference, ""));
    wait_provider_condition(
        &late,
        "Healthy",
        "False",
        &[&reference, "failed to read"],
        Duration::from_secs(30),
    );
    let registry =
        testenv::registry::Registry::start_on(plane, node, "late.crossplane-rs.test", None, port)
            .unwrap();
    let g = group("late");
    let dir = package_dir("late", "v1", &crds_of(&[test_crd(&g, "Sprocket")]));
    xpkg_push(&dir, &reference, None);
    let started = Instant::now();
    wait_provider_healthy(&late, Duration::from_secs(60));
    eprintln!(
        "packages: installed {:?} after the registry came up",
        started.elapsed()
    );
    // Once installed, the registry going away changes nothing.
    drop(registry);
    let before = e2e::shipped::reconciles("package-manager", "providerrevision");
    kubectl(&[
        "annotate",
        "providerrevisions.pkg.crossplane.io",
        revisions_of(&late)[0]["metadata"]["name"].as_str().unwrap(),
        "poke=1",
        "--overwrite",
    ]);
    wait_blocking(
        Duration::from_secs(30),
        "the revision reconciled after the registry went",
        || {
            let now = e2e::shipped::reconciles("package-manager", "providerrevision");
            (now > before).then_some(())
        },
        explain_packages,
    );
    let p = provider(&late).unwrap();
    assert_eq!(
        condition(&p, "Healthy").unwrap().0,
        "True",
        "an outage after install made it unhealthy: {p}"
    );
    delete_provider(&late);
}

#[test]
fn a_private_registry_needs_the_pull_secret_and_the_dependency_inherits_it() {
    let plane = testenv::control_plane_with_node();
    let node = plane.node.as_ref().unwrap();
    let (user, password) = ("robot", "pull-s3cret");
    let private = testenv::registry::Registry::start(
        plane,
        node,
        "private.crossplane-rs.test",
        Some((user, password)),
    )
    .unwrap();
    let unique = testenv::unique_name("dep");
    let b_repo = format!("{}/test/{unique}-b", private.address);
    let a_repo = format!("{}/test/{unique}-a", private.address);
    let gb = group("depb");
    let ga = group("depa");
    // B at v0.9.0, v1.0.0, v1.2.0, v1 and v2.0.0: A's >=v1.0.0, <v2.0.0
    // picks v1.2.0 (v1 is not a full version).
    for tag in ["v0.9.0", "v1.0.0", "v1.2.0", "v1", "v2.0.0"] {
        let dir = package_dir("b", tag, &crds_of(&[test_crd(&gb, "Bolt")]));
        xpkg_push_as(
            &dir,
            &format!("{b_repo}:{tag}"),
            None,
            Some((user, password)),
        );
    }
    let a_dir = package_dir_with(
        "a",
        "v1.0.0",
        &crds_of(&[test_crd(&ga, "Anchor")]),
        &meta_with_dependency("a", &b_repo, ">=v1.0.0, <v2.0.0"),
    );
    xpkg_push_as(
        &a_dir,
        &format!("{a_repo}:v1.0.0"),
        None,
        Some((user, password)),
    );

    // Without credentials the registry refuses, and the Provider says so.
    let a = format!("{unique}-a");
    apply(&provider_yaml(&a, &format!("{a_repo}:v1.0.0"), ""));
    wait_provider_condition(
        &a,
        "Healthy",
        "False",
        &["refused", "requires credentials"],
        Duration::from_secs(30),
    );
    assert!(revisions_of(&a).is_empty());

    // With the pull secret it installs, and so does B, with A's secret.
    let secret = testenv::unique_name("pull");
    let config = serde_json::json!({"auths": {private.address.clone(): {"username": user, "password": password}}});
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {RUNTIMES}}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{config}'\n"
    ));
    apply(&provider_yaml(
        &a,
        &format!("{a_repo}:v1.0.0"),
        &format!("  packagePullSecrets:\n  - name: {secret}\n"),
    ));
    wait_provider_healthy(&a, Duration::from_secs(60));
    let b = format!("{unique}-b");
    let bp = wait_provider_healthy(&b, Duration::from_secs(60));
    assert_eq!(bp["spec"]["package"], format!("{b_repo}:v1.2.0"));
    assert_eq!(bp["spec"]["packagePullSecrets"][0]["name"], secret.as_str());
    assert_eq!(
        bp["metadata"]["labels"]["pkg.crossplane.io/dependency"],
        "true"
    );
    let ar = &revisions_of(&a)[0];
    assert_eq!(ar["status"]["foundDependencies"], 1);
    assert_eq!(ar["status"]["installedDependencies"], 1);
    assert_eq!(ar["status"]["invalidDependencies"], 0);
    // B was installed only for A: it goes with A.
    delete_provider(&a);
    wait_provider_gone(&a);
    wait_provider_gone(&b);
}

#[test]
fn missing_incompatible_and_cyclic_dependencies_are_named() {
    let e = env();
    let unique = testenv::unique_name("deps");
    let repo = |n: &str| format!("{}/test/{unique}-{n}", e.registry.address);
    let push = |n: &str, tag: &str, spec_extra: &str| {
        let g = group(n);
        let dir = package_dir_with(n, tag, &crds_of(&[test_crd(&g, "Thing")]), spec_extra);
        xpkg_push(&dir, &format!("{}:{tag}", repo(n)), None);
    };
    // Incompatible: the user installed B at v2.0.0; A wants <v2.0.0.
    push("b", "v2.0.0", "");
    push(
        "a",
        "v1.0.0",
        &meta_with_dependency("a", &repo("b"), ">=v1.0.0, <v2.0.0"),
    );
    let b = format!("{unique}-b");
    apply(&provider_yaml(&b, &format!("{}:v2.0.0", repo("b")), ""));
    wait_provider_healthy(&b, Duration::from_secs(60));
    let a = format!("{unique}-a");
    apply(&provider_yaml(&a, &format!("{}:v1.0.0", repo("a")), ""));
    wait_provider_condition(
        &a,
        "Healthy",
        "False",
        &["incompatible", &b, "v2.0.0"],
        Duration::from_secs(30),
    );
    let ar = &revisions_of(&a)[0];
    assert_eq!(ar["status"]["invalidDependencies"], 1);
    assert!(
        condition(ar, "Healthy").unwrap().1.contains(&repo("b")),
        "the revision names the dependency: {ar}"
    );
    // trace shows the dependency as a child of the revision, with its
    // own status.
    let viewer = e2e::trace::viewer(&testenv::control_plane_with_node().control, true, &[]);
    let tree = e2e::trace::json(&viewer, &[&format!("provider/{a}")]);
    let dependency = e2e::trace::node(&tree, "Provider", &b);
    assert_eq!(dependency["status"]["ready"], "True", "{tree:#}");
    assert_eq!(dependency["status"]["dependency"], repo("b").as_str());

    // Missing: no tag of M satisfies the range.
    push("m", "v0.1.0", "");
    push(
        "needs-m",
        "v1.0.0",
        &meta_with_dependency("needs-m", &repo("m"), ">=v1.0.0"),
    );
    let needs = format!("{unique}-needs-m");
    apply(&provider_yaml(
        &needs,
        &format!("{}:v1.0.0", repo("needs-m")),
        "",
    ));
    wait_provider_condition(
        &needs,
        "Healthy",
        "False",
        &["missing", "no tag satisfies", "v0.1.0"],
        Duration::from_secs(30),
    );
    let tree = e2e::trace::json(&viewer, &[&format!("provider/{needs}")]);
    let missing = e2e::trace::node(&tree, "Provider", &repo("m"));
    assert_eq!(missing["status"]["state"], "missing", "{tree:#}");

    // A cycle: C needs D, D needs C.
    push(
        "c",
        "v1.0.0",
        &meta_with_dependency("c", &repo("d"), ">=v1.0.0"),
    );
    push(
        "d",
        "v1.0.0",
        &meta_with_dependency("d", &repo("c"), ">=v1.0.0"),
    );
    let c = format!("{unique}-c");
    let d = format!("{unique}-d");
    apply(&provider_yaml(&c, &format!("{}:v1.0.0", repo("c")), ""));
    wait_provider_condition(
        &d,
        "Healthy",
        "False",
        &["dependency cycle", &repo("c"), &repo("d")],
        Duration::from_secs(60),
    );
    wait_provider_condition(
        &c,
        "Healthy",
        "False",
        &["dependency cycle"],
        Duration::from_secs(60),
    );
    let tree = e2e::trace::json(&viewer, &[&format!("provider/{c}")]);
    let cyclic = e2e::trace::node(&tree, "Provider", &d);
    assert_eq!(cyclic["status"]["ready"], "False", "{tree:#}");

    // The user's B stays when A goes; D (installed for C) goes with C.
    for p in [&a, &needs, &c] {
        delete_provider(p);
    }
    for p in [&a, &needs, &c, &d] {
        wait_provider_gone(p);
    }
    assert!(
        provider(&b).is_some(),
        "a Provider the user installed was removed"
    );
    delete_provider(&b);
}

#[test]
fn pull_policies_manual_activation_and_pause() {
    let e = env();
    let unique = testenv::unique_name("pull");
    let repo = |n: &str| format!("{}/test/{unique}-{n}", e.registry.address);
    let g = group("pull");
    let crds_files = [test_crd(&g, "Knob")];
    let crds = crds_of(&crds_files);
    let push = |n: &str, tag: &str, version: &str| {
        xpkg_push(
            &package_dir(n, version, &crds),
            &format!("{}:{tag}", repo(n)),
            None,
        )
    };

    // IfNotPresent (the default): a moved tag is not looked at again.
    let d1 = push("steady", "v1", "one");
    let steady = format!("{unique}-steady");
    apply(&provider_yaml(
        &steady,
        &format!("{}:v1", repo("steady")),
        "",
    ));
    wait_provider_healthy(&steady, Duration::from_secs(60));
    let d2 = push("steady", "v1", "two");
    assert_ne!(d1, d2);
    poke(&steady, 3);
    assert_eq!(
        revision_names(&steady),
        [format!("{steady}-{}", short(&d1))]
    );
    delete_provider(&steady);

    // Always: the tag is resolved every --package-pull-interval (2s here);
    // a moved tag makes a new revision, which takes over.
    let g2 = group("always");
    let crds2_files = [test_crd(&g2, "Dial")];
    let crds2 = crds_of(&crds2_files);
    let a1 = xpkg_push(
        &package_dir("moving", "one", &crds2),
        &format!("{}:v1", repo("moving")),
        None,
    );
    let moving = format!("{unique}-moving");
    apply(&provider_yaml(
        &moving,
        &format!("{}:v1", repo("moving")),
        "  packagePullPolicy: Always\n",
    ));
    wait_provider_healthy(&moving, Duration::from_secs(60));
    let a2 = xpkg_push(
        &package_dir("moving", "two", &crds2),
        &format!("{}:v1", repo("moving")),
        None,
    );
    let rev2 = format!("{moving}-{}", short(&a2));
    wait_blocking(
        Duration::from_secs(60),
        "a new revision for the moved tag, serving",
        || {
            let p = provider(&moving)?;
            (p["status"]["currentRevision"] == rev2.as_str()
                && condition(&p, "Healthy").is_some_and(|c| c.0 == "True"))
            .then_some(())
        },
        explain_packages,
    );
    let revs = revisions_of(&moving);
    assert_eq!(
        revs[0]["metadata"]["name"],
        format!("{moving}-{}", short(&a1)).as_str()
    );
    assert_eq!(revs[0]["spec"]["desiredState"], "Inactive");
    delete_provider(&moving);

    // Never: nothing is pulled, and the Provider says what to do.
    let never = format!("{unique}-never");
    apply(&provider_yaml(
        &never,
        &format!("{}:v1", repo("steady")),
        "  packagePullPolicy: Never\n",
    ));
    wait_provider_condition(
        &never,
        "Healthy",
        "False",
        &["packagePullPolicy is Never"],
        Duration::from_secs(30),
    );
    assert!(revisions_of(&never).is_empty());
    delete_provider(&never);

    // Manual: a new revision waits for the user; the old one serves.
    let g3 = group("manual");
    let crds3_files = [test_crd(&g3, "Lever")];
    let crds3 = crds_of(&crds3_files);
    let m1 = xpkg_push(
        &package_dir("manual", "one", &crds3),
        &format!("{}:v1", repo("manual")),
        None,
    );
    let m2 = xpkg_push(
        &package_dir("manual", "two", &crds3),
        &format!("{}:v2", repo("manual")),
        None,
    );
    let manual = format!("{unique}-manual");
    let policy = "  revisionActivationPolicy: Manual\n";
    apply(&provider_yaml(
        &manual,
        &format!("{}:v1", repo("manual")),
        policy,
    ));
    let r1 = format!("{manual}-{}", short(&m1));
    wait_provider_condition(
        &manual,
        "Installed",
        "False",
        &["awaits activation", &r1],
        Duration::from_secs(30),
    );
    assert!(
        get_json(&["crd", &format!("levers.{g3}")]).is_none(),
        "an inactive revision installed CRDs"
    );
    kubectl(&[
        "patch",
        "providerrevisions.pkg.crossplane.io",
        &r1,
        "--type=merge",
        "-p",
        r#"{"spec":{"desiredState":"Active"}}"#,
    ]);
    wait_provider_healthy(&manual, Duration::from_secs(60));
    apply(&provider_yaml(
        &manual,
        &format!("{}:v2", repo("manual")),
        policy,
    ));
    let r2 = format!("{manual}-{}", short(&m2));
    let p = wait_provider_condition(
        &manual,
        "Installed",
        "True",
        &["awaits activation", &r2],
        Duration::from_secs(30),
    );
    assert_eq!(
        p["status"]["currentRevision"],
        r1.as_str(),
        "the old revision serves"
    );
    assert_eq!(condition(&p, "Healthy").unwrap().0, "True");
    kubectl(&[
        "patch",
        "providerrevisions.pkg.crossplane.io",
        &r2,
        "--type=merge",
        "-p",
        r#"{"spec":{"desiredState":"Active"}}"#,
    ]);
    wait_blocking(
        Duration::from_secs(60),
        "the activated revision serving and the old one inactive",
        || {
            let p = provider(&manual)?;
            let revs = revisions_of(&manual);
            (p["status"]["currentRevision"] == r2.as_str()
                && condition(&p, "Healthy").is_some_and(|c| c.0 == "True")
                && revs
                    .first()
                    .is_some_and(|r| r["spec"]["desiredState"] == "Inactive"))
            .then_some(())
        },
        explain_packages,
    );

    // Paused: nothing happens, however the Provider changes.
    kubectl(&[
        "annotate",
        "providers.pkg.crossplane.io",
        &manual,
        "crossplane.io/paused=true",
    ]);
    wait_provider_condition(
        &manual,
        "Synced",
        "False",
        &["paused"],
        Duration::from_secs(30),
    );
    apply(&provider_yaml(
        &manual,
        &format!("{}:v1", repo("steady")),
        policy,
    ));
    poke(&manual, 2);
    assert_eq!(
        revisions_of(&manual).len(),
        2,
        "a paused Provider made a revision"
    );
    kubectl(&[
        "annotate",
        "providers.pkg.crossplane.io",
        &manual,
        "crossplane.io/paused-",
    ]);
    delete_provider(&manual);
    wait_provider_gone(&manual);
}

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

#[test]
fn a_crd_a_new_version_dropped_stays_while_its_custom_resources_exist() {
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

#[test]
fn an_image_index_resolves_to_its_linux_amd64_package_and_one_without_is_refused() {
    let e = env();
    let unique = testenv::unique_name("index");
    let repo = format!("{}/test/{unique}", e.registry.address);
    let g = group("index");
    let image = oci::xpkg::build(
        &package_dir("index", "v1", &crds_of(&[test_crd(&g, "Gear")])),
        None,
    )
    .unwrap();
    let serialized = image.serialize().unwrap();
    let tls = oci::Tls::Ca(e.registry.ca_pem.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(image.push(&format!("{repo}:single"), &oci::Auth::Anonymous, &tls))
        .unwrap();
    let platform = |architecture: &str| oci::Platform {
        digest: serialized.digest.clone(),
        size: serialized.manifest.len() as u64,
        os: "linux".into(),
        architecture: architecture.into(),
    };
    rt.block_on(oci::push_index(
        &format!("{repo}:multi"),
        &[platform("arm64"), platform("amd64")],
        &oci::Auth::Anonymous,
        &tls,
    ))
    .unwrap();
    rt.block_on(oci::push_index(
        &format!("{repo}:arm-only"),
        &[platform("arm64"), platform("s390x")],
        &oci::Auth::Anonymous,
        &tls,
    ))
    .unwrap();

    // The index resolves to its linux/amd64 image: the revision is named
    // after that image's digest.
    let multi = format!("{unique}-multi");
    apply(&provider_yaml(&multi, &format!("{repo}:multi"), ""));
    let p = wait_provider_healthy(&multi, Duration::from_secs(60));
    assert_eq!(
        p["status"]["currentRevision"],
        format!("{multi}-{}", short(serialized.digest.as_str())).as_str()
    );

    let arm = format!("{unique}-arm");
    apply(&provider_yaml(&arm, &format!("{repo}:arm-only"), ""));
    wait_provider_condition(
        &arm,
        "Healthy",
        "False",
        &["no linux/amd64", "linux/arm64", "linux/s390x"],
        Duration::from_secs(30),
    );
    assert!(revisions_of(&arm).is_empty());
    for n in [&multi, &arm] {
        delete_provider(n);
    }
    for n in [&multi, &arm] {
        wait_provider_gone(n);
    }
}

#[test]
fn a_package_for_another_crossplane_version_waits_unless_told_to_ignore_it() {
    let e = env();
    let unique = testenv::unique_name("constraint");
    let g = group("constraint");
    let crds = [test_crd(&g, "Latch")];
    let dir = package_dir_with("old", "v1", &crds_of(&crds), "");
    // The helper's meta asks for >=v1.14.0; this one for an old Crossplane.
    let meta = std::fs::read_to_string(dir.join("package.yaml"))
        .unwrap()
        .replace(">=v1.14.0", "<v1.0.0");
    std::fs::write(dir.join("package.yaml"), meta).unwrap();
    let reference = format!("{}/test/{unique}:v1", e.registry.address);
    xpkg_push(&dir, &reference, None);
    apply(&provider_yaml(&unique, &reference, ""));
    wait_provider_condition(
        &unique,
        "Healthy",
        "False",
        &["needs Crossplane <v1.0.0", "ignoreCrossplaneConstraints"],
        Duration::from_secs(30),
    );
    assert!(
        get_json(&["crd", &format!("latchs.{g}")]).is_none(),
        "an incompatible package installed its CRDs"
    );
    apply(&provider_yaml(
        &unique,
        &reference,
        "  ignoreCrossplaneConstraints: true\n",
    ));
    wait_provider_healthy(&unique, Duration::from_secs(60));
    delete_provider(&unique);
    wait_provider_gone(&unique);
}

#[test]
fn a_permission_request_outside_the_allow_list_gets_no_roles_until_the_list_allows_it() {
    let e = env();
    let unique = testenv::unique_name("asks");
    let g = group("asks");
    let crds = [test_crd(&g, "Wish")];
    let dir = package_dir_with(
        "asks",
        "v1",
        &crds_of(&crds),
        "  controller:\n    permissionRequests:\n    - {apiGroups: [\"\"], resources: [configmaps], verbs: [get]}\n    - {apiGroups: [\"\"], resources: [nodes], verbs: [delete]}\n",
    );
    let reference = format!("{}/test/{unique}:v1", e.registry.address);
    let digest = xpkg_push(&dir, &reference, None);
    apply(&provider_yaml(&unique, &reference, ""));
    // Its CRDs are in place, but a runtime without its roles cannot work:
    // the Provider is not Healthy, and says why.
    let p = wait_provider_condition(
        &unique,
        "Healthy",
        "False",
        &["no roles", "delete nodes"],
        Duration::from_secs(60),
    );
    assert_eq!(condition(&p, "Installed").unwrap().0, "True", "{p:#}");
    let rev = format!("{unique}-{}", short(&digest));
    let system = format!("crossplane:provider:{rev}:system");
    let refused = wait_blocking(
        Duration::from_secs(30),
        "RBACReady=False naming the refused rule",
        || {
            let r = get_json(&["providerrevisions.pkg.crossplane.io", &rev])?;
            let (s, m) = condition(&r, "RBACReady")?;
            (s == "False" && m.contains("delete nodes")).then_some(m)
        },
        explain_packages,
    );
    assert!(
        refused.contains("crossplane-rs:allowed-provider-permissions"),
        "{refused}"
    );
    assert!(
        !refused.contains("configmaps"),
        "an allowed part was refused too: {refused}"
    );
    assert!(
        get_json(&["clusterrole", &system]).is_none(),
        "a refused revision got roles"
    );
    let refusals = e2e::metric_sum(
        &e2e::shipped::metrics_of("rbac-manager"),
        "crossplane_rs_rbac_permission_requests_refused_total",
        &[],
    );
    assert!(refusals > 0.0, "the refusal is not counted");
    // Widening the allow-list is enough: the roles appear by themselves.
    let allowed = get_json(&["clusterrole", "crossplane-rs:allowed-provider-permissions"]).unwrap();
    let mut rules = allowed["rules"].as_array().unwrap().clone();
    rules.push(serde_json::json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["delete"]}));
    let patch = serde_json::json!({"rules": rules}).to_string();
    kubectl(&[
        "patch",
        "clusterrole",
        "crossplane-rs:allowed-provider-permissions",
        "--type=merge",
        "-p",
        &patch,
    ]);
    let role = wait_blocking(
        Duration::from_secs(30),
        "the system role with the requested rule",
        || get_json(&["clusterrole", &system]),
        explain_packages,
    );
    assert!(role["rules"].to_string().contains("nodes"), "{role}");
    // The rbac-manager writes the roles, then the revision's status.
    wait_blocking(
        Duration::from_secs(30),
        "RBACReady=True once the role is rendered",
        || {
            let r = get_json(&["providerrevisions.pkg.crossplane.io", &rev])?;
            (condition(&r, "RBACReady")?.0 == "True").then_some(())
        },
        explain_packages,
    );
    wait_provider_healthy(&unique, Duration::from_secs(30));
    // Put the allow-list back as shipped.
    let patch = serde_json::json!({"rules": allowed["rules"]}).to_string();
    kubectl(&[
        "patch",
        "clusterrole",
        "crossplane-rs:allowed-provider-permissions",
        "--type=merge",
        "-p",
        &patch,
    ]);
    delete_provider(&unique);
    wait_provider_gone(&unique);
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
    let crd = e2e::trace::node(revision, "CustomResourceDefinition", &format!("dials.{g}"));
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

/// ImageConfigs: a Provider and its dependency, pushed only under a mirror
/// path of a private registry, are applied by their public name (for which
/// the node's containerd has no mirror); one ImageConfig rewrites the
/// packages, one the runtime image, one gives the mirror its pull Secret.
/// Both install; the runtime pod runs the rewritten image; editing an
/// ImageConfig reaches the runtime within 5 s; a deleted pull Secret is
/// named on the Provider with the ImageConfig that names it.
#[test]
fn image_configs_read_public_names_from_a_mirror_with_their_pull_secret() {
    let e = env();
    let plane = testenv::control_plane_with_node();
    let node = plane.node.as_ref().unwrap();
    let (user, password) = ("mirror-robot", "m1rror-s3cret");
    let mirror = testenv::registry::Registry::start(
        plane,
        node,
        "imageconfig-mirror.crossplane-rs.test",
        Some((user, password)),
    )
    .unwrap();
    let unique = testenv::unique_name("ic");
    let public = format!("xpkg.{unique}.test");
    let packages_at = format!("{}/acme-{unique}", mirror.address);
    let runtime_at = |n: u32| format!("{}/{unique}-runtime{n}", e.registry.address);

    // The runtime image, under two mirror paths of the open registry. It
    // carries a file of its own: the node's kubelet records the images it
    // pulls by image ID, and a pull of the preloaded pause image's ID under
    // another name would make it verify (pull) that image for every later
    // pod that runs it by its preloaded name (there is no registry for it).
    let pause = testenv::image::binary_image(&testenv::bin_dir().unwrap().join("pause"))
        .unwrap()
        .layer(
            oci::LayerBuilder::new()
                .file("etc/runtime-of", 0o644, unique.as_bytes().to_vec())
                .build()
                .unwrap(),
        );
    for n in [1, 2] {
        e2e::artifacts::push_image(e.registry, &format!("{}/pause:v1", runtime_at(n)), &pause);
    }
    // B (CRDs only) and A (depends on B, runs the public runtime name).
    let (ga, gb) = (group("ica"), group("icb"));
    let b_dir = package_dir("b", "v1.0.0", &crds_of(&[test_crd(&gb, "Beam")]));
    xpkg_push_as(
        &b_dir,
        &format!("{packages_at}/{unique}-b:v1.0.0"),
        None,
        Some((user, password)),
    );
    let a_dir = package_dir_with(
        "a",
        "v1.0.0",
        &crds_of(&[test_crd(&ga, "Arch")]),
        &meta_with_dependency("a", &format!("{public}/acme/{unique}-b"), ">=v1.0.0"),
    );
    xpkg_push_as(
        &a_dir,
        &format!("{packages_at}/{unique}-a:v1.0.0"),
        Some(&format!("{public}/runtime/pause:v1")),
        Some((user, password)),
    );

    let secret = format!("{unique}-pull");
    let config = serde_json::json!({"auths": {mirror.address.clone(): {"username": user, "password": password}}});
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {RUNTIMES}}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{config}'\n"
    ));
    let image_config = |name: &str, prefix: &str, rest: &str| {
        format!(
            "apiVersion: pkg.crossplane.io/v1beta1\nkind: ImageConfig\nmetadata: {{name: {name}}}\nspec:\n  matchImages:\n  - type: Prefix\n    prefix: \"{prefix}\"\n{rest}"
        )
    };
    let (packages_ic, runtime_ic, credentials_ic) = (
        format!("{unique}-packages"),
        format!("{unique}-runtime"),
        format!("{unique}-credentials"),
    );
    apply(&image_config(
        &packages_ic,
        &format!("{public}/acme/"),
        &format!("  rewriteImage: {{prefix: \"{packages_at}/\"}}\n"),
    ));
    let runtime_config = |n: u32| {
        image_config(
            &runtime_ic,
            &format!("{public}/runtime/"),
            &format!("  rewriteImage: {{prefix: \"{}/\"}}\n", runtime_at(n)),
        )
    };
    apply(&runtime_config(1));
    apply(&image_config(
        &credentials_ic,
        &format!("{packages_at}/"),
        &format!("  registry:\n    authentication:\n      pullSecretRef: {{name: {secret}}}\n"),
    ));

    // Applied by their public names: both install, from the mirror.
    let (a, b) = (format!("{unique}-a"), format!("{unique}-b"));
    apply(&provider_yaml(
        &a,
        &format!("{public}/acme/{unique}-a:v1.0.0"),
        "",
    ));
    let ap = wait_provider_healthy(&a, Duration::from_secs(120));
    let bp = wait_provider_healthy(&b, Duration::from_secs(60));
    assert_eq!(
        bp["spec"]["package"],
        format!("{public}/acme/{unique}-b:v1.0.0")
    );
    assert_eq!(
        ap["status"]["resolvedPackage"],
        format!("{packages_at}/{unique}-a:v1.0.0")
    );
    assert_eq!(
        bp["status"]["resolvedPackage"],
        format!("{packages_at}/{unique}-b:v1.0.0")
    );
    let applied = |p: &Value| -> Vec<(String, String)> {
        p["status"]["appliedImageConfigRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["name"].as_str().unwrap_or_default().to_owned(),
                    r["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let expected = vec![
        (packages_ic.clone(), "RewriteImage".to_owned()),
        (credentials_ic.clone(), "SetImagePullSecret".to_owned()),
    ];
    assert_eq!(applied(&ap), expected);
    assert_eq!(applied(&bp), expected);

    // The runtime runs the rewritten name; containerd knows no mirror for
    // the public one.
    let revision = revisions_of(&a)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let rewritten = |n: u32| format!("{}/pause:v1", runtime_at(n));
    let running_pod = |image: &str| {
        let pods = get_json(&[
            "pods",
            "-n",
            RUNTIMES,
            "-l",
            &format!("pkg.crossplane.io/revision={revision}"),
        ])?;
        pods["items"].as_array()?.iter().find_map(|p| {
            (p["spec"]["containers"][0]["image"] == image
                && p["status"]["phase"] == "Running"
                && p["metadata"]["deletionTimestamp"].is_null())
            .then_some(())
        })
    };
    wait_blocking(
        Duration::from_secs(60),
        "the runtime pod Running the rewritten image",
        || running_pod(&rewritten(1)),
        explain_packages,
    );
    assert!(
        !node.registry_config_dir().join(&public).exists(),
        "containerd has no mirror for {public}"
    );
    let rev = get_json(&["providerrevisions.pkg.crossplane.io", &revision]).unwrap();
    assert_eq!(rev["status"]["resolvedImage"], rewritten(1));
    assert_eq!(rev["spec"]["image"], format!("{public}/runtime/pause:v1"));

    // Editing the ImageConfig reaches the runtime Deployment within 5 s.
    let edited = Instant::now();
    apply(&runtime_config(2));
    let image_now = || {
        deployment_of(&revision).and_then(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .map(str::to_owned)
        })
    };
    wait_blocking(
        Duration::from_secs(5),
        "the runtime Deployment to run the newly rewritten image",
        || (image_now().as_deref() == Some(rewritten(2).as_str())).then_some(()),
        || format!("{:?}\n{}", image_now(), explain_packages()),
    );
    let took = edited.elapsed();
    assert!(took <= Duration::from_secs(5), "{took:?}");
    wait_blocking(
        Duration::from_secs(60),
        "the runtime pod Running the newly rewritten image",
        || running_pod(&rewritten(2)),
        explain_packages,
    );

    // The pull Secret deleted: a Provider of the mirror names it and the
    // ImageConfig that names it.
    kubectl(&["delete", "secret", &secret, "-n", RUNTIMES]);
    let c = format!("{unique}-c");
    apply(&provider_yaml(
        &c,
        &format!("{public}/acme/{unique}-b:v1.0.0"),
        "",
    ));
    wait_provider_condition(
        &c,
        "Healthy",
        "False",
        &[&format!(
            "pull Secret {secret} of ImageConfig {credentials_ic} does not exist in namespace {RUNTIMES}"
        )],
        Duration::from_secs(30),
    );

    delete_provider(&c);
    delete_provider(&a);
    wait_provider_gone(&a);
    wait_provider_gone(&b);
    wait_provider_gone(&c);
    for ic in [&packages_ic, &runtime_ic, &credentials_ic] {
        kubectl(&["delete", "imageconfig.pkg.crossplane.io", ic]);
    }
}
