//! Who owns a CRD: two stacks cannot, a CRD another Extension owns waits for it, and the seed's Extension
//! applied by hand gets its controller and roles.

use super::*;

/// Two stacks that own one CRD: a request for it is refused naming both,
/// and nothing is installed.
#[test]
fn a_crd_two_stacks_own_is_refused_naming_both() {
    let _pm = rewriting();
    let g = format!("{}.example.org", testenv::unique_name("amb"));
    // One built by xpkg (its layer lists the CRDs it owns), one built
    // elsewhere without that annotation: the search reads its
    // .registry/resources instead.
    push_stack(
        &StackDir {
            title: "amb-one",
            version: "1.0.0",
            owns: &[(&g, "Gizmo")],
            depends_on: &[],
            controller: false,
        },
        &format!("{g}/amb-one"),
        "v1.0.0",
    );
    let dir = stack_dir(&StackDir {
        title: "amb-two",
        version: "1.0.0",
        owns: &[(&g, "Gizmo")],
        depends_on: &[],
        controller: false,
    });
    let mut layer = oci::LayerBuilder::new();
    for (path, bytes) in oci::stack::read_dir(&dir).unwrap() {
        layer = layer.file(path, 0o644, bytes);
    }
    let layer = layer
        .build()
        .unwrap()
        .annotate("io.crossplane.xpkg", "base");
    assert!(
        !layer
            .annotations()
            .contains_key(oci::stack::OWNS_ANNOTATION)
    );
    let e = env();
    push_image(
        &e.registry,
        &format!("{}/{g}/amb-two:v1.0.0", e.registry.address),
        &oci::Image::new(oci::Config::default()).layer(layer),
    );
    let ns = namespace("ambiguous");
    apply_in(
        &ns,
        &request_yaml("gizmos", &format!("crd: gizmos.{g}/v1alpha1")),
    );
    wait_request(
        &ns,
        "gizmos",
        "False",
        &[
            "more than one stack",
            &format!("{g}/amb-one:v1.0.0"),
            &format!("{g}/amb-two:v1.0.0"),
        ],
        Duration::from_secs(60),
    );
    assert!(!crd_exists(&format!("gizmos.{g}")));
    let (_, exts) = kubectl_try(&[
        "get",
        "extensions.extensions.crossplane.io",
        "-n",
        &ns,
        "-o",
        "name",
    ]);
    assert!(exts.trim().is_empty(), "{exts}");
}

/// The seed's Extension applied directly (no request): its controller
/// Deployment and ServiceAccount are made in its namespace and its role
/// bound; Ready says its CRD is not installed.
#[test]
fn the_seeds_extension_applied_directly_gets_its_controller_and_roles() {
    let _pm = rewriting();
    let ns = namespace("direct");
    let seed = std::fs::read_to_string(
        testenv::repo_root().join("examples/seeds/001-extension-redis.yaml"),
    )
    .unwrap();
    apply_in(&ns, &seed);
    let d = wait_blocking(
        Duration::from_secs(60),
        "the seed Extension's controller Deployment",
        || get_json(&["deployment", "redis-controller", "-n", &ns]),
        || explain(&ns),
    );
    assert_eq!(
        d.pointer("/spec/template/spec/serviceAccountName")
            .and_then(Value::as_str),
        Some("redis-controller")
    );
    assert_eq!(
        d.pointer("/metadata/ownerReferences/0/kind")
            .and_then(Value::as_str),
        Some("Extension")
    );
    assert!(get_json(&["serviceaccount", "redis-controller", "-n", &ns]).is_some());
    wait_blocking(
        Duration::from_secs(60),
        "RBACReady and Ready=False naming the missing CRD",
        || {
            let e = extension(&ns, "redis")?;
            let rbac = condition(&e, "RBACReady")?.0 == "True";
            let (ready, msg) = condition(&e, "Ready")?;
            (rbac
                && ready == "False"
                && msg.contains("RedisCluster (crossplane.redislabs.com/v1alpha1)"))
            .then_some(())
        },
        || explain(&ns),
    );
    let sa = format!("system:serviceaccount:{ns}:redis-controller");
    let (_, can) = kubectl_try(&["auth", "can-i", "list", "secrets", "-n", &ns, "--as", &sa]);
    assert_eq!(can.trim(), "yes");
    kubectl(&[
        "delete",
        "extensions.extensions.crossplane.io",
        "redis",
        "-n",
        &ns,
        "--wait=false",
    ]);
    wait_gone(
        "the Deployment",
        || get_json(&["deployment", "redis-controller", "-n", &ns]).is_some(),
        &ns,
    );
    wait_gone("the Extension", || extension(&ns, "redis").is_some(), &ns);
}

/// A stack whose CRD another Extension owns (the same package requested in
/// another namespace) names that owner, installs nothing, and installs by
/// itself once the owner is gone. A `spec.crd` that is not a CRD name says
/// how to write one.
#[test]
fn a_crd_owned_by_another_extension_waits_for_it_to_go() {
    let _pm = rewriting();
    let g = format!("{}.example.org", testenv::unique_name("owned"));
    push_stack(
        &StackDir {
            title: "Owned",
            version: "1.0.0",
            owns: &[(&g, "Valve")],
            depends_on: &[],
            controller: false,
        },
        &format!("{g}/owned"),
        "v1.0.0",
    );
    let (first, second) = (namespace("owner-one"), namespace("owner-two"));
    let request = request_yaml("valves", &format!("package: {g}/owned:v1.0.0"));
    apply_in(&first, &request);
    wait_request(&first, "valves", "True", &["installed"], INSTALL);
    apply_in(&second, &request);
    wait_request(
        &second,
        "valves",
        "False",
        &[&format!("which Extension {first}/owned owns already")],
        Duration::from_secs(60),
    );
    assert!(extension(&second, "owned").is_none());
    delete_request(&first, "valves");
    let r = wait_request(
        &second,
        "valves",
        "True",
        &["installed"],
        Duration::from_secs(120),
    );
    assert_eq!(
        r.pointer("/status/extensionRecord/name")
            .and_then(Value::as_str),
        Some("owned")
    );
    let crd = get_json(&["crd", &format!("valves.{g}")]).unwrap();
    assert_eq!(
        crd.pointer("/metadata/annotations/extensions.crossplane.io~1owner")
            .and_then(Value::as_str),
        Some(format!("{second}/owned").as_str())
    );
    apply_in(&second, &request_yaml("bad-crd", "crd: Valve"));
    wait_request(
        &second,
        "bad-crd",
        "False",
        &[
            "spec.crd",
            "is not a CRD name",
            "<plural>.<group>/<version>",
        ],
        Duration::from_secs(60),
    );
    delete_request(&second, "valves");
    wait_gone("the CRD", || crd_exists(&format!("valves.{g}")), &second);
}
