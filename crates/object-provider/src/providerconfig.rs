//! ProviderConfig: counts its users and cannot be deleted while any
//! ProviderConfigUsage names it.

use std::sync::Arc;

use futures::StreamExt;
use kube::{
    Api, Resource, ResourceExt,
    runtime::{Controller, WatchStreamExt, controller::Action, reflector::ObjectRef, watcher},
};
use runtime::{
    conditions,
    controller::{Reporting, Runtime},
    events::ReconcileError,
    finalizers, ssa,
};
use types::kubernetes::v1alpha1::{ProviderConfig, ProviderConfigUsage};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "providerconfig";
/// Held while the ProviderConfig has users.
pub const FINALIZER: &str = "in-use.crossplane.io";

/// Why reconciling a ProviderConfig failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request failed.
    #[error("failed to {0}")]
    Request(&'static str, #[source] kube::Error),
    /// Serializing failed.
    #[error("failed to serialize")]
    Serialize(#[from] serde_json::Error),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Request(..) => "ProviderConfigRequestFailed",
            Error::Serialize(_) => "CannotSerialize",
        }
    }
}

struct Ctx {
    rt: Runtime,
    reporting: Reporting,
}

async fn reconcile(pc: Arc<ProviderConfig>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.reporting
        .reconcile(pc.as_ref(), async {
            let api: Api<ProviderConfig> = Api::all(ctx.rt.client.clone());
            // One LIST by label: configs are few, and the count is then never
            // older than this reconcile.
            let usages: Api<ProviderConfigUsage> = Api::all(ctx.rt.client.clone());
            let selector = format!("kubernetes.crossplane.io/provider-config={}", pc.name_any());
            let mut users: Vec<String> = usages
                .list(&kube::api::ListParams::default().labels(&selector))
                .await
                .map_err(|e| Error::Request("list ProviderConfigUsages", e))?
                .items
                .iter()
                .filter(|u| u.spec.provider_config_ref.name == pc.name_any())
                .map(|u| format!("{} {}", u.spec.resource_ref.kind, u.spec.resource_ref.name))
                .collect();
            users.sort();
            let mut status = pc.status.clone().unwrap_or_default();
            let n = users.len() as i64;
            let mut changed = status.users != Some(n);
            status.users = Some(n);
            if pc.metadata.deletion_timestamp.is_some() {
                if users.is_empty() {
                    finalizers::remove(&api, pc.as_ref(), FINALIZER).await.map_err(|e| Error::Request("remove the finalizer", e))?;
                    return Ok(Action::await_change());
                }
                let msg = format!("in use by {n} Objects: {}; delete them (or point them at another ProviderConfig) first", users.join(", "));
                changed |= conditions::set(&mut status.conditions, conditions::custom("InUse", true, "ProviderConfigInUse", Some(msg.clone())), &conditions::now());
                if changed {
                    let oref = pc.object_ref(&());
                    ctx.reporting.events.warning(&oref, "ProviderConfigInUse", format!("cannot be deleted yet: {msg}")).await;
                }
            } else {
                finalizers::add(&api, pc.as_ref(), FINALIZER).await.map_err(|e| Error::Request("add the finalizer", e))?;
            }
            if changed {
                ssa::apply_status(&api, &pc.name_any(), serde_json::to_value(&status)?, &ctx.rt.field_manager())
                    .await
                    .map_err(|e| Error::Request("write ProviderConfig status", e))?;
            }
            // Usages wake their config; looking again every poll interval
            // keeps the count right even if a wake-up is ever missed.
            Ok(Action::requeue(ctx.rt.args.poll_interval))
        })
        .await
}

fn error_policy(pc: Arc<ProviderConfig>, _e: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.reporting.retry(pc.as_ref())
}

/// The ProviderConfig controller; usages wake the config they name.
pub fn controller(rt: &Runtime) -> impl Future<Output = ()> + use<> {
    let usage_events = watcher(
        Api::<ProviderConfigUsage>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects();
    let ctx = Arc::new(Ctx {
        rt: rt.clone(),
        reporting: Reporting::new(rt, CONTROLLER),
    });
    Controller::new(
        Api::<ProviderConfig>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .watches_stream(usage_events, |u: ProviderConfigUsage| {
        Some(ObjectRef::new(&u.spec.provider_config_ref.name))
    })
    .with_config(rt.controller_config())
    .graceful_shutdown_on(rt.shutdown())
    .run(reconcile, error_policy, ctx)
    .for_each(|_| futures::future::ready(()))
}
