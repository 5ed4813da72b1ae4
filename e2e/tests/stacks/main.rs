//! Stacks (seed 001), on a real node with a real registry: stacks built by
//! `xpkg` (a `.registry/` directory) whose controller is the project's
//! `stack-controller` (it writes a ConfigMap for each custom resource of
//! its CRD), installed through ExtensionRequests by package and by CRD, by
//! the six controllers running as pods from `deploy/` (the shipped
//! installation). The seed's requests name `registry.crossplane.io`; the
//! operator's ImageConfigs read that name from the test registry, so they
//! apply verbatim.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod dependencies;
mod install;
mod ownership;

use e2e::extensions::{explain_ns as explain, extension, namespace};
use e2e::packages::*;
use e2e::{
    pods::{PackageManagerFlags, package_manager_flags},
    shipped::operator_flags,
};
use serde_json::Value;
use std::{path::PathBuf, sync::OnceLock, time::Duration};

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
            &e.registry,
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

fn exists(_: &Value) -> bool {
    true
}
