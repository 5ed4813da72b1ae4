//! Helpers of the package tests: a registry with packages built by `xpkg`,
//! the six controllers running as pods from `deploy/` (the shipped
//! installation, [`crate::shipped`]), kubectl against the test binary's
//! control plane (with a node), and waits that explain themselves.

use std::{path::PathBuf, sync::OnceLock, time::Duration};

use serde_json::Value;

pub use crate::wait::wait_blocking;
pub use crate::{
    artifacts::{
        crds_of, package_dir_in, push_base_layer, push_binary_image, push_image, xpkg_push_trusting,
    },
    kubectl::{apply, get_json, kubectl, kubectl_try},
};

pub use crate::shipped::{NS, RUNTIMES, xpkg_push, xpkg_push_as};

/// What the package tests of one test binary share: the shipped
/// installation (its registry, CA file and scratch directory, through
/// `Deref`) and the object-provider runtime image pushed there.
pub struct Env {
    shipped: &'static crate::shipped::Shipped,
    /// The object-provider runtime image, as the node pulls it.
    pub runtime_image: String,
}

impl std::ops::Deref for Env {
    type Target = crate::shipped::Shipped;

    fn deref(&self) -> &Self::Target {
        self.shipped
    }
}

static ENV: OnceLock<Env> = OnceLock::new();

pub fn condition(obj: &Value, type_: &str) -> Option<(String, String)> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// Providers, revisions, the controllers' pods and the package- and
/// rbac-manager pods' logs, for a failed wait.
pub fn explain_packages() -> String {
    crate::shipped::explain()
}

/// The object-provider alone on the project's base layer, run as the
/// package's runtime.
pub fn push_runtime_image(registry: &testenv::registry::Registry) -> String {
    push_binary_image(
        registry,
        "object-provider",
        "crossplane-rs/object-provider:dev",
    )
}

/// The shared setup: the shipped installation (the six controllers as
/// pods, made on first use) and the runtime image pushed to its registry.
pub fn env() -> &'static Env {
    ENV.get_or_init(|| {
        let shipped = crate::shipped::shipped();
        Env {
            shipped,
            runtime_image: push_runtime_image(&shipped.registry),
        }
    })
}

/// Writes a package directory: the meta (with `extra` lines under
/// metadata.annotations) and the CRD files given.
pub fn package_dir(name: &str, version: &str, crds: &[(&str, String)]) -> PathBuf {
    package_dir_with(name, version, crds, "")
}

/// Like [`package_dir`], with `spec_extra` (YAML lines indented two
/// spaces, e.g. a dependsOn) under the meta's spec.
pub fn package_dir_with(
    name: &str,
    version: &str,
    crds: &[(&str, String)],
    spec_extra: &str,
) -> PathBuf {
    package_dir_in(&env().work, name, version, crds, spec_extra)
}

pub fn provider_yaml(name: &str, package: &str, extra: &str) -> String {
    format!(
        "apiVersion: pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\nspec:\n  package: {package}\n{extra}"
    )
}

pub fn provider(name: &str) -> Option<Value> {
    get_json(&["providers.pkg.crossplane.io", name])
}

/// The Provider, when it is Installed and Healthy.
pub fn provider_healthy(name: &str) -> Option<Value> {
    let p = provider(name)?;
    let ok = condition(&p, "Installed").is_some_and(|c| c.0 == "True")
        && condition(&p, "Healthy").is_some_and(|c| c.0 == "True");
    ok.then_some(p)
}

pub fn wait_provider_healthy(name: &str, timeout: Duration) -> Value {
    wait_blocking(
        timeout,
        &format!("Provider {name} Installed and Healthy"),
        || provider_healthy(name),
        explain_packages,
    )
}

pub fn revisions_of(provider: &str) -> Vec<Value> {
    let list = get_json(&[
        "providerrevisions.pkg.crossplane.io",
        "-l",
        &format!("pkg.crossplane.io/package={provider}"),
    ])
    .unwrap_or_default();
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    items.sort_by_key(|r| r["spec"]["revision"].as_i64());
    items
}

pub fn short(digest: &str) -> &str {
    &digest.trim_start_matches("sha256:")[..12]
}

/// A cluster-scoped test CRD `<plural>.<group>` of kind `kind`.
pub fn test_crd(group: &str, kind: &str) -> (String, String) {
    let plural = format!("{}s", kind.to_lowercase());
    let singular = kind.to_lowercase();
    (
        format!("{group}_{plural}.yaml"),
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Cluster\n  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}\n  versions:\n  - name: v1alpha1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
        ),
    )
}

/// A unique DNS-safe group for one test; the package-manager may list its
/// kinds (as the operator grants it, until the rbac-manager does), so a
/// Provider's deletion can see whether custom resources of it exist.
pub fn group(prefix: &str) -> String {
    let g = format!("{}.example.org", testenv::unique_name(prefix));
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: test-list-{g}\n  labels: {{rbac.crossplane-rs.io/aggregate-to-package-manager: \"true\"}}\nrules:\n- {{apiGroups: [{g}], resources: [\"*\"], verbs: [list]}}\n"
    ));
    g
}

/// Waits until the Provider's `type_` condition has `status` and its
/// message contains every one of `says`.
pub fn wait_provider_condition(
    name: &str,
    type_: &str,
    status: &str,
    says: &[&str],
    timeout: Duration,
) -> Value {
    wait_blocking(
        timeout,
        &format!("Provider {name} {type_}={status} saying {says:?}"),
        || {
            let p = provider(name)?;
            let (s, message) = condition(&p, type_)?;
            (s == status && says.iter().all(|w| message.contains(w))).then_some(p)
        },
        explain_packages,
    )
}

/// Pushes an image whose base layer holds `package_yaml` as is (no
/// checks: for packages xpkg would refuse to build); returns the digest.
pub fn push_raw(reference: &str, package_yaml: &str) -> String {
    let layer = oci::LayerBuilder::new()
        .file("package.yaml", 0o644, package_yaml.as_bytes().to_vec())
        .build()
        .unwrap();
    crate::shipped::push_layer(reference, layer)
}

pub fn meta(name: &str) -> String {
    format!("apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\n")
}

pub fn delete_provider(name: &str) {
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        name,
        "--ignore-not-found",
        "--wait=false",
    ]);
}

pub fn wait_provider_gone(name: &str) {
    wait_blocking(
        Duration::from_secs(60),
        &format!("Provider {name} gone"),
        || provider(name).is_none().then_some(()),
        explain_packages,
    );
}

pub fn revision_names(provider: &str) -> Vec<String> {
    revisions_of(provider)
        .iter()
        .map(|r| {
            r["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

pub fn meta_with_dependency(name: &str, dependency: &str, version: &str) -> String {
    format!("  dependsOn:\n  - provider: {dependency}\n    version: \"{version}\"\n")
        .replace("{name}", name)
}

/// Reconciles of the package-manager's Provider controller so far (any
/// result).
pub fn provider_reconciles() -> f64 {
    crate::shipped::reconciles("package-manager", "provider")
}

/// Makes the Provider controller look at `name` at least `n` more times
/// (each annotation is a change it is woken by).
pub fn poke(name: &str, n: usize) {
    for i in 0..n {
        let before = provider_reconciles();
        kubectl(&[
            "annotate",
            "providers.pkg.crossplane.io",
            name,
            &format!("poke={i}"),
            "--overwrite",
        ]);
        wait_blocking(
            Duration::from_secs(30),
            "the Provider controller to reconcile",
            || (provider_reconciles() > before).then_some(()),
            explain_packages,
        );
    }
}

/// What the revision applied for a CRD of the package: its
/// ManagedResourceDefinition for a managed kind (the CRD is the MRD's),
/// the CRD itself for a ProviderConfig kind.
pub fn delivered(crd: &str) -> Value {
    match get_json(&["mrd", crd]) {
        Some(m) => {
            let c = get_json(&["crd", crd]).unwrap();
            let owner = &c["metadata"]["ownerReferences"][0];
            assert_eq!(
                (
                    owner["kind"].as_str(),
                    owner["name"].as_str(),
                    owner["controller"].as_bool()
                ),
                (Some("ManagedResourceDefinition"), Some(crd), Some(true)),
                "the CRD of a managed kind is its MRD's: {c:#}"
            );
            m
        }
        None => get_json(&["crd", crd]).unwrap(),
    }
}

pub fn deployment_of(revision: &str) -> Option<Value> {
    get_json(&["deployment", revision, "-n", RUNTIMES])
}

/// What the package-manager still has to write of MRDs it was told of
/// before: an MRD not Established yet, an MRD no activation policy lists
/// yet, a listed one that is gone. Policies write their lists after a
/// window and an MRD its status after its CRD, both after a Provider is
/// Healthy or gone; the package-manager runs with deploy/'s `--activation=*`
/// (every MRD is listed once written), and no package is SafeStart.
pub fn mrd_writes_pending() -> Vec<String> {
    let items = |kind: &str| -> Vec<Value> {
        get_json(&[kind])
            .and_then(|l| l.get("items").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    };
    let mrds = items("mrd");
    let listed: Vec<Value> = items("mrap")
        .iter()
        .filter_map(|p| p.pointer("/status/activated").and_then(Value::as_array))
        .flatten()
        .cloned()
        .collect();
    let names: Vec<&Value> = mrds.iter().map(|m| &m["metadata"]["name"]).collect();
    let mut pending: Vec<String> = listed
        .iter()
        .filter(|n| !names.contains(n))
        .map(|n| format!("{n} listed, gone"))
        .collect();
    for m in &mrds {
        let name = &m["metadata"]["name"];
        if !listed.contains(name) {
            pending.push(format!("{name} not listed"));
        }
        if condition(m, "Established").is_none_or(|c| c.0 != "True") {
            pending.push(format!("{name} not Established"));
        }
    }
    pending
}

/// Waits until [`mrd_writes_pending`] has nothing left: from then on the
/// package-manager's counters move only for what the test does.
pub fn wait_mrd_writes() {
    wait_blocking(
        Duration::from_secs(60),
        "the MRDs' status and the activation policies' lists written",
        || mrd_writes_pending().is_empty().then_some(()),
        || format!("{:?}\n{}", mrd_writes_pending(), explain_packages()),
    );
}
