//! The ImageConfigs every controller of this binary reads: one watch feeds
//! one store (what [`crate::packages::Packages`] resolves images against),
//! and each controller that subscribed is told of every ImageConfig that
//! changed, after the store has it, to wake the objects it may apply to.

use std::sync::{Arc, Mutex, PoisonError};

use futures::{StreamExt as _, channel::mpsc};
use kube::{
    Api,
    runtime::{WatchStreamExt as _, reflector, watcher},
};
use types::pkg::v1beta1::{ImageConfig, Resolved, resolve};

/// The ImageConfigs, as the watch last saw them.
pub struct ImageConfigs {
    store: reflector::Store<ImageConfig>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Arc<ImageConfig>>>>,
}

impl ImageConfigs {
    /// The ImageConfigs of `client`'s cluster, and the future that keeps
    /// them (run it with the controllers; subscribe before it runs).
    pub fn watch(client: kube::Client) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let configs = Arc::new(Self {
            store,
            subscribers: Mutex::new(Vec::new()),
        });
        let changes = watcher(Api::<ImageConfig>::all(client), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        let fan_out = Arc::clone(&configs);
        let run = async move {
            futures::pin_mut!(changes);
            while let Some(change) = changes.next().await {
                match change {
                    Ok(config) => fan_out.tell(&Arc::new(config)),
                    Err(e) => {
                        let error = runtime::events::error_chain(&e);
                        tracing::warn!(%error, "watching ImageConfigs");
                    }
                }
            }
        };
        (configs, run)
    }

    fn tell(&self, config: &Arc<ImageConfig>) {
        let mut subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.retain(|s| s.unbounded_send(Arc::clone(config)).is_ok());
    }

    /// Every ImageConfig that changes (made, edited, deleted), once the
    /// store has the change.
    pub fn changes(&self) -> impl futures::Stream<Item = Arc<ImageConfig>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded();
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        rx
    }

    /// Whether the ImageConfigs have been listed: a reconcile that reads
    /// packages waits for it (they may say where a package is read from).
    pub async fn ready(&self) -> bool {
        runtime::controller::cache_ready(&self.store).await
    }

    /// What the ImageConfigs make of `image`, once they have been listed.
    pub async fn resolve(&self, image: &str) -> Resolved {
        // Ready once the first list is in (reconciles check `ready`
        // first, so this rarely waits).
        runtime::controller::wait_cache_ready(&self.store).await;
        resolve(&self.store.state(), image)
    }
}

impl ImageConfigs {
    /// The runtime config the ImageConfigs pick for a runtime whose
    /// package is read as `image`, with the picking ImageConfig's name.
    pub async fn runtime_config_for(
        &self,
        image: &str,
    ) -> Option<(String, types::pkg::v1::RuntimeConfigReference)> {
        runtime::controller::wait_cache_ready(&self.store).await;
        types::pkg::v1beta1::runtime_config_for(&self.store.state(), image)
    }

    /// The ImageConfig that requires `image` (as it is read) to be
    /// verified, if one does: its name, resourceVersion and verification.
    pub async fn verifying(
        &self,
        image: &str,
    ) -> Option<(String, String, types::pkg::v1beta1::ImageVerification)> {
        runtime::controller::wait_cache_ready(&self.store).await;
        let configs = self.store.state();
        let c = types::pkg::v1beta1::verification_for(&configs, image)?;
        Some((
            c.metadata.name.clone().unwrap_or_default(),
            c.metadata.resource_version.clone().unwrap_or_default(),
            c.spec.verification.clone()?,
        ))
    }
}

/// Whether a change of `config` may change what becomes of an object that
/// reads `images` and recorded `applied` (the names of the ImageConfigs
/// applied to it last time): one of its prefixes matches an image, or it
/// was applied (its prefixes may have changed, or it was deleted).
pub fn wakes<'a>(
    config: &ImageConfig,
    images: impl IntoIterator<Item = &'a str>,
    applied: impl IntoIterator<Item = &'a str>,
) -> bool {
    let name = config.metadata.name.as_deref().unwrap_or_default();
    applied.into_iter().any(|a| a == name)
        || images
            .into_iter()
            .any(|i| types::pkg::v1beta1::may_apply(config, i))
}

/// A mapper for `Controller::watches_shared_stream(changes(), …)` that
/// wakes every object of `store` that `keep` accepts, whichever ImageConfig
/// changed: for kinds that are few (stack requests and Extensions).
pub fn wake_all<K>(
    store: kube::runtime::reflector::Store<K>,
    keep: impl Fn(&K) -> bool + Send + Sync + 'static,
) -> impl Fn(Arc<ImageConfig>) -> Vec<kube::runtime::reflector::ObjectRef<K>> + Send + Sync + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    move |_| {
        store
            .state()
            .iter()
            .filter(|o| keep(o))
            .map(|o| kube::runtime::reflector::ObjectRef::from_obj(o.as_ref()))
            .collect()
    }
}
