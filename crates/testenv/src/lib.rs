//! A real control plane for tests: one etcd, two kube-apiservers on different
//! etcd prefixes (the control cluster and a remote cluster, RBAC on), and a
//! kube-controller-manager for each (garbage collection, namespaces,
//! Deployments), all from the upstream binaries `hack/build-binaries.sh`
//! builds. One control plane per test binary, started on first use and
//! stopped when the test process exits, even when a test panics. Tests
//! isolate themselves by namespace.
//!
//! With a node ([`control_plane_with_node`], `Options::node`, or
//! `CROSSPLANE_RS_TEST_NODE=1` for every test binary) the control cluster
//! also runs pods: see [`node`].
//!
//! With `CROSSPLANE_RS_CONTROL_KUBECONFIG` (and optionally
//! `CROSSPLANE_RS_REMOTE_KUBECONFIG`) set, the tests use those clusters
//! instead of starting their own.

// Test support: failing a test loudly, with what went wrong, is this crate's
// job, so it panics where production code would return errors.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

pub mod audit;
mod cluster;
mod faults;
pub mod image;
mod kubeconfig;
mod launch;
pub mod node;
mod options;
mod paths;
mod pki;
mod plane;
mod ports;
mod process;
pub mod registry;

pub use cluster::Cluster;
pub use options::Options;
pub use paths::{bin_dir, repo_root, unique_name, workspace_binary};
pub use plane::{
    ControlPlane, ServingTls, control_plane, control_plane_with, control_plane_with_node,
    start_local, start_local_with,
};
pub use ports::free_port_on;
