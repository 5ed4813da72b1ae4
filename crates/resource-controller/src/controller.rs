//! The resource controller: submits each scheduled
//! KubernetesApplicationResource's template (and its Secrets) to the remote
//! cluster, copies the remote object's status back, and removes what it
//! created when the resource is deleted.
//!
//! It runs on the shared reconcile skeleton ([`runtime::reconciler`]) and
//! the managed-resource contract ([`runtime::managed`]); what reconciles
//! share is [`ApplicationResources`], and the remote side is
//! [`crate::external::Remote`].
//!
//! Event-driven: the remote object and the propagated Secrets are read from
//! shared watches in the remote cluster, and a change to either wakes the
//! resource at once; KubernetesClusters and (by metadata only) local Secrets
//! are watched too and wake the resources that use them. `--poll-interval`
//! is only a safety resync, answered from those caches without a request.
//!
//! Deletion policy when the remote cluster cannot be reached: if the
//! KubernetesCluster or its connection Secret is gone, the remote objects can
//! never be reached again, so they are left in place at once with a Warning
//! event. If the cluster exists but does not answer, deletion is retried with
//! backoff for --deletion-timeout (default 5m) after the resource was
//! deleted, then the objects are left in place with a Warning event.
//! Deletion never hangs forever.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use prometheus::Histogram;
use runtime::{
    coalesce, conditions,
    controller::{CACHE_NOT_READY_RETRY, Runtime, trim},
    managed::{self, AppliedMemory, Connector, Lifecycle, Synced},
    reconciler::{self, Cleanup, Draft, Reconciler, Skeleton},
    remote::RemoteClients,
    watches::Watches,
};
use types::{
    compute::v1alpha1::KubernetesCluster,
    workload::v1alpha1::{KubernetesApplicationResource, KubernetesApplicationResourceState},
};

use crate::context::{ApplicationResources, CONTROLLER, FINALIZER, WORDING};
use crate::error::Error;
use crate::external::Remote;
use crate::strategy::Strategy;

type Res = KubernetesApplicationResource;

/// How long a change of a remote object's status alone may wait for more
/// (one write per window; the last state at most this late).
pub const COALESCE: Duration = Duration::from_secs(1);

fn cluster_of(res: &Res) -> Option<String> {
    res.spec.cluster_ref.as_ref().map(|c| c.name.clone())
}

impl Reconciler for ApplicationResources {
    type Object = Res;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.skeleton
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    /// A change of the remote object's status alone (status.remote and the
    /// Ready it decides) waits for the remote object's burst to settle: a
    /// Deployment rolling out rewrites its status several times a second.
    fn may_wait(&self, before: &Draft<Res>, after: &Draft<Res>) -> Option<Duration> {
        (before.state == after.state
            && before.observed_generation == after.observed_generation
            && coalesce::same_but_ready(&before.conditions, &after.conditions))
        .then_some(COALESCE)
    }

    /// A resource that is not scheduled yet is left alone until it is.
    fn wanted(&self, obj: &Res) -> bool {
        obj.spec.cluster_ref.is_some()
    }

    async fn apply(&self, obj: &Arc<Res>, status: &mut Draft<Res>) -> Result<Action, Error> {
        let Some(cluster) = cluster_of(obj) else {
            return Ok(Action::await_change());
        };
        if !self.caches_ready().await {
            return Ok(Action::requeue(CACHE_NOT_READY_RETRY));
        }
        let strategy = Strategy::of(obj).map_err(Error::InvalidStrategy)?;
        let session = Mutex::new(self.watches.session(ObjectRef::from_obj(obj.as_ref())));
        let (kind, synced, correction, missing) = {
            let remote = Remote::build(self, obj, &cluster, &session, strategy.clone()).await?;
            let synced = managed::sync(&remote, strategy.allowed()).await?;
            let missing = format!(
                "{} does not exist in {}, and writeStrategy ReadOnly only observes it: create it there, or change spec.writeStrategy.type",
                remote.what(),
                remote.cluster()
            );
            (
                remote.kind().to_owned(),
                synced,
                remote.correction(),
                missing,
            )
        };
        // Its watch wakes the resource once it appears.
        if let Ok(session) = session.into_inner() {
            session.commit();
        }
        if matches!(synced, Synced::Missing) {
            return Err(Error::NotObserved(missing));
        }
        // A drift the server did not confirm (the watch was behind) was no
        // correction: nothing was applied and nothing is said.
        if let (Synced::Updated { drifted: true, .. }, Some(correction)) = (&synced, correction) {
            let at = kube::Resource::object_ref(obj.as_ref(), &());
            let changed = format!(
                "{kind} {} was changed outside this resource",
                crate::context::remote_name(obj)
            );
            (self.drift_reporter())
                .corrected(&mut status.drift, &at, &kind, &changed, &correction)
                .await;
        }
        (self.drift_reporter()).loop_condition(status.drift.as_ref(), &mut status.conditions);
        let health =
            crate::health::judge(&self.rules, &obj.spec.health_rules, &kind, synced.live()).await;
        if let Some(why) = self.submitted(obj, status, synced.live(), health, &kind, &strategy) {
            self.skeleton
                .reporting
                .events
                .warning(
                    &kube::Resource::object_ref(obj.as_ref(), &()),
                    types::workload::v1alpha1::REASON_HEALTH_RULE_FAILED,
                    why,
                )
                .await;
        }
        // Remote changes arrive through the watches: this is a safety
        // resync, answered from their caches.
        Ok(Action::requeue(reconciler::jittered(
            self.rt.args.poll_interval,
            obj.as_ref(),
        )))
    }

    async fn cleanup(&self, obj: &Arc<Res>, _status: &mut Draft<Res>) -> Result<Cleanup, Error> {
        let Some(cluster) = cluster_of(obj) else {
            return Ok(Cleanup::Done);
        };
        if !self.caches_ready().await {
            return Ok(Cleanup::Wait(Action::requeue(CACHE_NOT_READY_RETRY)));
        }
        // Never counted again once deleting.
        if let Ok(mut seen) = self.observed.lock() {
            seen.remove(&obj.uid().unwrap_or_default());
        }
        let session = Mutex::new(self.watches.session(ObjectRef::from_obj(obj.as_ref())));
        let strategy = Strategy::for_deletion(obj);
        let allowed = strategy.allowed();
        let removed = {
            let remote = Remote::build(self, obj, &cluster, &session, strategy).await;
            self.lifecycle
                .remove(
                    &self.skeleton.reporting.events,
                    obj.as_ref(),
                    remote,
                    allowed,
                )
                .await?
        };
        // Still under way: the watch of what is being removed wakes it.
        if let (Cleanup::Wait(_), Ok(session)) = (&removed, session.into_inner()) {
            session.commit();
        }
        Ok(removed)
    }

    /// The status after a failure: Failed, and not Ready, saying why.
    fn failed(&self, obj: &Res, status: &mut Draft<Res>, message: &str) {
        conditions::set(
            &mut status.conditions,
            conditions::unavailable(message.to_owned()),
            &conditions::now(),
        );
        status.state = Some(KubernetesApplicationResourceState::Failed);
        status.observed_generation = obj.metadata.generation;
    }

    fn forget(&self, obj: &Res) {
        self.watches.release(&ObjectRef::from_obj(obj));
        let uid = obj.uid().unwrap_or_default();
        self.applied.forget(&uid);
        if let Ok(mut seen) = self.observed.lock() {
            seen.remove(&uid);
        }
    }
}

fn submit_latency(rt: &Runtime) -> Result<Histogram, prometheus::Error> {
    let h = Histogram::with_opts(
        prometheus::HistogramOpts::new(
            "crossplane_rs_submit_latency_seconds",
            "Time from a KubernetesApplicationResource's creation to its first Submitted state.",
        )
        .buckets(vec![0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0]),
    )?;
    rt.metrics.register(h)
}

/// What this controller keeps of a resource in its cache: its template
/// packed ([`runtime::packed`]), unpacked by the reconcile that renders it.
/// A template is most of a resource.
fn packed_template(res: &mut Res) {
    runtime::packed::pack(&mut res.spec.template);
}

/// The resources that a change to the KubernetesCluster `cluster` concerns.
fn using_cluster(store: &Store<Res>, cluster: &KubernetesCluster) -> Vec<ObjectRef<Res>> {
    let (ns, name) = (cluster.namespace(), cluster.name_any());
    store
        .state()
        .into_iter()
        .filter(|r| r.namespace() == ns && cluster_of(r).as_deref() == Some(name.as_str()))
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// The resources that a change to a local Secret concerns: those that
/// propagate it, and those whose cluster connects with it.
fn using_secret(
    store: &Store<Res>,
    clusters: &Store<KubernetesCluster>,
    secret: &PartialObjectMeta<Secret>,
) -> Vec<ObjectRef<Res>> {
    let (ns, name) = (secret.namespace(), secret.name_any());
    let connecting: HashSet<String> = clusters
        .state()
        .into_iter()
        .filter(|c| c.namespace() == ns && c.spec.connection_secret_ref.name == name)
        .map(|c| c.name_any())
        .collect();
    store
        .state()
        .into_iter()
        .filter(|r| r.namespace() == ns)
        .filter(|r| {
            r.spec.secrets.iter().any(|s| s.name == name)
                || cluster_of(r).is_some_and(|c| connecting.contains(&c))
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// The resource controller. It also watches KubernetesClusters, local
/// Secrets (by metadata only: names and versions, never data) and, through
/// shared watches, the remote objects and propagated Secrets.
pub fn controller(
    rt: &Runtime,
    deletion_timeout: Duration,
) -> Result<impl Future<Output = ()> + use<>, prometheus::Error> {
    let (clusters, cluster_events) = trim::reflected(
        rt.api::<KubernetesCluster>(),
        watcher::Config::default(),
        trim::nothing_else,
    );
    let cluster_events = cluster_events.touched_objects();
    let (secrets, secret_events) = trim::reflected(
        rt.api::<PartialObjectMeta<Secret>>(),
        watcher::Config::default(),
        trim::nothing_else,
    );
    let secret_events = secret_events.touched_objects();
    let (watches, woken) = Watches::new(CONTROLLER, &rt.metrics);
    // Only this controller writes a resource's status: its own status
    // write coming back wakes nothing.
    let ctrl = trim::controller_of_own_status(
        rt.api::<Res>(),
        watcher::Config::default(),
        packed_template,
    );
    let (by_cluster, by_secret) = (ctrl.store(), ctrl.store());
    let clusters_for_secrets = clusters.clone();
    let clients = RemoteClients::new(rt.metrics.clone(), rt.args.allow_insecure_remote_tls);
    let ctx = Arc::new(ApplicationResources {
        skeleton: Skeleton::new(rt, CONTROLLER).coalescing(COALESCE),
        rt: rt.clone(),
        // A Secret is known by its metadata (watched), never by a timer.
        connector: Connector::new(clients, rt.client.clone(), &WORDING, Duration::ZERO),
        watches,
        clusters,
        secrets,
        applied: AppliedMemory::default(),
        lifecycle: Lifecycle {
            deletion_timeout,
            orphaned_reason: "RemoteObjectsOrphaned",
            what: "the remote object and propagated Secrets",
        },
        submit_latency: submit_latency(rt)?,
        observed: Mutex::default(),
        rules: runtime::cel::Queries::new(crate::health::COMPILED_RULES),
        drift: runtime::managed::drift::corrections_metric(
            &rt.metrics,
            "Remote objects of KubernetesApplicationResources",
        )?,
    });
    let ctrl = ctrl
        // An application's resources are created together: taken in that
        // order, each application is done before the next.
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown())
        .watches_stream(cluster_events, move |c| using_cluster(&by_cluster, &c))
        .watches_stream(secret_events, move |s| {
            using_secret(&by_secret, &clusters_for_secrets, &s)
        })
        .reconcile_on(woken);
    Ok(reconciler::run(ctrl, ctx))
}
