//! The remote side of one KubernetesApplicationResource: its templated
//! object and the Secrets it propagates, in the resource's cluster, as the
//! managed-resource contract's external client ([`External`]).
//!
//! Every read is answered by a shared watch first (the object's kind in that
//! cluster; the propagated Secrets, selected by their label) and goes to the
//! cluster only when the watch cannot answer yet. Every write puts its
//! answer into the watch's cache. A remote object or Secret that does not
//! carry this resource's UID annotation is never changed or deleted.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PostParams},
    core::PartialObjectMeta,
    discovery::ApiResource,
    runtime::reflector::ObjectRef,
};
use runtime::{
    managed::{
        self, Deletion, External, Found, Located, Observation, RequestFailed, drift::Correction,
    },
    remote::RemoteCluster,
    ssa,
    watches::{Cached, Scope, Session, Target},
};
use serde_json::Value;
use types::workload::v1alpha1::KubernetesApplicationResource;

use crate::context::ApplicationResources;
use crate::error::Error;
use crate::remote_object;
use crate::remote_object::Ownership;
use crate::strategy::{Strategy, initial_manager};

mod strategies;

/// The field a user fixes when the remote cluster refuses the object.
const FIELD: &str = "spec.template";

type Res = KubernetesApplicationResource;

/// One resource's remote side, connected and resolved.
pub struct Remote<'a> {
    ctx: &'a ApplicationResources,
    res: &'a Res,
    uid: String,
    cluster: RemoteCluster,
    /// "cluster ns/name", as messages name it.
    described: String,
    /// "KubernetesCluster ns/name", as the breaker names it.
    breaker: String,
    located: Located,
    target: remote_object::Target,
    /// The object as the template renders it.
    full: Value,
    /// What this controller's manager applies: `full` without the ignored
    /// fields.
    desired: Value,
    strategy: Strategy,
    session: &'a Mutex<Session<Res>>,
    plan: Mutex<Plan>,
    /// What the last update put back, when someone else had changed it.
    correction: Mutex<Option<Correction>>,
}

/// What `observe` found, for `create`/`update` to act on.
#[derive(Default)]
struct Plan {
    live: Option<Value>,
    object_current: bool,
    drifted: bool,
    secrets: Vec<SecretWrite>,
}

/// A propagated Secret to write.
#[derive(Clone)]
struct SecretWrite {
    /// Its name in the remote cluster.
    name: String,
    /// The local Secret it copies.
    local: String,
    /// POST it (no Secret with the label is there; one without it must not
    /// be overwritten) rather than apply it (it is known ours or absent).
    create: bool,
}

/// The cluster as the breaker (--remote-timeout) and its messages name it.
pub fn breaker_label(res: &Res, cluster: &str) -> String {
    format!(
        "KubernetesCluster {}/{cluster}",
        res.namespace().unwrap_or_default()
    )
}

impl<'a> Remote<'a> {
    /// Connects to `cluster` and resolves the template's kind there.
    pub async fn build(
        ctx: &'a ApplicationResources,
        res: &'a Res,
        cluster: &str,
        session: &'a Mutex<Session<Res>>,
        strategy: Strategy,
    ) -> Result<Self, Error> {
        let uid = res.uid().unwrap_or_default();
        // The cache keeps templates packed (controller::packed_template).
        let template = runtime::packed::unpacked(&res.spec.template);
        let target = remote_object::target(&template).map_err(Error::InvalidTemplate)?;
        let remote = ctx.connect(res, cluster).await?;
        let described = format!("cluster {}", remote.name);
        let breaker = breaker_label(res, cluster);
        let located = ctx
            .rt
            .clusters
            .call(&breaker, &remote, async {
                managed::locate(
                    &remote,
                    &described,
                    &target.gvk.api_version(),
                    &target.gvk.kind,
                    target.namespace.as_deref(),
                    FIELD,
                )
                .await
                .map_err(Error::from)
            })
            .await?;
        let full = remote_object::render(&template, &uid, located.namespace.as_deref())
            .map_err(Error::InvalidTemplate)?;
        let desired = strategy.applied(&full);
        Ok(Self {
            ctx,
            res,
            uid,
            cluster: remote,
            described,
            breaker,
            located,
            target,
            full,
            desired,
            strategy,
            session,
            plan: Mutex::default(),
            correction: Mutex::default(),
        })
    }

    /// The template's kind, as the cluster serves it.
    pub fn kind(&self) -> &str {
        &self.located.resource.kind
    }

    /// "Deployment ns/name", as messages name the remote object.
    pub fn what(&self) -> String {
        self.target.describe(self.located.namespace.as_deref())
    }

    /// The cluster, as messages name it.
    pub fn cluster(&self) -> &str {
        &self.described
    }

    /// What the last update put back, when it corrected drift.
    pub fn correction(&self) -> Option<Correction> {
        self.correction.lock().ok().and_then(|mut c| c.take())
    }

    /// This resource, as the watches wake it.
    fn dependent(&self) -> ObjectRef<Res> {
        ObjectRef::from_obj(self.res)
    }

    /// The namespace propagated Secrets go to: the object's, or "default"
    /// beside a cluster-scoped object.
    fn secret_namespace(&self) -> String {
        self.located
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned())
    }

    fn object_target(&self) -> Target {
        Target {
            cluster: self.cluster.clone(),
            resource: self.located.resource.clone(),
            namespace: self.located.namespace.clone(),
            name: self.target.name.clone(),
            scope: Scope::Kind { labels: None },
        }
    }

    fn secret_target(&self, name: &str) -> Target {
        Target {
            cluster: self.cluster.clone(),
            resource: ApiResource::erase::<Secret>(&()),
            namespace: Some(self.secret_namespace()),
            name: name.to_owned(),
            scope: Scope::Kind {
                labels: Some(remote_object::PROPAGATED_SELECTOR.to_owned()),
            },
        }
    }

    fn failed(&self, what: String, e: kube::Error) -> Error {
        RequestFailed::new(what, &self.described, FIELD, e).into()
    }

    /// Reads `target` from its shared watch, or from the cluster when the
    /// watch cannot answer yet. Also says whether the cluster was asked.
    async fn read(&self, target: &Target) -> Result<(Option<Arc<DynamicObject>>, bool), Error> {
        let cached = self
            .session
            .lock()
            .map(|mut s| s.read(target))
            .unwrap_or(Cached::Unknown);
        let Found { object, asked } = managed::read_cached(cached, target).await.map_err(|e| {
            let what = format!("reading {} {}", target.resource.kind, target.name);
            self.failed(what, e)
        })?;
        Ok((object, asked))
    }

    /// Fails unless the remote object (or Secret) is ours.
    fn ours(&self, obj: &DynamicObject, what: &str) -> Result<(), Error> {
        let owner = remote_object::ownership(obj.metadata.annotations.as_ref(), &self.uid);
        if owner == Ownership::Ours {
            return Ok(());
        }
        Err(Error::Conflict(remote_object::conflict_message(
            what,
            &self.cluster.name,
            &owner,
        )))
    }

    fn is_ours(&self, obj: &DynamicObject) -> bool {
        remote_object::ownership(obj.metadata.annotations.as_ref(), &self.uid) == Ownership::Ours
    }

    /// Which propagated Secrets need writing.
    async fn observe_secrets(&self) -> Result<Vec<SecretWrite>, Error> {
        let ns = self.res.namespace().unwrap_or_default();
        let mut writes = Vec::new();
        for secret_ref in &self.res.spec.secrets {
            let local = self
                .ctx
                .secret_meta(&ns, &secret_ref.name)
                .ok_or_else(|| Error::LocalSecretNotFound(format!("{ns}/{}", secret_ref.name)))?;
            let source = source_of(&local);
            let name = remote_object::secret_name(&self.res.name_any(), &secret_ref.name);
            let (found, asked) = self.read(&self.secret_target(&name)).await?;
            let current = match &found {
                Some(s) => {
                    let what = format!("Secret {}/{name}", self.secret_namespace());
                    self.ours(s, &what)?;
                    remote_object::copied_from(s.metadata.annotations.as_ref(), &source)
                }
                None => false,
            };
            if !current {
                writes.push(SecretWrite {
                    name,
                    local: secret_ref.name.clone(),
                    create: found.is_none() && !asked,
                });
            }
        }
        Ok(writes)
    }

    /// Writes one propagated Secret from the local Secret's current data.
    async fn write_secret(&self, write: &SecretWrite) -> Result<(), Error> {
        let ns = self.res.namespace().unwrap_or_default();
        let local = Api::<Secret>::namespaced(self.ctx.rt.client.clone(), &ns)
            .get_opt(&write.local)
            .await
            .map_err(|e| Error::Read(format!("Secret {ns}/{}", write.local), e))?
            .ok_or_else(|| Error::LocalSecretNotFound(format!("{ns}/{}", write.local)))?;
        let data = serde_json::to_value(local.data.clone().unwrap_or_default())
            .map_err(|e| Error::Serialize("a Secret's data", e))?;
        let source = remote_object::source_version(
            &local.uid().unwrap_or_default(),
            &local.resource_version().unwrap_or_default(),
        );
        let secret_ns = self.secret_namespace();
        let body = remote_object::propagated_secret(
            &write.name,
            &secret_ns,
            &self.uid,
            &source,
            local.type_.as_deref(),
            &data,
        );
        let target = self.secret_target(&write.name);
        let what = format!("Secret {secret_ns}/{}", write.name);
        // Its own watch event, arriving before the answer, wakes no
        // second reconcile of this resource.
        let writing = self.ctx.watches.writing(&self.dependent(), &target);
        let written = if write.create {
            self.create_secret(&target, &body, &what).await?
        } else {
            self.apply(&target, &body, &what).await?
        };
        writing.written(written);
        Ok(())
    }

    /// Creates a Secret that the labelled watch does not show; one that
    /// exists without the label is checked before it is applied.
    async fn create_secret(
        &self,
        target: &Target,
        body: &Value,
        what: &str,
    ) -> Result<DynamicObject, Error> {
        let object: DynamicObject = serde_json::from_value(body.clone())
            .map_err(|e| Error::Serialize("a propagated Secret", e))?;
        let params = PostParams {
            field_manager: Some(self.ctx.rt.field_manager()),
            ..PostParams::default()
        };
        match target.api().create(&params, &object).await {
            Ok(created) => Ok(created),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = target
                    .api()
                    .get(&target.name)
                    .await
                    .map_err(|e| self.failed(format!("reading {what}"), e))?;
                self.ours(&existing, what)?;
                self.apply(target, body, what).await
            }
            Err(e) => Err(self.failed(format!("creating {what}"), e)),
        }
    }

    async fn apply(
        &self,
        target: &Target,
        body: &Value,
        what: &str,
    ) -> Result<DynamicObject, Error> {
        target
            .api()
            .patch(
                &target.name,
                &ssa::params(&self.ctx.rt.field_manager()),
                &Patch::Apply(body),
            )
            .await
            .map_err(|e| self.failed(format!("applying {what}"), e))
    }

    /// Writes the Secrets `observe` found stale, then the object unless it
    /// was current; answers the object as stored.
    async fn write(&self) -> Result<Value, Error> {
        let (secrets, live, current, drifted) = match self.plan.lock() {
            Ok(p) => (
                p.secrets.clone(),
                p.live.clone(),
                p.object_current,
                p.drifted,
            ),
            Err(_) => (Vec::new(), None, false, false),
        };
        for s in &secrets {
            self.write_secret(s).await?;
        }
        let creating = live.is_none();
        if let (true, Some(live)) = (current, live.as_ref()) {
            return Ok(live.clone());
        }
        let target = self.object_target();
        if drifted && let Some(fresh) = self.find_correction(&target, live.as_ref()).await {
            self.ctx.applied.remember(&self.uid, &self.desired, &fresh);
            return Ok(fresh);
        }
        if let Some(live) = &live {
            self.keep_ignored(&target, live).await?;
        }
        let writing = self.ctx.watches.writing(&self.dependent(), &target);
        // A created object gets the ignored fields too, and keeps them
        // once this manager stops applying them (module strategy).
        let initial = self
            .strategy
            .initial(&self.full, &self.full)
            .filter(|_| creating);
        let first = if initial.is_some() {
            &self.full
        } else {
            &self.desired
        };
        let mut answer = self.apply(&target, first, &self.what()).await?;
        if let Some(initial) = initial {
            let manager = initial_manager(&self.ctx.rt.field_manager());
            answer = target
                .api()
                .patch(
                    &target.name,
                    &ssa::params(&manager),
                    &Patch::Apply(&initial),
                )
                .await
                .map_err(|e| {
                    self.failed(format!("applying the ignored fields of {}", self.what()), e)
                })?;
        }
        writing.written(answer.clone());
        let value =
            serde_json::to_value(&answer).map_err(|e| Error::Serialize("the remote object", e))?;
        self.ctx.applied.remember(&self.uid, &self.desired, &value);
        Ok(value)
    }

    async fn observe_all(&self) -> Result<Observation, Error> {
        let (found, _) = self.read(&self.object_target()).await?;
        // ReadOnly observes what may be anyone's, and writes nothing.
        if self.strategy.read_only() {
            let live = match found {
                Some(l) => Some(
                    serde_json::to_value(l.as_ref())
                        .map_err(|e| Error::Serialize("the remote object", e))?,
                ),
                None => None,
            };
            return Ok(Observation {
                exists: live.is_some(),
                up_to_date: true,
                drifted: false,
                live,
            });
        }
        if let Some(live) = &found {
            self.ours(live, &self.what())?;
        }
        let secrets = self.observe_secrets().await?;
        let Some(live) = found else {
            self.set_plan(Plan {
                secrets,
                ..Plan::default()
            });
            return Ok(Observation::absent());
        };
        let value = serde_json::to_value(live.as_ref())
            .map_err(|e| Error::Serialize("the remote object", e))?;
        let (current, drifted) = self.ctx.applied.judge(&self.uid, &self.desired, &value);
        let secrets_current = secrets.is_empty();
        self.set_plan(Plan {
            live: Some(value.clone()),
            object_current: current,
            drifted,
            secrets,
        });
        Ok(Observation {
            exists: true,
            up_to_date: current && secrets_current,
            drifted,
            live: Some(value),
        })
    }

    fn set_plan(&self, plan: Plan) {
        if let Ok(mut p) = self.plan.lock() {
            *p = plan;
        }
    }

    async fn delete_all(&self) -> Result<Deletion, Error> {
        let orphan = self.strategy.orphans();
        for secret_ref in &self.res.spec.secrets {
            let name = remote_object::secret_name(&self.res.name_any(), &secret_ref.name);
            let target = self.secret_target(&name);
            if let (Some(s), _) = self.read(&target).await?
                && self.is_ours(&s)
            {
                let what = format!("Secret {}/{name}", self.secret_namespace());
                if orphan {
                    self.release(&target, &what).await?;
                } else {
                    self.delete_one(&target, &what).await?;
                }
            }
        }
        let target = self.object_target();
        let (found, _) = self.read(&target).await?;
        match found {
            // Gone, or not ours: never touched, never deleted.
            None => Ok(Deletion::Gone),
            Some(live) if !self.is_ours(&live) => Ok(Deletion::Gone),
            Some(_) if orphan => self.release(&target, &self.what()).await,
            Some(live) if live.metadata.deletion_timestamp.is_some() => Ok(Deletion::InProgress),
            Some(_) => self.delete_one(&target, &self.what()).await,
        }
    }

    /// Deletes one remote object: gone at once, or still being removed
    /// (finalizers, a Namespace emptying itself) when the answer carries a
    /// deletionTimestamp.
    async fn delete_one(&self, target: &Target, what: &str) -> Result<Deletion, Error> {
        match target
            .api()
            .delete(&target.name, &DeleteParams::background())
            .await
        {
            Ok(answer) => match answer.left() {
                Some(obj) if obj.metadata.deletion_timestamp.is_some() => {
                    self.ctx.watches.written(target, obj);
                    Ok(Deletion::InProgress)
                }
                _ => Ok(Deletion::Gone),
            },
            Err(e) if managed::not_found(&e) => Ok(Deletion::Gone),
            Err(e) => Err(self.failed(format!("deleting {what}"), e)),
        }
    }
}

/// The version of a local Secret known by its metadata.
fn source_of(meta: &PartialObjectMeta<Secret>) -> String {
    remote_object::source_version(
        meta.meta().uid.as_deref().unwrap_or_default(),
        meta.meta().resource_version.as_deref().unwrap_or_default(),
    )
}

impl Remote<'_> {
    /// Runs `work` against this resource's cluster under its breaker.
    async fn guarded<T>(&self, work: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        self.ctx
            .rt
            .clusters
            .call(&self.breaker, &self.cluster, work)
            .await
    }
}

impl External for Remote<'_> {
    type Error = Error;

    async fn observe(&self) -> Result<Observation, Error> {
        self.guarded(self.observe_all()).await
    }

    async fn create(&self) -> Result<Value, Error> {
        self.guarded(self.write()).await
    }

    async fn update(&self) -> Result<Value, Error> {
        self.guarded(self.write()).await
    }

    async fn delete(&self) -> Result<Deletion, Error> {
        self.guarded(self.delete_all()).await
    }
}
