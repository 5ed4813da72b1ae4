//! The Provider controller: turns a Provider's package into
//! ProviderRevisions (one per package digest, named `<provider>-<12 hex>`),
//! chooses the active one, prunes old ones, and reports Installed and
//! Healthy from the revisions.
//!
//! Upgrades make before they break: a new revision is made Active while
//! the old one keeps serving, and the old one is deactivated only once the
//! new one is healthy. A package that cannot be read or is invalid makes no
//! revision at all; the revision that serves goes on serving and the
//! Provider says so.
//!
//! Rooms, as upstream's `internal/controller/pkg/manager`: this module
//! reconciles; [`revisions`] names and writes the revisions a Provider
//! makes, [`report`] its conditions, [`error`] what they share.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use oci::Digest;
use runtime::{
    conditions,
    controller::{Runtime, cache_ready},
    expiring::Expiring,
    reconciler::{self, Cleanup, Draft, Reconciler, Skeleton},
};
use types::pkg::{
    contract::common,
    v1::{Provider, ProviderRevision, RevisionState},
};

pub mod error;
pub mod report;
pub mod revisions;

pub use error::{CONTROLLER, Error, FINALIZER, Settings, TYPE_HEALTHY};
pub use revisions::revision_name;

use error::DELETE_POLL;
use report::{report, report_failure};
use revisions::{manual, pinned_digest, pull_policy, spec_from};

use crate::{
    image_configs::{self, ImageConfigs},
    labels,
    packages::Packages,
    usage,
};

/// The Provider controller's reconciler.
pub struct Providers {
    sk: Skeleton,
    revisions: Store<ProviderRevision>,
    /// Every CRD as the watch sees it: where a kind's objects are listed.
    crds: crate::stacks::known::Known,
    packages: Packages,
    settings: Settings,
    /// The last resolution of a tag: (Provider name) → (package, digest).
    /// Per Provider: the digest its tag had where it was read from (the
    /// location after the ImageConfigs), and when.
    resolved: Expiring<String, (String, Digest, std::time::Instant)>,
}

impl Reconciler for Providers {
    type Object = Provider;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn ready(&self) -> bool {
        cache_ready(&self.revisions).await && self.packages.ready().await
    }

    async fn apply(
        &self,
        p: &Arc<Provider>,
        status: &mut Draft<Provider>,
    ) -> Result<Action, Error> {
        // Where the package is read from, said before anything may fail.
        let resolved = self.packages.resolved(&p.spec.package).await;
        status.resolved_package = Some(resolved.image);
        status.applied_image_config_refs = resolved.applied;
        let revisions = self.revisions_of(p);
        let serving = revisions
            .iter()
            .rev()
            .find(|r| is_active(r) && r.healthy())
            .cloned();
        let current = match self.current(p, &revisions).await {
            Ok(c) => c,
            Err(e) => {
                // Nothing new is made; whatever serves goes on serving.
                report_failure(status, &e, serving.as_deref());
                return Err(e);
            }
        };
        let target = if manual(p) {
            revisions.iter().rev().find(|r| is_active(r)).cloned()
        } else {
            Some(current.clone())
        };
        if let Some(t) = &target {
            self.keep_in_step(p, t).await?;
        }
        let ready_to_serve =
            |t: &ProviderRevision| t.healthy() && (!self.settings.runtime_bound || t.rbac_ready());
        if let Some(t) = target.as_ref().filter(|t| ready_to_serve(t)) {
            for r in revisions
                .iter()
                .filter(|r| r.name_any() != t.name_any() && is_active(r))
            {
                self.set_state(r, RevisionState::Inactive).await?;
            }
        }
        self.prune(p, &revisions, target.as_deref(), &current)
            .await?;
        report(p, status, target.as_deref(), &current, serving.as_deref());
        Ok(self.next_look(p))
    }

    async fn cleanup(
        &self,
        p: &Arc<Provider>,
        status: &mut Draft<Provider>,
    ) -> Result<Cleanup, Error> {
        let revisions = self.revisions_of(p);
        if revisions.is_empty() {
            self.resolved.remove(&p.name_any());
            return Ok(Cleanup::Done);
        }
        if revisions
            .iter()
            .all(|r| r.meta().deletion_timestamp.is_some())
        {
            // Each revision's own cleanup keeps a CRD while objects of its
            // kind exist (and says so); looking again here would read every
            // CRD and list every kind on each wake while thousands go.
            return Ok(Cleanup::Wait(Action::requeue(DELETE_POLL)));
        }
        // Custom resources of the package's CRDs hold the deletion: they
        // would be lost with their CRDs.
        let crds = self.crds_of(&revisions).await?;
        let users = usage::custom_resources(self.sk.client(), &self.crds, &crds)
            .await
            .map_err(|e| Error::Revisions("list the custom resources of the package's CRDs", e))?;
        conditions::set(
            &mut status.conditions,
            conditions::deleting(),
            &conditions::now(),
        );
        if let Some(waiting) = users {
            conditions::set(
                &mut status.conditions,
                conditions::custom(
                    TYPE_HEALTHY,
                    false,
                    "Deleting",
                    Some(format!(
                        "{waiting}; delete them to finish deleting the Provider"
                    )),
                ),
                &conditions::now(),
            );
            return Ok(Cleanup::Wait(Action::requeue(DELETE_POLL)));
        }
        let api = self.revisions_api();
        for r in revisions
            .iter()
            .filter(|r| r.meta().deletion_timestamp.is_none())
        {
            runtime::objects::delete(&api, &r.name_any())
                .await
                .map_err(|e| Error::Revisions("delete a revision", e))?;
        }
        Ok(Cleanup::Wait(Action::requeue(DELETE_POLL)))
    }

    fn failed(&self, _p: &Provider, _status: &mut Draft<Provider>, _message: &str) {}
}

fn is_active(r: &ProviderRevision) -> bool {
    r.is_active()
}

impl Providers {
    fn revisions_api(&self) -> Api<ProviderRevision> {
        Api::all(self.sk.client().clone())
    }

    /// The CRDs `revisions` delivered, from each read whole: the cache
    /// keeps revisions without the objects they list ([`delivered`]).
    async fn crds_of(&self, revisions: &[Arc<ProviderRevision>]) -> Result<Vec<String>, Error> {
        let api = self.revisions_api();
        let mut crds = Vec::new();
        for r in revisions {
            let whole = api
                .get_opt(&r.name_any())
                .await
                .map_err(|e| Error::Revisions("read a revision's CRDs", e))?;
            crds.extend(whole.iter().flat_map(|w| w.crd_names()));
        }
        // An upgraded Provider's revisions deliver the same CRDs.
        crds.sort_unstable();
        crds.dedup();
        Ok(crds)
    }

    /// The Provider's revisions from the cache, oldest (lowest revision)
    /// first.
    fn revisions_of(&self, p: &Provider) -> Vec<Arc<ProviderRevision>> {
        let uid = p.uid().unwrap_or_default();
        let mut revisions: Vec<_> = self
            .revisions
            .state()
            .into_iter()
            .filter(|r| runtime::objects::controlled_by(r.owner_references(), &uid))
            .collect();
        revisions.sort_by_key(|r| r.spec.revision);
        revisions
    }

    /// The revision of the package the Provider names now: found among
    /// the revisions, or made (after reading and checking the package).
    async fn current(
        &self,
        p: &Provider,
        revisions: &[Arc<ProviderRevision>],
    ) -> Result<Arc<ProviderRevision>, Error> {
        let package = p.spec.package.clone();
        let digest = self.digest(p, revisions).await?;
        let name = revision_name(&p.name_any(), &digest);
        if let Some(r) = revisions.iter().find(|r| r.name_any() == name) {
            return Ok(r.clone());
        }
        // Read (and cache) the package before making anything: a bad one
        // makes no revision.
        let fetched = self
            .packages
            .fetch(&package, &digest, &p.spec.package_pull_secrets)
            .await
            .map_err(|e| Error::Package(e.into()))?;
        // A v1-style package names its runtime image; otherwise the package
        // image is the runtime, if it carries one.
        let image = match fetched.contents.meta.controller_image.clone() {
            Some(image) => Some(image),
            None => self
                .packages
                .runtime_image(&package, &digest, &p.spec.package_pull_secrets)
                .await
                .map_err(|e| Error::Package(e.into()))?,
        };
        let number = revisions.iter().map(|r| r.spec.revision).max().unwrap_or(0) + 1;
        let revision =
            revisions::revision_for(p, (&name, number), &digest, image, &fetched.contents.meta);
        match self
            .revisions_api()
            .create(&PostParams::default(), &revision)
            .await
        {
            Ok(r) => {
                let note = format!("revision {number} ({name}) made for package {package}");
                self.sk
                    .reporting
                    .events
                    .normal(&p.object_ref(&()), "RevisionCreated", note)
                    .await;
                Ok(Arc::new(r))
            }
            // Made by an earlier reconcile the cache does not show yet.
            Err(kube::Error::Api(e)) if e.code == 409 => self
                .revisions_api()
                .get(&name)
                .await
                .map(Arc::new)
                .map_err(|e| Error::Revisions("read a revision", e)),
            Err(e) => Err(Error::Revisions("create a revision", e)),
        }
    }

    /// The digest the Provider's package names, resolving a tag only when
    /// the pull policy says so.
    async fn digest(
        &self,
        p: &Provider,
        revisions: &[Arc<ProviderRevision>],
    ) -> Result<Digest, Error> {
        let package = &p.spec.package;
        if let Some(d) = pinned_digest(package) {
            return Ok(d);
        }
        let known = revisions
            .iter()
            .rev()
            .filter(|r| r.annotations().get(labels::SOURCE) == Some(package))
            .find_map(|r| {
                r.annotations()
                    .get(labels::DIGEST)
                    .and_then(|d| Digest::parse(d))
            });
        let policy = pull_policy(p);
        if policy != "Always" {
            if let Some(d) = known {
                return Ok(d);
            }
            if policy == "Never" {
                return Err(Error::NeverPulled(package.clone()));
            }
        }
        // A tag is resolved once (where the ImageConfigs say it is read
        // from); with Always, again once the pull interval has passed.
        let location = self.packages.resolved(package).await.image;
        if let Some((pkg, d, when)) = self.resolved.get(&p.name_any())
            && pkg == location
            && (policy != "Always" || when.elapsed() < self.settings.pull_interval)
        {
            return Ok(d);
        }
        let d = self
            .packages
            .resolve(package, &p.spec.package_pull_secrets)
            .await
            .map_err(|e| Error::Package(e.into()))?;
        self.resolved.insert(
            p.name_any(),
            (location, d.clone(), std::time::Instant::now()),
        );
        Ok(d)
    }

    /// Copies the Provider's settings that a revision follows (pull
    /// secrets, runtime config, …) onto the target revision, and activates
    /// it, writing only what differs.
    async fn keep_in_step(&self, p: &Provider, r: &ProviderRevision) -> Result<(), Error> {
        let want = spec_from(p);
        let differs = r.spec.package_pull_policy != want.package_pull_policy
            || r.spec.package_pull_secrets != want.package_pull_secrets
            || r.spec.skip_dependency_resolution != want.skip_dependency_resolution
            || r.spec.ignore_crossplane_constraints != want.ignore_crossplane_constraints
            || r.spec.runtime_config_ref != want.runtime_config_ref
            || r.spec.controller_config_ref != want.controller_config_ref
            || r.spec.common_labels != want.common_labels
            || r.spec.common_annotations != want.common_annotations
            || (!manual(p) && !is_active(r));
        if !differs {
            return Ok(());
        }
        let state = if manual(p) {
            r.spec.desired_state
        } else {
            RevisionState::Active
        };
        // The revision carries the common labels and annotations itself;
        // ones taken out of the Provider go from it too.
        let meta = |old: &Option<BTreeMap<String, String>>,
                    new: &Option<BTreeMap<String, String>>| {
            let mut m = serde_json::Map::new();
            for k in common(old.as_ref()).into_keys() {
                m.insert(k, serde_json::Value::Null);
            }
            for (k, v) in common(new.as_ref()) {
                m.insert(k, v.into());
            }
            m
        };
        // A merge patch merges maps: a key taken out is written as null.
        let spec_map = |old: &Option<BTreeMap<String, String>>,
                        new: &Option<BTreeMap<String, String>>| {
            if new.is_none() {
                serde_json::Value::Null
            } else {
                serde_json::Value::Object(meta(old, new))
            }
        };
        let patch = serde_json::json!({
            "metadata": {
                "labels": meta(&r.spec.common_labels, &want.common_labels),
                "annotations": meta(&r.spec.common_annotations, &want.common_annotations),
            },
            "spec": {
                "commonLabels": spec_map(&r.spec.common_labels, &want.common_labels),
                "commonAnnotations": spec_map(&r.spec.common_annotations, &want.common_annotations),
                "desiredState": state,
                "packagePullPolicy": want.package_pull_policy,
                "packagePullSecrets": want.package_pull_secrets,
                "skipDependencyResolution": want.skip_dependency_resolution,
                "ignoreCrossplaneConstraints": want.ignore_crossplane_constraints,
                "runtimeConfigRef": want.runtime_config_ref,
                "controllerConfigRef": want.controller_config_ref,
            }
        });
        self.patch_revision(r, &patch, "update a revision's settings")
            .await
    }

    async fn set_state(&self, r: &ProviderRevision, state: RevisionState) -> Result<(), Error> {
        let patch = serde_json::json!({"spec": {"desiredState": state}});
        self.patch_revision(r, &patch, "deactivate a revision")
            .await
    }

    async fn patch_revision(
        &self,
        r: &ProviderRevision,
        patch: &serde_json::Value,
        what: &'static str,
    ) -> Result<(), Error> {
        self.revisions_api()
            .patch(&r.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| Error::Revisions(what, e))?;
        Ok(())
    }

    /// Deletes the oldest inactive revisions beyond revisionHistoryLimit
    /// (default 1; 0 keeps all).
    async fn prune(
        &self,
        p: &Provider,
        revisions: &[Arc<ProviderRevision>],
        target: Option<&ProviderRevision>,
        current: &ProviderRevision,
    ) -> Result<(), Error> {
        let limit = p.spec.revision_history_limit.unwrap_or(1);
        if limit <= 0 {
            return Ok(());
        }
        let keep = |r: &ProviderRevision| {
            is_active(r)
                || r.name_any() == current.name_any()
                || target.is_some_and(|t| t.name_any() == r.name_any())
        };
        let inactive: Vec<_> = revisions
            .iter()
            .filter(|r| !keep(r) && r.meta().deletion_timestamp.is_none())
            .collect();
        let excess = inactive
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(usize::MAX));
        for r in inactive.into_iter().take(excess) {
            runtime::objects::delete(&self.revisions_api(), &r.name_any())
                .await
                .map_err(|e| Error::Revisions("delete an old revision", e))?;
        }
        Ok(())
    }

    fn next_look(&self, p: &Provider) -> Action {
        if pull_policy(p) == "Always" && pinned_digest(&p.spec.package).is_none() {
            Action::requeue(self.settings.pull_interval)
        } else {
            Action::requeue(self.settings.resync)
        }
    }
}

/// What the Provider controller keeps of a revision: all but the objects
/// it delivered and the permissions its package asked for (two lines of
/// status for each of hundreds of kinds, read whole where needed:
/// [`Providers::crds_of`]).
fn delivered(r: &mut ProviderRevision) {
    if let Some(status) = r.status.as_mut() {
        status.object_refs = Vec::new();
        status.permission_requests = Vec::new();
    }
}

/// The Provider controller, ready to run. It watches the revisions it
/// controls through one reflector, which updates the store reconciles read
/// before it wakes their Provider.
pub fn controller(
    rt: &Runtime,
    packages: Packages,
    image_configs: &ImageConfigs,
    crds: crate::stacks::known::Known,
    settings: Settings,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let (reader, revisions) = runtime::controller::trim::reflected(
        Api::<ProviderRevision>::all(rt.client.clone()),
        watcher::Config::default(),
        delivered,
    );
    let revisions = revisions.touched_objects();
    let providers = Arc::new(Providers {
        sk: Skeleton::new(rt, CONTROLLER),
        revisions: reader,
        crds,
        packages,
        settings,
        resolved: Expiring::new(Duration::from_secs(3600)),
    });
    let ctrl = Controller::new(
        Api::<Provider>::all(rt.client.clone()),
        watcher::Config::default(),
    );
    let by_config = ctrl.store();
    let ctrl = ctrl
        .owns_stream(revisions)
        .watches_shared_stream(image_configs.changes(), move |config| {
            by_config
                .state()
                .iter()
                .filter(|p| {
                    let status = p.status.as_ref();
                    let images = [
                        Some(p.spec.package.as_str()),
                        status.and_then(|s| s.resolved_package.as_deref()),
                    ];
                    let applied = status
                        .iter()
                        .flat_map(|s| &s.applied_image_config_refs)
                        .map(|r| r.name.as_str());
                    image_configs::wakes(&config, images.into_iter().flatten(), applied)
                })
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        })
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    reconciler::run(ctrl, providers)
}
