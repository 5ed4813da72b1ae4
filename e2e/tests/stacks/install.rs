//! Installing stacks: the seed's requests, a package pushed before or after its request, a malformed
//! app.yaml, a rewritten registry with its credentials.

use super::*;

/// The seed's two requests, applied verbatim from examples/seeds: both end
/// at the same Extension `redis` (the stack redis:v0.1.0 owns
/// redisclusters.cache.crossplane.io), whose controller runs on the node
/// with its role bound, and a RedisCluster made afterwards is acted on
/// (seed "Step 2"). It goes only when the last request goes, with its
/// controller and CRD.
#[test]
fn seed_requests_install_the_redis_stack_and_its_controller_acts() {
    let _pm = rewriting();
    // The example stack of examples/stacks/redis, its controller image
    // named as this node pulls it.
    let dir = env().work.join(testenv::unique_name("redis-example"));
    for (path, bytes) in
        oci::stack::read_dir(&testenv::repo_root().join("examples/stacks/redis")).unwrap()
    {
        let to = dir.join(&path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let bytes = if path.ends_with("install.yaml") {
            String::from_utf8(bytes)
                .unwrap()
                .replace(
                    "registry.crossplane.io/stack-controller:v0.1.0",
                    &stacks().controller_image,
                )
                .into_bytes()
        } else {
            bytes
        };
        std::fs::write(to, bytes).unwrap();
    }
    xpkg_push(
        &dir,
        &format!("{}/redis:v0.1.0", env().registry.address),
        None,
    );
    let ns = namespace("seed-stacks");
    let seed = std::fs::read_to_string(
        testenv::repo_root().join("examples/seeds/001-extensionrequests.yaml"),
    )
    .unwrap();
    apply_in(&ns, &seed);
    for name in ["redis-from-package", "redis-from-crd"] {
        let r = wait_request(&ns, name, "True", &["Extension"], INSTALL);
        assert_eq!(
            r.pointer("/status/extensionRecord/name")
                .and_then(Value::as_str),
            Some("redis"),
            "{r:#}"
        );
    }
    let ext = extension(&ns, "redis").expect("the Extension record");
    assert_eq!(
        ext.pointer("/spec/title").and_then(Value::as_str),
        Some("Redis")
    );
    assert_eq!(
        ext.pointer("/spec/version").and_then(Value::as_str),
        Some("0.1.0")
    );
    assert_eq!(
        ext.pointer("/spec/license").and_then(Value::as_str),
        Some("Apache-2.0")
    );
    assert_eq!(
        ext.pointer("/spec/icons/0/mediatype")
            .and_then(Value::as_str),
        Some("image/png")
    );
    assert_eq!(
        ext.pointer("/spec/customresourcedefinitions/owns/0"),
        Some(
            &serde_json::json!({"kind": "RedisCluster", "apiVersion": "cache.crossplane.io/v1alpha1"})
        )
    );
    let owners: Vec<&str> = ext["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert!(
        owners.contains(&"redis-from-package") && owners.contains(&"redis-from-crd"),
        "{owners:?}"
    );
    // Its roles: the rbac-manager bound the stack's rule set to the
    // controller's ServiceAccount.
    wait_blocking(
        Duration::from_secs(60),
        "RBACReady on the Extension",
        || {
            let e = extension(&ns, "redis")?;
            (condition(&e, "RBACReady")?.0 == "True").then_some(())
        },
        || explain(&ns),
    );
    let sa = format!("system:serviceaccount:{ns}:redis-controller");
    let (ok, can) = kubectl_try(&[
        "auth",
        "can-i",
        "create",
        "configmaps",
        "-n",
        &ns,
        "--as",
        &sa,
    ]);
    assert!(ok && can.trim() == "yes", "{can}");
    // Step 2: a custom resource of the stack's CRD is acted on by its
    // controller, a real pod on the node.
    apply_in(
        &ns,
        "apiVersion: cache.crossplane.io/v1alpha1\nkind: RedisCluster\nmetadata:\n  name: cache-one\nspec:\n  size: 3\n",
    );
    let cm = wait_blocking(
        INSTALL,
        "the stack controller's ConfigMap for RedisCluster cache-one",
        || get_json(&["configmap", "cache-one", "-n", &ns]),
        || explain(&ns),
    );
    assert_eq!(
        cm.pointer("/data/spec").and_then(Value::as_str),
        Some(r#"{"size":3}"#)
    );
    let (_, events) = kubectl_try(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        "involvedObject.name=redis-from-package,reason=Installed",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("as Extension"),
        "no Installed event: {events}"
    );
    // kubectl shows where each stands.
    let table = kubectl(&["get", "extensionrequests,extensions", "-A"]);
    for column in [
        "PACKAGE",
        "CRD",
        "READY",
        "EXTENSION",
        "VERSION",
        "redis-from-crd",
        "redisclusters.cache.crossplane.io/v1alpha1",
        "0.1.0",
    ] {
        assert!(table.contains(column), "{column} missing from:\n{table}");
    }
    // crossplane-rs trace, as a user of crossplane-view (with Kubernetes'
    // `view` in the stack's namespace, where its controller runs): the
    // request, its Extension, the CRD it owns, its controller and pod, and
    // its role and binding, each with its status.
    let viewer = e2e::trace::viewer(&testenv::control_plane_with_node().control, true, &[&ns]);
    let tree = e2e::trace::json(&viewer, &["extensionrequest/redis-from-package", "-n", &ns]);
    assert_eq!(tree["kind"], "ExtensionRequest");
    assert_eq!(tree["namespace"], ns.as_str());
    assert_eq!(tree["status"]["ready"], "True", "{tree:#}");
    let ext = e2e::trace::node(&tree, "Extension", "redis");
    assert_eq!(ext["status"]["ready"], "True", "{ext:#}");
    assert_eq!(ext["status"]["state"], "0.1.0", "{ext:#}");
    let crd = e2e::trace::node(
        ext,
        "CustomResourceDefinition",
        "redisclusters.cache.crossplane.io",
    );
    assert_eq!(crd["status"]["state"], "owns", "{crd:#}");
    assert_eq!(crd["status"]["ready"], "True", "{crd:#}");
    let controller = e2e::trace::node(ext, "Deployment", "redis-controller");
    assert_eq!(controller["status"]["ready"], "True", "{controller:#}");
    let pods = e2e::trace::of_kind(controller, "Pod");
    assert!(
        !pods.is_empty() && pods.iter().all(|p| p["status"]["state"] == "Running"),
        "{controller:#}"
    );
    let role = format!("crossplane:extension:{ns}:redis:system");
    e2e::trace::node(ext, "Role", &role);
    e2e::trace::node(ext, "RoleBinding", &role);
    e2e::trace::node(
        ext,
        "ClusterRoleBinding",
        &format!("crossplane:extension:{ns}:redis:identity"),
    );
    assert!(e2e::trace::forbidden(&tree).is_empty(), "{tree:#}");
    let text = e2e::trace::text(&viewer, &["extreq", "redis-from-crd", "-n", &ns]);
    for shown in [
        "ExtensionRequest/redis-from-crd",
        "Extension/redis",
        "Deployment/redis-controller",
    ] {
        assert!(text.contains(shown), "{shown} missing from:\n{text}");
    }
    // Uninstall: the Extension is held while any request holds it.
    delete_request(&ns, "redis-from-crd");
    wait_gone(
        "ExtensionRequest redis-from-crd",
        || request(&ns, "redis-from-crd").is_some(),
        &ns,
    );
    let ext =
        extension(&ns, "redis").expect("the Extension stays while redis-from-package holds it");
    assert!(ext["metadata"]["deletionTimestamp"].is_null(), "{ext:#}");
    delete_request(&ns, "redis-from-package");
    wait_gone("Extension redis", || extension(&ns, "redis").is_some(), &ns);
    wait_gone(
        "the controller Deployment",
        || get_json(&["deployment", "redis-controller", "-n", &ns]).is_some(),
        &ns,
    );
    wait_gone(
        "CRD redisclusters.cache.crossplane.io",
        || crd_exists("redisclusters.cache.crossplane.io"),
        &ns,
    );
    let (_, roles) = kubectl_try(&["get", "clusterroles,clusterrolebindings", "-o", "name"]);
    assert!(
        !roles.contains(&format!("crossplane:extension:{ns}:redis")),
        "{roles}"
    );
}

/// A request for a CRD no stack owns says so and installs by itself once a
/// stack that owns it is pushed.
#[test]
fn a_missing_package_is_installed_once_pushed() {
    let _pm = rewriting();
    let g = format!("{}.example.org", testenv::unique_name("late"));
    let ns = namespace("late");
    apply_in(
        &ns,
        &request_yaml("things", &format!("crd: things.{g}/v1alpha1")),
    );
    wait_request(
        &ns,
        "things",
        "False",
        &[&format!(
            "no stack in registry registry.crossplane.io owns CRD things.{g}/v1alpha1"
        )],
        Duration::from_secs(60),
    );
    push_stack(
        &StackDir {
            title: "late",
            version: "0.2.0",
            owns: &[(&g, "Thing")],
            depends_on: &[],
            controller: false,
        },
        &format!("{g}/late"),
        "v0.2.0",
    );
    let r = wait_request(
        &ns,
        "things",
        "True",
        &["installed"],
        Duration::from_secs(90),
    );
    assert_eq!(
        r.pointer("/status/extensionRecord/name")
            .and_then(Value::as_str),
        Some("late")
    );
    assert!(crd_exists(&format!("things.{g}")));
    delete_request(&ns, "things");
    wait_gone("the CRD", || crd_exists(&format!("things.{g}")), &ns);
}

/// A stack pushed before a request is created is found by it at once,
/// though the package-manager reuses a scan of the registry for a minute:
/// a scan is never reused by a request created after it began. Here the
/// scan that a search for a CRD nobody owns just made is less than a minute
/// old when the stack is pushed and a request for its CRD created.
#[test]
fn a_stack_pushed_before_its_request_is_found_at_once() {
    let _pm = rewriting();
    let g = format!("{}.example.org", testenv::unique_name("fresh"));
    let ns = namespace("fresh");
    // This search scans the registry (and finds nothing).
    apply_in(
        &ns,
        &request_yaml("nobody", &format!("crd: nobodies.{g}/v1alpha1")),
    );
    wait_request(
        &ns,
        "nobody",
        "False",
        &["no stack in registry registry.crossplane.io owns CRD"],
        Duration::from_secs(60),
    );
    push_stack(
        &StackDir {
            title: "fresh",
            version: "0.1.0",
            owns: &[(&g, "Widget")],
            depends_on: &[],
            controller: false,
        },
        &format!("{g}/fresh"),
        "v0.1.0",
    );
    let asked = std::time::Instant::now();
    apply_in(
        &ns,
        &request_yaml("widgets", &format!("crd: widgets.{g}/v1alpha1")),
    );
    // Well within the minute a reused scan would have hidden it for.
    let r = wait_request(
        &ns,
        "widgets",
        "True",
        &["installed"],
        Duration::from_secs(15),
    );
    eprintln!("found and installed in {:?}", asked.elapsed());
    assert_eq!(
        r.pointer("/status/extensionRecord/name")
            .and_then(Value::as_str),
        Some("fresh")
    );
    delete_request(&ns, "widgets");
    delete_request(&ns, "nobody");
    wait_gone("the CRD", || crd_exists(&format!("widgets.{g}")), &ns);
}

/// A malformed app.yaml is refused naming the file and line; nothing is
/// installed.
#[test]
fn a_malformed_app_yaml_is_refused_with_its_line() {
    let _pm = rewriting();
    let g = format!("{}.example.org", testenv::unique_name("bad"));
    let layer = oci::LayerBuilder::new()
        .file(
            ".registry/app.yaml",
            0o644,
            b"title: Bad\nmaintainers: [unclosed\n".to_vec(),
        )
        .file(
            format!(".registry/resources/{g}/bolt.crd.yaml"),
            0o644,
            crd_yaml(&g, "Bolt").into_bytes(),
        )
        .build()
        .unwrap()
        .annotate("io.crossplane.xpkg", "base");
    let e = env();
    push_image(
        &e.registry,
        &format!("{}/{g}/bad:v1.0.0", e.registry.address),
        &oci::Image::new(oci::Config::default()).layer(layer),
    );
    let ns = namespace("malformed");
    apply_in(
        &ns,
        &request_yaml("bad", &format!("package: {g}/bad:v1.0.0")),
    );
    let r = wait_request(
        &ns,
        "bad",
        "False",
        &[".registry/app.yaml (line 2"],
        Duration::from_secs(60),
    );
    let (_, events) = kubectl_try(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        "involvedObject.name=bad",
    ]);
    assert!(
        events.contains("app.yaml"),
        "no event names the fault:\n{events}\n{r:#}"
    );
    assert!(!crd_exists(&format!("bolts.{g}")));
    assert!(extension(&ns, "bad").is_none());
}

/// An ImageConfig reads a private mirror for `private.crossplane.io`, and
/// another gives the mirror its pull Secret: refused without the Secret
/// (the message names it and its ImageConfig), installed once it exists.
/// Provider packages go through the same rewrite.
#[test]
fn a_rewritten_registry_uses_its_credentials_and_providers_use_it_too() {
    let _pm = rewriting();
    let st = stacks();
    let e = env();
    let g = format!("{}.example.org", testenv::unique_name("mirror"));
    let dir = stack_dir(&StackDir {
        title: "Mirrored",
        version: "1.0.0",
        owns: &[(&g, "Copy")],
        depends_on: &[],
        controller: false,
    });
    let repo = format!("mirror-{}", testenv::unique_name("s"));
    xpkg_push_as(
        &dir,
        &format!("{}/mirror/{repo}:v1.0.0", st.private.address),
        None,
        Some(MIRROR_USER),
    );
    let ns = namespace("mirror");
    apply_in(
        &ns,
        &format!(
            "apiVersion: extensions.crossplane.io/v1alpha1\nkind: ExtensionRequest\nmetadata:\n  name: mirrored\nspec:\n  source: private.crossplane.io\n  package: {repo}:v1.0.0\n"
        ),
    );
    wait_request(
        &ns,
        "mirrored",
        "False",
        &[&format!(
            "pull Secret {MIRROR_SECRET} of ImageConfig stacks-private-credentials does not exist in namespace {RUNTIMES}"
        )],
        Duration::from_secs(60),
    );
    let config = serde_json::json!({"auths": {st.private.address.clone(): {"username": MIRROR_USER.0, "password": MIRROR_USER.1}}});
    apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {MIRROR_SECRET}, namespace: {RUNTIMES}}}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{config}'\n"
    ));
    // Looked at again within 30s of a credentials failure: no poke needed.
    let r = wait_request(
        &ns,
        "mirrored",
        "True",
        &["installed private.crossplane.io/"],
        Duration::from_secs(90),
    );
    assert_eq!(
        r.pointer("/status/extensionRecord/name")
            .and_then(Value::as_str),
        Some(repo.as_str())
    );
    let ext = extension(&ns, &repo).unwrap();
    let recorded = ext
        .pointer("/metadata/annotations/extensions.crossplane.io~1package")
        .and_then(Value::as_str)
        .unwrap();
    assert!(
        recorded.starts_with(&format!("private.crossplane.io/{repo}:v1.0.0@sha256:")),
        "{recorded}"
    );

    // A Provider named registry.crossplane.io/... installs from the test
    // registry, and keeps the name it was given.
    let pg = group("rewritten");
    let pkg = package_dir("rewritten", "v1.0.0", &crds_of(&[test_crd(&pg, "Rewrite")]));
    xpkg_push(
        &pkg,
        &format!("{}/{pg}/provider:v1.0.0", e.registry.address),
        None,
    );
    let name = testenv::unique_name("rewritten");
    let package = format!("registry.crossplane.io/{pg}/provider:v1.0.0");
    apply(&provider_yaml(&name, &package, ""));
    let p = wait_blocking(
        Duration::from_secs(90),
        &format!("Provider {name} Installed and Healthy"),
        || {
            let p = provider(&name)?;
            (condition(&p, "Installed")?.0 == "True" && condition(&p, "Healthy")?.0 == "True")
                .then_some(p)
        },
        || kubectl_try(&["get", "providers,providerrevisions", "-o", "yaml"]).1,
    );
    assert_eq!(
        p.pointer("/spec/package").and_then(Value::as_str),
        Some(package.as_str())
    );
    assert!(crd_exists(&format!("rewrites.{pg}")));
    delete_provider(&name);
    wait_gone("the Provider", || provider(&name).is_some(), &ns);
    delete_request(&ns, "mirrored");
    wait_gone(
        "the mirrored stack's CRD",
        || crd_exists(&format!("copys.{g}")),
        &ns,
    );
}
