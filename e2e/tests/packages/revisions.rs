//! Revisions and dependencies: pull policies, manual activation, pausing, missing, incompatible and cyclic dependencies.

use super::*;

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
