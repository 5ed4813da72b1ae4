//! Stacks (seed 001), on a real node with a real registry: stacks built by
//! `xpkg` (a `.registry/` directory) whose controller is the project's
//! `stack-controller` (it writes a ConfigMap for each custom resource of
//! its CRD), installed through ExtensionRequests by package and by CRD, by
//! the six controllers running as pods from `deploy/` (the shipped
//! installation). The seed's requests name `registry.crossplane.io`; the
//! operator's ImageConfigs read that name from the test registry, so they
//! apply verbatim.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{path::PathBuf, sync::OnceLock, time::Duration};

use e2e::packages::*;
use e2e::{
    pods::{PackageManagerFlags, package_manager_flags},
    shipped::operator_flags,
};
use serde_json::Value;

const INSTALL: Duration = Duration::from_secs(180);

struct Stacks {
    /// The stack-controller image, as the node pulls it.
    controller_image: String,
    /// A registry that wants credentials, read as `private.crossplane.io`.
    private: testenv::registry::Registry,
    /// The package-manager's flags: the operator's.
    flags: Vec<String>,
}

/// The package-manager's credentials for rewritten registries.
const MIRROR_SECRET: &str = "stacks-mirror-credentials";
const MIRROR_USER: (&str, &str) = ("mirror", "m1rror-pass");

static STACKS: OnceLock<Stacks> = OnceLock::new();

/// The registry, a private one, the stack-controller image, and the
/// ImageConfigs reading registry.crossplane.io from the test registry,
/// private.crossplane.io from the private one (with the credentials of
/// [`MIRROR_SECRET`], named by an ImageConfig of the mirror's name).
fn stacks() -> &'static Stacks {
    STACKS.get_or_init(|| {
        let e = env();
        let plane = testenv::control_plane_with_node();
        let private = testenv::registry::Registry::start(
            plane,
            plane.node.as_ref().unwrap(),
            "private.crossplane-rs.test",
            Some(MIRROR_USER),
        )
        .unwrap();
        let controller_image = push_binary_image(
            e.registry,
            "stack-controller",
            "stacks-test/stack-controller:dev",
        );
        let flags = operator_flags();
        let image_config = |name: &str, prefix: &str, rest: &str| {
            format!(
                "apiVersion: pkg.crossplane.io/v1beta1\nkind: ImageConfig\nmetadata: {{name: {name}}}\nspec:\n  matchImages:\n  - prefix: {prefix}\n{rest}"
            )
        };
        apply(&image_config(
            "stacks-registry",
            "registry.crossplane.io",
            &format!("  rewriteImage: {{prefix: \"{}\"}}\n", e.registry.address),
        ));
        apply(&image_config(
            "stacks-private",
            "private.crossplane.io",
            &format!("  rewriteImage: {{prefix: \"{}/mirror\"}}\n", private.address),
        ));
        apply(&image_config(
            "stacks-private-credentials",
            &format!("\"{}/mirror\"", private.address),
            &format!("  registry: {{authentication: {{pullSecretRef: {{name: {MIRROR_SECRET}}}}}}}\n"),
        ));
        Stacks {
            controller_image,
            private,
            flags,
        }
    })
}

/// The package-manager pod running with the stacks' flags, for the
/// test's duration (every test of this binary shares them).
fn rewriting() -> PackageManagerFlags {
    package_manager_flags(&stacks().flags)
}

fn namespace(prefix: &str) -> String {
    let ns = testenv::unique_name(prefix);
    kubectl(&["create", "namespace", &ns]);
    ns
}

/// A namespaced CRD `<plural>.<group>` of kind `kind` (v1alpha1).
fn crd_yaml(group: &str, kind: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{kind: {kind}, plural: {plural}, singular: {}, listKind: {kind}List}}\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
        kind.to_lowercase()
    )
}

/// What goes into a stack directory.
struct StackDir<'a> {
    title: &'a str,
    version: &'a str,
    /// (group, kind) of the CRDs it owns.
    owns: &'a [(&'a str, &'a str)],
    /// `dependsOn` entries as `crd:` names.
    depends_on: &'a [String],
    /// Run the stack-controller for the first owned CRD.
    controller: bool,
}

fn stack_dir(s: &StackDir) -> PathBuf {
    let dir = env().work.join(testenv::unique_name("stack"));
    let reg = dir.join(".registry");
    std::fs::create_dir_all(&reg).unwrap();
    let mut app = format!(
        "title: {}\ndescription: |\n  A test stack.\nversion: {}\nmaintainers:\n- name: Test\n  email: test@example.org\ncompany: crossplane-rs\nkeywords: [test]\nlinks:\n- description: Source\n  url: https://example.org/stack\nlicense: Apache-2.0\n",
        s.title, s.version
    );
    if !s.depends_on.is_empty() {
        app.push_str("dependsOn:\n");
        for d in s.depends_on {
            app.push_str(&format!("- crd: {d}\n"));
        }
    }
    std::fs::write(reg.join("app.yaml"), app).unwrap();
    std::fs::write(reg.join("icon.png"), [0x89, b'P', b'N', b'G', 0x0d, 0x0a]).unwrap();
    for (group, kind) in s.owns {
        let d = reg
            .join("resources")
            .join(group)
            .join(kind.to_lowercase())
            .join("v1alpha1");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join(format!("{}.v1alpha1.crd.yaml", kind.to_lowercase())),
            crd_yaml(group, kind),
        )
        .unwrap();
        std::fs::write(d.join("resource.yaml"), format!("title: {kind}\n")).unwrap();
    }
    if s.controller {
        let (group, kind) = s.owns[0];
        let name = format!("{}-controller", s.title.to_lowercase());
        std::fs::write(
            reg.join("install.yaml"),
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: controller\n        image: {}\n        env:\n        - {{name: STACK_GROUP, value: {group}}}\n        - {{name: STACK_VERSION, value: v1alpha1}}\n        - {{name: STACK_KIND, value: {kind}}}\n        - {{name: STACK_PLURAL, value: {}s}}\n",
                stacks().controller_image,
                kind.to_lowercase()
            ),
        )
        .unwrap();
        std::fs::write(
            reg.join("rbac.yaml"),
            "rules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list, watch, create, update, patch]\n",
        )
        .unwrap();
    }
    dir
}

/// Builds and pushes a stack as `<registry>/<repository>:<tag>`.
fn push_stack(s: &StackDir, repository: &str, tag: &str) {
    xpkg_push(
        &stack_dir(s),
        &format!("{}/{repository}:{tag}", env().registry.address),
        None,
    );
}

fn request_yaml(name: &str, what: &str) -> String {
    format!(
        "apiVersion: extensions.crossplane.io/v1alpha1\nkind: ExtensionRequest\nmetadata:\n  name: {name}\nspec:\n  source: registry.crossplane.io\n  {what}\n"
    )
}

fn apply_in(ns: &str, yaml: &str) {
    let out = testenv::control_plane_with_node()
        .control
        .kubectl_stdin(&["apply", "-n", ns, "-f", "-"], Some(yaml));
    assert!(
        out.status.success(),
        "apply: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn request(ns: &str, name: &str) -> Option<Value> {
    get_json(&["extensionrequests.extensions.crossplane.io", name, "-n", ns])
}

fn extension(ns: &str, name: &str) -> Option<Value> {
    get_json(&["extensions.extensions.crossplane.io", name, "-n", ns])
}

fn explain(ns: &str) -> String {
    let (_, objects) = kubectl_try(&[
        "get",
        "extensionrequests,extensions,deployments,pods",
        "-n",
        ns,
        "-o",
        "yaml",
    ]);
    objects
}

fn wait_request(ns: &str, name: &str, status: &str, says: &[&str], timeout: Duration) -> Value {
    wait_blocking(
        timeout,
        &format!("ExtensionRequest {ns}/{name} Ready={status} saying {says:?}"),
        || {
            let r = request(ns, name)?;
            let (s, m) = condition(&r, "Ready")?;
            (s == status && says.iter().all(|w| m.contains(w))).then_some(r)
        },
        || explain(ns),
    )
}

fn wait_gone(what: &str, mut exists: impl FnMut() -> bool, ns: &str) {
    wait_blocking(
        Duration::from_secs(90),
        &format!("{what} gone"),
        || (!exists()).then_some(()),
        || explain(ns),
    );
}

fn crd_exists(name: &str) -> bool {
    get_json(&["crd", name]).is_some()
}

fn delete_request(ns: &str, name: &str) {
    kubectl(&[
        "delete",
        "extensionrequests.extensions.crossplane.io",
        name,
        "-n",
        ns,
        "--wait=false",
    ]);
}

/// Records, from watches, the resourceVersion at which each named object
/// first satisfied a condition. resourceVersions are the etcd revisions of
/// one etcd, so they order writes to different objects exactly.
struct Order {
    seen: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>>,
    _rt: tokio::runtime::Runtime,
}

type Check = fn(&Value) -> bool;

impl Order {
    /// Watches Extensions in `ns` and all CRDs; `wanted` lists
    /// (name, condition) for both.
    fn watch(ns: &str, wanted: Vec<(String, Check)>) -> Self {
        use futures::TryStreamExt as _;
        use kube::{
            Api,
            api::{ApiResource, DynamicObject, GroupVersionKind},
            runtime::watcher,
        };
        let rt = tokio::runtime::Runtime::new().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
        let wanted = std::sync::Arc::new(wanted);
        let client = rt.block_on(testenv::control_plane_with_node().control.client());
        let ext = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "extensions.crossplane.io",
            "v1alpha1",
            "Extension",
        ));
        let crd = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        ));
        let apis = [
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ext),
            Api::<DynamicObject>::all_with(client, &crd),
        ];
        let (tx, rx) = std::sync::mpsc::channel();
        for api in apis {
            let (seen, wanted, tx) = (seen.clone(), wanted.clone(), tx.clone());
            rt.spawn(async move {
                let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
                while let Ok(Some(event)) = stream.try_next().await {
                    let o = match event {
                        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => o,
                        watcher::Event::InitDone => {
                            let _ = tx.send(());
                            continue;
                        }
                        _ => continue,
                    };
                    let v = serde_json::to_value(&o).unwrap();
                    let name = o.metadata.name.clone().unwrap_or_default();
                    let rv: u64 = o
                        .metadata
                        .resource_version
                        .as_deref()
                        .unwrap_or("0")
                        .parse()
                        .unwrap();
                    if wanted.iter().any(|(n, check)| *n == name && check(&v)) {
                        seen.lock().unwrap().entry(name).or_insert(rv);
                    }
                }
            });
        }
        for _ in 0..2 {
            rx.recv_timeout(Duration::from_secs(30))
                .expect("the watches list");
        }
        Self { seen, _rt: rt }
    }

    fn revision(&self, name: &str) -> u64 {
        *self
            .seen
            .lock()
            .unwrap()
            .get(name)
            .unwrap_or_else(|| panic!("the watch never saw {name} as expected"))
    }
}

fn is_ready(v: &Value) -> bool {
    condition(v, "Ready").is_some_and(|c| c.0 == "True")
}

fn exists(_: &Value) -> bool {
    true
}

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
        e.registry,
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
        e.registry,
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
