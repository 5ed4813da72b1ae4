//! What a deleted revision delivered goes: each kind's MRD and CRD, or
//! only the revision's reference on them while another revision of the
//! Provider still delivers them, and never while custom resources of the
//! kind exist.

use std::{collections::HashSet, sync::Arc};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, ResourceExt as _,
    api::{Patch, PatchParams},
};
use types::{apiextensions::v1alpha1::ManagedResourceDefinition, pkg::v1::ProviderRevision};

use super::{Error, ProviderRevisions};
use crate::{labels, mrds::body, usage};

impl ProviderRevisions {
    /// Lets go of every kind the revision `r` delivered; what waits for
    /// custom resources of its kind to go, as `waiting for ...` clauses.
    pub(super) async fn let_go(&self, r: &ProviderRevision) -> Result<Vec<String>, Error> {
        // Each kind's MRD and CRD, usage::AT_ONCE kinds at a time.
        let mrds = r.mrd_names();
        let mut kinds = mrds.clone();
        kinds.extend(r.crd_names().into_iter().filter(|c| !mrds.contains(c)));
        // A kind a newer revision being deleted too also delivers is left
        // to it: it deletes the kind (it does not count on this one, which
        // is going), and this one looks again once it is gone, when the
        // views show what is left. Both walking every kind read each CRD
        // and MRD and listed each kind twice (at 50 x 100, 15311 CRD reads
        // and 12968 lists for 5000 kinds).
        let heir = self.heir(r);
        let (left, kinds): (Vec<_>, Vec<_>) = kinds
            .into_iter()
            .partition(|k| heir.as_ref().is_some_and(|(_, theirs)| theirs.contains(k)));
        let mut waiting: Vec<String> = futures::stream::iter(kinds)
            .map(|name| {
                let mrd = mrds.contains(&name);
                async move { self.let_go_kind(r, &name, mrd).await }
            })
            .buffered(usage::AT_ONCE)
            .try_collect::<Vec<_>>()
            .await?
            .into_iter()
            .flatten()
            .collect();
        if let Some((name, _)) = heir
            && !left.is_empty()
        {
            waiting.push(format!(
                "waiting for ProviderRevision {name}, being deleted too, to let go of the {} kinds it also delivers",
                left.len()
            ));
        }
        Ok(waiting)
    }

    /// The newest revision of `r`'s Provider newer than `r` and being
    /// deleted too, and the kinds (MRD and CRD names) it delivers.
    fn heir(&self, r: &ProviderRevision) -> Option<(String, HashSet<String>)> {
        heir_among(r, &self.revisions.state())
    }

    /// Lets go of the kind `name` the revision delivered: of its MRD, when
    /// `mrd`, and of its CRD. Only the revision's reference goes from
    /// either when another revision of the Provider still delivers it;
    /// otherwise it is deleted (an MRD with the CRD it serves) once no
    /// custom resource of its kind is left. `Some(users)` while some are.
    async fn let_go_kind(
        &self,
        r: &ProviderRevision,
        name: &str,
        mrd: bool,
    ) -> Result<Option<String>, Error> {
        self.seen.forget(name);
        // Gone from the views (deleted by a pass before, or by garbage
        // collection with its owner): nothing to read. The views lag only
        // behind objects just made, and what a revision delivered was
        // made long before; an MRD or CRD missed still goes with its
        // owners. A CRD its deleted MRD served is that MRD's.
        let mrd_seen = mrd && self.mrd_versions.read(|all| all.contains_key(name));
        // A CRD being deleted is let go of already: whoever deleted it
        // looked for its custom resources first (or a user deleted it,
        // and its objects go with it whatever this revision does).
        let crd_seen = self.crds_known.state(name).is_some() && !self.crds_known.going(name);
        if !mrd_seen && (!crd_seen || (mrd && self.crds_known.mrds_alone(name))) {
            return Ok(None);
        }
        let crds = self.crds_api();
        if mrd {
            let mrds = Api::<ManagedResourceDefinition>::all(self.sk.client().clone());
            if let Some(live) = self.release(r, &mrds, name).await? {
                let crd = crds
                    .get_opt(name)
                    .await
                    .map_err(|e| Error::request("read a CRD", e))?;
                if let Some(crd) = &crd
                    && let Some(users) = self.users(crd).await?
                {
                    return Ok(Some(users));
                }
                let served = crd.as_ref().is_some_and(|c| {
                    body::crd_control(&live, &c.metadata) == body::CrdControl::Ours
                });
                // The MRD goes first: gone, its controller has nothing to
                // look at when the CRD goes. The other way round, the CRD
                // going woke the MRD, still Active, which read both again
                // and could apply the terminating CRD again (at 50 x 100,
                // 1099 CRD patches in the deletion).
                runtime::objects::delete(&mrds, name)
                    .await
                    .map_err(|e| Error::request("delete a ManagedResourceDefinition", e))?;
                // The CRD it served right after, not later by garbage
                // collection: the Provider's deletion sees it go.
                if served {
                    runtime::objects::delete(&crds, name)
                        .await
                        .map_err(|e| Error::request("delete a CRD", e))?;
                }
                if served || crd.is_none() {
                    return Ok(None);
                }
            } else if self.crds_known.mrds_alone(name) {
                // Another revision's MRD still serves the CRD, which no
                // revision references: nothing more of it to let go of.
                return Ok(None);
            }
        }
        if let Some(live) = self.release(r, &crds, name).await? {
            if let Some(users) = self.users(&live).await? {
                return Ok(Some(users));
            }
            runtime::objects::delete(&crds, name)
                .await
                .map_err(|e| Error::request("delete a CRD", e))?;
        }
        Ok(None)
    }

    /// `waiting for ...` the custom resources of the kind `crd` serves.
    async fn users(&self, crd: &CustomResourceDefinition) -> Result<Option<String>, Error> {
        let Some(ar) = usage::api_resource(crd) else {
            return Ok(None);
        };
        let clause = usage::of_kind(self.sk.client(), &ar)
            .await
            .map_err(|e| Error::request("list custom resources", e))?;
        Ok(usage::waiting_for(clause.as_slice()))
    }

    /// The CRD or MRD `name` when the revision is the last of its
    /// Provider's to deliver it (its to delete); None when it is gone, not
    /// the revision's, or still another revision's, whose the revision's
    /// reference is then removed from it.
    async fn release<K>(
        &self,
        r: &ProviderRevision,
        api: &Api<K>,
        name: &str,
    ) -> Result<Option<K>, Error>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let uid = r.uid().unwrap_or_default();
        let Some(live) = api
            .get_opt(name)
            .await
            .map_err(|e| Error::request("read a CRD or ManagedResourceDefinition", e))?
        else {
            return Ok(None);
        };
        let refs = live.owner_references();
        if !refs.iter().any(|o| o.uid == uid) {
            return Ok(None);
        }
        let others: Vec<OwnerReference> = refs
            .iter()
            .filter(|o| o.uid != uid && o.kind == "ProviderRevision" && self.stays(&o.name))
            .cloned()
            .map(|mut o| {
                o.controller = Some(false);
                o
            })
            .collect();
        if others.is_empty() {
            return Ok(Some(live));
        }
        // Another revision of the Provider still delivers it: only this
        // revision's reference goes. Guarded by the resourceVersion, so
        // two revisions letting go at once cannot both leave (and orphan
        // it): the second looks again and deletes it.
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": live.resource_version(),
                "ownerReferences": others,
            },
        });
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::request("release a CRD or ManagedResourceDefinition", e))?;
        Ok(None)
    }
}

/// Among `all`, the newest revision of `r`'s Provider (its package label)
/// newer than `r` and being deleted too, and the kinds it delivers.
fn heir_among(
    r: &ProviderRevision,
    all: &[Arc<ProviderRevision>],
) -> Option<(String, HashSet<String>)> {
    let package = r.labels().get(labels::PACKAGE)?;
    let newest = all
        .iter()
        .filter(|o| {
            o.labels().get(labels::PACKAGE) == Some(package)
                && o.spec.revision > r.spec.revision
                && o.metadata.deletion_timestamp.is_some()
        })
        .max_by_key(|o| o.spec.revision)?;
    let mut theirs: HashSet<String> = newest.mrd_names().into_iter().collect();
    theirs.extend(newest.crd_names());
    Some((newest.name_any(), theirs))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn revision(
        name: &str,
        package: &str,
        n: i64,
        going: bool,
        kinds: &[&str],
    ) -> Arc<ProviderRevision> {
        let refs: Vec<_> = kinds
            .iter()
            .map(|k| json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "name": k}))
            .collect();
        let mut meta = json!({"name": name, "labels": {labels::PACKAGE: package}});
        if going {
            meta["deletionTimestamp"] = json!("2026-12-03T21:50:50Z");
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
                "metadata": meta,
                "spec": {"package": "example.org/p:v1", "desiredState": "Inactive", "revision": n},
                "status": {"objectRefs": refs},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_kind_is_left_to_the_newest_revision_being_deleted_too() {
        let old = revision("p-1", "p", 1, true, &["as.example.org", "bs.example.org"]);
        let all = [
            old.clone(),
            revision("p-2", "p", 2, true, &["as.example.org"]),
            revision("p-3", "p", 3, true, &["bs.example.org"]),
            revision("p-4", "p", 4, false, &["as.example.org", "bs.example.org"]),
            revision("q-9", "q", 9, true, &["as.example.org"]),
        ];
        let (name, theirs) = heir_among(&old, &all).unwrap();
        assert_eq!(
            name, "p-3",
            "the newest of the Provider's that is going, not one staying or another Provider's"
        );
        assert_eq!(theirs, HashSet::from(["bs.example.org".to_owned()]));
        assert!(
            heir_among(&all[2], &all).is_none(),
            "no newer revision is going"
        );
        let staying = [
            old.clone(),
            revision("p-2", "p", 2, false, &["as.example.org"]),
        ];
        assert!(
            heir_among(&old, &staying).is_none(),
            "a revision that stays inherits nothing: it is released only"
        );
    }
}
