//! The configs Objects use, from watch caches: a cluster Object's
//! `kubernetes.crossplane.io` ProviderConfig; a namespaced Object's
//! ProviderConfig (of its own namespace) or ClusterProviderConfig.
//!
//! What a namespaced Object may reach follows from its config: with the
//! provider's own identity (InjectedIdentity) it manages objects only in its
//! own namespace, and every namespaced Object reads references only in its
//! own namespace, unless a ClusterProviderConfig with `reach: Cluster` says
//! otherwise. A namespaced ProviderConfig reads its credentials only from a
//! Secret of its own namespace.

use std::fmt;

use kube::{
    Api, ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};
use runtime::finalizers;
use types::{
    kubernetes::v1alpha1::{self, Identity, ProviderCredentials},
    kubernetes_m::v1alpha1::{self as m, ProviderConfigKind, Reach},
};

use super::kind::ObjectKind;

/// The finalizer a config carries while Objects use it.
pub const IN_USE: &str = "in-use.crossplane.io";

/// The config caches the Objects of one kind read.
#[derive(Clone)]
pub enum Configs {
    /// A cluster Object's ProviderConfigs.
    Cluster(Store<v1alpha1::ProviderConfig>),
    /// A namespaced Object's ProviderConfigs and ClusterProviderConfigs.
    Namespaced {
        local: Store<m::ProviderConfig>,
        cluster: Store<m::ClusterProviderConfig>,
    },
}

/// The config one Object uses.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConfigRef {
    /// A `kubernetes.crossplane.io` ProviderConfig.
    Legacy(String),
    /// A `kubernetes.m.crossplane.io` ProviderConfig in a namespace.
    Local { namespace: String, name: String },
    /// A ClusterProviderConfig.
    Cluster(String),
}

impl fmt::Display for ConfigRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Legacy(name) => write!(f, "ProviderConfig {name}"),
            Self::Local { namespace, name } => write!(f, "ProviderConfig {namespace}/{name}"),
            Self::Cluster(name) => write!(f, "ClusterProviderConfig {name}"),
        }
    }
}

impl ConfigRef {
    /// How the connector's client cache knows it: the name of a cluster
    /// Object's ProviderConfig (as before namespaced Objects), else what
    /// messages call it.
    pub fn key(&self) -> String {
        match self {
            Self::Legacy(name) => name.clone(),
            other => other.to_string(),
        }
    }
}

/// The config `obj` uses.
pub fn config_of<K: ObjectKind>(obj: &K) -> ConfigRef {
    let name = obj.view().spec.provider_config_ref.name.clone();
    match obj.config_kind() {
        None => ConfigRef::Legacy(name),
        Some(ProviderConfigKind::ClusterProviderConfig) => ConfigRef::Cluster(name),
        Some(ProviderConfigKind::ProviderConfig) => ConfigRef::Local {
            namespace: obj.namespace().unwrap_or_default(),
            name,
        },
    }
}

/// A config, as connecting needs it.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which.
    pub of: ConfigRef,
    /// Its generation (a changed spec connects again).
    pub generation: Option<i64>,
    /// Its credentials.
    pub credentials: ProviderCredentials,
    /// Its cloud identity, if it names one.
    pub identity: Option<Identity>,
    /// How far namespaced Objects using it reach.
    pub reach: Reach,
}

impl Configs {
    /// Waits until the caches hold their first complete list.
    pub async fn wait_ready(&self) {
        match self {
            Self::Cluster(s) => runtime::controller::wait_cache_ready(s).await,
            Self::Namespaced { local, cluster } => {
                runtime::controller::wait_cache_ready(local).await;
                runtime::controller::wait_cache_ready(cluster).await;
            }
        }
    }

    /// Whether the caches hold their first complete list.
    pub async fn ready(&self) -> bool {
        match self {
            Self::Cluster(s) => runtime::controller::cache_ready(s).await,
            Self::Namespaced { local, cluster } => {
                runtime::controller::cache_ready(local).await
                    && runtime::controller::cache_ready(cluster).await
            }
        }
    }

    /// The config `of` names, from the cache.
    pub fn get(&self, of: &ConfigRef) -> Option<Config> {
        let config = |generation, credentials: &ProviderCredentials, identity, reach| Config {
            of: of.clone(),
            generation,
            credentials: credentials.clone(),
            identity,
            reach,
        };
        match (self, of) {
            (Self::Cluster(s), ConfigRef::Legacy(name)) => s.get(&ObjectRef::new(name)).map(|pc| {
                config(
                    pc.metadata.generation,
                    &pc.spec.credentials,
                    pc.spec.identity.clone(),
                    Reach::Cluster,
                )
            }),
            (Self::Namespaced { local, .. }, ConfigRef::Local { namespace, name }) => local
                .get(&ObjectRef::new(name).within(namespace))
                .map(|pc| {
                    config(
                        pc.metadata.generation,
                        &pc.spec.credentials,
                        pc.spec.identity.clone(),
                        Reach::OwnNamespace,
                    )
                }),
            (Self::Namespaced { cluster, .. }, ConfigRef::Cluster(name)) => {
                cluster.get(&ObjectRef::new(name)).map(|pc| {
                    config(
                        pc.metadata.generation,
                        &pc.spec.credentials,
                        pc.spec.identity.clone(),
                        pc.spec.reach,
                    )
                })
            }
            _ => None,
        }
    }

    /// Puts the in-use finalizer on the config `of` names when it does not
    /// carry it yet (one request per config, not per Object), so that it is
    /// protected before anything is made with it, whenever its own
    /// controller gets to it.
    pub async fn protect(&self, client: &kube::Client, of: &ConfigRef) -> Result<(), kube::Error> {
        match (self, of) {
            (Self::Cluster(s), ConfigRef::Legacy(name)) => {
                let api = Api::<v1alpha1::ProviderConfig>::all(client.clone());
                protect_in(&api, s.get(&ObjectRef::new(name))).await
            }
            (Self::Namespaced { local, .. }, ConfigRef::Local { namespace, name }) => {
                let api = Api::<m::ProviderConfig>::namespaced(client.clone(), namespace);
                protect_in(&api, local.get(&ObjectRef::new(name).within(namespace))).await
            }
            (Self::Namespaced { cluster, .. }, ConfigRef::Cluster(name)) => {
                let api = Api::<m::ClusterProviderConfig>::all(client.clone());
                protect_in(&api, cluster.get(&ObjectRef::new(name))).await
            }
            _ => Ok(()),
        }
    }
}

async fn protect_in<P>(api: &Api<P>, pc: Option<std::sync::Arc<P>>) -> Result<(), kube::Error>
where
    P: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + fmt::Debug,
{
    let Some(pc) = pc else {
        return Ok(());
    };
    if pc.meta().deletion_timestamp.is_some() || finalizers::has(pc.as_ref(), IN_USE) {
        return Ok(());
    }
    finalizers::add(api, pc.as_ref(), IN_USE).await
}

/// The config a key ([`ConfigRef::key`]) names, for a namespaced Object's
/// configs (a cluster Object's key is its ProviderConfig's name).
pub fn parse_key(key: &str) -> Option<ConfigRef> {
    if let Some(rest) = key.strip_prefix("ProviderConfig ") {
        let (namespace, name) = rest.split_once('/')?;
        return Some(ConfigRef::Local {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    key.strip_prefix("ClusterProviderConfig ")
        .map(|name| ConfigRef::Cluster(name.to_owned()))
}

/// Watches configs of kind `P` (lazily: while the returned stream is
/// polled): their cache, the stream that keeps it, and the keys
/// ([`ConfigRef::key`]) of configs whose spec changed or that were deleted
/// (their Objects connect again).
pub fn watch<P>(
    rt: &runtime::controller::Runtime,
    key: fn(&P) -> String,
) -> (
    Store<P>,
    futures::stream::BoxStream<'static, Result<P, kube::runtime::watcher::Error>>,
    futures::channel::mpsc::UnboundedReceiver<String>,
)
where
    P: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let (tx, changed) = futures::channel::mpsc::unbounded();
    let mut generations = std::collections::HashMap::new();
    let (store, events) = runtime::controller::trim::reflected(
        Api::<P>::all(rt.client.clone()),
        watcher::Config::default(),
        runtime::controller::trim::nothing_else,
    );
    let events = events
        .inspect(move |event| {
            let changed = match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let previous = generations.insert(key(p), p.meta().generation);
                    previous
                        .is_some_and(|g| g != p.meta().generation)
                        .then(|| key(p))
                }
                Ok(watcher::Event::Delete(p)) => {
                    generations.remove(&key(p));
                    Some(key(p))
                }
                _ => None,
            };
            if let Some(k) = changed {
                let _ = tx.unbounded_send(k);
            }
        })
        .applied_objects()
        .boxed();
    (store, events, changed)
}

/// The key of a namespaced ProviderConfig.
pub fn local_key(pc: &m::ProviderConfig) -> String {
    ConfigRef::Local {
        namespace: pc.namespace().unwrap_or_default(),
        name: pc.name_any(),
    }
    .key()
}

/// The key of a ClusterProviderConfig.
pub fn cluster_key(pc: &m::ClusterProviderConfig) -> String {
    ConfigRef::Cluster(pc.name_any()).key()
}

/// The namespace a namespaced Object is confined to, if it is: every
/// namespaced Object for what it reads in the control cluster
/// (`references`), unless its ClusterProviderConfig reaches the cluster.
pub fn reads_confined_to<K: ObjectKind>(obj: &K, config: Option<&Config>) -> Option<String> {
    let namespace = obj.namespace()?;
    match config {
        Some(c) if c.reach == Reach::Cluster => None,
        _ => Some(namespace),
    }
}

/// The namespace a namespaced Object's managed object (and connection
/// detail sources) must be in, if confined: when its config reaches the
/// control cluster with the provider's own identity and does not reach
/// the cluster.
pub fn writes_confined_to<K: ObjectKind>(obj: &K, config: &Config) -> Option<String> {
    let injected = config.credentials.source == v1alpha1::CredentialsSource::InjectedIdentity;
    if !injected {
        return None;
    }
    reads_confined_to(obj, Some(config))
}
