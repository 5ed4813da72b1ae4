//! The controllers of the shipped installation ([`crate::shipped`]) as an
//! operator handles their pods: run with operator flags after deploy/'s
//! args (rolled out, the new pod Ready and leading), restarted with
//! `kubectl delete pod`, and given the remote cluster at an address a pod
//! reaches.

use std::{
    sync::{Condvar, Mutex, PoisonError},
    time::Duration,
};

use crate::{
    kubectl::kubectl,
    shipped::{
        NS, container_args, log_tail, operator_flags, patch_deployment, pod_of, shipped,
        sole_leader,
    },
    wait::wait_blocking,
};

/// Which operator flags the package-manager runs with, and how many tests
/// hold them.
struct Flags {
    /// None: as installed ([`operator_flags`]).
    flags: Option<Vec<String>>,
    holders: usize,
}

static FLAGS: Mutex<Flags> = Mutex::new(Flags {
    flags: None,
    holders: 0,
});
static FLAGS_RELEASED: Condvar = Condvar::new();

/// The package-manager running with `flags` after deploy/'s args (instead
/// of [`operator_flags`]), held until dropped: tests that need the same
/// flags share them, a test that needs others waits until no test holds
/// these. Hold it for the whole test; a test that holds none sees whichever
/// flags are set, so in a binary where one test changes them every test
/// holds a guard.
#[must_use = "the flags hold only while the guard lives"]
pub struct PackageManagerFlags(());

impl Drop for PackageManagerFlags {
    fn drop(&mut self) {
        let mut state = FLAGS.lock().unwrap_or_else(PoisonError::into_inner);
        state.holders -= 1;
        FLAGS_RELEASED.notify_all();
    }
}

/// Runs the package-manager Deployment with deploy/'s args plus `flags`
/// (operator configuration, a JSON patch of its args), waiting for the
/// rollout: the new pod Ready and leading, the old one gone. See
/// [`PackageManagerFlags`].
pub fn package_manager_flags(flags: &[String]) -> PackageManagerFlags {
    let s = shipped();
    let mut state = FLAGS.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let current = state.flags.clone().unwrap_or_else(operator_flags);
        if current == flags {
            break;
        }
        if state.holders == 0 {
            // Held across the rollout: nobody starts with either set.
            roll_out_package_manager(&[s.deployed_args.clone(), flags.to_vec()].concat());
            state.flags = Some(flags.to_vec());
            break;
        }
        state = FLAGS_RELEASED
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
    }
    state.holders += 1;
    PackageManagerFlags(())
}

/// Sets the package-manager's args and waits for the rollout ([`roll_out`]).
fn roll_out_package_manager(args: &[String]) {
    roll_out("package-manager", args);
}

/// Sets a controller Deployment's args (operator configuration, a JSON
/// patch) and waits until one pod of that template runs, Ready, holding
/// the Lease, and no other is left.
fn roll_out(binary: &str, args: &[String]) {
    let patch = serde_json::json!([
        {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args},
    ]);
    patch_deployment(binary, &patch);
    wait_blocking(
        Duration::from_secs(180),
        &format!("{binary} to roll out with {args:?}"),
        || sole_leader(binary, Some(args), None),
        || {
            let pods = kubectl(&["get", "pods", "-n", NS, "-o", "wide"]);
            format!("\n{pods}\n{}", log_tail(binary, 30))
        },
    );
}

/// Runs a controller (not the package-manager: see
/// [`package_manager_flags`]) with exactly `args`, as an operator would
/// configure it (e.g. putting back what [`controller_flags`] changed).
pub fn controller_args(binary: &str, args: &[String]) {
    shipped();
    if container_args(binary) != args {
        roll_out(binary, args);
    }
}

/// Runs a controller (not the package-manager: see
/// [`package_manager_flags`]) with deploy/'s args plus `flags`, as an
/// operator would configure it; nothing when it already does.
pub fn controller_flags(binary: &str, flags: &[&str]) {
    shipped();
    let current = container_args(binary);
    if current.ends_with(&flags.iter().map(|f| (*f).to_owned()).collect::<Vec<_>>()) {
        return;
    }
    let args: Vec<String> = current
        .into_iter()
        .chain(flags.iter().map(|f| (*f).to_owned()))
        .collect();
    roll_out(binary, &args);
}

/// Restarts a controller as an operator does (`kubectl delete pod`): its
/// running pod is deleted, and the Deployment's new pod takes over. Returns
/// once the new pod is Ready and holds the Lease, the old one gone: its
/// name.
pub fn restart(binary: &str) -> String {
    let (old, _) = pod_of(binary);
    kubectl(&["delete", "pod", &old, "-n", NS, "--wait=false"]);
    wait_blocking(
        Duration::from_secs(180),
        &format!("a new {binary} pod, Ready and leading, {old} gone"),
        || sole_leader(binary, None, Some(&old)),
        || {
            let pods = kubectl(&["get", "pods", "-n", NS, "-o", "wide"]);
            format!("\n{pods}\n{}", log_tail(binary, 30))
        },
    )
}

/// The remote cluster's kubeconfig as pods reach it: the API server at
/// the node-facing address (127.0.0.1 in a pod is the pod itself).
pub fn remote_kubeconfig_for_pods() -> String {
    let plane = testenv::control_plane_with_node();
    let node = plane.node.as_ref().expect("testenv's node");
    let kubeconfig = plane
        .remote
        .kubeconfig
        .replace("https://127.0.0.1:", &format!("https://{}:", node.host_ip));
    assert_ne!(
        kubeconfig, plane.remote.kubeconfig,
        "the remote kubeconfig names 127.0.0.1"
    );
    kubeconfig
}
