//! The managed object, as runtime::managed's External: observed from the
//! shared watch of its kind in the target cluster (a GET only when the watch
//! cannot answer yet), created and updated with one server-side apply by the
//! Object's own field manager, deleted with one DELETE.

use kube::runtime::reflector::ObjectRef;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch},
};
use runtime::{
    managed::{
        self, Deletion, External, Observation, RequestFailed,
        drift::{self, Confirmed, Correction},
    },
    remote::RemoteCluster,
    ssa,
    watches::{Cached, Scope, Session, Target},
};
use serde_json::Value;

use super::configs::{config_of, writes_confined_to};
use super::context::{CONTROLLER, Objects, target_of};
use super::errors::Error;
use super::kind::ObjectKind;
use super::manifest;
use super::references::Resolved;
use crate::policy;

/// The field a user fixes when the target refuses the managed object.
const FIELD: &str = "spec.forProvider.manifest";

/// One Object's managed object in its target cluster.
pub struct ManagedObject<'a, K: ObjectKind> {
    ctx: &'a Objects<K>,
    /// Where it lives (and the shared watch that serves it).
    pub target: Target,
    api: Api<DynamicObject>,
    /// The manifest to apply.
    pub manifest: Value,
    /// What the cache knew when it was located.
    cached: Cached,
    uid: String,
    /// The Object, as its watch wakes it.
    dependent: ObjectRef<K>,
    field_manager: String,
    /// "ConfigMap name", as messages say it.
    pub what: String,
    cluster: String,
    /// Whether status shows it was never observed (its first apply needs
    /// no read before it).
    never_observed: bool,
    /// How its dependents go when it is deleted.
    propagation: DeleteParams,
    /// Whether observe found it changed by someone else.
    drifted: std::sync::atomic::AtomicBool,
    /// What the update put back, when it had drifted.
    correction: std::sync::Mutex<Option<Correction>>,
    /// The live object observe judged drifted.
    observed: std::sync::Mutex<Option<Value>>,
}

/// Works out the managed object from the resolved Object and registers the
/// Object's interest in it.
pub async fn locate<'a, K: ObjectKind>(
    ctx: &'a Objects<K>,
    obj: &K,
    cluster: &RemoteCluster,
    resolved: &Resolved,
    session: &mut Session<K>,
) -> Result<ManagedObject<'a, K>, Error> {
    let mut manifest = manifest::desired(obj, &resolved.doc)?;
    let (api_version, kind) = (
        manifest::text(&manifest, "/apiVersion"),
        manifest::text(&manifest, "/kind"),
    );
    // A namespaced Object's manifest is in its own namespace unless it
    // names another.
    let namespace = manifest
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .or_else(|| obj.namespace());
    let located = managed::locate(
        cluster,
        &target_of(obj),
        &api_version,
        &kind,
        namespace.as_deref(),
        FIELD,
    )
    .await?;
    let confined = ctx
        .reach
        .configs
        .get(&config_of(obj))
        .and_then(|c| writes_confined_to(obj, &c));
    if let Some(ns) = confined
        && located.namespace.as_deref() != Some(ns.as_str())
    {
        let name = manifest::text(&manifest, "/metadata/name");
        let what = match &located.namespace {
            Some(other) => format!("{kind} {other}/{name}"),
            None => format!("{kind} {name} (cluster-scoped)"),
        };
        return Err(Error::OutsideNamespace(FIELD.to_owned(), ns, what));
    }
    if obj.namespace().is_some()
        && let (Some(ns), Some(m)) = (
            &located.namespace,
            manifest.get_mut("metadata").and_then(Value::as_object_mut),
        )
    {
        m.insert("namespace".to_owned(), Value::from(ns.as_str()));
    }
    if located.namespace.is_none()
        && let Some(m) = manifest.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.remove("namespace");
    }
    let name = manifest::text(&manifest, "/metadata/name");
    Ok(at(ctx, obj, cluster, located, name, manifest, session))
}

/// The managed object recorded in status.managedObjectRef: what was applied
/// when the manifest can no longer be worked out (a reference's source is
/// gone) and the Object is deleted.
pub async fn recorded<'a, K: ObjectKind>(
    ctx: &'a Objects<K>,
    obj: &K,
    cluster: &RemoteCluster,
    session: &mut Session<K>,
) -> Option<Result<ManagedObject<'a, K>, Error>> {
    let r = obj.view().status.as_ref()?.managed_object_ref.clone()?;
    let located = managed::locate(
        cluster,
        &target_of(obj),
        &r.api_version,
        &r.kind,
        r.namespace.as_deref(),
        FIELD,
    )
    .await;
    Some(
        located
            .map(|l| at(ctx, obj, cluster, l, r.name, Value::Null, session))
            .map_err(Error::from),
    )
}

fn at<'a, K: ObjectKind>(
    ctx: &'a Objects<K>,
    obj: &K,
    cluster: &RemoteCluster,
    located: managed::Located,
    name: String,
    manifest: Value,
    session: &mut Session<K>,
) -> ManagedObject<'a, K> {
    let target = Target {
        cluster: cluster.clone(),
        resource: located.resource,
        namespace: located.namespace,
        name: name.clone(),
        scope: Scope::Kind { labels: None },
    };
    let cached = session.read(&target);
    ManagedObject {
        ctx,
        what: format!("{} {name}", target.resource.kind),
        target,
        api: located.api,
        manifest,
        cached,
        uid: obj.uid().unwrap_or_default(),
        dependent: ObjectRef::from_obj(obj),
        field_manager: manifest::field_manager(obj),
        cluster: target_of(obj),
        never_observed: obj
            .view()
            .status
            .as_ref()
            .is_none_or(|s| s.at_provider.is_none()),
        propagation: propagation(obj),
        drifted: Default::default(),
        correction: Default::default(),
        observed: Default::default(),
    }
}

/// The deletion of the managed object, as
/// `spec.forProvider.deletionPropagationPolicy` says (Background unset).
fn propagation<K: ObjectKind>(obj: &K) -> DeleteParams {
    use types::kubernetes::v1alpha2::DeletionPropagation as P;
    match obj.view().spec.for_provider.deletion_propagation_policy {
        P::Foreground => DeleteParams::foreground(),
        P::Orphan => DeleteParams::orphan(),
        P::Background => DeleteParams::background(),
    }
}

impl<K: ObjectKind> ManagedObject<'_, K> {
    fn failed(&self, what: &str, e: kube::Error) -> Error {
        RequestFailed::new(format!("{what} {}", self.what), &self.cluster, FIELD, e).into()
    }

    /// What the last update put back, when it corrected drift.
    pub fn correction(&self) -> Option<Correction> {
        self.correction.lock().ok().and_then(|mut c| c.take())
    }

    /// Reads the managed object from the server (watch caches keep no
    /// managedFields) to say what changed and who changed it; a failed read
    /// only leaves the report without them. Answers the object as the server
    /// has it when nothing the manifest sets differs there after all (the
    /// watch had shown an older version): no drift, nothing to apply.
    async fn find_correction(&self) -> Option<Value> {
        let found = match self.api.get(&self.target.name).await {
            Ok(live) => Some(manifest::as_value(&live, &self.target.resource)),
            Err(e) => {
                tracing::debug!(error = %e, "reading the drifted object for its managedFields");
                None
            }
        };
        let cached = self.observed.lock().ok().and_then(|o| o.clone());
        match drift::confirm(&self.manifest, found, cached.as_ref(), &self.field_manager) {
            Confirmed::NoDrift(fresh) => Some(fresh),
            Confirmed::Drift(correction) => {
                if let Ok(mut c) = self.correction.lock() {
                    *c = Some(correction);
                }
                None
            }
        }
    }

    /// The live object: from the watch, else from the server.
    async fn live(&self) -> Result<Option<Value>, Error> {
        let found = managed::read_cached(self.cached.clone(), &self.target)
            .await
            .map_err(|e| self.failed("reading", e))?;
        Ok(found
            .object
            .map(|o| manifest::as_value(&o, &self.target.resource)))
    }

    async fn apply(&self) -> Result<Value, Error> {
        // Its own watch event, arriving before the answer, wakes no
        // second reconcile of this Object.
        let writing = self.ctx.watches.writing(&self.dependent, &self.target);
        let answer = self
            .api
            .patch(
                &self.target.name,
                &ssa::params(&self.field_manager),
                &Patch::Apply(&self.manifest),
            )
            .await
            .map_err(|e| self.failed("applying", e))?;
        let live = manifest::as_value(&answer, &self.target.resource);
        self.ctx.applied.remember(&self.uid, &self.manifest, &live);
        writing.written(answer);
        Ok(live)
    }
}

impl<K: ObjectKind> External for ManagedObject<'_, K> {
    type Error = Error;

    async fn observe(&self) -> Result<Observation, Error> {
        self.ctx
            .rt
            .metrics
            .remote_observations
            .with_label_values(&[CONTROLLER, self.target.cluster.metric_label()])
            .inc();
        if matches!(self.cached, Cached::Unknown) && self.never_observed {
            // First sync while the watch is still listing: the apply that
            // follows answers the live object (one request instead of two).
            return Ok(Observation::absent());
        }
        let Some(live) = self.live().await? else {
            return Ok(Observation::absent());
        };
        let (up_to_date, drifted) = self.ctx.applied.judge(&self.uid, &self.manifest, &live);
        self.drifted
            .store(drifted, std::sync::atomic::Ordering::Relaxed);
        if drifted && let Ok(mut o) = self.observed.lock() {
            *o = Some(live.clone());
        }
        Ok(Observation {
            exists: true,
            up_to_date,
            drifted,
            live: Some(live),
        })
    }

    async fn create(&self) -> Result<Value, Error> {
        self.apply().await
    }

    async fn update(&self) -> Result<Value, Error> {
        if self.drifted.load(std::sync::atomic::Ordering::Relaxed)
            && let Some(fresh) = self.find_correction().await
        {
            self.ctx.applied.remember(&self.uid, &self.manifest, &fresh);
            return Ok(fresh);
        }
        self.apply().await
    }

    async fn delete(&self) -> Result<Deletion, Error> {
        let call = async {
            match &self.cached {
                Cached::Absent => return Ok(Deletion::Gone),
                Cached::Present(o) if o.metadata.deletion_timestamp.is_some() => {
                    return Ok(Deletion::InProgress);
                }
                _ => {}
            }
            match self.api.delete(&self.target.name, &self.propagation).await {
                // The object is still there (it has finalizers): its watch
                // wakes the Object when it goes.
                Ok(answer) => match answer.left() {
                    Some(still) => {
                        self.ctx.watches.written(&self.target, still);
                        Ok(Deletion::InProgress)
                    }
                    None => Ok(Deletion::Gone),
                },
                Err(e) if managed::not_found(&e) => Ok(Deletion::Gone),
                Err(e) => Err(self.failed("deleting", e)),
            }
        };
        self.ctx
            .rt
            .clusters
            .call(&self.cluster, &self.target.cluster, call)
            .await
    }
}

/// What the policies of an Object allow.
pub fn allowed<K: ObjectKind>(obj: &K) -> managed::Allowed {
    let policies = &obj.view().spec.management_policies;
    managed::Allowed {
        create: policy::can_create(policies),
        update: policy::can_update(policies),
        delete: policy::can_delete(policies, obj.view().spec.deletion_policy),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use types::kubernetes::v1alpha2::Object;

    #[test]
    fn the_managed_object_is_deleted_with_the_propagation_its_object_names() {
        let with = |policy: Option<&str>| {
            let mut for_provider = json!({"manifest": {}});
            if let (Some(p), Some(f)) = (policy, for_provider.as_object_mut()) {
                f.insert("deletionPropagationPolicy".into(), json!(p));
            }
            let o: Object = serde_json::from_value(json!({
                "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
                "metadata": {"name": "o"}, "spec": {"forProvider": for_provider},
            }))
            .unwrap();
            propagation(&o)
        };
        assert_eq!(with(None), DeleteParams::background());
        assert_eq!(with(Some("Background")), DeleteParams::background());
        assert_eq!(with(Some("Foreground")), DeleteParams::foreground());
        assert_eq!(with(Some("Orphan")), DeleteParams::orphan());
    }
}
