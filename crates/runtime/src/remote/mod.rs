//! Clients for remote clusters, built from kubeconfig bytes held in a Secret.
//!
//! The bytes are checked by [`crate::kubeconfig::sanitise`] before any client
//! is built: only inline material is accepted, so a Secret can never make a
//! controller run a command, read a file or send its traffic elsewhere.
//!
//! Clients are cached per owner (the KubernetesCluster or ProviderConfig that
//! names the Secret) and are valid for one (Secret UID, key,
//! resourceVersion): two owners that read different keys of one Secret get
//! different clients, and a rotated kubeconfig takes effect at once. An
//! owner's entry goes when its credential changes, when the owner or its
//! Secret is gone ([`RemoteClients::release`]), after [`IDLE_TIMEOUT`]
//! unused, or when the cache is full ([`MAX_CLIENTS`], least recently used
//! first). Each cluster has its own discovery cache, which goes with its
//! client: templated kinds are resolved in the cluster that serves them,
//! never from a compiled-in list.

mod answers;
mod clients;
mod cluster;
mod counting;
mod error;

pub use answers::Answers;
pub use clients::RemoteClients;
pub use cluster::{DiscoveryCache, RemoteCluster, ResolveError};
pub use counting::{Counting, CountingLayer, Heard, VERBS, counted_client, verb};
pub use error::RemoteError;

use std::time::Duration;

/// Bound on connecting to a remote cluster: an unreachable cluster must fail
/// a reconcile quickly rather than hold a worker.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one request to a remote cluster. Watches use
/// [`WATCH_READ_TIMEOUT`] instead, through [`RemoteCluster::watch_client`].
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on waiting for the next bytes of a watch (or of the list that
/// starts it) from a remote cluster. It is longer than the time a watch stays
/// open on the server (kube's watcher asks for 290 s and gives up on a
/// silent stream 5 s after that), so a quiet but healthy watch is never cut
/// by it, while a cluster that stops answering still frees the connection.
pub const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(330);
/// How many remote clients a binary keeps at most. Each holds a connection
/// pool and a discovery cache; beyond this many owners the least recently
/// used client is dropped and rebuilt on its next use.
pub const MAX_CLIENTS: usize = 256;
/// A client unused this long is dropped (its owner has most likely gone);
/// live owners use theirs at least every --poll-interval.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How many remote clusters get their own value of the `cluster` label of
/// `crossplane_rs_kube_api_requests_total` in one binary; requests to any
/// further cluster are counted under `other`. A value is freed, and its
/// series removed, when the last client using it is dropped.
pub const MAX_CLUSTER_LABELS: usize = 50;
/// The `cluster` label of the control cluster; never capped.
pub const CONTROL_LABEL: &str = "control";
/// The `cluster` label shared by remote clusters beyond
/// [`MAX_CLUSTER_LABELS`].
pub const OTHER_LABEL: &str = "other";

#[cfg(test)]
mod tests;
