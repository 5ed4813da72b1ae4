//! Establishing a revision's objects: its CRDs and webhook configurations,
//! all or nothing, and who controls one that exists (control moves within a
//! Provider by revision number; anything else is a conflict).

use std::{collections::BTreeMap, sync::Arc};

use futures::{StreamExt as _, TryStreamExt as _};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef},
};
use runtime::{
    reconciler::{Draft, value_hash},
    ssa,
};
use types::{
    apiextensions::v1alpha1::ManagedResourceDefinition, common::TypedReference,
    pkg::v1::ProviderRevision,
};

use super::{
    context::{PENDING, ProviderRevisions, TYPE_HEALTHY, WAIT_POLL, set},
    deliver,
    error::Error,
    seen::{Kind, Known},
};
use crate::labels;

/// How a CRD that exists relates to this revision.
pub(super) enum Control {
    /// Nobody, this revision or an older sibling controls it: ours to apply.
    Ours,
    /// A newer revision of the same Provider controls it.
    Newer,
    /// Something else controls it; the message names it.
    Foreign(String),
}

impl ProviderRevisions {
    /// The Provider's other revisions, by name → revision number.
    pub(super) fn siblings(&self, r: &ProviderRevision) -> BTreeMap<String, i64> {
        let package = r.labels().get(labels::PACKAGE).cloned();
        self.revisions
            .state()
            .iter()
            .filter(|o| {
                o.labels().get(labels::PACKAGE) == package.as_ref() && o.name_any() != r.name_any()
            })
            .map(|o| (o.name_any(), o.spec.revision))
            .collect()
    }

    /// What is known of `name` while the watch shows it at the version it
    /// was known at (`now`, [`super::seen`]); else the object, read whole
    /// (`None` when there is none).
    async fn recall_or_read<K>(
        &self,
        kind: Kind,
        api: &Api<K>,
        name: &str,
        now: Option<&str>,
        what: &'static str,
    ) -> Result<(Option<Known>, Option<K>), Error>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        if let Some(known) = self.seen.recall(kind, name, now) {
            return Ok((Some(known), None));
        }
        let live = api
            .get_opt(name)
            .await
            .map_err(|e| Error::request(what, e))?;
        Ok((None, live))
    }

    /// How the object `what` (its `meta`) that exists relates to this
    /// revision: a package never takes over what it did not make.
    pub(super) fn control_of(
        &self,
        r: &ProviderRevision,
        siblings: &BTreeMap<String, i64>,
        what: &str,
        meta: &kube::api::ObjectMeta,
    ) -> Control {
        let refs = meta.owner_references.as_deref().unwrap_or_default();
        let Some(owner) = refs.iter().find(|o| o.controller == Some(true)) else {
            // Uncontrolled: ours only when this revision or a sibling still
            // references it (a sibling let go of control on its way out).
            // A CRD nobody of this Provider references was made by someone
            // else (by hand, by Helm, by crossplane-rs's own crds/) and is
            // never taken over.
            let delivered = refs.iter().any(|o| {
                Some(&o.uid) == r.uid().as_ref()
                    || (o.kind == "ProviderRevision" && siblings.contains_key(&o.name))
            });
            return if delivered {
                Control::Ours
            } else {
                Control::Foreign(format!(
                    "{what} exists and was not installed by this Provider ({}); a package never takes over what it did not create: delete it, or remove it from the package",
                    crate::crds::maker_of(meta)
                ))
            };
        };
        if Some(&owner.uid) == r.uid().as_ref() {
            return Control::Ours;
        }
        if owner.kind == "ProviderRevision"
            && let Some(n) = siblings.get(&owner.name)
        {
            return if *n > r.spec.revision {
                Control::Newer
            } else {
                Control::Ours
            };
        }
        let provider = (owner.kind == "ProviderRevision")
            .then(|| self.revisions.get(&ObjectRef::new(&owner.name)))
            .flatten()
            .and_then(|o| o.labels().get(labels::PACKAGE).cloned());
        Control::Foreign(match provider {
            Some(p) => format!(
                "{what} is already controlled by ProviderRevision {} of Provider {p}; delete one of the two Providers",
                owner.name
            ),
            None => format!(
                "{what} is already controlled by {} {}; remove it or that owner first",
                owner.kind, owner.name
            ),
        })
    }

    /// Installs the package's CRDs. `Ok(Some(action))` when the revision
    /// must wait (a newer sibling took over, or CRDs are not established
    /// yet).
    pub(super) async fn install(
        &self,
        r: &ProviderRevision,
        contents: &oci::xpkg::Contents,
        webhooks: Option<&crate::crds::WebhookTarget<'_>>,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Option<Action>, Error> {
        let objects = &contents.objects;
        let crds = self.crds_api();
        let siblings = self.siblings(r);
        // Nothing of a package installs when any of its CRDs or webhook
        // configurations may never be.
        let own = crate::webhooks::kinds(objects);
        if let Some(why) = objects
            .iter()
            .find_map(|o| crate::crds::refused(o, true))
            .or_else(|| {
                contents
                    .webhooks
                    .iter()
                    .find_map(|w| crate::webhooks::refused(w, &own))
            })
        {
            return Err(Error::Conflict(why));
        }
        // What each CRD is to become is worked out again for the dry run and
        // for the write rather than kept: a package's CRDs as objects are
        // many times the package, and two copies of them would be held.
        let body_of = |object: &serde_json::Value, owners: &[OwnerReference]| {
            let mut body = self.crd_body(r, object, owners, &siblings);
            if let Some(target) = webhooks {
                crate::crds::point_conversion(&mut body, target);
            }
            body
        };
        let mrds = Api::<ManagedResourceDefinition>::all(self.sk.client().clone());
        // Whether a CRD the view of CRDs does not show may be taken as
        // absent (it has listed them all).
        let view_ready = self.crds_known.ready().await;
        // Without SafeStart a package's MRDs are Active from the start.
        let active = !r.safe_start();
        let mut planned = Vec::new();
        for object in objects {
            let name = object
                .pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_owned();
            let managed = crate::mrds::body::is_managed(object);
            // Each object as the watch last saw it; read whole only when it
            // changed, besides its status, since this controller last
            // looked. Whether a CRD is established is the watch's.
            let crd_now = self.crds_known.state(&name);
            // A managed kind's CRD is its MRD's to make (and its MRD
            // refuses one it did not make): one the view does not show yet
            // is not read, the revision waits for it.
            // Of a CRD its MRD serves the revision takes only its uid and
            // whether it is established: the view says both.
            let by_mrd = managed && crd_now.as_ref().is_some_and(|c| c.by_mrd);
            let (crd_known, live) = if managed && view_ready && crd_now.is_none() {
                (None, None)
            } else if let Some(now) = crd_now.as_ref().filter(|_| by_mrd) {
                let known = Known {
                    version: now.version.clone(),
                    uid: now.uid(),
                    ready: now.established,
                    applied: None,
                    owners: Arc::from([]),
                };
                (Some(known), None)
            } else {
                self.recall_or_read(
                    Kind::Crd,
                    &crds,
                    &name,
                    crd_now.as_ref().map(|c| c.version.as_str()),
                    "read a CRD",
                )
                .await?
            };
            // (A CRD stays established until it is deleted, which is a new
            // version: what was found established still is.)
            let crd_known = crd_known.map(|mut k| {
                k.ready |= crd_now.as_ref().is_some_and(|c| c.established);
                k
            });
            let recalled_crd = crd_known.as_ref().map(|k| k.meta(&name));
            let crd_meta = live.as_ref().map(|l| &l.metadata).or(recalled_crd.as_ref());
            if let Some(meta) = crd_meta
                && !by_mrd
                && !(managed && crate::mrds::body::served_by_mrd(meta))
            {
                let what = format!("CustomResourceDefinition {name}");
                match self.control_of(r, &siblings, &what, meta) {
                    Control::Ours => {}
                    Control::Newer => {
                        // A newer revision took over: this one is on its way
                        // out; leave everything to it.
                        return Ok(Some(Action::requeue(self.settings.resync)));
                    }
                    Control::Foreign(message) => return Err(Error::Conflict(message)),
                }
            }
            let (mrd_known, live_mrd) = match self.mrd_versions.get(&name) {
                // The view of MRDs (listed before any reconcile) shows none:
                // there is none to read. One made a moment ago that it does
                // not show yet is applied again, which changes nothing.
                Some(version) if managed => {
                    self.recall_or_read(
                        Kind::Mrd,
                        &mrds,
                        &name,
                        version.as_deref(),
                        "read a ManagedResourceDefinition",
                    )
                    .await?
                }
                _ => (None, None),
            };
            let recalled_mrd = mrd_known.as_ref().map(|k| k.meta(&name));
            let mrd_meta = live_mrd
                .as_ref()
                .map(|l| &l.metadata)
                .or(recalled_mrd.as_ref());
            if let Some(meta) = mrd_meta {
                let what = format!("ManagedResourceDefinition {name}");
                match self.control_of(r, &siblings, &what, meta) {
                    Control::Ours => {}
                    Control::Newer => return Ok(Some(Action::requeue(self.settings.resync))),
                    Control::Foreign(message) => return Err(Error::Conflict(message)),
                }
            }
            let owners = match (mrd_meta, crd_meta) {
                (Some(m), _) => m.owner_references.clone().unwrap_or_default(),
                (None, Some(l)) if !managed => l.owner_references.clone().unwrap_or_default(),
                _ => Vec::new(),
            };
            let body = body_of(object, &owners);
            // What already is as this revision would apply it is not
            // written again. Of the live objects only uids and whether the
            // kind is served are kept: read back whole, a package's CRDs
            // would be many times the package in memory.
            // A managed kind's CRD is its MRD's to write: only the MRD is
            // compared with what this revision would apply.
            let body_hash = (!managed).then(|| value_hash(&body));
            let crd_state = match (&live, crd_known) {
                (Some(l), _) => {
                    let applied = body_hash.filter(|_| ssa::applied(l, &body, &self.field_manager));
                    let known = Known::crd(l, applied);
                    self.seen.remember(Kind::Crd, &name, known.clone());
                    Some(known)
                }
                (None, known) => known,
            };
            let crd = crd_state.as_ref().map(|k| (k.uid.clone(), k.ready));
            let current = if managed {
                let desired = crate::mrds::body::mrd_of(&body, active);
                let desired_hash = value_hash(&desired);
                let mrd_state = match (&live_mrd, mrd_known) {
                    (Some(m), _) => {
                        let applied = ssa::applied(m, &desired, &self.field_manager);
                        let known = Known::mrd(m, applied.then_some(desired_hash));
                        self.seen.remember(Kind::Mrd, &name, known.clone());
                        Some(known)
                    }
                    (None, known) => known,
                };
                mrd_state
                    .filter(|k| k.applied == Some(desired_hash))
                    .map(|k| (k.uid, k.ready))
            } else {
                crd_state
                    .filter(|k| k.applied == body_hash)
                    .map(|k| (k.uid, true))
            };
            planned.push(Planned {
                name,
                object,
                owners,
                managed,
                crd,
                current,
            });
        }
        // All or nothing: every CRD to write is checked by the API server
        // before any is written (a managed kind's as its MRD would serve
        // it), a few at once.
        let to_write: Vec<usize> = (0..planned.len())
            .filter(|&i| planned[i].current.is_none())
            .collect();
        futures::stream::iter(to_write)
            .map(|i: usize| {
                let p = &planned[i];
                let mut body = body_of(p.object, &p.owners);
                if p.managed
                    && let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut())
                {
                    meta.remove("ownerReferences");
                }
                let crds = &crds;
                async move {
                    crate::crds::dry_run_one(crds, &self.field_manager, &p.name, &body).await
                }
            })
            .buffered(deliver::AT_ONCE)
            .try_collect::<()>()
            .await?;
        // The MRDs to make, a few at once, each serving its CRD when it
        // does not exist yet (deliver.rs).
        let to_make: Vec<usize> = (0..planned.len())
            .filter(|&i| planned[i].managed && planned[i].current.is_none())
            .collect();
        let mut made: BTreeMap<String, deliver::Made> = futures::stream::iter(to_make)
            .map(|i: usize| {
                let p = &planned[i];
                self.make_mrd(deliver::ToMake {
                    name: p.name.clone(),
                    body: crate::mrds::body::mrd_of(&body_of(p.object, &p.owners), active),
                    crd_absent: p.crd.is_none(),
                    active,
                })
            })
            .buffered(deliver::AT_ONCE)
            .map_ok(|m| (m.name.clone(), m))
            .try_collect()
            .await?;
        let mut pending = Vec::new();
        // Whether a CRD the revision applies itself is pending: the MRDs'
        // watch wakes the revision when theirs are served, not its own.
        let mut unwatched = false;
        let mut refs = Vec::new();
        for mut p in planned {
            // (uid, Active) of the object the revision applies.
            let (uid, serving) = match p.current {
                Some(live) => live,
                None if p.managed => match made.remove(&p.name) {
                    Some(m) => {
                        p.crd = m.crd.or(p.crd);
                        (m.uid, m.active)
                    }
                    // (Every MRD to make was made, or the first failure
                    // returned.)
                    None => {
                        pending.push(p.name.clone());
                        continue;
                    }
                },
                None => {
                    let body = body_of(p.object, &p.owners);
                    let applied = ssa::apply(&crds, &p.name, &body, &self.field_manager)
                        .await
                        .map_err(|e| Error::request("apply a CRD", e))?;
                    let known = Known::crd(&applied, Some(value_hash(&body)));
                    self.seen.remember(Kind::Crd, &p.name, known);
                    let uid = applied.uid();
                    // Read back now: the CRD's state is what was applied.
                    refs.push(crd_ref(&p.name, uid));
                    if !crate::crds::established(&applied) {
                        pending.push(p.name.clone());
                        unwatched = true;
                    }
                    continue;
                }
            };
            if p.managed {
                refs.push(TypedReference {
                    api_version: "apiextensions.crossplane.io/v1alpha1".into(),
                    kind: "ManagedResourceDefinition".into(),
                    name: p.name.clone(),
                    uid,
                });
                // An Inactive kind has no CRD to wait for; an Active one
                // waits until its MRD serves it.
                match p.crd {
                    Some((crd_uid, established)) => {
                        refs.push(crd_ref(&p.name, crd_uid));
                        if serving && !established {
                            pending.push(p.name.clone());
                        }
                    }
                    None if serving => pending.push(p.name.clone()),
                    None => {}
                }
                continue;
            }
            if !p.crd.is_some_and(|(_, established)| established) {
                pending.push(p.name.clone());
                unwatched = true;
            }
            refs.push(crd_ref(&p.name, uid));
        }
        status.object_refs = refs;
        if status.found_dependencies.is_none() {
            status.found_dependencies = Some(0);
            status.installed_dependencies = Some(0);
            status.invalid_dependencies = Some(0);
        }
        if !pending.is_empty() {
            set(
                status,
                TYPE_HEALTHY,
                false,
                "UnhealthyPackageRevision",
                Some(format!("{PENDING}{}", pending.join(", "))),
            );
            // The MRDs' watch wakes the revision when theirs is served;
            // looking again is the fallback.
            let again = if unwatched {
                std::time::Duration::from_secs(1)
            } else {
                WAIT_POLL
            };
            return Ok(Some(Action::requeue(again)));
        }
        if let Some(target) = webhooks {
            for w in &contents.webhooks {
                match self.install_webhook(r, &siblings, w, target).await? {
                    Some(reference) => status.object_refs.push(reference),
                    // A newer revision took over.
                    None => return Ok(Some(Action::requeue(self.settings.resync))),
                }
            }
        }
        set(status, TYPE_HEALTHY, true, "HealthyPackageRevision", None);
        Ok(None)
    }

    /// Installs one of the package's webhook configurations, pointed at
    /// `target` and controlled by the revision. `None` when a newer
    /// revision of the Provider controls it.
    pub(super) async fn install_webhook(
        &self,
        r: &ProviderRevision,
        siblings: &BTreeMap<String, i64>,
        object: &serde_json::Value,
        target: &crate::crds::WebhookTarget<'_>,
    ) -> Result<Option<TypedReference>, Error> {
        let kind = object
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        let name = object
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or_default();
        let resource = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            &format!("{}s", kind.to_lowercase()),
        );
        let api = Api::<kube::api::DynamicObject>::all_with(self.sk.client().clone(), &resource);
        let live = api
            .get_opt(name)
            .await
            .map_err(|e| Error::request("read a webhook configuration", e))?;
        if let Some(live) = &live {
            match self.control_of(r, siblings, &format!("{kind} {name}"), &live.metadata) {
                Control::Ours => {}
                Control::Newer => return Ok(None),
                Control::Foreign(message) => return Err(Error::Conflict(message)),
            }
        }
        let owner = deliver::controlled_by(r)
            .and_then(|o| serde_json::to_value(o).ok())
            .unwrap_or_default();
        let mut labels = serde_json::Map::new();
        for (k, v) in r.common_labels() {
            labels.insert(k, v.into());
        }
        if let Some(p) = r.labels().get(labels::PACKAGE) {
            labels.insert(labels::PACKAGE.into(), p.clone().into());
        }
        let body = crate::webhooks::body(object, target, &owner, &labels);
        let applied = match live {
            Some(l) if ssa::applied(&l, &body, &self.field_manager) => l,
            _ => ssa::apply(&api, name, &body, &self.field_manager)
                .await
                .map_err(|e| Error::request("apply a webhook configuration", e))?,
        };
        Ok(Some(TypedReference {
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            uid: applied.uid(),
        }))
    }
}

/// One package CRD, as the revision found it.
struct Planned<'a> {
    name: String,
    object: &'a serde_json::Value,
    /// The live owners of what the revision applies (its MRD, or its CRD).
    owners: Vec<OwnerReference>,
    /// Delivered as a ManagedResourceDefinition.
    managed: bool,
    /// The live CRD: uid, and whether it is established.
    crd: Option<(Option<String>, bool)>,
    /// What the revision applies, when it already is as it would apply
    /// it: uid, and whether it serves the kind (an MRD's Active state).
    current: Option<(Option<String>, bool)>,
}

fn crd_ref(name: &str, uid: Option<String>) -> TypedReference {
    TypedReference {
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        name: name.to_owned(),
        uid,
    }
}
