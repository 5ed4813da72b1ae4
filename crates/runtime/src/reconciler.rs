//! The one reconcile skeleton every controller runs.
//!
//! A controller says what it wants done ([`Reconciler::apply`] and
//! [`Reconciler::cleanup`]); the skeleton does the rest, the same way for
//! every kind:
//!
//! 1. guards: an object the controller does not want yet is left alone, one
//!    another part of the process is acting on waits for it
//!    ([`Reconciler::deferred`]), and one it wants waits (uncounted) until the controller's caches are
//!    ready ([`Reconciler::ready`]); a paused object (`crossplane.io/paused: "true"`) gets Synced=False with
//!    reason ReconcilePaused, one Normal event, and nothing else; a deleted
//!    object whose finalizer is gone is left alone;
//! 2. the finalizer (and any labels the controller asks for) is added in one
//!    guarded metadata patch, only when missing;
//! 3. apply or cleanup; a cleanup that is done lets the finalizer go;
//! 4. Synced is set (True, or False with the error's fix-it message) and the
//!    status is written once, only when it changed ([`StatusWriter`]); the
//!    controller hears of a write ([`Reconciler::written`]). A controller
//!    that shares its kind's status with another writes its own fields and
//!    opts out of this step ([`Reconciler::writes_status`]). A change the
//!    controller marks as following a burst elsewhere waits for it to
//!    settle ([`Reconciler::may_wait`], [`crate::coalesce`]);
//! 5. the result is reported by [`Reporting::reconcile`]: a log line with
//!    the object's key, a Warning event, the error metric and the backoff;
//!    all inside a `tracing` span carrying the controller and the key.
//!
//! [`run`] drives a `kube` Controller through the skeleton, so a controller
//! cannot reconcile around it.

use std::{
    collections::BTreeMap,
    fmt::Debug,
    hash::{Hash, Hasher},
    sync::Arc,
    time::Duration,
};

use kube::{
    Api, Resource, ResourceExt,
    runtime::{Controller, controller::Action},
};
use serde::{Serialize, de::DeserializeOwned};
use types::common::{ANNOTATION_PAUSED, Conditioned};

use crate::{
    coalesce::Coalesce,
    conditions,
    controller::{CACHE_NOT_READY_RETRY, Reporting, Runtime},
    events::ReconcileError,
    finalizers,
};

mod drive;
mod status;
pub use drive::drive;
pub use status::{StatusWriter, WRITTEN_TTL, older};

/// A request to the control cluster made by the skeleton (finalizer,
/// status) failed. Controllers' error types convert from it.
#[derive(Debug, thiserror::Error)]
#[error("failed to {what}")]
pub struct ControlError {
    /// What was attempted.
    pub what: &'static str,
    /// Cause.
    #[source]
    pub source: Box<kube::Error>,
}

impl ControlError {
    /// A failed request to the control cluster.
    pub fn new(what: &'static str, source: kube::Error) -> Self {
        Self {
            what,
            source: Box::new(source),
        }
    }
}

/// The error category of [`ControlError`].
pub const CONTROL_REQUEST_FAILED: &str = "ControlClusterRequestFailed";

/// What a cleanup found.
#[derive(Debug)]
pub enum Cleanup {
    /// Everything the object made is gone (or left in place on purpose):
    /// the finalizer goes.
    Done,
    /// Not yet: the status is written and the object looked at again per
    /// the action (watches usually wake it sooner).
    Wait(Action),
}

/// A status being worked out in one reconcile. Starts as the object's
/// current status; the controller changes it, the skeleton writes it.
pub type Draft<K> = <K as Conditioned>::Status;

/// How the Api of one object is made from its kind's scope: in the
/// object's namespace for a namespaced kind, cluster-wide otherwise.
pub trait ScopedApi: Sized {
    /// The Api that reads and writes `obj`.
    fn api_for<K>(client: kube::Client, obj: &K) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>;
}

impl ScopedApi for k8s_openapi::NamespaceResourceScope {
    fn api_for<K>(client: kube::Client, obj: &K) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Api::namespaced(client, &obj.namespace().unwrap_or_default())
    }
}

impl ScopedApi for k8s_openapi::ClusterResourceScope {
    fn api_for<K>(client: kube::Client, _obj: &K) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Api::all(client)
    }
}

/// What a controller decides; see the module documentation for what the
/// skeleton does around it.
pub trait Reconciler: Send + Sync + 'static {
    /// The kind reconciled.
    type Object: Resource<DynamicType = (), Scope: ScopedApi>
        + Conditioned
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    /// Why a reconcile failed; each message says what to fix.
    type Error: ReconcileError + From<ControlError> + Send + Sync + 'static;

    /// The shared parts.
    fn skeleton(&self) -> &Skeleton;

    /// The Api of the object's kind in its namespace (`Api::namespaced` or
    /// `Api::all`, from the kind's scope), for its finalizer and status.
    fn api(&self, obj: &Self::Object) -> Api<Self::Object> {
        <<Self::Object as Resource>::Scope as ScopedApi>::api_for(
            self.skeleton().client().clone(),
            obj,
        )
    }

    /// The finalizer that holds an object until [`Reconciler::cleanup`] is
    /// done. `None` for a controller that makes nothing outside the object.
    fn finalizer(&self) -> Option<&'static str>;

    /// Labels the object must carry, written together with the finalizer.
    fn labels(&self, _obj: &Self::Object) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// The object a reconcile works on, made from the one the cache holds:
    /// a cache that keeps fields packed ([`crate::packed`]) opens them here,
    /// so that everything after (apply, the status compared and written)
    /// sees the object as the API server has it. By default the cached
    /// object itself.
    fn open_cached(&self, obj: Arc<Self::Object>) -> Arc<Self::Object> {
        obj
    }

    /// Whether there is anything to do for the object now (e.g. a resource
    /// that is not scheduled yet is left alone until it is).
    fn wanted(&self, _obj: &Self::Object) -> bool {
        true
    }

    /// How long to leave a wanted object alone because another part of
    /// this process is acting on it right now and wakes it when done (the
    /// revision controller serving the CRD of an MRD it just made): looked
    /// at again after that long at most, with nothing read, counted or
    /// written meanwhile, so the object's status is first written from
    /// what that other part made. None (the default): reconciled now.
    fn deferred(&self, _obj: &Self::Object) -> Option<Duration> {
        None
    }

    /// Whether the caches the controller decides from hold their first
    /// complete list (see [`crate::controller::cache_ready`]). While they do not, a wanted
    /// object is looked at again after [`CACHE_NOT_READY_RETRY`], without a
    /// reconcile being counted or rate limited.
    fn ready(&self) -> impl Future<Output = bool> + Send {
        async { true }
    }

    /// Whether the skeleton owns the object's status: sets Synced and
    /// writes the draft (true, the default). A controller that shares its
    /// kind's status with another controller returns false and writes only
    /// the fields it owns, itself, in `apply` (the scheduler sets clusterRef,
    /// state and Scheduled on an application whose Synced and Ready are the
    /// application-controller's). The skeleton then writes no status at all:
    /// a paused object is left alone without a condition or an event, and a
    /// failure is reported by event, log and metric only.
    fn writes_status(&self) -> bool {
        true
    }

    /// Called after the skeleton wrote a changed status at the end of a
    /// successful `apply` or `cleanup` (not when nothing changed, nor after
    /// a failure), e.g. to announce a new state with a Normal event.
    fn written(
        &self,
        _obj: &Self::Object,
        _status: &Draft<Self::Object>,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Brings what the object describes about; sets Ready and the other
    /// status fields in `status` (Synced is the skeleton's).
    fn apply(
        &self,
        obj: &Arc<Self::Object>,
        status: &mut Draft<Self::Object>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// How long the change from `before` to `after` (Synced set) may wait
    /// for the burst elsewhere it follows to settle, counted from the first
    /// change held (see [`crate::coalesce`]; only with
    /// [`Skeleton::coalescing`], and never longer than its `longest`); None:
    /// it is news, written at once.
    fn may_wait(
        &self,
        _before: &Draft<Self::Object>,
        _after: &Draft<Self::Object>,
    ) -> Option<Duration> {
        None
    }

    /// Whether a wake while a change of the object is held back may bring
    /// a change that must not wait ([`Reconciler::may_wait`] would say no:
    /// a new state), judged cheaply from the caches against `status`, the
    /// status as last written. Then it is reconciled at once instead of at
    /// the window's end. By default a held object waits.
    fn urgent(&self, _obj: &Self::Object, _status: &Draft<Self::Object>) -> bool {
        false
    }

    /// Removes what the object made.
    fn cleanup(
        &self,
        obj: &Arc<Self::Object>,
        status: &mut Draft<Self::Object>,
    ) -> impl Future<Output = Result<Cleanup, Self::Error>> + Send;

    /// The status to show after `apply` failed (Synced is already False
    /// with the message). By default a Ready=True stays (the last thing
    /// made is still there); otherwise Ready=False with the message.
    fn failed(&self, _obj: &Self::Object, status: &mut Draft<Self::Object>, message: &str) {
        let conds = Self::Object::conditions_mut(status);
        let ready = conditions::is_true(conds, conditions::TYPE_READY);
        if !ready {
            conditions::set(
                conds,
                conditions::unavailable(message.to_owned()),
                &conditions::now(),
            );
        }
    }

    /// Called once an object's finalizer is gone (or it is deleted without
    /// one): forget what was kept about it.
    fn forget(&self, _obj: &Self::Object) {}
}

/// The shared parts of a controller's reconciles.
#[derive(Clone)]
pub struct Skeleton {
    /// Reporting (events, metrics, backoff, rate, deadline).
    pub reporting: Reporting,
    /// The status writer.
    pub status: StatusWriter,
    /// Holds back the status changes [`Reconciler::may_wait`] marks.
    pub coalesce: Option<Coalesce>,
    client: kube::Client,
}

impl Skeleton {
    /// The skeleton of one controller of a binary.
    pub fn new(rt: &Runtime, controller: &'static str) -> Self {
        Self {
            reporting: Reporting::new(rt, controller),
            status: StatusWriter::new(rt.field_manager()),
            coalesce: None,
            client: rt.client.clone(),
        }
    }

    /// Conditions of these types belong to another binary: this one never
    /// applies them (see [`StatusWriter::leaving`]).
    pub fn leaving_conditions(self, foreign: &'static [&'static str]) -> Self {
        let status = self.status.leaving(foreign);
        Self { status, ..self }
    }

    /// Status changes [`Reconciler::may_wait`] marks wait for their burst
    /// to settle, none longer than `longest`.
    pub fn coalescing(self, longest: Duration) -> Self {
        let coalesce = Some(Coalesce::new(longest));
        Self { coalesce, ..self }
    }

    /// The control-cluster client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }
}

/// Whether the object carries `crossplane.io/paused: "true"`.
pub fn paused<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PAUSED))
        .is_some_and(|v| v == "true")
}

/// One reconcile of `obj` through the skeleton.
pub async fn reconcile<R: Reconciler>(r: &R, obj: Arc<R::Object>) -> Result<Action, R::Error> {
    let obj = r.open_cached(obj);
    if !r.wanted(&obj) {
        return Ok(Action::await_change());
    }
    if let Some(wait) = r.deferred(&obj) {
        return Ok(Action::requeue(wait));
    }
    if !r.ready().await {
        return Ok(Action::requeue(CACHE_NOT_READY_RETRY));
    }
    let deleting = obj.meta().deletion_timestamp.is_some();
    if deleting
        && r.finalizer()
            .is_none_or(|f| !finalizers::has(obj.as_ref(), f))
    {
        r.forget(&obj);
        r.skeleton().status.forget(obj.as_ref());
        return Ok(Action::await_change());
    }
    let sk = r.skeleton();
    // A held status change: nothing new to do before its window ends,
    // unless this wake brings a change that may not wait.
    if let (false, Some(c), Some(uid)) = (deleting, &sk.coalesce, obj.meta().uid.as_deref())
        && let Some(wait) = c.waiting(uid, obj.meta().generation)
        && !r.urgent(&obj, &sk.status.base(obj.as_ref()))
    {
        return Ok(Action::requeue(wait));
    }
    sk.reporting
        .reconcile(obj.as_ref(), steps(r, &obj, deleting))
        .await
}

async fn steps<R: Reconciler>(
    r: &R,
    obj: &Arc<R::Object>,
    deleting: bool,
) -> Result<Action, R::Error> {
    let sk = r.skeleton();
    let api = r.api(obj.as_ref());
    let mut status = sk.status.base(obj.as_ref());
    let before = sk.coalesce.as_ref().map(|_| status.clone());
    if paused(obj.as_ref()) {
        return pause(r, &api, obj, status).await;
    }
    if deleting {
        let cleaned = r.cleanup(obj, &mut status).await;
        return match cleaned {
            Ok(Cleanup::Done) => {
                if let Some(f) = r.finalizer() {
                    finalizers::remove(&api, obj.as_ref(), f)
                        .await
                        .map_err(|e| ControlError::new("remove the finalizer", e))?;
                }
                r.forget(obj);
                sk.status.forget(obj.as_ref());
                Ok(Action::await_change())
            }
            Ok(Cleanup::Wait(action)) => Ok(succeeded(r, &api, obj, before, status, action).await?),
            Err(e) => Err(fail(r, &api, obj, status, e).await),
        };
    }
    if let Some(f) = r.finalizer() {
        finalizers::add_with_labels(&api, obj.as_ref(), f, &r.labels(obj))
            .await
            .map_err(|e| ControlError::new("add the finalizer", e))?;
    }
    match r.apply(obj, &mut status).await {
        Ok(action) => Ok(succeeded(r, &api, obj, before, status, action).await?),
        Err(e) => Err(fail(r, &api, obj, status, e).await),
    }
}

/// Sets Synced=True and writes the status once it changed (a change
/// [`Reconciler::may_wait`] marks waits for its window: the object is
/// looked at again then); tells the controller when it was written.
async fn succeeded<R: Reconciler>(
    r: &R,
    api: &Api<R::Object>,
    obj: &R::Object,
    before: Option<Draft<R::Object>>,
    mut status: Draft<R::Object>,
    action: Action,
) -> Result<Action, ControlError> {
    if !r.writes_status() {
        return Ok(action);
    }
    synced(obj, &mut status, conditions::reconcile_success());
    let sk = r.skeleton();
    let uid = obj.meta().uid.as_deref().unwrap_or_default();
    if let (Some(c), Some(before)) = (&sk.coalesce, &before)
        && let Some(window) = r.may_wait(before, &status)
        && sk.status.differs(obj, &status)
        && let Some(wait) = c.hold(uid, obj.meta().generation, window)
    {
        return Ok(Action::requeue(wait));
    }
    if sk.status.write(api, obj, &status).await? {
        r.written(obj, &status).await;
    }
    if let Some(c) = &sk.coalesce {
        c.release(uid);
    }
    Ok(action)
}

/// Records a failure in the status (unless it is a lost race, which is
/// looked at again quietly) and hands the error back for reporting.
async fn fail<R: Reconciler>(
    r: &R,
    api: &Api<R::Object>,
    obj: &R::Object,
    mut status: Draft<R::Object>,
    error: R::Error,
) -> R::Error {
    if error.is_conflict() || !r.writes_status() {
        return error;
    }
    let message = crate::events::error_chain(&error);
    synced(
        obj,
        &mut status,
        conditions::reconcile_error(message.clone()),
    );
    r.failed(obj, &mut status, &message);
    if let Err(e) = r.skeleton().status.write(api, obj, &status).await {
        let error = crate::events::error_chain(&e);
        tracing::warn!(%error, "failed to record the error in the status");
    } else if let (Some(c), Some(uid)) = (&r.skeleton().coalesce, obj.meta().uid.as_deref()) {
        c.release(uid);
    }
    error
}

async fn pause<R: Reconciler>(
    r: &R,
    api: &Api<R::Object>,
    obj: &R::Object,
    mut status: Draft<R::Object>,
) -> Result<Action, R::Error> {
    if !r.writes_status() {
        tracing::debug!("paused by the crossplane.io/paused annotation");
        return Ok(Action::await_change());
    }
    let already = conditions::get(R::Object::conditions(&status), conditions::TYPE_SYNCED)
        .is_some_and(|c| c.reason.as_deref() == Some(conditions::reason::RECONCILE_PAUSED));
    if !already {
        synced(obj, &mut status, conditions::reconcile_paused());
        r.skeleton().status.write(api, obj, &status).await?;
        r.skeleton()
            .reporting
            .events
            .normal(
                &obj.object_ref(&()),
                conditions::reason::RECONCILE_PAUSED,
                "reconciling is paused by the crossplane.io/paused annotation".to_owned(),
            )
            .await;
    }
    Ok(Action::await_change())
}

/// Sets Synced, recording the generation it describes.
fn synced<K: Conditioned + Resource>(
    obj: &K,
    status: &mut K::Status,
    mut condition: types::common::Condition,
) {
    condition.observed_generation = obj.meta().generation;
    conditions::set(K::conditions_mut(status), condition, &conditions::now());
}

/// Runs `controller` through the skeleton until it stops. Every result
/// passes through [`Reporting::reconcile`]; failures of the controller
/// machinery itself (a watch that cannot list, an object gone from the
/// cache) are logged by [`drive`].
pub async fn run<R: Reconciler>(controller: Controller<R::Object>, r: Arc<R>) {
    let reporting = r.skeleton().reporting.clone();
    drive(controller, r, reporting, |obj, r: Arc<R>| async move {
        reconcile(r.as_ref(), obj).await
    })
    .await;
}

/// A hash of a JSON value, to tell whether it changed without keeping it.
pub fn value_hash(value: &serde_json::Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut h);
    h.finish()
}

/// A delay of `d` ±10%, stable per object (by UID), so that the safety
/// resyncs of many objects spread out instead of arriving together.
pub fn jittered<K: Resource>(d: Duration, obj: &K) -> Duration {
    let seed = obj
        .meta()
        .uid
        .as_deref()
        .unwrap_or_default()
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let permille = 900 + (seed % 201);
    d.mul_f64(permille as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent_and_is_stable() {
        let obj: types::kubernetes::v1alpha1::Object = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "o", "uid": "1234-abcd"},
            "spec": {"forProvider": {"manifest": {}}},
        }))
        .unwrap();
        let d = jittered(Duration::from_secs(600), &obj);
        assert!(
            d >= Duration::from_secs(540) && d <= Duration::from_secs(660),
            "{d:?}"
        );
        assert_eq!(d, jittered(Duration::from_secs(600), &obj));
    }
}
