//! What the package-manager's own request counters say, while a test
//! alone holds its pod ([`alone`]): an installed stack reconciled again
//! writes nothing, and a Provider's managed kinds are made without reading
//! one back.

use super::*;

/// An installed stack (requested by package and by CRD, both held) is
/// reconciled again and again without a write: no CRD, Extension, status
/// or label patch, no create. The counters are the package-manager pod's,
/// while this test alone runs ([`alone`]).
#[test]
fn an_installed_stack_writes_nothing_when_reconciled_again() {
    let _alone = alone();
    let e = env();
    let pm = package_manager_flags(&operator_flags());
    apply(&format!(
        "apiVersion: pkg.crossplane.io/v1beta1\nkind: ImageConfig\nmetadata: {{name: steady-registry}}\nspec:\n  matchImages:\n  - prefix: registry.crossplane.io\n  rewriteImage: {{prefix: \"{}\"}}\n",
        e.registry.address
    ));
    let g = format!("{}.example.org", testenv::unique_name("steady"));
    let dir = e.work.join(testenv::unique_name("steady-stack"));
    let res = dir.join(".registry/resources").join(&g);
    std::fs::create_dir_all(&res).unwrap();
    std::fs::write(
        dir.join(".registry/app.yaml"),
        "title: Steady\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        res.join("knob.crd.yaml"),
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: knobs.{g}\nspec:\n  group: {g}\n  scope: Namespaced\n  names: {{kind: Knob, plural: knobs}}\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
        ),
    )
    .unwrap();
    xpkg_push(
        &dir,
        &format!("{}/{g}/steady:v1.0.0", e.registry.address),
        None,
    );
    let ns = testenv::unique_name("steady");
    kubectl(&["create", "namespace", &ns]);
    let request = |name: &str, what: &str| {
        format!(
            "apiVersion: extensions.crossplane.io/v1alpha1\nkind: ExtensionRequest\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: registry.crossplane.io\n  {what}\n"
        )
    };
    apply(&request(
        "by-package",
        &format!("package: {g}/steady:v1.0.0"),
    ));
    apply(&request("by-crd", &format!("crd: knobs.{g}/v1alpha1")));
    let ready = |name: &str| {
        get_json(&[
            "extensionrequests.extensions.crossplane.io",
            name,
            "-n",
            &ns,
        ])
        .and_then(|r| condition(&r, "Ready"))
        .is_some_and(|c| c.0 == "True")
    };
    wait_blocking(
        Duration::from_secs(90),
        "both requests Ready",
        || (ready("by-package") && ready("by-crd")).then_some(()),
        || {
            kubectl_try(&[
                "get",
                "extensionrequests,extensions",
                "-n",
                &ns,
                "-o",
                "yaml",
            ])
            .1
        },
    );
    // The rbac-manager (a pod beside it) has rendered the Extension's
    // roles: the installation has settled.
    wait_blocking(
        Duration::from_secs(60),
        "the Extension's RBACReady",
        || {
            let x = get_json(&["extensions.extensions.crossplane.io", "steady", "-n", &ns])?;
            (condition(&x, "RBACReady")?.0 == "True").then_some(())
        },
        explain_packages,
    );
    // Writes by verb. Not `update`: the package-manager's only PUT is the
    // renewal of its leader-election Lease (deploy/ runs it with
    // --leader-elect), every couple of seconds; its controllers write with
    // patch, create and delete.
    let writes = || {
        let metrics = metrics_of("package-manager");
        ["patch", "create", "delete"].map(|verb| {
            let n = e2e::metric_sum(
                &metrics,
                "crossplane_rs_kube_api_requests_total",
                &[("cluster", "control"), ("verb", verb)],
            );
            (verb, n)
        })
    };
    let reconciles = |controller: &str| e2e::shipped::reconciles("package-manager", controller);
    // Providers an earlier test deleted are gone, but the activation
    // policies let go of their kinds in one write after a window: this
    // pod's counters are this test's once that is written.
    wait_mrd_writes();
    let written = writes();
    assert!(
        written.iter().map(|(_, n)| n).sum::<f64>() > 0.0,
        "the install itself was counted:\n{}",
        metrics_of("package-manager")
    );
    for round in 0..3 {
        let (requests, extensions) = (reconciles("extensionrequest"), reconciles("extension"));
        for (kind, name) in [
            ("extensionrequests.extensions.crossplane.io", "by-package"),
            ("extensionrequests.extensions.crossplane.io", "by-crd"),
            ("extensions.extensions.crossplane.io", "steady"),
        ] {
            kubectl(&[
                "annotate",
                kind,
                name,
                "-n",
                &ns,
                &format!("poke={round}"),
                "--overwrite",
            ]);
        }
        wait_blocking(
            Duration::from_secs(30),
            "both requests and the Extension reconciled again",
            || {
                (reconciles("extensionrequest") >= requests + 2.0
                    && reconciles("extension") > extensions)
                    .then_some(())
            },
            explain_packages,
        );
    }
    let after = writes();
    assert_eq!(
        after,
        written,
        "an installed stack wrote something: {after:?}, was {written:?}\n{}",
        e2e::shipped::log_tail("package-manager", 40)
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    wait_blocking(
        Duration::from_secs(90),
        "the stack's CRD gone with its namespace",
        || {
            get_json(&["crd", &format!("knobs.{g}")])
                .is_none()
                .then_some(())
        },
        explain_packages,
    );
    drop(pm);
}

/// A Provider's managed kinds are made without reading one back: each MRD
/// is applied and, its CRD absent, the CRD served from the API server's
/// answer, so the package-manager reads no MRD and no CRD (counted on its
/// pod while this test alone holds it). Each MRD still says Established
/// and controls the CRD it serves.
#[test]
fn a_providers_managed_kinds_are_made_without_reading_one_back() {
    let _alone = alone();
    let e = env();
    let pm = package_manager_flags(&operator_flags());
    let g = group("unread");
    let kinds = [
        "Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf", "Hotel",
    ];
    let crds: Vec<_> = kinds.iter().map(|k| test_crd(&g, k)).collect();
    let reference = format!(
        "{}/test/{}:v1",
        e.registry.address,
        testenv::unique_name("unread")
    );
    // CRDs alone: no runtime to read either.
    xpkg_push(
        &package_dir("unread", "v1", &crds_of(&crds)),
        &reference,
        None,
    );
    let gets = || {
        e2e::metric_sum(
            &metrics_of("package-manager"),
            "crossplane_rs_kube_api_requests_total",
            &[("cluster", "control"), ("verb", "get")],
        )
    };
    // What earlier tests left (MRD status, policies' lists) is written.
    wait_mrd_writes();
    let before = gets();
    let name = testenv::unique_name("unread");
    apply(&provider_yaml(&name, &reference, ""));
    wait_provider_healthy(&name, Duration::from_secs(90));
    wait_mrd_writes();
    let reads = gets() - before;
    // Reading back each MRD and looking for each CRD was three reads a
    // kind; what is left is the Provider's own (its revision, a Lease).
    assert!(
        reads < kinds.len() as f64,
        "installing {} managed kinds read {reads} objects\n{}",
        kinds.len(),
        e2e::shipped::log_tail("package-manager", 40)
    );
    for k in kinds {
        let crd_name = format!("{}s.{g}", k.to_lowercase());
        let mrd = get_json(&["mrd", &crd_name]).unwrap();
        assert_eq!(
            condition(&mrd, "Established").map(|c| c.0).as_deref(),
            Some("True"),
            "{mrd}"
        );
        let crd = get_json(&["crd", &crd_name]).unwrap();
        let controller = crd["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["controller"] == true)
            .cloned()
            .unwrap_or_default();
        assert_eq!(controller["kind"], "ManagedResourceDefinition", "{crd}");
        assert_eq!(controller["uid"], mrd["metadata"]["uid"], "{crd}");
    }
    delete_provider(&name);
    wait_provider_gone(&name);
    drop(pm);
}
