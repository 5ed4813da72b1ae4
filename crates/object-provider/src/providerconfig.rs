//! ProviderConfig, namespaced ProviderConfig and ClusterProviderConfig:
//! each counts its users and cannot be deleted while any Object uses it.
//! The users are counted from the Objects' watch cache (the
//! object-provider's own), by spec.providerConfigRef (and, for a cluster
//! Object, by the label `kubernetes.crossplane.io/provider-config` it
//! carries), so no per-Object record is written; a change of an Object's
//! config wakes the configs it left and joined.

use std::{fmt::Debug, sync::Arc, time::Duration};

use futures::{Stream, channel::mpsc};
use kube::{
    Resource,
    runtime::{
        Controller,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use runtime::{
    conditions,
    controller::Runtime,
    events::ReconcileError,
    reconciler::{
        self, CONTROL_REQUEST_FAILED, Cleanup, ControlError, Reconciler, ScopedApi, Skeleton,
    },
};
use serde::{Serialize, de::DeserializeOwned};
use types::{common::Conditioned, kubernetes::v1alpha1, kubernetes_m::v1alpha1 as m};

use crate::object::{configs, kind::ObjectKind, usage};

/// Name of this controller in metrics and events, for each kind of config.
pub const CONTROLLER: &str = "providerconfig";
/// Held while the config has users.
pub const FINALIZER: &str = usage::IN_USE;
/// Wakes of one config closer together than this are reconciled once: a
/// burst of new Objects costs one status write, not one each.
const DEBOUNCE: Duration = Duration::from_secs(1);

/// A kind of config Objects use.
pub trait ConfigKind:
    Resource<DynamicType = (), Scope: ScopedApi>
    + Conditioned
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Its name in metrics and events.
    const CONTROLLER: &'static str;
    /// Records how many Objects use it.
    fn set_users(status: &mut Self::Status, users: i64);
}

impl ConfigKind for v1alpha1::ProviderConfig {
    const CONTROLLER: &'static str = CONTROLLER;
    fn set_users(status: &mut v1alpha1::ProviderConfigStatus, users: i64) {
        status.users = Some(users);
    }
}

impl ConfigKind for m::ProviderConfig {
    const CONTROLLER: &'static str = "namespaced-providerconfig";
    fn set_users(status: &mut m::ProviderConfigStatus, users: i64) {
        status.users = Some(users);
    }
}

impl ConfigKind for m::ClusterProviderConfig {
    const CONTROLLER: &'static str = "clusterproviderconfig";
    fn set_users(status: &mut m::ProviderConfigStatus, users: i64) {
        status.users = Some(users);
    }
}

/// Why reconciling a config failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        CONTROL_REQUEST_FAILED
    }
}

/// The reconciler of configs of kind `P`, used by Objects of kind `K`.
struct ProviderConfigs<P, K: ObjectKind> {
    skeleton: Skeleton,
    objects: Store<K>,
    kind: std::marker::PhantomData<fn() -> P>,
}

/// The message of a config that is in use.
fn in_use(users: &[String]) -> String {
    format!(
        "in use by {} Objects: {}; delete them (or point them at another config) first",
        users.len(),
        users.join(", ")
    )
}

impl<P: ConfigKind, K: ObjectKind> ProviderConfigs<P, K> {
    async fn users(&self, pc: &P, status: &mut P::Status) -> Vec<String> {
        // Counting before the Objects are listed would count none.
        runtime::controller::wait_cache_ready(&self.objects).await;
        let state = self.objects.state();
        let users = usage::users(state.iter().map(|o| o.as_ref()), &configs::key_of(pc));
        P::set_users(status, users.len() as i64);
        users
    }
}

impl<P: ConfigKind, K: ObjectKind> Reconciler for ProviderConfigs<P, K> {
    type Object = P;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.skeleton
    }

    /// A config's users are counted from the Objects' cache.
    async fn ready(&self) -> bool {
        runtime::controller::cache_ready(&self.objects).await
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn apply(&self, pc: &Arc<P>, status: &mut P::Status) -> Result<Action, Error> {
        self.users(pc, status).await;
        // Objects wake their config; no resync needed.
        Ok(Action::await_change())
    }

    async fn cleanup(&self, pc: &Arc<P>, status: &mut P::Status) -> Result<Cleanup, Error> {
        let users = self.users(pc, status).await;
        if users.is_empty() {
            return Ok(Cleanup::Done);
        }
        let msg = in_use(&users);
        let condition = conditions::custom("InUse", true, "ProviderConfigInUse", Some(msg.clone()));
        if conditions::set(P::conditions_mut(status), condition, &conditions::now()) {
            self.skeleton
                .reporting
                .events
                .warning(
                    &pc.object_ref(&()),
                    "ProviderConfigInUse",
                    format!("cannot be deleted yet: {msg}"),
                )
                .await;
        }
        Ok(Cleanup::Wait(Action::await_change()))
    }
}

/// The cluster ProviderConfigs' watch: its cache (the Object controller
/// reads configs from it), and the names of configs whose spec changed.
pub struct ConfigWatch {
    /// The ProviderConfigs' cache.
    pub store: Store<v1alpha1::ProviderConfig>,
    /// Names of ProviderConfigs whose spec changed or that were deleted.
    pub changed: mpsc::UnboundedReceiver<String>,
    events: futures::stream::BoxStream<'static, Result<v1alpha1::ProviderConfig, watcher::Error>>,
}

/// Starts watching cluster ProviderConfigs (lazily: with the controller).
pub fn watch_configs(rt: &Runtime) -> ConfigWatch {
    let (store, events, changed) = configs::watch(rt);
    ConfigWatch {
        store,
        changed,
        events,
    }
}

/// The cluster ProviderConfig controller; `objects` is the cluster
/// Objects' cache and `wakes` names configs whose users changed.
pub fn controller(
    rt: &Runtime,
    configs: ConfigWatch,
    objects: Store<types::kubernetes::v1alpha2::Object>,
    wakes: impl Stream<Item = ObjectRef<v1alpha1::ProviderConfig>> + Send + 'static,
) -> impl Future<Output = ()> {
    controller_of(rt, configs.events, configs.store, objects, wakes)
}

/// The controller of configs of kind `P` (from `events`, cached in
/// `store`), used by Objects of kind `K` (cached in `objects`); `wakes`
/// names configs whose users changed.
pub fn controller_of<P: ConfigKind, K: ObjectKind>(
    rt: &Runtime,
    events: impl Stream<Item = Result<P, watcher::Error>> + Send + 'static,
    store: Store<P>,
    objects: Store<K>,
    wakes: impl Stream<Item = ObjectRef<P>> + Send + 'static,
) -> impl Future<Output = ()> {
    let ctx = Arc::new(ProviderConfigs {
        skeleton: Skeleton::new(rt, P::CONTROLLER),
        objects,
        kind: std::marker::PhantomData,
    });
    let controller = Controller::for_stream(events, store)
        .reconcile_on(wakes)
        .with_config(rt.controller_config().debounce(DEBOUNCE))
        .graceful_shutdown_on(rt.shutdown());
    reconciler::run(controller, ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_use_message_names_every_user() {
        let msg = in_use(&["Object a".to_owned(), "Object b".to_owned()]);
        assert!(
            msg.starts_with("in use by 2 Objects: Object a, Object b;"),
            "{msg}"
        );
    }
}
