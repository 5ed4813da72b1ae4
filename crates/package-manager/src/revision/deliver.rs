//! What a revision applies of its package: each CRD's body
//! ([`ProviderRevisions::crd_body`]), and its ManagedResourceDefinitions,
//! a few at once: when one is Active and its CRD does not exist, the
//! revision serves the CRD at once from the MRD the API server answered
//! with, as the MRD controller in this process would
//! ([`crate::mrds::Served`]); the MRD controller then only says it is
//! Established.

use std::collections::BTreeMap;

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{Api, Resource as _, ResourceExt as _};
use runtime::{reconciler::value_hash, ssa};
use types::{apiextensions::v1alpha1::ManagedResourceDefinition, pkg::v1::ProviderRevision};

use super::{
    context::ProviderRevisions,
    error::Error,
    seen::{Kind, Known},
};
use crate::labels;

/// How many of its CRDs one revision checks (their dry run), or MRDs it
/// makes, at once, in its turn ([`Turns`]).
pub(super) const AT_ONCE: usize = 16;

/// How many revisions write their kinds at once.
///
/// The API server publishes OpenAPI per API group: each CRD established
/// changes its group's document, and every 5 s the API server's
/// aggregator asks for them all, which encodes each group that changed
/// since, every kind of it. Kinds written a few groups at a time are
/// established a few groups at a time, and each group is encoded in one
/// or two of those rounds rather than in every round while the
/// revisions install together. (At 50 Providers of 100 CRDs, 8 revisions
/// writing at once changed 8 groups a round, and encoding them took 8 %
/// of the API server's CPU while CRDs were written; the null writer's 16
/// at a time, 20 %.)
const TURNS: usize = 2;

/// How long a revision waits for its turn to write before it writes
/// anyway: a turn is an order, never a reason to stall (nor to outlast
/// the reconcile timeout).
const TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Turns at writing a revision's kinds, [`TURNS`] at a time, in the order
/// revisions asked.
#[derive(Clone)]
pub struct Turns(std::sync::Arc<tokio::sync::Semaphore>);

impl Default for Turns {
    fn default() -> Self {
        Self(std::sync::Arc::new(tokio::sync::Semaphore::new(TURNS)))
    }
}

impl Turns {
    /// Waits for a turn (at most [`TURN_WAIT`]); the turn ends when what
    /// this returns is dropped. `None`: the revision writes without one.
    pub(super) async fn take(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.take_within(TURN_WAIT).await
    }

    async fn take_within(
        &self,
        wait: std::time::Duration,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        tokio::time::timeout(wait, self.0.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
    }
}

/// One MRD to make: its name, what to apply, and whether its CRD is known
/// not to exist (the view of CRDs, listed, does not show it, or a read
/// found none).
pub(super) struct ToMake {
    pub name: String,
    pub body: serde_json::Value,
    pub crd_absent: bool,
    /// Whether the MRD is made Active (no SafeStart).
    pub active: bool,
}

/// An MRD made: its uid, whether it is Active, and its CRD's uid and
/// whether it is established, when the revision served it.
pub(super) struct Made {
    pub name: String,
    pub uid: Option<String>,
    pub active: bool,
    pub crd: Option<(Option<String>, bool)>,
}

impl ProviderRevisions {
    /// Makes the MRD `m` (the revision makes [`AT_ONCE`] at a time).
    pub(super) async fn make_mrd(&self, m: ToMake) -> Result<Made, Error> {
        let mrds = Api::<ManagedResourceDefinition>::all(self.sk.client().clone());
        let crds = Api::<CustomResourceDefinition>::all(self.sk.client().clone());
        // The MRD controller waits for the revision to serve the CRD
        // rather than reading both back.
        let claim = (m.crd_absent && m.active).then(|| self.served.claim(&m.name));
        let applied = ssa::apply(&mrds, &m.name, &m.body, &self.field_manager)
            .await
            .map_err(|e| Error::request("apply a ManagedResourceDefinition", e))?;
        let known = Known::mrd(&applied, Some(value_hash(&m.body)));
        let active = known.ready;
        self.seen.remember(Kind::Mrd, &m.name, known);
        let crd = match claim {
            Some(claim) => claim
                .serve(&crds, &self.field_manager, &applied)
                .await
                .map_err(|e| Error::request("apply a CRD", e))?
                .map(|c| (c.uid(), crate::crds::established(&c))),
            None => None,
        };
        Ok(Made {
            name: m.name,
            uid: applied.uid(),
            active,
            crd,
        })
    }

    /// A CRD of the package as this revision applies it: controlled by the
    /// revision, referenced (not controlled) by its siblings that already
    /// reference it.
    pub(super) fn crd_body(
        &self,
        r: &ProviderRevision,
        object: &serde_json::Value,
        live_owners: &[OwnerReference],
        siblings: &BTreeMap<String, i64>,
    ) -> serde_json::Value {
        let mut owners: Vec<OwnerReference> = live_owners
            .iter()
            .filter(|o| o.kind == "ProviderRevision" && siblings.contains_key(&o.name))
            .cloned()
            .map(|mut o| {
                o.controller = Some(false);
                o.block_owner_deletion = None;
                o
            })
            .collect();
        owners.extend(controlled_by(r));
        let mut body = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": object.pointer("/metadata/name").cloned().unwrap_or_default(),
                "labels": object.pointer("/metadata/labels").cloned().unwrap_or_else(|| serde_json::json!({})),
                "ownerReferences": owners,
            },
            "spec": object.get("spec").cloned().unwrap_or_default(),
        });
        // The package's annotations, if it has any (an empty map would
        // never read back equal, so the CRD would be written every time).
        if let Some(a) = object
            .pointer("/metadata/annotations")
            .filter(|a| a.as_object().is_some_and(|a| !a.is_empty()))
            && let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut())
        {
            meta.insert("annotations".into(), a.clone());
        }
        if let Some(l) = body
            .pointer_mut("/metadata/labels")
            .and_then(|l| l.as_object_mut())
        {
            for (k, v) in r.common_labels() {
                l.entry(k).or_insert(v.into());
            }
            if let Some(p) = r.labels().get(labels::PACKAGE) {
                l.insert(labels::PACKAGE.into(), p.clone().into());
            }
        }
        let common_annotations = r.common_annotations();
        if !common_annotations.is_empty()
            && let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut())
        {
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| serde_json::json!({}));
            if let Some(a) = annotations.as_object_mut() {
                for (k, v) in common_annotations {
                    a.entry(k).or_insert(v.into());
                }
            }
        }
        body
    }
}

/// The reference that makes the revision the controller of what it
/// establishes (CRDs, webhook configurations), blocking the revision's
/// deletion until they go.
pub(super) fn controlled_by(r: &ProviderRevision) -> Option<OwnerReference> {
    r.controller_owner_ref(&()).map(|mut own| {
        own.block_owner_deletion = Some(true);
        own
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn revisions_write_kinds_two_at_a_time_and_never_stall_on_a_turn() {
        let turns = Turns::default();
        let (first, second) = (turns.take().await, turns.take().await);
        assert!(first.is_some() && second.is_some());
        // A third waits for one of the two to end, and then has its turn.
        let third = tokio::spawn({
            let turns = turns.clone();
            async move { turns.take().await.is_some() }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "a third revision waits its turn");
        drop(first);
        assert!(third.await.unwrap(), "the turn that ended is the third's");
        // With both turns held, one that waited long enough writes without.
        let _third = turns.take().await;
        assert!(
            turns.take_within(Duration::from_millis(50)).await.is_none(),
            "no turn, and no stall"
        );
    }
}
