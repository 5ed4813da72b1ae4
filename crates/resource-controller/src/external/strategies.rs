//! What the write strategy and the deletion policy add to the remote
//! side: keeping ignored fields when this manager stops applying them,
//! finding what drift changed and who changed it, and leaving an object in
//! place unmarked (Orphan).

use kube::api::Patch;
use runtime::{
    managed::{
        self, Deletion,
        drift::{self, Confirmed},
    },
    watches::Target,
};
use serde_json::Value;

use super::Remote;
use crate::error::Error;
use crate::remote_object;
use crate::strategy::initial_manager;

impl Remote<'_> {
    /// Before this manager applies an existing object without its ignored
    /// fields: the initial manager takes the values they have now, without
    /// force, so that an apply that no longer sets them (ignoreFields added
    /// to a resource whose object exists) does not remove them. A field
    /// another manager changed meanwhile conflicts, and is theirs: kept
    /// either way.
    pub(super) async fn keep_ignored(&self, target: &Target, live: &Value) -> Result<(), Error> {
        let Some(now) = self.strategy.initial(&self.full, live) else {
            return Ok(());
        };
        let manager = initial_manager(&self.ctx.rt.field_manager());
        match target
            .api()
            .patch(
                &target.name,
                &kube::api::PatchParams::apply(&manager),
                &Patch::Apply(&now),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(self.failed(format!("keeping the ignored fields of {}", self.what()), e)),
        }
    }

    /// Reads the object from the server (the watch cache keeps no
    /// managedFields) to say what changed and who changed it. A failed read
    /// only leaves the report without them.
    /// Answers the object as the server has it when nothing it manages
    /// differs there after all (the watch had shown an older version): no
    /// drift, and nothing to apply.
    pub(super) async fn find_correction(
        &self,
        target: &Target,
        cached: Option<&Value>,
    ) -> Option<Value> {
        tracing::debug!(
            kind = %target.resource.kind,
            name = %target.name,
            cached = ?cached.and_then(|c| c.pointer("/metadata/resourceVersion")),
            "its watch shows a change by someone else: reading it to confirm"
        );
        let found = match target.api().get(&target.name).await {
            Ok(live) => serde_json::to_value(&live).ok(),
            Err(e) => {
                tracing::debug!(error = %e, "reading the drifted object for its managedFields");
                None
            }
        };
        match drift::confirm(&self.desired, found, cached, &self.ctx.rt.field_manager()) {
            Confirmed::NoDrift(fresh) => Some(fresh),
            Confirmed::Drift(correction) => {
                if let Ok(mut c) = self.correction.lock() {
                    *c = Some(correction);
                }
                None
            }
        }
    }

    /// Leaves one remote object in place, no longer marked as this
    /// resource's (deletionPolicy Orphan): its UID annotation, and a
    /// propagated Secret's label and source annotation, are removed.
    pub(super) async fn release(&self, target: &Target, what: &str) -> Result<Deletion, Error> {
        let unmarked = serde_json::json!({"metadata": {
            "annotations": {
                types::workload::v1alpha1::ANNOTATION_RESOURCE_UID: null,
                remote_object::ANNOTATION_SOURCE: null,
            },
            "labels": {remote_object::LABEL_PROPAGATED: null},
        }});
        let params = kube::api::PatchParams {
            field_manager: Some(self.ctx.rt.field_manager()),
            ..Default::default()
        };
        match target
            .api()
            .patch(&target.name, &params, &Patch::Merge(&unmarked))
            .await
        {
            Ok(_) => Ok(Deletion::Gone),
            Err(e) if managed::not_found(&e) => Ok(Deletion::Gone),
            Err(e) => Err(self.failed(format!("leaving {what} in place"), e)),
        }
    }
}
