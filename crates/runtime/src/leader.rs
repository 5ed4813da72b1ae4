//! Leader election on a coordination.k8s.io/v1 Lease.

use std::{future::Future, time::Duration};

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;

use crate::{args::CommonArgs, metrics::Metrics};

/// Why running under leader election stopped.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease could not be set up.
    #[error("failed to set up leader election on Lease {namespace}/{name}")]
    Setup {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// Cause.
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    /// This replica lost the Lease while leading; it must stop so that two
    /// replicas never act at once.
    #[error("lost leadership of Lease {0}; exiting so a fresh replica can take over")]
    Lost(String),
}

/// Runs `work` — when --leader-elect is set, only once this replica holds the
/// Lease `crossplane-rs-<binary>`. Returns when `work` ends, when `shutdown`
/// resolves, or with an error when leadership is lost.
pub async fn run<W, S>(
    client: Client,
    args: &CommonArgs,
    binary: &str,
    metrics: &Metrics,
    work: W,
    shutdown: S,
) -> Result<(), LeaderError>
where
    W: Future<Output = ()>,
    S: Future<Output = ()>,
{
    if !args.leader_elect {
        metrics.leader.set(1);
        tokio::select! {
            () = work => {},
            () = shutdown => {},
        }
        return Ok(());
    }
    let name = format!("crossplane-rs-{binary}");
    let namespace = args.leader_election_namespace.clone();
    let duration = args.leader_election_lease_duration.as_secs().max(2);
    let manager = LeaseManagerBuilder::new(client, &name)
        .with_namespace(&namespace)
        .with_identity(args.identity())
        .with_duration(duration)
        // Renew with two thirds of the lease still to run (every ~third of
        // it): a slow API server then has most of the lease to answer
        // before this replica loses it, as client-go's defaults allow.
        .with_grace((duration * 2 / 3).max(1))
        .with_field_manager(format!("crossplane-rs-{binary}"))
        .build()
        .await
        .map_err(|source| LeaderError::Setup {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?;
    let (mut leading, task) = manager.watch().await;
    tracing::info!(lease = %name, identity = %args.identity(), "waiting to become leader");
    tokio::pin!(shutdown);
    loop {
        if *leading.borrow_and_update() {
            break;
        }
        tokio::select! {
            changed = leading.changed() => {
                if changed.is_err() {
                    return Err(LeaderError::Lost(name));
                }
            }
            () = &mut shutdown => {
                drop(leading);
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
                return Ok(());
            }
        }
    }
    tracing::info!(lease = %name, "became leader");
    metrics.leader.set(1);
    let result = tokio::select! {
        () = work => Ok(()),
        () = &mut shutdown => Ok(()),
        () = async {
            loop {
                if leading.changed().await.is_err() || !*leading.borrow_and_update() {
                    return;
                }
            }
        } => Err(LeaderError::Lost(name.clone())),
    };
    metrics.leader.set(0);
    // Dropping the receiver makes the manager release the Lease, so a standby
    // replica takes over at once after a graceful stop.
    drop(leading);
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    result
}
