//! The Object controller: resolves references against the control cluster,
//! then observes, creates, updates or deletes the managed object in the
//! target cluster as the management and deletion policies allow, on the
//! shared reconcile skeleton (runtime::reconciler) and managed-resource
//! contract (runtime::managed).
//!
//! Objects are read and reconciled as `kubernetes.crossplane.io/v1alpha2`
//! (v1alpha1 Objects reach the provider converted by the API server).
//!
//! Event-driven: the managed object, patchesFrom and connection-detail
//! sources are read through shared watches (runtime::watches) that wake
//! exactly the Object that read what changed; --poll-interval is only a
//! safety resync answered from those caches. spec.watch is accepted and
//! changes nothing: this provider always watches. Secrets in the control
//! cluster are the exception: the provider may not list or watch them, so
//! they are read with a GET (the credentials Secret at most once per
//! ProviderConfig per 30 s), and a change to a Secret a patchesFrom
//! reference names reaches the managed object at the next resync or any
//! other wake.
//!
//! Deletion policy when the target does not answer: retried with backoff
//! for --deletion-timeout (default 5m) after the Object was deleted, then
//! the managed object is left in place with a Warning event. A missing
//! ProviderConfig or credentials Secret orphans at once (the target can never
//! be reached again).

pub(crate) mod cached;
pub mod configs;
mod connect;
mod connection;
mod context;
mod errors;
mod external;
pub mod holds;
pub mod kind;
mod manifest;
pub mod metrics;
mod published;
pub mod references;
pub mod usage;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use futures::{Stream, StreamExt, channel::mpsc};
use kube::{
    Api, ResourceExt,
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
    events::error_chain,
    managed::{self, AppliedMemory, Lifecycle, Synced, drift},
    reconciler::{self, Cleanup, Reconciler, Skeleton, jittered},
    remote::RemoteCluster,
    watches::{Session, Watches},
};
use serde_json::Value;
use types::kubernetes::v1alpha2::ObjectStatus;

pub use connect::Reach;
pub use context::{CONTROLLER, FINALIZER, NAMESPACED_CONTROLLER, Objects, target_named};
pub use context::{NAMESPACED_WORDING, WORDING};
use context::{connect, target_of};
pub use errors::{Error, REASONS};
use external::{ManagedObject, allowed};

use crate::policy;
use kind::ObjectKind;

/// How often the managed-objects gauge is recounted from the cache.
const COUNT_EVERY: Duration = Duration::from_secs(5);

/// How many compiled readiness queries are kept.
const QUERIES: usize = 1024;

/// Ready by the Object's readiness policy; a CEL query is compiled once
/// and evaluated within its bounds ([`runtime::cel`]).
async fn readiness<K: ObjectKind>(
    queries: &runtime::cel::Queries,
    obj: &K,
    live: &Value,
    secrets: &policy::Redactions,
) -> types::common::Condition {
    let why = match (
        &obj.view().spec.readiness.policy,
        &obj.view().spec.readiness.cel_query,
    ) {
        (types::kubernetes::v1alpha2::ReadinessPolicy::DeriveFromCelQuery, Some(query)) => {
            let answer = match queries.get(query) {
                Ok(q) => q.evaluate(live).await,
                Err(e) => Err(e),
            };
            match answer {
                Ok(true) => None,
                Ok(false) => Some("readiness.celQuery is false for the managed object".to_owned()),
                Err(e) => Some(format!("readiness.celQuery: {e}")),
            }
        }
        _ => policy::unready(&obj.view().spec.readiness, live),
    };
    match why {
        None => conditions::available(),
        Some(why) => conditions::unavailable(secrets.text(&why)),
    }
}

fn is_ready(status: &ObjectStatus) -> bool {
    conditions::get(&status.conditions, conditions::TYPE_READY).is_some_and(|c| c.status == "True")
}

impl<K: ObjectKind> Objects<K> {
    /// Drops the references the spec no longer makes, then connects to the
    /// target: work in the control cluster, done before the target's
    /// deadline starts.
    async fn prepare(&self, obj: &K) -> Result<RemoteCluster, Error> {
        let wanted: BTreeSet<String> = references::object_targets(obj).collect();
        // Only a spec change drops a reference: an Object last Synced at
        // this generation holds only what it references.
        if !synced_at_generation(obj) {
            references::release(self, obj, Some(&wanted)).await?;
        }
        connect(self, obj).await
    }

    /// Observes, then creates or updates the managed object in `cluster`;
    /// shows it in `status`; publishes connection details.
    async fn sync(
        &self,
        obj: &K,
        cluster: &RemoteCluster,
        status: &mut ObjectStatus,
        session: &mut Session<K>,
        secrets: &mut policy::Redactions,
    ) -> Result<(), Error> {
        let resolved = references::resolve(self, obj, true, session, secrets).await?;
        let managed = external::locate(self, obj, cluster, &resolved, session).await?;
        references::hold(self, obj, &resolved.referenced).await?;
        let synced = managed::sync(&managed, allowed(obj)).await?;
        let Some(live) = synced.live().cloned() else {
            let policies = &obj.view().spec.management_policies;
            let why = if policy::observe_only(policies) {
                "only observe it"
            } else {
                "do not allow creating it"
            };
            return Err(Error::NotAllowed(format!(
                "{} does not exist and managementPolicies {} {why}: create it there, or add Create to spec.managementPolicies",
                managed.what,
                policy::listed(policies)
            )));
        };
        // A drift the server did not confirm (the watch was behind) was no
        // correction: nothing was applied and nothing is said.
        if let (Synced::Updated { drifted: true, .. }, Some(correction)) =
            (&synced, managed.correction())
        {
            let kind = &managed.target.resource.kind;
            (self.drift_reporter())
                .corrected(
                    &mut status.drift,
                    &obj.object_ref(&()),
                    kind,
                    "the managed object was changed outside this Object",
                    &correction,
                )
                .await;
        }
        (self.drift_reporter()).loop_condition(status.drift.as_ref(), &mut status.conditions);
        let was_ready = is_ready(status);
        manifest::observe_into(status, &live, secrets);
        let ready = readiness(&self.queries, obj, &live, secrets).await;
        conditions::set(&mut status.conditions, ready, &conditions::now());
        connection::publish(self, obj, cluster, session).await?;
        if is_ready(status) && !was_ready {
            self.first_ready(obj);
        }
        Ok(())
    }

    /// How this controller reports drift (runtime::managed::drift).
    fn drift_reporter(&self) -> drift::Reporter<'_> {
        drift::Reporter {
            metric: &self.metrics.drift,
            events: &self.skeleton.reporting.events,
            threshold: self.rt.args.drift_loop_threshold,
        }
    }

    fn first_ready(&self, obj: &K) {
        if let Some(created) = obj.creation_timestamp() {
            let ms =
                k8s_openapi::jiff::Timestamp::now().as_millisecond() - created.0.as_millisecond();
            self.metrics.first_ready.observe(ms.max(0) as f64 / 1000.0);
        }
    }

    /// The managed object to delete: the one the manifest names, or, when
    /// the manifest can no longer be worked out (a reference's source is
    /// gone), the one recorded in status.managedObjectRef.
    async fn to_delete<'a>(
        &'a self,
        obj: &K,
        cluster: &RemoteCluster,
        session: &mut Session<K>,
        secrets: &mut policy::Redactions,
    ) -> Result<ManagedObject<'a, K>, Error> {
        let located = match references::resolve(self, obj, false, session, secrets).await {
            Ok(resolved) => external::locate(self, obj, cluster, &resolved, session).await,
            Err(e) => Err(e),
        };
        match located {
            Err(e) if e.unresolvable() => {
                let Some(recorded) = external::recorded(self, obj, cluster, session).await else {
                    return Err(e);
                };
                tracing::info!(reason = %secrets.text(&error_chain(&e)), "deleting the recorded managed object");
                recorded
            }
            other => other,
        }
    }
}

impl<K: ObjectKind> Reconciler for Objects<K> {
    type Object = K;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.skeleton
    }

    /// Every Object reads its ProviderConfig from that cache.
    async fn ready(&self) -> bool {
        self.reach.configs.ready().await
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    fn labels(&self, obj: &K) -> BTreeMap<String, String> {
        usage::labels(obj)
    }

    fn open_cached(&self, obj: Arc<K>) -> Arc<K> {
        Arc::new(cached::opened(obj.as_ref()))
    }

    async fn apply(&self, obj: &Arc<K>, status: &mut ObjectStatus) -> Result<Action, Error> {
        // Nothing is done with policies that do not observe: Synced=False
        // says what to fix, retried with the error backoff.
        if let Some(fix) = policy::invalid(&obj.view().spec.management_policies) {
            return Err(Error::InvalidPolicies(fix));
        }
        let mut secrets = policy::Redactions::default();
        let mut session = self.watches.session(ObjectRef::from_obj(obj.as_ref()));
        let cluster = self.prepare(obj).await?;
        let synced = self
            .rt
            .clusters
            .call(
                &target_of(obj.as_ref()),
                &cluster,
                self.sync(obj, &cluster, status, &mut session, &mut secrets),
            )
            .await;
        synced.map_err(|e| e.redacted(&secrets))?;
        session.commit();
        Ok(Action::requeue(jittered(
            self.rt.args.poll_interval,
            obj.as_ref(),
        )))
    }

    async fn cleanup(&self, obj: &Arc<K>, status: &mut ObjectStatus) -> Result<Cleanup, Error> {
        let deleting = || conditions::deleting();
        if references::held(obj.as_ref()) {
            // Referrers hold this Object until their own managed objects
            // are gone; each removed finalizer wakes it.
            conditions::set(&mut status.conditions, deleting(), &conditions::now());
            return Ok(Cleanup::Wait(Action::requeue(managed::DELETE_RECHECK)));
        }
        let mut secrets = policy::Redactions::default();
        let mut session = self.watches.session(ObjectRef::from_obj(obj.as_ref()));
        let allowed = allowed(obj.as_ref());
        let external = if allowed.delete {
            match connect(self, obj).await {
                Ok(cluster) => {
                    let locating = self.to_delete(obj, &cluster, &mut session, &mut secrets);
                    let target = target_of(obj.as_ref());
                    self.rt.clusters.call(&target, &cluster, locating).await
                }
                Err(e) => Err(e),
            }
        } else {
            Err(Error::NotAllowed(String::new()))
        };
        let events = &self.skeleton.reporting.events;
        let removed = self
            .lifecycle
            .remove(events, obj.as_ref(), external, allowed);
        match removed.await.map_err(|e| e.redacted(&secrets))? {
            Cleanup::Done => {
                references::release(self, obj, None).await?;
                self.forget(obj);
                Ok(Cleanup::Done)
            }
            Cleanup::Wait(action) => {
                conditions::set(&mut status.conditions, deleting(), &conditions::now());
                session.commit();
                Ok(Cleanup::Wait(action))
            }
        }
    }

    /// As upstream's provider: a failed reconcile says so in Synced
    /// alone; Ready keeps what it last said (nothing, before the managed
    /// object was first observed).
    fn failed(&self, _obj: &K, _status: &mut ObjectStatus, _message: &str) {}

    fn forget(&self, obj: &K) {
        self.watches.release(&ObjectRef::from_obj(obj));
        if let Some(uid) = obj.uid() {
            self.applied.forget(&uid);
            self.published.forget(&uid);
        }
    }
}

/// What wakes an Object from its own watch: its spec (generation),
/// annotations (paused, external-name) and deletion. Its status (most
/// often our own write) and its labels (the provider-config label written
/// with the finalizer) do not.
fn desired_state_hash<K: ObjectKind>(o: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    o.meta().generation.hash(&mut h);
    o.meta().annotations.hash(&mut h);
    // Finalizers matter only once deleting (a referrer letting go); the
    // finalizer an Object gets on its first sync must not wake it again.
    if let Some(deleted) = &o.meta().deletion_timestamp {
        deleted.0.as_millisecond().hash(&mut h);
        o.meta().finalizers.hash(&mut h);
    }
    Some(h.finish())
}

/// The Objects' watch (of one kind), shared by the Object and the
/// ProviderConfig controllers.
pub struct ObjectWatch<K: ObjectKind> {
    /// The Objects' cache.
    pub objects: Store<K>,
    /// Configs whose users changed, by [`configs::ConfigRef::key`].
    pub config_wakes: mpsc::UnboundedReceiver<String>,
    events: futures::stream::BoxStream<'static, Result<K, watcher::Error>>,
    referrer_wakes: mpsc::UnboundedReceiver<ObjectRef<K>>,
    /// Which Objects carry each referrer finalizer.
    holds: holds::Holds<K>,
}

/// Starts watching Objects of kind `K` (lazily: the watch runs with the
/// controller).
pub fn watch_objects<K: ObjectKind>(rt: &Runtime) -> ObjectWatch<K> {
    let (config_tx, config_wakes) = mpsc::unbounded();
    let (referrer_tx, referrer_wakes) = mpsc::unbounded();
    let mut wakes = usage::Wakes::default();
    let holds = holds::Holds::default();
    let indexing = holds.clone();
    let (objects, events) = trim::reflected(
        Api::<K>::all(rt.client.clone()),
        watcher::Config::default(),
        cached::sealed,
    );
    let events = events
        .inspect(move |event| {
            if let Ok(event) = event {
                indexing.event(event);
                let woken = wakes.event(event);
                for c in woken.configs {
                    let _ = config_tx.unbounded_send(c);
                }
                for r in woken.referrers {
                    let _ = referrer_tx.unbounded_send(context::ref_of(&r));
                }
            }
        })
        .applied_objects()
        .predicate_filter(
            desired_state_hash,
            kube::runtime::utils::PredicateConfig::default(),
        )
        .boxed();
    ObjectWatch {
        objects,
        config_wakes,
        events,
        referrer_wakes,
        holds,
    }
}

/// The Object controller of kind `K`, named `name` in metrics and events.
/// `reach` connects to the configs its Objects use; `config_changed`
/// names (by key) each config whose spec changed (its Objects are woken to
/// connect again).
pub fn controller<K: ObjectKind>(
    rt: &Runtime,
    name: &'static str,
    deletion_timeout: Duration,
    watch: ObjectWatch<K>,
    reach: Reach,
    config_changed: impl Stream<Item = String> + Send + 'static,
    metrics: metrics::ObjectMetrics,
) -> impl Future<Output = ()> {
    let (watches, woken) = Watches::new(name, &rt.metrics);
    let objects = watch.objects.clone();
    let users = objects.clone();
    let of_config = config_changed.flat_map(move |key| {
        let using: Vec<_> = users
            .state()
            .iter()
            .filter(|o| configs::config_of(o.as_ref()).key() == key)
            .map(|o| ObjectRef::from_obj(o.as_ref()))
            .collect();
        futures::stream::iter(using)
    });
    let ctx = Arc::new(Objects {
        rt: rt.clone(),
        skeleton: Skeleton::new(rt, name),
        reach,
        objects: objects.clone(),
        holds: watch.holds.clone(),
        watches,
        applied: AppliedMemory::default(),
        published: published::Published::default(),
        lifecycle: Lifecycle {
            deletion_timeout,
            orphaned_reason: "ManagedObjectOrphaned",
            what: "the managed object",
        },
        field_manager: rt.field_manager(),
        metrics,
        queries: runtime::cel::Queries::new(QUERIES),
    });
    let controller = Controller::for_stream(watch.events, objects)
        .reconcile_on(woken)
        .reconcile_on(watch.referrer_wakes)
        .reconcile_on(of_config)
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let counting = count_periodically(ctx.clone());
    let run = reconciler::run(controller, ctx);
    let shutdown = rt.shutdown();
    async move {
        tokio::select! {
            () = run => {},
            () = counting => {},
            () = shutdown => {},
        }
    }
}

/// Recounts the managed-objects gauge, and drops what is remembered about
/// Objects deleted behind our back (their finalizer removed by hand).
async fn count_periodically<K: ObjectKind>(ctx: Arc<Objects<K>>) {
    /// Stopped (this replica stood down), it counts none.
    struct CountNone<K: ObjectKind>(Arc<Objects<K>>);
    impl<K: ObjectKind> Drop for CountNone<K> {
        fn drop(&mut self) {
            self.0.metrics.count_none::<K>();
        }
    }
    let _none_when_stopped = CountNone(ctx.clone());
    let mut tick = tokio::time::interval(COUNT_EVERY);
    loop {
        tick.tick().await;
        ctx.metrics.count_managed(&ctx.objects);
        if ctx.applied.len() > ctx.objects.state().len() + 64 {
            let live: BTreeSet<String> =
                ctx.objects.state().iter().filter_map(|o| o.uid()).collect();
            ctx.applied.retain(|uid| live.contains(uid));
        }
    }
}

/// Whether `obj` was last reconciled successfully at its current generation.
fn synced_at_generation<K: ObjectKind>(obj: &K) -> bool {
    obj.view()
        .status
        .as_ref()
        .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_SYNCED))
        .is_some_and(|c| {
            c.status == "True"
                && c.observed_generation.is_some()
                && c.observed_generation == obj.meta().generation
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use types::kubernetes::v1alpha2::Object;

    fn object(extra: Value) -> Object {
        let mut v = json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
            "metadata": {"name": "o", "generation": 1},
            "spec": {"forProvider": {"manifest": {}}},
        });
        if let (Some(m), Some(e)) = (v["metadata"].as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    fn with_readiness(readiness: Value) -> Object {
        let mut obj = object(json!({}));
        obj.spec.readiness = serde_json::from_value(readiness).unwrap();
        obj
    }

    #[test]
    fn labels_and_a_first_finalizer_do_not_wake_an_object_but_its_spec_does() {
        let base = desired_state_hash(&object(json!({})));
        let labelled = object(json!({"labels": {usage::LABEL: "pc"}, "finalizers": [FINALIZER]}));
        assert_eq!(desired_state_hash(&labelled), base);
        assert_ne!(desired_state_hash(&object(json!({"generation": 2}))), base);
        let deleting = object(json!({"deletionTimestamp": "2024-01-01T00:00:00Z"}));
        assert_ne!(desired_state_hash(&deleting), base);
    }

    #[tokio::test]
    async fn readiness_follows_the_policy_and_hides_secret_values() {
        let queries = runtime::cel::Queries::new(4);
        let obj = object(json!({}));
        let ready = readiness(
            &queries,
            &obj,
            &json!({"kind": "ConfigMap"}),
            &Default::default(),
        )
        .await;
        assert_eq!(ready.status, "True");
        let mut secrets = policy::Redactions::default();
        secrets.add(&json!("s3cr3t"));
        let live = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "message": "bad password s3cr3t"}]}});
        let unready = readiness(
            &queries,
            &with_readiness(json!({"policy": "DeriveFromObject"})),
            &live,
            &secrets,
        )
        .await;
        assert_eq!(unready.status, "False");
        let message = unready.message.unwrap_or_default();
        assert!(
            message.contains("REDACTED") && !message.contains("s3cr3t"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_cel_readiness_query_decides_ready_and_a_bad_one_is_named() {
        let queries = runtime::cel::Queries::new(4);
        let by = |query: &str| {
            with_readiness(json!({"policy": "DeriveFromCelQuery", "celQuery": query}))
        };
        let live = json!({"kind": "ConfigMap", "data": {"color": "blue"}});
        let ready = readiness(
            &queries,
            &by("object.data.color == 'blue'"),
            &live,
            &Default::default(),
        )
        .await;
        assert_eq!(ready.status, "True");
        let unready = readiness(
            &queries,
            &by("object.data.color == 'red'"),
            &live,
            &Default::default(),
        )
        .await;
        assert_eq!(unready.status, "False");
        assert!(unready.message.unwrap_or_default().contains("is false"));
        let missing = readiness(
            &queries,
            &by("object.status.phase == 'Running'"),
            &live,
            &Default::default(),
        )
        .await;
        assert_eq!(missing.status, "False");
        let message = missing.message.unwrap_or_default();
        assert!(message.starts_with("readiness.celQuery: "), "{message}");
    }
}
