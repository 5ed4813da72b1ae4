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

use std::collections::HashMap;

use kube::{
    Api, ResourceExt,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
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
    ConfigRef::named(obj.config_kind(), name, obj.namespace())
}

impl ConfigRef {
    /// The config named `name` of kind `kind` (None: a
    /// `kubernetes.crossplane.io` ProviderConfig), as a user in `namespace`
    /// names it (a ProviderConfig is in the user's namespace).
    pub fn named(
        kind: Option<ProviderConfigKind>,
        name: String,
        namespace: Option<String>,
    ) -> Self {
        match kind {
            None => Self::Legacy(name),
            Some(ProviderConfigKind::ClusterProviderConfig) => Self::Cluster(name),
            Some(ProviderConfigKind::ProviderConfig) => Self::Local {
                namespace: namespace.unwrap_or_default(),
                name,
            },
        }
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

/// The key ([`ConfigRef::key`]) of a config of any kind: a cluster
/// Object's ProviderConfig (no namespace), a namespaced ProviderConfig, or
/// a ClusterProviderConfig.
pub fn key_of<P: kube::Resource<DynamicType = ()>>(pc: &P) -> String {
    let name = pc.name_any();
    match (P::kind(&()).as_ref(), pc.namespace()) {
        ("ClusterProviderConfig", _) => ConfigRef::Cluster(name),
        (_, Some(namespace)) => ConfigRef::Local { namespace, name },
        (_, None) => ConfigRef::Legacy(name),
    }
    .key()
}

/// Watches configs of kind `P` (lazily: while the returned stream is
/// polled): their cache, the stream that keeps it, and the keys
/// ([`ConfigRef::key`]) of configs whose spec changed or that were deleted
/// (their Objects connect again).
pub fn watch<P>(
    rt: &runtime::controller::Runtime,
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
    use kube::runtime::WatchStreamExt as _;
    let (tx, changed) = futures::channel::mpsc::unbounded();
    let mut generations = ConfigGenerations::default();
    let (store, events) = runtime::controller::trim::reflected(
        Api::<P>::all(rt.client.clone()),
        watcher::Config::default(),
        runtime::controller::trim::nothing_else,
    );
    let events = events
        .inspect(move |event| {
            if let Ok(event) = event
                && let Some(key) = generations.changed(event)
            {
                let _ = tx.unbounded_send(key);
            }
        })
        .applied_objects()
        .boxed();
    (store, events, changed)
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
    confined_to(obj.namespace(), config)
}

/// The namespace what a namespaced object (one in `namespace`) reaches in
/// the control cluster with the provider's own identity is confined to,
/// if it is: its own, unless its config reaches the cluster. `None` for a
/// cluster object, or a config with credentials of its own.
pub fn confined_to(namespace: Option<String>, config: &Config) -> Option<String> {
    let injected = config.credentials.source == v1alpha1::CredentialsSource::InjectedIdentity;
    let namespace = namespace.filter(|_| injected)?;
    (config.reach != Reach::Cluster).then_some(namespace)
}

/// Remembers each ProviderConfig's generation, to tell a change of its spec
/// (which wakes its Objects) from a change of its status (which does not).
#[derive(Default)]
pub struct ConfigGenerations(HashMap<String, Option<i64>>);

impl ConfigGenerations {
    /// The key ([`key_of`]) of the config whose spec this
    /// event changed (what it connects to), if it did.
    pub fn changed<P: kube::Resource<DynamicType = ()>>(
        &mut self,
        event: &watcher::Event<P>,
    ) -> Option<String> {
        match event {
            watcher::Event::Apply(pc) | watcher::Event::InitApply(pc) => {
                let key = key_of(pc);
                let previous = self.0.insert(key.clone(), pc.meta().generation);
                (previous.is_some_and(|g| g != pc.meta().generation)).then_some(key)
            }
            watcher::Event::Delete(pc) => {
                let key = key_of(pc);
                self.0.remove(&key);
                Some(key)
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use types::kubernetes::v1alpha1::ProviderConfig;

    use super::*;

    #[test]
    fn only_a_spec_change_of_a_config_wakes_its_objects() {
        let pc = |generation: i64| -> ProviderConfig {
            serde_json::from_value(json!({
                "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "ProviderConfig",
                "metadata": {"name": "pc", "generation": generation},
                "spec": {"credentials": {"source": "InjectedIdentity"}},
            }))
            .unwrap()
        };
        let mut generations = ConfigGenerations::default();
        assert_eq!(generations.changed(&watcher::Event::InitApply(pc(1))), None);
        assert_eq!(generations.changed(&watcher::Event::Apply(pc(1))), None);
        assert_eq!(
            generations.changed(&watcher::Event::Apply(pc(2))),
            Some("pc".to_owned())
        );
        assert_eq!(
            generations.changed(&watcher::Event::Delete(pc(2))),
            Some("pc".to_owned())
        );
    }

    #[test]
    fn every_kind_of_config_has_the_key_its_objects_name_it_by() {
        let local: m::ProviderConfig = serde_json::from_value(json!({
            "apiVersion": m::API_VERSION, "kind": "ProviderConfig",
            "metadata": {"name": "pc", "namespace": "team-a"},
            "spec": {"credentials": {"source": "InjectedIdentity"}},
        }))
        .unwrap();
        let cluster: m::ClusterProviderConfig = serde_json::from_value(json!({
            "apiVersion": m::API_VERSION, "kind": "ClusterProviderConfig",
            "metadata": {"name": "pc"},
            "spec": {"credentials": {"source": "InjectedIdentity"}},
        }))
        .unwrap();
        let local_ref = ConfigRef::Local {
            namespace: "team-a".to_owned(),
            name: "pc".to_owned(),
        };
        assert_eq!(key_of(&local), local_ref.key());
        assert_eq!(parse_key(&key_of(&local)), Some(local_ref));
        assert_eq!(
            parse_key(&key_of(&cluster)),
            Some(ConfigRef::Cluster("pc".to_owned()))
        );
    }
}
