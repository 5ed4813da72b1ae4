//! The observe-only controller, for binaries whose reconcile logic has not
//! landed yet: it watches every object of one kind, counts and logs what it
//! sees, so that their wiring (watch, RBAC, metrics, leader election) is
//! exercised.

use std::{fmt::Debug, sync::Arc};

use kube::{
    Api, Resource, ResourceExt,
    runtime::{Controller, controller::Action, reflector::Store, watcher},
};
use serde::{Serialize, de::DeserializeOwned};

use super::{Reporting, Runtime};
use crate::reconciler;

/// An observe-only reconcile cannot fail.
#[derive(Debug)]
pub enum Never {}

impl std::fmt::Display for Never {
    fn fmt(&self, _f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {}
    }
}

impl std::error::Error for Never {}

impl crate::events::ReconcileError for Never {
    fn category(&self) -> &'static str {
        match *self {}
    }
}

/// What an observe-only controller's reconciles share.
struct Observer<K: Resource<DynamicType = ()> + 'static> {
    reporting: Reporting,
    store: Store<K>,
    resync: std::time::Duration,
}

/// Watches every object of kind `K` under the name `controller` (its
/// `controller` label in the metrics), through the same driver and
/// [`Reporting`] as every other controller: each object seen is one
/// reconcile that logs it, counts it and publishes how many are cached; it is
/// looked at again after --sync-interval.
pub async fn observe<K>(rt: Runtime, controller: &'static str)
where
    K: Resource<DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let reporting = Reporting::new(&rt, controller);
    let ctrl = Controller::new(Api::<K>::all(rt.client.clone()), watcher::Config::default());
    let observer = Arc::new(Observer {
        reporting: reporting.clone(),
        store: ctrl.store(),
        resync: rt.args.sync_interval,
    });
    let ctrl = ctrl
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    reconciler::drive(ctrl, observer, reporting, |obj, o| async move {
        o.reporting.reconcile(obj.as_ref(), seen(&o, &obj)).await
    })
    .await;
}

async fn seen<K: Resource<DynamicType = ()> + Clone>(
    o: &Observer<K>,
    obj: &K,
) -> Result<Action, Never> {
    let controller = o.reporting.controller;
    o.reporting
        .metrics
        .pending
        .with_label_values(&[controller])
        .set(o.store.state().len() as i64);
    tracing::debug!(controller, name = %obj.name_any(), "observed");
    Ok(Action::requeue(o.resync))
}
