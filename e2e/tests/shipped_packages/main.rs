//! Packages installed by the six controllers running as pods from `deploy/`
//! on the real node (the local-node overlay plus the registry's CA,
//! operator configuration), as a platform engineer would:
//! - `upstream_built`: provider-kubernetes built and pushed by upstream's
//!   own `crossplane` CLI, installed, run and upgraded;
//! - `activation`: the newest provider-kubernetes (SafeStart) with its
//!   managed kinds inactive until a ManagedResourceActivationPolicy
//!   activates one;
//! - `shapes`: the package shapes upstream allows (CRDs alone, labels and
//!   annotations, webhook configurations, dependencies on functions and
//!   configurations), built by this project's `xpkg`.
//!
//! Each test asserts what a user sees: conditions, the runtime's pod, its
//! managed resources, `kubectl get` answers during an upgrade.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod activation;
mod shapes;
mod upstream_built;

use e2e::packages::{
    apply, condition, get_json, kubectl, kubectl_try, provider_healthy, provider_yaml,
    revisions_of, test_crd, wait_blocking,
};
use e2e::shipped::{RUNTIMES, explain, package_dir, shipped, xpkg_push};
use serde_json::Value;
use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

/// The tests that install provider-kubernetes hold this: its releases
/// serve the same CRDs, which one Provider at a time may own. Each deletes
/// its Provider before it lets go.
fn kubernetes_group() -> std::sync::MutexGuard<'static, ()> {
    static GROUP: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GROUP
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Deletes the Provider `name` and waits until it is gone, and with it the
/// CRD and the ManagedResourceDefinition of each of `kinds`.
fn delete_provider_with(name: &str, kinds: &[&str]) {
    kubectl(&[
        "delete",
        "providers.pkg.crossplane.io",
        name,
        "--wait=false",
    ]);
    wait_blocking(
        Duration::from_secs(120),
        &format!("Provider {name} gone, and the CRDs and MRDs of {kinds:?}"),
        || {
            let left: Vec<&str> = kinds
                .iter()
                .filter(|k| get_json(&["mrd", k]).is_some() || get_json(&["crd", k]).is_some())
                .copied()
                .collect();
            (get_json(&["providers.pkg.crossplane.io", name]).is_none() && left.is_empty())
                .then_some(())
                .ok_or_else(|| format!("left: {left:?}"))
        },
        explain,
    );
}

/// provider-kubernetes, built and pushed by `crossplane xpkg`: one
/// reference per release in hack/versions.env, oldest first.
struct Upstream {
    references: Vec<String>,
}

static UPSTREAM: OnceLock<Upstream> = OnceLock::new();

fn upstream() -> &'static Upstream {
    UPSTREAM.get_or_init(|| {
        let s = shipped();
        // Upstream's provider-kubernetes serves the API group crossplane-rs's
        // own Object provider serves (kubernetes.crossplane.io): whoever
        // runs upstream's removes ours first, as here. The package-manager
        // never takes over CRDs it did not install.
        e2e::shipped::remove_object_provider();
        // The two oldest releases: an upgrade from one to the other.
        let references = e2e::upstream::provider_kubernetes_versions()
            .iter()
            .take(2)
            .map(|v| {
                let reference = format!(
                    "{}/crossplane-contrib/provider-kubernetes:{v}",
                    s.registry.address
                );
                e2e::upstream::build_and_push(v, &reference, &s.ca_file, &s.work);
                reference
            })
            .collect::<Vec<_>>();
        assert!(
            references.len() >= 2,
            "hack/versions.env names two provider-kubernetes releases (an upgrade is tested)"
        );
        Upstream { references }
    })
}

/// The running runtime pods of a Provider (every revision's).
fn runtime_pods(provider: &str) -> Vec<Value> {
    get_json(&[
        "pods",
        "-n",
        RUNTIMES,
        "-l",
        &format!("pkg.crossplane.io/provider={provider}"),
    ])
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
}
