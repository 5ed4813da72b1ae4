//! What the revision controller last read or wrote of each CRD and MRD it
//! establishes, at the version it saw (a CRD's resourceVersion; an MRD's
//! uid and generation and metadata, which its status writes leave alone):
//! while the watches show the same version what was known still holds, so
//! a reconcile reads nothing again (a Provider of a hundred CRDs would
//! otherwise cost two hundred reads on every wake, and an idle one
//! nothing). Whatever changed, or is not in the watch yet, is read.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
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

/// What is known of one object at `resource_version`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Known {
    pub resource_version: String,
    pub uid: Option<String>,
    /// A CRD: Established; an MRD: Active.
    pub ready: bool,
    /// The hash of the body found applied (or applied) then, if it was.
    pub applied: Option<u64>,
    /// Its owners then (who controls it).
    pub owners: Vec<OwnerReference>,
}

impl Known {
    /// What a CRD read or applied now is, `applied` the hash of the body
    /// it was found applied with, if it was.
    pub fn crd(live: &CustomResourceDefinition, applied: Option<u64>) -> Self {
        Self {
            resource_version: live.resource_version().unwrap_or_default(),
            uid: live.uid(),
            ready: crate::crds::established(live),
            applied,
            owners: live.owner_references().to_vec(),
        }
    }

    /// What an MRD read or applied now is, at its
    /// [`crate::mrds::body::version`].
    pub fn mrd(live: &ManagedResourceDefinition, applied: Option<u64>) -> Self {
        Self {
            resource_version: crate::mrds::body::version(live).unwrap_or_default(),
            uid: live.uid(),
            ready: crate::mrds::body::active(live),
            applied,
            owners: live.owner_references().to_vec(),
        }
    }

    /// What [`super::ProviderRevisions::control_of`] reads of `name`.
    pub fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            uid: self.uid.clone(),
            owner_references: Some(self.owners.clone()),
            ..ObjectMeta::default()
        }
    }
}

/// The objects, by kind and name.
#[derive(Default)]
pub(super) struct Seen {
    known: Mutex<HashMap<(Kind, String), Known>>,
}

impl Seen {
    /// What is known of `name`, if the watch's resourceVersion `now` is
    /// the one it was known at.
    pub fn recall(&self, kind: Kind, name: &str, now: Option<&str>) -> Option<Known> {
        let now = now?;
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known
            .get(&(kind, name.to_owned()))
            .filter(|k| k.resource_version == now)
            .cloned()
    }

    /// Remembers `known` of `name` (nothing without a resourceVersion).
    pub fn remember(&self, kind: Kind, name: &str, known: Known) {
        if known.resource_version.is_empty() {
            return;
        }
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((kind, name.to_owned()), known);
    }

    /// Forgets `name` of both kinds (it is deleted or let go of).
    pub fn forget(&self, name: &str) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.remove(&(Kind::Crd, name.to_owned()));
        known.remove(&(Kind::Mrd, name.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(rv: &str) -> Known {
        Known {
            resource_version: rv.into(),
            uid: Some("u".into()),
            ready: true,
            applied: Some(1),
            owners: Vec::new(),
        }
    }

    #[test]
    fn an_object_is_recalled_only_at_the_resource_version_it_was_seen_at() {
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
    fn nothing_is_remembered_without_a_resource_version() {
        let seen = Seen::default();
        seen.remember(Kind::Mrd, "b", known(""));
        assert_eq!(seen.recall(Kind::Mrd, "b", Some("")), None);
    }
}
