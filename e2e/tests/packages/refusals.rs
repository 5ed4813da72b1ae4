//! Packages that cannot be installed say what to fix and make nothing: bad packages, CRDs another Provider owns,
//! another Crossplane version, permissions outside the allow-list.

use super::*;

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
    let events_all = if events.contains("CannotReadPackage") {
        events
    } else {
        kubectl_try(&["get", "events", "-A", "-o", "json"]).1
    };
    assert!(
        events_all.contains("CannotReadPackage"),
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
    // A managed kind: the revision delivers it as a ManagedResourceDefinition.
    let crd_name = format!("gadgets.{g}");
    let owners_before =
        get_json(&["mrd", &crd_name]).unwrap()["metadata"]["ownerReferences"].clone();
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
    // It changed nothing of the MRD.
    assert_eq!(
        get_json(&["mrd", &crd_name]).unwrap()["metadata"]["ownerReferences"],
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
    let owners = get_json(&["mrd", &crd_name]).unwrap()["metadata"]["ownerReferences"].clone();
    assert_eq!(owners[0]["name"], second_rev.as_str(), "{owners}");
    delete_provider(&second);
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

    // A package made for Crossplane v2 installs as it is.
    let v2 = testenv::unique_name("v2");
    let g = group("v2");
    let dir = package_dir_with("v2", "v1", &crds_of(&[test_crd(&g, "Hinge")]), "");
    let meta = std::fs::read_to_string(dir.join("package.yaml"))
        .unwrap()
        .replace(">=v1.14.0", ">=v2.0.0");
    std::fs::write(dir.join("package.yaml"), meta).unwrap();
    let reference = format!("{}/test/{v2}:v1", e.registry.address);
    xpkg_push(&dir, &reference, None);
    apply(&provider_yaml(&v2, &reference, ""));
    wait_provider_healthy(&v2, Duration::from_secs(60));
    delete_provider(&v2);
    wait_provider_gone(&v2);
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
