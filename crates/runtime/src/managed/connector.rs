//! Connecting to a managed object's cluster (crossplane-runtime's
//! connecter): the kubeconfig Secret an owner names (a KubernetesCluster, a
//! ProviderConfig) becomes a client, and every way that can fail is one
//! [`ConnectError`], worded by the controller's [`Wording`]. Reading a
//! target through its shared watch, else with one GET, lives here too, so
//! both remote controllers read alike.
//!
//! A Secret is read (one GET) only when the client cached for the owner
//! cannot be known current without it: a controller that watches Secrets by
//! metadata says so with [`Known::Metadata`]; one that may not watch them
//! reads a Secret at most once per owner generation and `secret_ttl`
//! ([`Known::Generation`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, Resource, api::DynamicObject};

use crate::{
    events::ReconcileError,
    remote::{RemoteClients, RemoteCluster, RemoteError},
    watches::{Cached, Session, Target},
};

/// How one controller's messages and event reasons name what it connects
/// with. Each controller keeps the words its users know.
#[derive(Debug)]
pub struct Wording {
    /// The kind that names the Secret: "KubernetesCluster".
    pub owner: &'static str,
    /// What to do when it does not exist: "fix spec.clusterRef".
    pub fix: &'static str,
    /// What its Secret is called: "connection Secret".
    pub secret: &'static str,
    /// How "cannot connect" joins the owner: "to", "with".
    pub connect: &'static str,
    /// Said after what a failed read was reading: " from the control
    /// cluster", or nothing.
    pub read_from: &'static str,
    /// Reasons (event reason, metric category), one per way to fail.
    pub reasons: Reasons,
}

/// The reason of each way connecting fails.
#[derive(Debug)]
pub struct Reasons {
    /// The owner does not exist.
    pub owner_not_found: &'static str,
    /// Its Secret does not exist.
    pub secret_not_found: &'static str,
    /// The kubeconfig is unusable.
    pub cannot_connect: &'static str,
    /// Reading the owner or the Secret from the control cluster failed.
    pub cannot_read: &'static str,
}

/// Why a cluster could not be connected to. Messages say what to fix and
/// never quote what the Secret holds.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The owner does not exist.
    #[error("{} {owner} not found: create it, or {}", .wording.owner, .wording.fix)]
    OwnerNotFound {
        /// How the controller words it.
        wording: &'static Wording,
        /// The owner, as the client cache knows it ("ns/name", "name").
        owner: String,
    },
    /// The owner's Secret does not exist (or the owner names none).
    #[error("{} {secret} of {} {owner} not found: create it with a kubeconfig", .wording.secret, .wording.owner)]
    SecretNotFound {
        /// How the controller words it.
        wording: &'static Wording,
        /// namespace/name of the Secret.
        secret: String,
        /// The owner.
        owner: String,
    },
    /// The kubeconfig is unusable.
    #[error("cannot connect {} {} {owner}", .wording.connect, .wording.owner)]
    Unusable {
        /// How the controller words it.
        wording: &'static Wording,
        /// The owner.
        owner: String,
        /// Why (boxed: a refusal is large, and every reconcile error
        /// carries this one's size).
        #[source]
        source: Box<RemoteError>,
    },
    /// Reading the owner or its Secret from the control cluster failed.
    #[error("failed to read {what}{}", .wording.read_from)]
    Read {
        /// How the controller words it.
        wording: &'static Wording,
        /// What was read ("Secret ns/name").
        what: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
}

impl ConnectError {
    fn wording(&self) -> &'static Wording {
        match self {
            ConnectError::OwnerNotFound { wording, .. }
            | ConnectError::SecretNotFound { wording, .. }
            | ConnectError::Unusable { wording, .. }
            | ConnectError::Read { wording, .. } => wording,
        }
    }

    /// The owner or its Secret is gone: the cluster can never be reached
    /// again through it.
    pub fn target_gone(&self) -> bool {
        matches!(
            self,
            ConnectError::OwnerNotFound { .. } | ConnectError::SecretNotFound { .. }
        )
    }
}

impl ReconcileError for ConnectError {
    fn category(&self) -> &'static str {
        let reasons = &self.wording().reasons;
        match self {
            ConnectError::OwnerNotFound { .. } => reasons.owner_not_found,
            ConnectError::SecretNotFound { .. } => reasons.secret_not_found,
            ConnectError::Unusable { .. } => reasons.cannot_connect,
            ConnectError::Read { .. } => reasons.cannot_read,
        }
    }
}

/// Where a kubeconfig is: a key of a Secret in the control cluster.
#[derive(Clone, Copy, Debug)]
pub struct SecretKey<'a> {
    /// The Secret's namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The key that holds the kubeconfig.
    pub key: &'a str,
}

/// What the caller knows of the Secret that may spare reading it.
#[derive(Clone, Copy, Debug)]
pub enum Known<'a> {
    /// Its UID and resourceVersion, from a metadata-only watch: the client
    /// cached for them is current.
    Metadata {
        /// The Secret's UID.
        uid: &'a str,
        /// Its resourceVersion.
        resource_version: &'a str,
    },
    /// The owner's generation: a Secret read for the same generation less
    /// than the connector's `secret_ttl` ago is used again (for a controller
    /// that may not watch Secrets).
    Generation(Option<i64>),
    /// Nothing: the Secret is read.
    Nothing,
}

/// Credentials → client, for one controller: the cache of remote clients,
/// the Secrets it read recently, and how its messages word a failure.
pub struct Connector {
    clients: RemoteClients,
    control: Client,
    wording: &'static Wording,
    secret_ttl: Duration,
    recent: RecentSecrets,
    /// Per owner, the turn of a reconcile reading its Secret: reconciles
    /// that need a client the caches cannot give at once (a controller's
    /// workers on first use of a cluster) wait for one read, then find its
    /// client cached.
    reading: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// The Secrets last read, per owner, with the owner's generation at the
/// time: one is used again while the owner's spec is unchanged and it is
/// younger than a TTL.
#[derive(Default)]
struct RecentSecrets(Mutex<HashMap<String, Recent>>);

/// One Secret as read for an owner at one generation.
struct Recent {
    generation: Option<i64>,
    at: Instant,
    secret: Arc<Secret>,
}

impl RecentSecrets {
    /// The Secret read for `owner` at `generation` less than `ttl` ago.
    fn fresh(&self, owner: &str, generation: Option<i64>, ttl: Duration) -> Option<Arc<Secret>> {
        let secrets = self.0.lock().ok()?;
        let read = secrets.get(owner)?;
        (read.generation == generation && read.at.elapsed() < ttl).then(|| read.secret.clone())
    }

    fn store(&self, owner: &str, generation: Option<i64>, secret: Arc<Secret>) {
        if let Ok(mut secrets) = self.0.lock() {
            let read = Recent {
                generation,
                at: Instant::now(),
                secret,
            };
            secrets.insert(owner.to_owned(), read);
        }
    }

    fn forget(&self, owner: &str) {
        if let Ok(mut secrets) = self.0.lock() {
            secrets.remove(owner);
        }
    }
}

impl Connector {
    /// A connector whose clients come from `clients` and whose Secrets are
    /// read with `control`. A Secret read under [`Known::Generation`] is
    /// used again for `secret_ttl`.
    pub fn new(
        clients: RemoteClients,
        control: Client,
        wording: &'static Wording,
        secret_ttl: Duration,
    ) -> Self {
        Self {
            clients,
            control,
            wording,
            secret_ttl,
            recent: RecentSecrets::default(),
            reading: Mutex::default(),
        }
    }

    /// The client for the kubeconfig under `at` that `owner` (the
    /// KubernetesCluster's namespace/name, the ProviderConfig's name: its
    /// key in the client cache and in metrics) names. The Secret is read
    /// only when `known` cannot tell that the cached client is current.
    pub async fn connect(
        &self,
        owner: &str,
        at: SecretKey<'_>,
        known: Known<'_>,
    ) -> Result<RemoteCluster, ConnectError> {
        if let Some(cached) = self.cached(owner, at, known) {
            return cached;
        }
        // Only a read whose outcome the caches keep is worth waiting for.
        let turn = match known {
            Known::Nothing => None,
            _ => Some(self.turn(owner)),
        };
        let held = match &turn {
            Some(turn) => Some(turn.lock().await),
            None => None,
        };
        // The reconcile before this one in turn may have read it.
        let connected = match self.cached(owner, at, known) {
            Some(cached) => cached,
            None => self.read_and_connect(owner, at, known).await,
        };
        drop(held);
        // Every holder lets go of the turn under the lock it was taken
        // under; the last one removes it.
        if let Some(turn) = turn
            && let Ok(mut reading) = self.reading.lock()
        {
            drop(turn);
            if reading
                .get(owner)
                .is_some_and(|t| Arc::strong_count(t) == 1)
            {
                reading.remove(owner);
            }
        }
        connected
    }

    /// What the caches give for `owner` without a read: the cached client
    /// of the Secret version `known` names, or the client (or why it cannot
    /// be made) of the Secret read recently for the owner's generation.
    fn cached(
        &self,
        owner: &str,
        at: SecretKey<'_>,
        known: Known<'_>,
    ) -> Option<Result<RemoteCluster, ConnectError>> {
        match known {
            Known::Metadata {
                uid,
                resource_version,
            } => self
                .clients
                .cached(owner, uid, at.key, resource_version)
                .map(Ok),
            Known::Generation(generation) => {
                let secret = self.recent.fresh(owner, generation, self.secret_ttl)?;
                Some(self.client_for(owner, &secret, at))
            }
            Known::Nothing => None,
        }
    }

    fn turn(&self, owner: &str) -> Arc<tokio::sync::Mutex<()>> {
        match self.reading.lock() {
            Ok(mut reading) => reading.entry(owner.to_owned()).or_default().clone(),
            Err(_) => Arc::default(),
        }
    }

    /// Reads the Secret (kept for the owner's generation when `known` gives
    /// one) and makes its client.
    async fn read_and_connect(
        &self,
        owner: &str,
        at: SecretKey<'_>,
        known: Known<'_>,
    ) -> Result<RemoteCluster, ConnectError> {
        let secret = Arc::new(self.read_secret(owner, at).await?);
        if let Known::Generation(generation) = known {
            self.recent.store(owner, generation, secret.clone());
        }
        self.client_for(owner, &secret, at)
    }

    fn client_for(
        &self,
        owner: &str,
        secret: &Secret,
        at: SecretKey<'_>,
    ) -> Result<RemoteCluster, ConnectError> {
        self.clients
            .for_secret(owner, secret, at.key)
            .map_err(|source| ConnectError::Unusable {
                wording: self.wording,
                owner: owner.to_owned(),
                source: Box::new(source),
            })
    }

    /// Reads the Secret (one GET); a missing one releases the owner's
    /// client.
    async fn read_secret(&self, owner: &str, at: SecretKey<'_>) -> Result<Secret, ConnectError> {
        let what = format!("{}/{}", at.namespace, at.name);
        let found = Api::<Secret>::namespaced(self.control.clone(), at.namespace)
            .get_opt(at.name)
            .await
            .map_err(|e| self.read_failed(format!("Secret {what}"), e))?;
        found.ok_or_else(|| self.secret_not_found(owner, what))
    }

    /// The owner does not exist: its client goes.
    pub fn owner_not_found(&self, owner: &str) -> ConnectError {
        self.release(owner);
        ConnectError::OwnerNotFound {
            wording: self.wording,
            owner: owner.to_owned(),
        }
    }

    /// The owner's Secret (`secret`: namespace/name, or what stands for a
    /// Secret the owner does not name) does not exist: its client goes.
    pub fn secret_not_found(&self, owner: &str, secret: String) -> ConnectError {
        self.release(owner);
        ConnectError::SecretNotFound {
            wording: self.wording,
            secret,
            owner: owner.to_owned(),
        }
    }

    /// Reading `what` (the owner, its Secret) from the control cluster
    /// failed.
    pub fn read_failed(&self, what: String, source: kube::Error) -> ConnectError {
        ConnectError::Read {
            wording: self.wording,
            what,
            source: Box::new(source),
        }
    }

    /// Drops the owner's client and the Secret read for it: the owner is
    /// gone, or connects without a Secret now.
    pub fn release(&self, owner: &str) {
        self.clients.release(owner);
        self.recent.forget(owner);
    }
}

/// What reading a target found.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// The object, if it exists.
    pub object: Option<Arc<DynamicObject>>,
    /// Whether its cluster was asked (the watch could not answer): an
    /// absent object was then confirmed absent by the server itself.
    pub asked: bool,
}

/// Reads `target` through its shared watch, registering the dependent's
/// interest; asks the cluster (one GET) only when the watch cannot answer
/// yet (not listed, or failing).
pub async fn read_through<K>(
    session: &mut Session<K>,
    target: &Target,
) -> Result<Found, kube::Error>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    read_cached(session.read(target), target).await
}

/// Answers what `cached` (a session's answer for `target`) says, or asks
/// the cluster (one GET) when it is [`Cached::Unknown`].
pub async fn read_cached(cached: Cached, target: &Target) -> Result<Found, kube::Error> {
    match cached {
        Cached::Present(o) => Ok(Found {
            object: Some(o),
            asked: false,
        }),
        Cached::Absent => Ok(Found::default()),
        Cached::Unknown => {
            tracing::debug!(
                kind = %target.resource.kind,
                name = %target.name,
                "its shared watch has not listed, or is failing: asking the cluster"
            );
            Ok(Found {
                object: target.api().get_opt(&target.name).await?.map(Arc::new),
                asked: true,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Moved from the object-provider (usage.rs), with the memory it tests.
    #[test]
    fn a_credentials_secret_is_read_again_after_its_ttl_or_a_spec_change() {
        const CREDENTIALS_TTL: Duration = Duration::from_secs(30);
        let pc = |generation: i64| ("pc", Some(generation));
        let fresh = |credentials: &RecentSecrets, (owner, generation), ttl| {
            credentials.fresh(owner, generation, ttl)
        };
        let credentials = RecentSecrets::default();
        assert!(fresh(&credentials, pc(1), CREDENTIALS_TTL).is_none());
        credentials.store("pc", Some(1), Arc::new(Secret::default()));
        assert!(fresh(&credentials, pc(1), CREDENTIALS_TTL).is_some());
        assert!(fresh(&credentials, pc(2), CREDENTIALS_TTL).is_none());
        assert!(fresh(&credentials, pc(1), Duration::ZERO).is_none());
        credentials.forget("pc");
        assert!(fresh(&credentials, pc(1), CREDENTIALS_TTL).is_none());
    }
}
