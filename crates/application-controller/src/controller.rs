//! The application controller: keeps one KubernetesApplicationResource per
//! template of each scheduled application, deletes the ones no template asks
//! for, and reports desired/submitted/state/Ready. Deleting an application
//! deletes its resources (and through their finalizers, the remote objects)
//! before the application goes.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    api::DeleteParams,
    runtime::{Controller, WatchStreamExt, controller::Action, reflector::Store, watcher},
};
use runtime::{
    conditions,
    controller::{CACHE_NOT_READY_RETRY, Reporting, Runtime, cache_ready},
    events::ReconcileError,
    finalizers, ssa,
};
use types::workload::v1alpha1::{
    KubernetesApplication, KubernetesApplicationResource, KubernetesApplicationState,
};

use crate::desired;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "kubernetesapplication";
/// Finalizer that holds an application until its resources are gone.
pub const FINALIZER: &str = "workload.crossplane.io/application-controller";
/// How often a deleting application looks at its remaining resources.
const DELETE_POLL: Duration = Duration::from_secs(2);

/// Why reconciling an application failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Adding or removing the finalizer failed.
    #[error("failed to update the finalizer")]
    Finalizer(#[source] kube::Error),
    /// Deleting a resource failed.
    #[error("failed to delete KubernetesApplicationResource {0}")]
    Delete(String, #[source] kube::Error),
    /// Writing status failed.
    #[error("failed to write KubernetesApplication status")]
    WriteStatus(#[source] kube::Error),
    /// Serializing status failed.
    #[error("failed to serialize status")]
    Serialize(#[from] serde_json::Error),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Finalizer(_) => "CannotUpdateFinalizer",
            Error::Delete(..) => "CannotDeleteResource",
            Error::WriteStatus(_) => "CannotWriteStatus",
            Error::Serialize(_) => "CannotSerializeStatus",
        }
    }
}

/// Shared by reconciles.
pub struct Ctx {
    rt: Runtime,
    reporting: Reporting,
    resources: Store<KubernetesApplicationResource>,
}

fn owned<'a>(
    ctx: &'a Ctx,
    app: &'a KubernetesApplication,
) -> impl Iterator<Item = Arc<KubernetesApplicationResource>> + 'a {
    let ns = app.namespace();
    ctx.resources
        .state()
        .into_iter()
        .filter(move |r| r.namespace() == ns && desired::controlled_by(r, app))
}

async fn reconcile(app: Arc<KubernetesApplication>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let scheduled = app
        .status
        .as_ref()
        .and_then(|s| s.cluster_ref.as_ref())
        .map(|c| c.name.clone());
    let deleting = app.metadata.deletion_timestamp.is_some();
    if scheduled.is_none() && !finalizers::has(app.as_ref(), FINALIZER) {
        // Unscheduled applications belong to the scheduler.
        return Ok(Action::await_change());
    }
    if !cache_ready(&ctx.resources).await {
        return Ok(Action::requeue(CACHE_NOT_READY_RETRY));
    }
    ctx.reporting
        .reconcile(app.as_ref(), async {
            let api: Api<KubernetesApplication> =
                Api::namespaced(ctx.rt.client.clone(), &app.namespace().unwrap_or_default());
            if deleting {
                return cleanup(&ctx, &api, &app).await;
            }
            finalizers::add(&api, app.as_ref(), FINALIZER)
                .await
                .map_err(Error::Finalizer)?;
            let cluster = scheduled.unwrap_or_default();
            apply(&ctx, &api, &app, &cluster).await
        })
        .await
}

async fn apply(
    ctx: &Ctx,
    api: &Api<KubernetesApplication>,
    app: &KubernetesApplication,
    cluster: &str,
) -> Result<Action, Error> {
    let ns = app.namespace().unwrap_or_default();
    let resources: Api<KubernetesApplicationResource> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let mut problems: Vec<String> = Vec::new();
    let mut wanted = BTreeSet::new();
    for index in 0..app.spec.resource_templates.len() {
        let (name, body) = match desired::resource_for(app, index, cluster) {
            Ok(r) => r,
            Err(msg) => {
                problems.push(msg);
                continue;
            }
        };
        wanted.insert(name.clone());
        let existing = ctx
            .resources
            .get(&kube::runtime::reflector::ObjectRef::new(&name).within(&ns));
        if let Some(existing) = &existing {
            if !desired::controlled_by(existing, app) {
                let by = match desired::controller_of(existing) {
                    Some(o) => format!("{} {}", o.kind, o.name),
                    None => "no controller".to_owned(),
                };
                problems.push(format!(
                    "KubernetesApplicationResource {ns}/{name} already exists and is controlled by {by}; it is left alone: rename the template or delete that resource"
                ));
                continue;
            }
            if desired::up_to_date(existing, &body) {
                continue;
            }
        }
        if let Err(e) = ssa::apply(&resources, &name, &body, &ctx.rt.field_manager()).await {
            problems.push(format!(
                "cannot apply KubernetesApplicationResource {ns}/{name}: {}",
                runtime::events::error_chain(&e)
            ));
        }
    }
    let owned: Vec<_> = owned(ctx, app).collect();
    for name in desired::stale(owned.iter().map(Arc::as_ref), &wanted) {
        match resources.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {
                tracing::info!(namespace = %ns, resource = %name, "deleted a resource no template asks for")
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::Delete(format!("{ns}/{name}"), e)),
        }
    }
    // Status from the resources this application controls and still wants.
    let current: Vec<_> = owned
        .iter()
        .filter(|r| wanted.contains(&r.name_any()))
        .collect();
    let submitted = current.iter().filter(|r| desired::submitted(r)).count();
    let failed = current.iter().filter(|r| desired::failed(r)).count();
    let desired_count = app.spec.resource_templates.len();
    let mut not_ready: Vec<String> = Vec::new();
    for name in &wanted {
        let ready = current
            .iter()
            .find(|r| &r.name_any() == name)
            .and_then(|r| {
                r.status
                    .as_ref()
                    .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_READY))
                    .cloned()
            });
        match ready {
            Some(c) if c.status == "True" => {}
            Some(c) => not_ready.push(format!(
                "{name}: {}",
                c.message.unwrap_or_else(|| c.reason.unwrap_or_default())
            )),
            None => not_ready.push(format!("{name}: not yet submitted")),
        }
    }
    let state = desired::state(desired_count, submitted, failed);
    let synced = if problems.is_empty() {
        conditions::reconcile_success()
    } else {
        conditions::reconcile_error(problems.join("; "))
    };
    let ready = if not_ready.is_empty() && problems.is_empty() {
        conditions::available()
    } else if not_ready.is_empty() {
        conditions::unavailable(problems.join("; "))
    } else {
        conditions::unavailable(format!(
            "not every remote object is healthy: {}",
            not_ready.join("; ")
        ))
    };
    write_status(
        ctx,
        api,
        app,
        state,
        desired_count,
        submitted,
        [synced, ready],
    )
    .await?;
    if !problems.is_empty() {
        // A conflicting resource is not ours to watch; look again later.
        for p in &problems {
            tracing::warn!(namespace = %ns, application = %app.name_any(), problem = %p, "cannot submit a resource");
        }
        return Ok(Action::requeue(ctx.rt.args.poll_interval));
    }
    Ok(Action::requeue(ctx.rt.args.sync_interval))
}

async fn cleanup(
    ctx: &Ctx,
    api: &Api<KubernetesApplication>,
    app: &KubernetesApplication,
) -> Result<Action, Error> {
    let ns = app.namespace().unwrap_or_default();
    let resources: Api<KubernetesApplicationResource> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let remaining: Vec<_> = owned(ctx, app).collect();
    if remaining.is_empty() {
        finalizers::remove(api, app, FINALIZER)
            .await
            .map_err(Error::Finalizer)?;
        return Ok(Action::await_change());
    }
    let desired_count = app.spec.resource_templates.len();
    let submitted = remaining.iter().filter(|r| desired::submitted(r)).count();
    write_status(
        ctx,
        api,
        app,
        KubernetesApplicationState::Deleting,
        desired_count,
        submitted,
        [conditions::reconcile_success(), conditions::deleting()],
    )
    .await?;
    for r in remaining
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
    {
        let name = r.name_any();
        // The resource's own finalizer removes its remote object first.
        match resources.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::Delete(format!("{ns}/{name}"), e)),
        }
    }
    Ok(Action::requeue(DELETE_POLL))
}

async fn write_status(
    ctx: &Ctx,
    api: &Api<KubernetesApplication>,
    app: &KubernetesApplication,
    state: KubernetesApplicationState,
    desired: usize,
    submitted: usize,
    conds: [types::common::Condition; 2],
) -> Result<(), Error> {
    let mut status = app.status.clone().unwrap_or_default();
    let now = conditions::now();
    let mut changed = false;
    for c in conds {
        changed |= conditions::set(&mut status.conditions, c, &now);
    }
    let (desired, submitted) = (desired as i64, submitted as i64);
    changed |= status.state != Some(state)
        || status.desired_resources != Some(desired)
        || status.submitted_resources != Some(submitted)
        || status.observed_generation != app.metadata.generation;
    if !changed {
        return Ok(());
    }
    let ours: Vec<_> = status
        .conditions
        .iter()
        .filter(|c| c.type_ == conditions::TYPE_SYNCED || c.type_ == conditions::TYPE_READY)
        .collect();
    let body = serde_json::json!({
        "state": state,
        "desiredResources": desired,
        "submittedResources": submitted,
        "observedGeneration": app.metadata.generation,
        "conditions": ours,
    });
    ssa::apply_status(api, &app.name_any(), body, &ctx.rt.field_manager())
        .await
        .map_err(Error::WriteStatus)?;
    if status.state != app.status.as_ref().and_then(|s| s.state) {
        let oref = kube::Resource::object_ref(app, &());
        ctx.reporting
            .events
            .normal(
                &oref,
                &format!("{state:?}"),
                format!("{submitted} of {desired} resources submitted"),
            )
            .await;
    }
    Ok(())
}

fn error_policy(app: Arc<KubernetesApplication>, _error: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.reporting.retry(app.as_ref())
}

/// The application controller; it also watches the resources it controls.
pub fn controller(rt: &Runtime) -> impl Future<Output = ()> + use<> {
    // The resources are watched once: the reflector updates the store that
    // reconciles read *before* it wakes the owning application, so a
    // reconcile never sees a resource older than the change that woke it.
    let (reader, writer) = kube::runtime::reflector::store();
    let resources = watcher(
        rt.api::<KubernetesApplicationResource>(),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    let ctx = Arc::new(Ctx {
        rt: rt.clone(),
        reporting: Reporting::new(rt, CONTROLLER),
        resources: reader,
    });
    Controller::new(
        rt.api::<KubernetesApplication>(),
        watcher::Config::default(),
    )
    .owns_stream(resources)
    .with_config(rt.controller_config())
    .graceful_shutdown_on(rt.shutdown())
    .run(reconcile, error_policy, ctx)
    .for_each(|_| futures::future::ready(()))
}
