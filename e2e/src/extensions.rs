//! Helpers of the stack tests: a namespace of their own, an Extension as
//! JSON, and what a namespace holds of a stack, for a failed wait.

use serde_json::Value;

use crate::kubectl::{get_json, kubectl, kubectl_try};

/// A new namespace named after `prefix`.
pub fn namespace(prefix: &str) -> String {
    let ns = testenv::unique_name(prefix);
    kubectl(&["create", "namespace", &ns]);
    ns
}

/// The Extension `name` in `ns`, as JSON.
pub fn extension(ns: &str, name: &str) -> Option<Value> {
    get_json(&["extensions.extensions.crossplane.io", name, "-n", ns])
}

/// What `ns` holds of stacks (requests, Extensions, their Deployments,
/// ServiceAccounts and pods), as YAML, and the package side of the
/// installation: for a failed wait.
pub fn explain_ns(ns: &str) -> String {
    let (_, objects) = kubectl_try(&[
        "get",
        "extensionrequests,extensions,deployments,serviceaccounts,pods",
        "-n",
        ns,
        "-o",
        "yaml",
    ]);
    format!("{objects}\n{}", crate::shipped::explain())
}
