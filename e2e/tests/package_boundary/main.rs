//! Package content is data: what a package, a stack, an Extension or a
//! registry says never takes more than the operator allowed. Every test
//! here runs against the six controllers as pods from `deploy/` (the
//! local-node overlay, plus the registry's CA as operator configuration),
//! on the real node, with packages in a real registry; each asserts what a
//! user sees (conditions, `kubectl auth can-i`, the live objects, the pods'
//! restart counts).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod providers;
mod registries;
mod runtimes;
mod stacks;

use e2e::hostile::{Hostile, Reply};
use e2e::kubectl::{can_i, create_as};
use e2e::packages::{
    apply, condition, delete_provider, get_json, kubectl, kubectl_try, provider, provider_yaml,
    test_crd, wait_blocking, wait_provider_healthy,
};
use e2e::shipped::{
    NS, RUNTIMES, explain, lease_of, package_dir, package_manager_lease, pod_of, push_layer,
    reconciles, resident_bytes, shipped, xpkg_push,
};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Every condition message of an object, one per line (`Type=Status:
/// message`).
fn conditions_text(obj: &Value) -> String {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{}={}: {}",
                        c["type"].as_str().unwrap_or_default(),
                        c["status"].as_str().unwrap_or_default(),
                        c["message"].as_str().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn namespace(prefix: &str) -> String {
    shipped();
    e2e::extensions::namespace(prefix)
}

/// Whether the API server lets `subject` `verb` the kind `plural` of
/// `group` (cluster-wide), asked as a SelfSubjectAccessReview: `kubectl
/// auth can-i` resolves a new CRD's kind through its cached discovery and,
/// when that does not know it yet, asks about another resource.
fn may(subject: &str, verb: &str, plural: &str, group: &str) -> bool {
    let (ok, out) = create_as(
        subject,
        &format!(
            "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec: {{resourceAttributes: {{verb: {verb}, group: {group}, resource: {plural}}}}}\n"
        ),
    );
    ok && out.contains("allowed: true")
}

/// Pushes a Provider package of one kind, `things.<group>` (with
/// `spec_extra` meta lines under spec), whose runtime is the pause image,
/// and installs it as Provider `name`: returns the group.
fn install_provider_as(name: &str, prefix: &str, spec_extra: &str) -> String {
    let g = format!("{}.example.org", testenv::unique_name(prefix));
    let (file, crd) = test_crd(&g, "Thing");
    let dir = package_dir(&format!("provider-{prefix}"), spec_extra, &[(file, crd)]);
    let reference = format!(
        "{}/{prefix}/provider-{prefix}:v1",
        shipped().registry.address
    );
    xpkg_push(&dir, &reference, Some(&shipped().pause_image));
    apply(&provider_yaml(name, &reference, ""));
    g
}

/// [`install_provider_as`] under a new name: (name, group).
fn install_provider(prefix: &str, spec_extra: &str) -> (String, String) {
    let name = testenv::unique_name(prefix);
    let g = install_provider_as(&name, prefix, spec_extra);
    (name, g)
}

/// The node's host address, where the pods reach this machine.
fn host_ip() -> std::net::IpAddr {
    shipped();
    testenv::control_plane_with_node()
        .node
        .as_ref()
        .unwrap()
        .host_ip
        .into()
}

/// Waits until the Provider has a condition that is False and whose
/// message contains every one of `says`; returns every condition's text.
fn wait_provider_says(name: &str, says: &[&str]) -> String {
    wait_blocking(
        Duration::from_secs(90),
        &format!("Provider {name} to say {says:?}"),
        || {
            let p = provider(name)?;
            let text = conditions_text(&p);
            (text.contains("=False") && says.iter().all(|s| text.contains(s))).then_some(text)
        },
        explain,
    )
}

/// The admission policy `deploy/` ships for package identities, as its
/// refusals name it.
const POLICY: &str = "crossplane-rs-package-identities";

/// A Secret of type `kubernetes.io/service-account-token` for
/// ServiceAccount `ns/for`: kube-controller-manager fills it with a token of
/// that ServiceAccount.
fn token_secret(ns: &str, name: &str, for_sa: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations: {{kubernetes.io/service-account.name: {for_sa}}}\ntype: kubernetes.io/service-account-token\n"
    )
}

fn opaque_secret(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\nstringData: {{password: connection-detail}}\n"
    )
}

/// Asserts that `subject` cannot mint a token of `ns/for_sa`: the create is
/// refused by the package-identity policy, and no such Secret exists.
fn assert_cannot_mint(subject: &str, ns: &str, for_sa: &str) {
    let name = testenv::unique_name("minted");
    let (ok, out) = create_as(subject, &token_secret(ns, &name, for_sa));
    assert!(
        !ok && out.contains(POLICY) && out.contains("service-account-token"),
        "{subject} created a token Secret for {ns}/{for_sa}: {out}"
    );
    assert!(get_json(&["secret", &name, "-n", ns]).is_none());
}

/// The rbac-manager's flags are shared by every test of this binary: the
/// test that narrows runtimes' Secrets runs alone, and puts the flags back.
static RBAC_MANAGER: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The rbac-manager as installed, held for a whole test.
fn rbac_manager_as_installed() -> std::sync::RwLockReadGuard<'static, ()> {
    RBAC_MANAGER
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The rbac-manager to itself, its deploy/ args put back when dropped.
struct Narrowed {
    args: Vec<String>,
    _alone: std::sync::RwLockWriteGuard<'static, ()>,
}

impl Drop for Narrowed {
    fn drop(&mut self) {
        e2e::pods::controller_args("rbac-manager", &self.args);
    }
}

fn narrowed_rbac_manager() -> Narrowed {
    shipped();
    let alone = RBAC_MANAGER
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Narrowed {
        args: e2e::shipped::container_args("rbac-manager"),
        _alone: alone,
    }
}
