//! ProviderConfig: counts its users and cannot be deleted while any Object
//! uses it. The users are counted from the Objects' watch cache (the
//! object-provider's own), by spec.providerConfigRef and by the label
//! `kubernetes.crossplane.io/provider-config` each Object carries, so no
//! per-Object record is written; a change of an Object's config wakes the
//! configs it left and joined.

use std::{sync::Arc, time::Duration};

use futures::{Stream, StreamExt, channel::mpsc};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use runtime::{
    conditions,
    controller::{Runtime, trim},
    events::ReconcileError,
    reconciler::{self, CONTROL_REQUEST_FAILED, Cleanup, ControlError, Reconciler, Skeleton},
};
use types::kubernetes::{
    v1alpha1::{ProviderConfig, ProviderConfigStatus},
    v1alpha2::Object,
};

use crate::object::usage;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "providerconfig";
/// Held while the ProviderConfig has users.
pub const FINALIZER: &str = usage::IN_USE;
/// Wakes of one ProviderConfig closer together than this are reconciled
/// once: a burst of new Objects costs one status write, not one each.
const DEBOUNCE: Duration = Duration::from_secs(1);

/// Why reconciling a ProviderConfig failed.
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

/// The ProviderConfig reconciler: what its reconciles share.
struct ProviderConfigs {
    skeleton: Skeleton,
    objects: Store<Object>,
}

/// The message of a ProviderConfig that is in use.
fn in_use(users: &[String]) -> String {
    format!(
        "in use by {} Objects: {}; delete them (or point them at another ProviderConfig) first",
        users.len(),
        users.join(", ")
    )
}

impl ProviderConfigs {
    async fn users(&self, pc: &ProviderConfig, status: &mut ProviderConfigStatus) -> Vec<String> {
        // Counting before the Objects are listed would count none.
        runtime::controller::wait_cache_ready(&self.objects).await;
        let state = self.objects.state();
        let users = usage::users(state.iter().map(|o| o.as_ref()), &pc.name_any());
        status.users = Some(users.len() as i64);
        users
    }
}

impl Reconciler for ProviderConfigs {
    type Object = ProviderConfig;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.skeleton
    }

    /// A ProviderConfig's users are counted from the Objects' cache.
    async fn ready(&self) -> bool {
        runtime::controller::cache_ready(&self.objects).await
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn apply(
        &self,
        pc: &Arc<ProviderConfig>,
        status: &mut ProviderConfigStatus,
    ) -> Result<Action, Error> {
        self.users(pc, status).await;
        // Objects wake their config; no resync needed.
        Ok(Action::await_change())
    }

    async fn cleanup(
        &self,
        pc: &Arc<ProviderConfig>,
        status: &mut ProviderConfigStatus,
    ) -> Result<Cleanup, Error> {
        let users = self.users(pc, status).await;
        if users.is_empty() {
            return Ok(Cleanup::Done);
        }
        let msg = in_use(&users);
        let condition = conditions::custom("InUse", true, "ProviderConfigInUse", Some(msg.clone()));
        if conditions::set(&mut status.conditions, condition, &conditions::now()) {
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

/// The ProviderConfigs' watch: its cache (the Object controller reads
/// configs from it), and the names of configs whose spec changed.
pub struct ConfigWatch {
    /// The ProviderConfigs' cache.
    pub store: Store<ProviderConfig>,
    /// Names of ProviderConfigs whose spec changed or that were deleted.
    pub changed: mpsc::UnboundedReceiver<String>,
    events: futures::stream::BoxStream<'static, Result<ProviderConfig, watcher::Error>>,
}

/// Starts watching ProviderConfigs (lazily: with the controller).
pub fn watch_configs(rt: &Runtime) -> ConfigWatch {
    let (tx, changed) = mpsc::unbounded();
    let mut generations = usage::ConfigGenerations::default();
    let (store, events) = trim::reflected(
        Api::<ProviderConfig>::all(rt.client.clone()),
        watcher::Config::default(),
        trim::nothing_else,
    );
    let events = events
        .inspect(move |event| {
            if let Ok(event) = event
                && let Some(name) = generations.changed(event)
            {
                let _ = tx.unbounded_send(name);
            }
        })
        .applied_objects()
        .boxed();
    ConfigWatch {
        store,
        changed,
        events,
    }
}

/// The ProviderConfig controller; `objects` is the Objects' cache and
/// `wakes` names configs whose users changed.
pub fn controller(
    rt: &Runtime,
    configs: ConfigWatch,
    objects: Store<Object>,
    wakes: impl Stream<Item = ObjectRef<ProviderConfig>> + Send + 'static,
) -> impl Future<Output = ()> {
    let ctx = Arc::new(ProviderConfigs {
        skeleton: Skeleton::new(rt, CONTROLLER),
        objects,
    });
    let controller = Controller::for_stream(configs.events, configs.store)
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
