//! What the revision controller last read or wrote of each CRD and MRD it
//! establishes, at the version it saw (the object's uid, generation and
//! metadata, [`crate::mrds::body::version`], which status writes leave alone):
//! while the watches show the same version what was known still holds, so
//! a reconcile reads nothing again (a Provider of a hundred CRDs would
//! otherwise cost two hundred reads on every wake, and an idle one
//! nothing). Whatever changed, or is not in the watch yet, is read.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::ResourceExt as _;
use types::apiextensions::v1alpha1::ManagedResourceDefinition;

/// Which of the two kinds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Kind {
    Crd,
    Mrd,
}

/// What is known of one object at `version` (its
/// [`crate::mrds::body::version`]).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Known {
    pub version: String,
    pub uid: Option<String>,
    /// A CRD: Established then (a status write changes it and not the
    /// version: the reader also asks the watch of CRDs); an MRD: Active.
    pub ready: bool,
    /// The hash of the body found applied (or applied) then, if it was.
    pub applied: Option<u64>,
    /// Its owners then (who controls it): the same for every object of
    /// a revision, so kept once ([`Seen::remember`]).
    pub owners: Arc<[OwnerReference]>,
}

impl Known {
    /// What a CRD read or applied now is, `applied` the hash of the body
    /// it was found applied with, if it was.
    pub fn crd(live: &CustomResourceDefinition, applied: Option<u64>) -> Self {
        Self {
            version: crate::mrds::body::version(live).unwrap_or_default(),
            uid: live.uid(),
            ready: crate::crds::established(live),
            applied,
            owners: live.owner_references().into(),
        }
    }

    /// What an MRD read or applied now is, at its
    /// [`crate::mrds::body::version`].
    pub fn mrd(live: &ManagedResourceDefinition, applied: Option<u64>) -> Self {
        Self {
            version: crate::mrds::body::version(live).unwrap_or_default(),
            uid: live.uid(),
            ready: crate::mrds::body::active(live),
            applied,
            owners: live.owner_references().into(),
        }
    }

    /// What [`super::ProviderRevisions::control_of`] reads of `name`.
    pub fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            uid: self.uid.clone(),
            owner_references: Some(self.owners.to_vec()),
            ..ObjectMeta::default()
        }
    }
}

/// The objects, by kind and name.
#[derive(Default)]
pub(super) struct Seen {
    known: Mutex<Memo>,
}

#[derive(Default)]
struct Memo {
    by_name: HashMap<(Kind, String), Known>,
    /// The owners last remembered: a revision's hundreds of objects
    /// share one list.
    owners: Option<Arc<[OwnerReference]>>,
}

impl Seen {
    /// What is known of `name`, if the version `now` the watch shows is
    /// the one it was known at.
    pub fn recall(&self, kind: Kind, name: &str, now: Option<&str>) -> Option<Known> {
        let now = now?;
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known
            .by_name
            .get(&(kind, name.to_owned()))
            .filter(|k| k.version == now)
            .cloned()
    }

    /// Remembers `known` of `name` (nothing without a version).
    pub fn remember(&self, kind: Kind, name: &str, mut known: Known) {
        if known.version.is_empty() {
            return;
        }
        let mut all = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        match &all.owners {
            Some(last) if *last == known.owners => known.owners = Arc::clone(last),
            _ => all.owners = Some(Arc::clone(&known.owners)),
        }
        all.by_name.insert((kind, name.to_owned()), known);
    }

    /// Forgets `name` of both kinds (it is deleted or let go of).
    pub fn forget(&self, name: &str) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.by_name.remove(&(Kind::Crd, name.to_owned()));
        known.by_name.remove(&(Kind::Mrd, name.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(rv: &str) -> Known {
        Known {
            version: rv.into(),
            uid: Some("u".into()),
            ready: true,
            applied: Some(1),
            owners: Arc::from([]),
        }
    }

    #[test]
    fn an_object_is_recalled_only_at_the_version_it_was_seen_at() {
        let seen = Seen::default();
        seen.remember(Kind::Crd, "a.example.org", known("5"));
        assert_eq!(
            seen.recall(Kind::Crd, "a.example.org", Some("5")),
            Some(known("5"))
        );
        // Changed since, not in the watch, or the other kind: read again.
        assert_eq!(seen.recall(Kind::Crd, "a.example.org", Some("6")), None);
        assert_eq!(seen.recall(Kind::Crd, "a.example.org", None), None);
        assert_eq!(seen.recall(Kind::Mrd, "a.example.org", Some("5")), None);
        seen.forget("a.example.org");
        assert_eq!(seen.recall(Kind::Crd, "a.example.org", Some("5")), None);
    }

    #[test]
    fn the_objects_of_one_revision_share_their_owners() {
        let owners = |uid: &str| -> Arc<[OwnerReference]> {
            Arc::from([OwnerReference {
                api_version: "pkg.crossplane.io/v1".into(),
                kind: "ProviderRevision".into(),
                name: "p-1".into(),
                uid: uid.into(),
                controller: Some(true),
                ..OwnerReference::default()
            }])
        };
        let seen = Seen::default();
        for (kind, name, uid) in [
            (Kind::Crd, "a", "r1"),
            (Kind::Mrd, "a", "r1"),
            (Kind::Crd, "b", "r2"),
        ] {
            let mut k = known("5");
            k.owners = owners(uid);
            seen.remember(kind, name, k);
        }
        let of = |kind, name| seen.recall(kind, name, Some("5")).unwrap().owners;
        assert!(Arc::ptr_eq(&of(Kind::Crd, "a"), &of(Kind::Mrd, "a")));
        assert!(!Arc::ptr_eq(&of(Kind::Crd, "a"), &of(Kind::Crd, "b")));
        assert_eq!(of(Kind::Crd, "b"), owners("r2"));
        assert_eq!(
            of(Kind::Crd, "a").first().map(|o| o.uid.as_str()),
            Some("r1")
        );
    }

    #[test]
    fn nothing_is_remembered_without_a_version() {
        let seen = Seen::default();
        seen.remember(Kind::Mrd, "b", known(""));
        assert_eq!(seen.recall(Kind::Mrd, "b", Some("")), None);
    }
}
