//! What a Provider package says is data: no impersonation or binding, no CRD or ServiceAccount takeover,
//! no webhook URL of its own, bounded dependencies, refusals shown escaped.

use super::*;

#[test]
fn a_package_cannot_ask_for_impersonation_deployments_or_binding() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    let (name, _) = install_provider(
        "asks",
        "  controller:\n    permissionRequests:\n    - {apiGroups: [\"\"], resources: [serviceaccounts], verbs: [impersonate]}\n    - {apiGroups: [apps], resources: [deployments], verbs: [create]}\n    - {apiGroups: [rbac.authorization.k8s.io], resources: [clusterroles], verbs: [bind]}\n",
    );
    let revision = wait_blocking(
        Duration::from_secs(90),
        "a revision refused by the rbac-manager, naming each request",
        || {
            let list = get_json(&[
                "providerrevisions.pkg.crossplane.io",
                "-l",
                &format!("pkg.crossplane.io/package={name}"),
            ])?;
            let r = list["items"].as_array()?.first()?.clone();
            let (status, message) = condition(&r, "RBACReady")?;
            (status == "False"
                && message.contains("impersonate serviceaccounts")
                && message.contains("create deployments")
                && message.contains("bind clusterroles"))
            .then_some(r)
        },
        explain,
    );
    let rev = revision["metadata"]["name"].as_str().unwrap().to_owned();
    // The runtime's ServiceAccount (it runs: the package names a runtime
    // image) holds none of it.
    let sa = format!("system:serviceaccount:{RUNTIMES}:{name}");
    assert!(!can_i(&sa, &["impersonate", "serviceaccounts", "-A"]));
    assert!(!can_i(&sa, &["create", "deployments", "-n", RUNTIMES]));
    assert!(!can_i(&sa, &["bind", "clusterroles"]));
    let role = get_json(&["clusterrole", &format!("crossplane:provider:{rev}:system")]);
    assert!(
        role.is_none(),
        "a role was rendered for a refused revision: {role:?}"
    );
    delete_provider(&name);
}

#[test]
fn a_package_never_takes_over_a_crd_it_did_not_create() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    let g = format!("{}.example.org", testenv::unique_name("handmade"));
    // The administrator's CRD: a strict schema.
    let strict = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.{g}\nspec:\n  group: {g}\n  scope: Cluster\n  names: {{kind: Thing, plural: things, singular: thing, listKind: ThingList}}\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, properties: {{spec: {{type: object, properties: {{size: {{type: integer}}}}}}}}}}\n"
    );
    let out = testenv::control_plane_with_node()
        .control
        .kubectl_stdin(&["create", "-f", "-"], Some(&strict));
    assert!(out.status.success(), "create the hand-made CRD: {out:?}");
    // The API server writes a new CRD's status itself (NamesAccepted, then
    // Established); look at it only after those, so that any later write
    // is somebody else's.
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        &format!("things.{g}"),
    ]);
    let before = get_json(&["crd", &format!("things.{g}")]).unwrap();
    let own_before = get_json(&["crd", "providers.pkg.crossplane.io"]).unwrap();
    // A package shipping a loose CRD of the same name, and one shipping
    // this project's own Provider CRD.
    let (file, loose) = test_crd(&g, "Thing");
    let own =
        std::fs::read_to_string(testenv::repo_root().join("crds/pkg.crossplane.io_providers.yaml"))
            .unwrap();
    let mut names = Vec::new();
    for (n, crds) in [
        ("takeover", vec![(file, loose)]),
        ("own-api", vec![("providers.yaml".to_owned(), own)]),
    ] {
        let dir = package_dir(&format!("provider-{n}"), "", &crds);
        let reference = format!("{}/takeover/provider-{n}:v1", shipped().registry.address);
        xpkg_push(&dir, &reference, None);
        let name = testenv::unique_name(n);
        apply(&provider_yaml(&name, &reference, ""));
        names.push(name);
    }
    let takeover = wait_blocking(
        Duration::from_secs(90),
        "the takeover package to be refused naming the CRD and its maker",
        || {
            let p = provider(&names[0])?;
            let (status, message) = condition(&p, "Healthy")?;
            (status == "False"
                && message.contains(&format!("things.{g}"))
                && message.contains("was not installed by this Provider")
                && message.contains("kubectl"))
            .then_some(message)
        },
        explain,
    );
    eprintln!("takeover: {takeover}");
    let own_api = wait_blocking(
        Duration::from_secs(90),
        "the package shipping providers.pkg.crossplane.io to be refused",
        || {
            let p = provider(&names[1])?;
            let (status, message) = condition(&p, "Healthy")?;
            (status == "False" && message.contains("providers.pkg.crossplane.io"))
                .then_some(message)
        },
        explain,
    );
    eprintln!("own API: {own_api}");
    for (before, name) in [
        (before, format!("things.{g}")),
        (own_before, "providers.pkg.crossplane.io".to_owned()),
    ] {
        let after = get_json(&["crd", &name]).unwrap();
        for field in ["/metadata/uid", "/metadata/resourceVersion"] {
            assert_eq!(
                before.pointer(field),
                after.pointer(field),
                "{name}: {field} changed"
            );
        }
    }
    // No role of either package gained rights on them.
    let roles = get_json(&["clusterroles"]).unwrap();
    for r in roles["items"].as_array().unwrap() {
        let role = r["metadata"]["name"].as_str().unwrap_or_default();
        if !role.starts_with("crossplane:provider:") {
            continue;
        }
        let text = r["rules"].to_string();
        assert!(
            !(text.contains(&g)
                || text.contains("pkg.crossplane.io") && text.contains("providers")),
            "{role} has rights on a CRD its package did not create: {text}"
        );
    }
    let edit_user = "system:serviceaccount:default:nobody";
    let (_, _) = kubectl_try(&["create", "serviceaccount", "nobody", "-n", "default"]);
    let (_, _) = kubectl_try(&[
        "create",
        "rolebinding",
        "nobody-edit",
        "--clusterrole=crossplane-edit",
        "--serviceaccount=default:nobody",
        "-n",
        "default",
    ]);
    assert!(!can_i(edit_user, &["create", &format!("things.{g}")]));
    for n in &names {
        kubectl(&["delete", "providers.pkg.crossplane.io", n, "--wait=false"]);
    }
}

#[test]
fn a_conversion_webhook_url_in_a_package_is_replaced_by_the_providers_own_service() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    let node = testenv::control_plane_with_node().node.as_ref().unwrap();
    // Accepts connections (TLS or not) and never answers; counts them.
    let stalled = e2e::stall::Stalled::start_on(node.host_ip.into(), e2e::stall::Mode::Tcp);
    let listener = stalled.addr;
    let g = format!("{}.example.org", testenv::unique_name("convert"));
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.{g}\nspec:\n  group: {g}\n  scope: Cluster\n  names: {{kind: Thing, plural: things, singular: thing, listKind: ThingList}}\n  conversion:\n    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1]\n      clientConfig:\n        url: https://{listener}/convert\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n  - name: v1alpha2\n    served: true\n    storage: false\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
    );
    let dir = package_dir("provider-convert", "", &[("things.yaml".to_owned(), crd)]);
    let reference = format!("{}/convert/provider-convert:v1", shipped().registry.address);
    xpkg_push(&dir, &reference, None);
    let name = testenv::unique_name("convert");
    apply(&provider_yaml(&name, &reference, ""));
    let installed = wait_blocking(
        Duration::from_secs(90),
        "the CRD installed, converting at the Provider's own Service",
        || {
            let crd = get_json(&["crd", &format!("things.{g}")])?;
            (crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["name"]
                == name.as_str())
            .then_some(crd)
        },
        explain,
    );
    let client = &installed["spec"]["conversion"]["webhook"]["clientConfig"];
    assert!(
        client.get("url").is_none(),
        "the package's URL stayed: {client}"
    );
    assert_eq!(client["service"]["namespace"], RUNTIMES);
    assert_eq!(client["service"]["port"], 9443);
    let secret = get_json(&["secret", &format!("{name}-tls-server"), "-n", RUNTIMES]).unwrap();
    assert_eq!(client["caBundle"], secret["data"]["ca.crt"]);
    // A conversion is asked for: it goes to the Provider's Service (which
    // has no runtime here, so it fails), never to the package's URL.
    apply(&format!(
        "apiVersion: {g}/v1alpha1\nkind: Thing\nmetadata:\n  name: one\n"
    ));
    let (ok, out) = kubectl_try(&["get", &format!("things.v1alpha2.{g}"), "one"]);
    eprintln!("conversion without a runtime: {ok} {}", out.trim());
    assert_eq!(
        stalled.accepted(),
        0,
        "the API server connected to the package's webhook URL"
    );
    kubectl(&[
        "delete",
        &format!("things.v1alpha1.{g}"),
        "one",
        "--wait=false",
    ]);
    delete_provider(&name);
}

#[test]
fn a_refused_permission_request_is_shown_escaped_and_the_provider_is_not_healthy() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    // A verb that would retitle the terminal of whoever reads it raw.
    let (name, _) = install_provider(
        "esc",
        "  controller:\n    permissionRequests:\n    - {apiGroups: [\"\"], resources: [configmaps], verbs: [\"\\e]0;pwned\\a\"]}\n",
    );
    let healthy = wait_provider_says(&name, &["no roles", "]0;pwned"]);
    let provider = e2e::packages::provider(&name).unwrap();
    let (status, message) = condition(&provider, "Healthy").unwrap();
    assert_eq!(status, "False", "{healthy}");
    assert!(
        message.contains("\\u{1b}]0;pwned\\u{7}") && !message.contains('\u{1b}'),
        "{message:?}"
    );
    for r in e2e::packages::revisions_of(&name) {
        let (_, rbac) = condition(&r, "RBACReady").unwrap();
        assert!(
            !rbac.contains('\u{1b}') && !rbac.contains('\u{7}'),
            "{rbac:?}"
        );
    }
    let viewer = e2e::trace::viewer(&testenv::control_plane_with_node().control, true, &[]);
    let wide = e2e::trace::text(&viewer, &[&format!("provider/{name}"), "-o", "wide"]);
    assert!(
        wide.contains("]0;pwned") && !wide.contains('\u{1b}') && !wide.contains('\u{7}'),
        "{wide:?}"
    );
    delete_provider(&name);
}

/// `dependsOn` lines of a package's meta for `repositories`.
fn depends_on(repositories: &[String]) -> String {
    let mut out = "  dependsOn:\n".to_owned();
    for r in repositories {
        out.push_str(&format!("  - provider: {r}\n    version: \">=v1.0.0\"\n"));
    }
    out
}

/// The Providers whose package is in `repository_prefix`.
fn providers_from(repository_prefix: &str) -> Vec<Value> {
    get_json(&["providers.pkg.crossplane.io"])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            p.pointer("/spec/package")
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with(repository_prefix))
        })
        .collect()
}

#[test]
fn dependency_lists_and_chains_past_their_bounds_are_refused_naming_the_bound() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    let registry = &shipped().registry.address;
    // 33 dependencies: refused before any is looked up or installed.
    let many = testenv::unique_name("many");
    let deps: Vec<String> = (0..33).map(|i| format!("{registry}/{many}/d{i}")).collect();
    let g = format!("{many}.example.org");
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir("provider-many", &depends_on(&deps), &[(file, crd)]);
    let reference = format!("{registry}/{many}/root:v1.0.0");
    xpkg_push(&dir, &reference, None);
    let root = testenv::unique_name("many");
    apply(&provider_yaml(&root, &reference, ""));
    let said = wait_provider_says(&root, &["33 dependencies", "32"]);
    eprintln!("33 dependencies: {said}");
    assert!(providers_from(&format!("{registry}/{many}/d")).is_empty());
    // A chain l0 → l1 → … → l8: l0 is installed by the user, l1…l7 as
    // dependencies; l7's own dependency would be level 9.
    let chain = testenv::unique_name("chain");
    let levels: Vec<String> = (0..9).map(|i| format!("{registry}/{chain}/l{i}")).collect();
    for (i, repository) in levels.iter().enumerate() {
        let g = format!("l{i}.{chain}.example.org");
        let (file, crd) = test_crd(&g, "Thing");
        let deps = levels
            .get(i + 1)
            .map(|next| depends_on(std::slice::from_ref(next)));
        let dir = package_dir(
            &format!("provider-l{i}"),
            &deps.unwrap_or_default(),
            &[(file, crd)],
        );
        xpkg_push(&dir, &format!("{repository}:v1.0.0"), None);
    }
    let first = testenv::unique_name("chain");
    apply(&provider_yaml(&first, &format!("{}:v1.0.0", levels[0]), ""));
    let deepest = wait_blocking(
        Duration::from_secs(240),
        "the Provider of level 8 to name the bound",
        || {
            let p = providers_from(&format!("{}:", levels[7])).pop()?;
            let text = conditions_text(&p);
            (text.contains("level 9") && text.contains("8 levels")).then_some(text)
        },
        explain,
    );
    eprintln!("chain: {deepest}");
    // The refusal climbs the chain: the Provider the user installed names it.
    let at_root = wait_blocking(
        Duration::from_secs(120),
        "the Provider the user installed to name the chain's bound",
        || {
            let text = conditions_text(&provider(&first)?);
            (text.contains("is 9 levels deep") && text.contains(&format!("{chain}/l8")))
                .then_some(text)
        },
        explain,
    );
    eprintln!("chain, at its root: {at_root}");
    assert!(
        providers_from(&levels[8]).is_empty(),
        "level 9 was installed"
    );
    assert_eq!(providers_from(&format!("{registry}/{chain}/")).len(), 8);
    for p in [root, first] {
        delete_provider(&p);
    }
}

#[test]
fn a_provider_never_takes_over_a_service_account_it_did_not_make() {
    let _rbac = rbac_manager_as_installed();
    shipped();
    // Someone else's ServiceAccount in the runtimes' namespace, named as a
    // Provider's runtime would be.
    let name = testenv::unique_name("taken");
    kubectl(&["create", "serviceaccount", &name, "-n", RUNTIMES]);
    kubectl(&[
        "label",
        "serviceaccount",
        &name,
        "-n",
        RUNTIMES,
        "owner=someone-else",
    ]);
    install_provider_as(&name, "taken", "");
    let text = wait_provider_says(
        &name,
        &[
            &format!("ServiceAccount {RUNTIMES}/{name} exists"),
            "never takes over",
        ],
    );
    eprintln!("takeover: {text}");
    let sa = get_json(&["serviceaccount", &name, "-n", RUNTIMES]).unwrap();
    assert!(sa["metadata"].get("ownerReferences").is_none(), "{sa:#}");
    assert_eq!(
        sa["metadata"]["labels"],
        serde_json::json!({"owner": "someone-else"})
    );
    for r in e2e::packages::revisions_of(&name) {
        let rev = r["metadata"]["name"].as_str().unwrap();
        assert!(
            get_json(&["deployment", rev, "-n", RUNTIMES]).is_none(),
            "{rev} runs"
        );
    }
    delete_provider(&name);
    kubectl(&["delete", "serviceaccount", &name, "-n", RUNTIMES]);
}
