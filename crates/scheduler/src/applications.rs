//! Scheduling: places each unscheduled KubernetesApplication onto one Ready
//! KubernetesCluster in its namespace that matches its clusterSelector. Once
//! written, a decision is never revisited: a scheduled application is left
//! alone, so restarts and new clusters move nothing.

use std::{collections::HashMap, sync::Arc};

use kube::{
    ResourceExt,
    runtime::{
        WatchStreamExt, controller::Action, reflector::ObjectRef, reflector::Store, watcher,
    },
};
use prometheus::IntCounterVec;
use runtime::{
    conditions,
    controller::{Runtime, cache_ready, trim},
    events::ReconcileError,
    reconciler::{
        self, CONTROL_REQUEST_FAILED, Cleanup, ControlError, Draft, Reconciler, Skeleton,
    },
    ssa,
};
use types::{
    compute::v1alpha1::KubernetesCluster,
    workload::v1alpha1::{
        KubernetesApplication, KubernetesApplicationState, KubernetesApplicationStatus,
    },
};

use crate::placement::{Candidate, Placement, place};

/// Name of this controller in metrics and events: it schedules
/// KubernetesApplications (the application-controller, which submits them,
/// is "kubernetesapplication").
pub const CONTROLLER: &str = "scheduling";
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
    /// Another request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::WriteStatus(_) => "CannotWriteStatus",
            Error::Serialize(_) => "CannotSerializeStatus",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }
}

/// The scheduling controller's reconciler. It shares the application's
/// status with the application-controller, so it writes only the fields it
/// owns: the Pending state and condition through the skeleton's status
/// writer, the decision with a resourceVersion-guarded apply.
pub struct KubernetesApplications {
    sk: Skeleton,
    field_manager: String,
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
fn candidates(ctx: &KubernetesApplications, ns: &str) -> Vec<Candidate> {
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

impl Reconciler for KubernetesApplications {
    type Object = KubernetesApplication;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    /// A decision is written once: scheduled (and deleted) applications are
    /// left alone.
    fn wanted(&self, app: &KubernetesApplication) -> bool {
        scheduled_to(app).is_none() && app.metadata.deletion_timestamp.is_none()
    }

    /// Decide only on complete caches: a partial view of the applications
    /// would skew the spread.
    async fn ready(&self) -> bool {
        cache_ready(&self.clusters).await && cache_ready(&self.apps).await
    }

    fn writes_status(&self) -> bool {
        false
    }

    async fn apply(
        &self,
        app: &Arc<KubernetesApplication>,
        status: &mut Draft<KubernetesApplication>,
    ) -> Result<Action, Error> {
        let ns = app.namespace().unwrap_or_default();
        let candidates = candidates(self, &ns);
        match place(&ns, app.spec.cluster_selector.as_ref(), &candidates) {
            Placement::Cluster(cluster) => self.schedule(app, status, cluster).await?,
            Placement::Pending(msg) => self.pend(app, status, msg).await?,
        }
        // Cluster changes wake pending applications through the watch.
        Ok(Action::await_change())
    }

    async fn cleanup(
        &self,
        _app: &Arc<KubernetesApplication>,
        _status: &mut Draft<KubernetesApplication>,
    ) -> Result<Cleanup, Error> {
        // Scheduling makes nothing to remove.
        Ok(Cleanup::Done)
    }
}

impl KubernetesApplications {
    /// Writes the decision, only if nobody changed the application since we
    /// looked: a decision is written once.
    async fn schedule(
        &self,
        app: &KubernetesApplication,
        status: &mut KubernetesApplicationStatus,
        cluster: String,
    ) -> Result<(), Error> {
        status.cluster_ref = Some(types::common::LocalObjectReference {
            name: cluster.clone(),
        });
        status.state = Some(KubernetesApplicationState::Scheduled);
        let msg = format!("scheduled to KubernetesCluster {cluster}");
        let scheduled = conditions::custom(TYPE_SCHEDULED, true, "Scheduled", Some(msg.clone()));
        conditions::set(&mut status.conditions, scheduled, &conditions::now());
        let rv = app.resource_version().unwrap_or_default();
        let fields = scheduled_fields(status)?;
        ssa::apply_status_at(
            &self.api(app),
            &app.name_any(),
            &rv,
            fields,
            &self.field_manager,
        )
        .await
        .map_err(Error::WriteStatus)?;
        self.placements.with_label_values(&["scheduled"]).inc();
        tracing::info!(%cluster, "scheduled");
        let oref = kube::Resource::object_ref(app, &());
        self.sk
            .reporting
            .events
            .normal(&oref, "Scheduled", msg)
            .await;
        Ok(())
    }

    /// Says why the application waits, once per change of the reason.
    async fn pend(
        &self,
        app: &KubernetesApplication,
        status: &mut KubernetesApplicationStatus,
        msg: String,
    ) -> Result<(), Error> {
        status.state = Some(KubernetesApplicationState::Pending);
        let pending = conditions::custom(
            TYPE_SCHEDULED,
            false,
            "NoMatchingCluster",
            Some(msg.clone()),
        );
        conditions::set(&mut status.conditions, pending, &conditions::now());
        if self.sk.status.write(&self.api(app), app, status).await? {
            self.placements.with_label_values(&["pending"]).inc();
            let oref = kube::Resource::object_ref(app, &());
            self.sk
                .reporting
                .events
                .warning(&oref, "NoMatchingCluster", msg)
                .await;
        }
        Ok(())
    }
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

/// What the scheduler keeps of an application: its metadata, selector and
/// status (which it reads and writes), not its templates, which it never
/// reads and which are most of an application.
fn placement_only(app: &mut KubernetesApplication) {
    app.spec.resource_templates = Vec::new();
}

/// The scheduling controller.
pub fn controller(rt: &Runtime) -> Result<impl Future<Output = ()> + use<>, prometheus::Error> {
    let placements = placements(rt)?;
    // Clusters are watched through a reflector whose store the decisions
    // read: it is updated before the watch wakes an application, so a
    // decision never uses a cluster older than the change that woke it.
    let (clusters, cluster_events) = trim::reflected(
        rt.api::<KubernetesCluster>(),
        watcher::Config::default(),
        trim::nothing_else,
    );
    let cluster_events = cluster_events.applied_objects();
    let ctrl = trim::controller(
        rt.api::<KubernetesApplication>(),
        watcher::Config::default(),
        placement_only,
    );
    let apps = ctrl.store();
    let pending = apps.clone();
    let scheduling = Arc::new(KubernetesApplications {
        sk: Skeleton::new(rt, CONTROLLER),
        field_manager: rt.field_manager(),
        clusters,
        apps,
        placements,
    });
    let ctrl = ctrl
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
        });
    Ok(reconciler::run(ctrl, scheduling))
}

/// The decisions counter, registered.
fn placements(rt: &Runtime) -> Result<IntCounterVec, prometheus::Error> {
    let placements = IntCounterVec::new(
        prometheus::Opts::new(
            "crossplane_rs_placements_total",
            "Scheduling decisions by result: scheduled, or pending (no cluster fits).",
        ),
        &["result"],
    )?;
    let placements = rt.metrics.register(placements)?;
    for result in ["scheduled", "pending"] {
        placements.with_label_values(&[result]);
    }
    Ok(placements)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_cache_keeps_what_placement_reads_and_drops_the_templates() {
        let mut app: KubernetesApplication = serde_json::from_value(json!({
            "apiVersion": "workload.crossplane.io/v1alpha1",
            "kind": "KubernetesApplication",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                         "labels": {"app": "a"}},
            "spec": {
                "clusterSelector": {"matchLabels": {"region": "eu"}},
                "resourceTemplates": [{"metadata": {"name": "t"},
                                       "spec": {"template": {"kind": "ConfigMap"}}}],
            },
            "status": {"state": "Scheduled", "clusterRef": {"name": "c"}},
        }))
        .unwrap();
        let before = app.clone();
        placement_only(&mut app);
        assert!(app.spec.resource_templates.is_empty());
        assert_eq!(app.spec.cluster_selector, before.spec.cluster_selector);
        assert_eq!(app.status, before.status);
        assert_eq!(app.metadata, before.metadata);
        assert_eq!(scheduled_to(&app), Some("c"));
    }
}
