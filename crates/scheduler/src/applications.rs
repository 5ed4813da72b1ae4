//! Scheduling: places each unscheduled KubernetesApplication onto one Ready
//! KubernetesCluster in its namespace that matches its clusterSelector. Once
//! written, a decision is never revisited: a scheduled application is left
//! alone, so restarts and new clusters move nothing.

use std::{collections::HashMap, sync::Arc};

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    runtime::{
        Controller, WatchStreamExt, controller::Action, reflector::ObjectRef, reflector::Store,
        watcher,
    },
};
use prometheus::IntCounterVec;
use runtime::{
    conditions,
    controller::{CACHE_NOT_READY_RETRY, Reporting, Runtime, cache_ready},
    events::ReconcileError,
    ssa,
};
use types::{
    compute::v1alpha1::KubernetesCluster,
    workload::v1alpha1::{
        KubernetesApplication, KubernetesApplicationState, KubernetesApplicationStatus,
    },
};

use crate::placement::{Candidate, Placement, place};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "kubernetesapplication";
/// The condition this controller owns.
pub const TYPE_SCHEDULED: &str = "Scheduled";

/// Why scheduling one application failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing the decision failed (a conflict means the application changed
    /// under us; it is looked at again).
    #[error("failed to write the scheduling decision")]
    WriteStatus(#[source] kube::Error),
    /// Serializing status failed.
    #[error("failed to serialize status")]
    Serialize(#[from] serde_json::Error),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::WriteStatus(_) => "CannotWriteStatus",
            Error::Serialize(_) => "CannotSerializeStatus",
        }
    }
}

/// Shared by reconciles.
pub struct Ctx {
    rt: Runtime,
    reporting: Reporting,
    clusters: Store<KubernetesCluster>,
    apps: Store<KubernetesApplication>,
    placements: IntCounterVec,
}

fn scheduled_to(app: &KubernetesApplication) -> Option<&str> {
    app.status
        .as_ref()
        .and_then(|s| s.cluster_ref.as_ref())
        .map(|r| r.name.as_str())
}

/// The candidates in `ns`, with their application counts, from the caches.
fn candidates(ctx: &Ctx, ns: &str) -> Vec<Candidate> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for app in ctx.apps.state() {
        if app.namespace().as_deref() == Some(ns)
            && let Some(c) = scheduled_to(&app)
        {
            *counts.entry(c.to_owned()).or_default() += 1;
        }
    }
    ctx.clusters
        .state()
        .into_iter()
        .filter(|c| c.namespace().as_deref() == Some(ns))
        .map(|c| {
            let ready = c
                .status
                .as_ref()
                .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_READY));
            let not_ready = match ready {
                Some(r) if r.status == "True" => None,
                Some(r) => Some(
                    r.message
                        .clone()
                        .unwrap_or_else(|| "Ready is False".to_owned()),
                ),
                None => Some("readiness not yet known".to_owned()),
            };
            Candidate {
                name: c.name_any(),
                labels: c.labels().clone(),
                not_ready,
                scheduled: counts.get(&c.name_any()).copied().unwrap_or(0),
            }
        })
        .collect()
}

async fn reconcile(app: Arc<KubernetesApplication>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if scheduled_to(&app).is_some() || app.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Decide only on complete caches: a partial view of the applications
    // would skew the spread.
    if !(cache_ready(&ctx.clusters).await && cache_ready(&ctx.apps).await) {
        return Ok(Action::requeue(CACHE_NOT_READY_RETRY));
    }
    ctx.reporting
        .reconcile(app.as_ref(), async {
            let ns = app.namespace().unwrap_or_default();
            let name = app.name_any();
            let api: Api<KubernetesApplication> = Api::namespaced(ctx.rt.client.clone(), &ns);
            let mut status: KubernetesApplicationStatus = app.status.clone().unwrap_or_default();
            let now = conditions::now();
            let oref = kube::Resource::object_ref(app.as_ref(), &());
            match place(
                &ns,
                app.spec.cluster_selector.as_ref(),
                &candidates(&ctx, &ns),
            ) {
                Placement::Cluster(cluster) => {
                    status.cluster_ref = Some(types::common::LocalObjectReference {
                        name: cluster.clone(),
                    });
                    status.state = Some(KubernetesApplicationState::Scheduled);
                    let msg = format!("scheduled to KubernetesCluster {cluster}");
                    conditions::set(
                        &mut status.conditions,
                        conditions::custom(TYPE_SCHEDULED, true, "Scheduled", Some(msg.clone())),
                        &now,
                    );
                    // Only if nobody changed the application since we looked:
                    // a decision is written once.
                    let rv = app.resource_version().unwrap_or_default();
                    ssa::apply_status_at(
                        &api,
                        &name,
                        &rv,
                        scheduled_fields(&status)?,
                        &ctx.rt.field_manager(),
                    )
                    .await
                    .map_err(Error::WriteStatus)?;
                    ctx.placements.with_label_values(&["scheduled"]).inc();
                    tracing::info!(namespace = %ns, application = %name, %cluster, "scheduled");
                    ctx.reporting.events.normal(&oref, "Scheduled", msg).await;
                }
                Placement::Pending(msg) => {
                    let mut changed = status.state != Some(KubernetesApplicationState::Pending);
                    status.state = Some(KubernetesApplicationState::Pending);
                    changed |= conditions::set(
                        &mut status.conditions,
                        conditions::custom(
                            TYPE_SCHEDULED,
                            false,
                            "NoMatchingCluster",
                            Some(msg.clone()),
                        ),
                        &now,
                    );
                    if changed {
                        ssa::apply_status(
                            &api,
                            &name,
                            scheduled_fields(&status)?,
                            &ctx.rt.field_manager(),
                        )
                        .await
                        .map_err(Error::WriteStatus)?;
                        ctx.placements.with_label_values(&["pending"]).inc();
                        ctx.reporting
                            .events
                            .warning(&oref, "NoMatchingCluster", msg)
                            .await;
                    }
                }
            }
            // Cluster changes wake pending applications through the watch.
            Ok(Action::await_change())
        })
        .await
}

/// The status fields the scheduler owns: clusterRef, state and the Scheduled
/// condition (server-side apply merges the rest).
fn scheduled_fields(
    status: &KubernetesApplicationStatus,
) -> Result<serde_json::Value, serde_json::Error> {
    let scheduled: Vec<_> = status
        .conditions
        .iter()
        .filter(|c| c.type_ == TYPE_SCHEDULED)
        .collect();
    let mut value = serde_json::Map::new();
    value.insert("state".to_owned(), serde_json::to_value(status.state)?);
    value.insert("conditions".to_owned(), serde_json::to_value(scheduled)?);
    if let Some(c) = &status.cluster_ref {
        value.insert("clusterRef".to_owned(), serde_json::to_value(c)?);
    }
    Ok(serde_json::Value::Object(value))
}

fn error_policy(app: Arc<KubernetesApplication>, _error: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.reporting.retry(app.as_ref())
}

/// The scheduling controller.
pub fn controller(rt: &Runtime) -> Result<impl Future<Output = ()> + use<>, prometheus::Error> {
    let placements = IntCounterVec::new(
        prometheus::Opts::new(
            "crossplane_rs_placements_total",
            "Scheduling decisions by result: scheduled, or pending (no cluster fits).",
        ),
        &["result"],
    )?;
    rt.metrics
        .registry()
        .register(Box::new(placements.clone()))?;
    for result in ["scheduled", "pending"] {
        placements.with_label_values(&[result]);
    }
    // Clusters are watched through a reflector whose store the decisions
    // read: it is updated before the watch wakes an application, so a
    // decision never uses a cluster older than the change that woke it.
    let (clusters, writer) = kube::runtime::reflector::store();
    let cluster_events = watcher(rt.api::<KubernetesCluster>(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let ctrl = Controller::new(
        rt.api::<KubernetesApplication>(),
        watcher::Config::default(),
    );
    let apps = ctrl.store();
    let pending = apps.clone();
    let ctx = Arc::new(Ctx {
        rt: rt.clone(),
        reporting: Reporting::new(rt, CONTROLLER),
        clusters,
        apps,
        placements,
    });
    Ok(ctrl
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown())
        // A cluster that appears, gains labels or becomes Ready may fit a
        // pending application at once.
        .watches_stream(cluster_events, move |cluster: KubernetesCluster| {
            let ns = cluster.namespace();
            pending
                .state()
                .into_iter()
                .filter(|a| a.namespace() == ns && scheduled_to(a).is_none())
                .map(|a| ObjectRef::from_obj(a.as_ref()))
                .collect::<Vec<_>>()
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(())))
}
