//! Shared controller plumbing for the crossplane-rs binaries: start-up flags,
//! logging, the metrics/health server, leader election, conditions, events,
//! remote-cluster clients, shared watches and server-side apply. No controller logic lives
//! here: a controller's decisions belong to its own crate.

mod alloc;
pub mod args;
pub mod backoff;
pub mod cel;
pub mod certificates;
pub mod coalesce;
pub mod conditions;
pub mod controller;
pub mod crds;
pub mod events;
pub mod expiring;
pub mod fieldpath;
pub mod finalizers;
pub mod index;
pub mod kubeconfig;
pub mod leader;
pub mod limits;
pub mod lru;
pub mod managed;
pub mod metrics;
pub mod objects;
pub mod packed;
pub mod reconciler;
pub mod remote;
pub mod server;
pub mod ssa;
pub mod telemetry;
pub mod watches;
pub mod webhook;

pub use args::CommonArgs;
pub use metrics::Metrics;

/// Process start-up shared by every binary: selects rustls' crypto provider
/// (kube's rustls feature leaves it open) and installs logging.
pub fn init_process(format: args::LogFormat) {
    // Err means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
    telemetry::init(format);
}
