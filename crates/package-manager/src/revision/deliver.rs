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
/// makes, at once.
pub(super) const AT_ONCE: usize = 4;

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
