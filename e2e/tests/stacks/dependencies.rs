//! Stack dependencies: installed first, cycles refused, a CRD another stack depends on kept on uninstall.

use super::*;

fn is_ready(v: &Value) -> bool {
    condition(v, "Ready").is_some_and(|c| c.0 == "True")
}

/// A chain of two: app depends on a CRD of base. Base is found by its CRD,
/// installed first, and app's CRDs appear only once base is Ready (its
/// controller available on the node). A cycle is refused naming its path.
#[test]
fn dependencies_install_first_and_cycles_are_refused() {
    let _pm = rewriting();
    // Cycle: one owns A and needs B, the other owns B and needs A. Pushed
    // first: the package-manager reuses a scan of the registry for a
    // minute (a stack pushed later is found within about 75 s), and the
    // scan that finds base for app below is then one that lists these too,
    // so the cycle is found as soon as it is asked for.
    let c = format!("{}.example.org", testenv::unique_name("cyc"));
    push_stack(
        &StackDir {
            title: "CycA",
            version: "1.0.0",
            owns: &[(&c, "Alpha")],
            depends_on: &[format!("betas.{c}/v1alpha1")],
            controller: false,
        },
        &format!("{c}/cyc-a"),
        "v1.0.0",
    );
    push_stack(
        &StackDir {
            title: "CycB",
            version: "1.0.0",
            owns: &[(&c, "Beta")],
            depends_on: &[format!("alphas.{c}/v1alpha1")],
            controller: false,
        },
        &format!("{c}/cyc-b"),
        "v1.0.0",
    );
    let g = format!("{}.example.org", testenv::unique_name("dep"));
    push_stack(
        &StackDir {
            title: "Base",
            version: "1.0.0",
            owns: &[(&g, "Widget")],
            depends_on: &[],
            controller: true,
        },
        &format!("{g}/base"),
        "v1.0.0",
    );
    push_stack(
        &StackDir {
            title: "App",
            version: "1.0.0",
            owns: &[(&g, "Gadget")],
            depends_on: &[format!("widgets.{g}/v1alpha1")],
            controller: false,
        },
        &format!("{g}/app"),
        "v1.0.0",
    );
    let ns = namespace("deps");
    let order = Order::watch(
        &ns,
        vec![
            ("base".to_owned(), is_ready as Check),
            (format!("gadgets.{g}"), exists as Check),
            (format!("widgets.{g}"), exists as Check),
        ],
    );
    apply_in(
        &ns,
        &request_yaml("app", &format!("package: {g}/app:v1.0.0")),
    );
    let r = wait_request(
        &ns,
        "app",
        "True",
        &["after its dependencies", &format!("{ns}/base")],
        INSTALL,
    );
    assert_eq!(
        r.pointer("/status/extensionRecord/name")
            .and_then(Value::as_str),
        Some("app")
    );
    // Order, from the watches: base's CRD, then base Ready (its controller
    // available on the node), then app's CRD.
    let (widgets, base_ready, gadgets) = (
        order.revision(&format!("widgets.{g}")),
        order.revision("base"),
        order.revision(&format!("gadgets.{g}")),
    );
    assert!(
        widgets < base_ready && base_ready < gadgets,
        "CRD widgets at {widgets}, base Ready at {base_ready}, CRD gadgets at {gadgets}"
    );
    // Reading what it depends on is asked for like any rule: the shipped
    // allow-list does not cover another stack's kinds, so app is granted
    // nothing and RBACReady names the read.
    let app = wait_blocking(
        Duration::from_secs(60),
        "app's RBACReady to refuse reading widgets",
        || {
            let app = extension(&ns, "app")?;
            let (status, message) = e2e::packages::condition(&app, "RBACReady")?;
            (status == "False"
                && message.contains(&format!("get widgets (group \"{g}\")"))
                && message.contains("not in the allow-list"))
            .then_some(app)
        },
        || format!("{:#?}", extension(&ns, "app")),
    );
    assert_eq!(
        app.pointer("/spec/customresourcedefinitions/dependsOn/0"),
        Some(&serde_json::json!({"kind": "Widget", "apiVersion": format!("{g}/v1alpha1")}))
    );
    // trace shows the dependency: the CRD app depends on, and the Extension
    // that owns it, with its status.
    let viewer = e2e::trace::viewer(&testenv::control_plane_with_node().control, true, &[&ns]);
    let tree = e2e::trace::json(&viewer, &["extensionrequest/app", "-n", &ns]);
    let widgets = e2e::trace::node(&tree, "CustomResourceDefinition", &format!("widgets.{g}"));
    assert_eq!(widgets["status"]["state"], "depends on", "{tree:#}");
    assert_eq!(widgets["status"]["owner"], format!("{ns}/base"), "{tree:#}");
    let base = e2e::trace::node(widgets, "Extension", "base");
    assert_eq!(base["status"]["ready"], "True", "{tree:#}");
    apply_in(
        &ns,
        &request_yaml("cyclic", &format!("package: {c}/cyc-a:v1.0.0")),
    );
    wait_request(
        &ns,
        "cyclic",
        "False",
        &[
            "cycle",
            &format!(
                "registry.crossplane.io/{c}/cyc-a:v1.0.0 → registry.crossplane.io/{c}/cyc-b:v1.0.0 → registry.crossplane.io/{c}/cyc-a:v1.0.0"
            ),
        ],
        Duration::from_secs(60),
    );
    assert!(!crd_exists(&format!("alphas.{c}")) && !crd_exists(&format!("betas.{c}")));
    let tree = e2e::trace::json(&viewer, &["extreq/cyclic", "-n", &ns]);
    assert_eq!(tree["status"]["ready"], "False", "{tree:#}");
    assert!(
        tree["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cycle")),
        "{tree:#}"
    );
    delete_request(&ns, "app");
    wait_gone("CRD gadgets", || crd_exists(&format!("gadgets.{g}")), &ns);
    wait_gone("CRD widgets", || crd_exists(&format!("widgets.{g}")), &ns);
}

/// Uninstalling a stack keeps a CRD another installed stack depends on;
/// it goes with the last stack that uses it.
#[test]
fn uninstall_keeps_a_crd_another_stack_depends_on() {
    let _pm = rewriting();
    let g = format!("{}.example.org", testenv::unique_name("share"));
    push_stack(
        &StackDir {
            title: "Shared",
            version: "1.0.0",
            owns: &[(&g, "Pool")],
            depends_on: &[],
            controller: false,
        },
        &format!("{g}/shared"),
        "v1.0.0",
    );
    push_stack(
        &StackDir {
            title: "User",
            version: "1.0.0",
            owns: &[(&g, "Lease")],
            depends_on: &[format!("pools.{g}/v1alpha1")],
            controller: false,
        },
        &format!("{g}/user"),
        "v1.0.0",
    );
    let ns = namespace("shared");
    apply_in(
        &ns,
        &request_yaml("shared", &format!("package: {g}/shared:v1.0.0")),
    );
    wait_request(&ns, "shared", "True", &["installed"], INSTALL);
    apply_in(
        &ns,
        &request_yaml("user", &format!("package: {g}/user:v1.0.0")),
    );
    wait_request(&ns, "user", "True", &["installed"], INSTALL);
    let uid_of = |crd: &Value| {
        crd["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let before = uid_of(&get_json(&["crd", &format!("pools.{g}")]).unwrap());
    delete_request(&ns, "shared");
    wait_gone(
        "Extension shared",
        || extension(&ns, "shared").is_some(),
        &ns,
    );
    let pools = get_json(&["crd", &format!("pools.{g}")]).expect("pools stays: user depends on it");
    assert!(pools["metadata"]["deletionTimestamp"].is_null());
    // The same CRD, kept: not deleted and installed again for user.
    assert_eq!(uid_of(&pools), before, "pools was deleted and made again");
    delete_request(&ns, "user");
    wait_gone("CRD leases", || crd_exists(&format!("leases.{g}")), &ns);
    wait_gone("CRD pools", || crd_exists(&format!("pools.{g}")), &ns);
}
