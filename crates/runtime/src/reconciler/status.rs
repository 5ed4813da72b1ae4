//! The status writer of the skeleton: writes only a changed status, and
//! trusts what it just wrote over a cache that has not shown it yet.

use std::{fmt::Debug, time::Duration};

use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use types::common::Conditioned;

use super::ControlError;
use crate::ssa;

/// Writes an object's status only when it changed.
///
/// "Changed" is judged against the object as the cache shows it, and
/// against what this writer last wrote: a reconcile that runs before the
/// watch delivered our own previous write sees the old status. So what was
/// written is kept for a short while ([`WRITTEN_TTL`]) with the
/// resourceVersion the write produced, and while the cache is older than
/// that write the next reconcile drafts from it ([`StatusWriter::base`]):
/// it neither writes the same status again nor works from a stale one
/// (whose conditions would get new transition times).
#[derive(Clone)]
pub struct StatusWriter {
    field_manager: String,
    /// Condition types another binary owns on the same objects: never
    /// applied by this writer, so it neither co-owns them nor puts back a
    /// value it read before their owner changed it.
    foreign: &'static [&'static str],
    /// By UID: the status written (its JSON text: kept compact, parsed
    /// when looked at) and the resourceVersion the write produced.
    written: crate::expiring::Expiring<String, (String, String)>,
}

/// How long a written status is trusted over a cache that has not shown it
/// yet. Watch events follow a write within milliseconds; the bound keeps the
/// memory to the writes of the last moments.
pub const WRITTEN_TTL: Duration = Duration::from_secs(30);

impl StatusWriter {
    /// A writer applying with `field_manager`.
    pub fn new(field_manager: String) -> Self {
        Self {
            field_manager,
            foreign: &[],
            written: crate::expiring::Expiring::new(WRITTEN_TTL),
        }
    }

    /// This writer leaves the conditions of these types to their owner.
    pub fn leaving(self, foreign: &'static [&'static str]) -> Self {
        Self { foreign, ..self }
    }

    /// `status` as this writer applies it: without foreign conditions.
    fn ours<S: serde::Serialize>(&self, status: &S) -> serde_json::Result<serde_json::Value> {
        let mut value = serde_json::to_value(status)?;
        if let Some(list) = value.get_mut("conditions").and_then(|c| c.as_array_mut()) {
            list.retain(|c| {
                c.get("type")
                    .and_then(|t| t.as_str())
                    .is_none_or(|t| !self.foreign.contains(&t))
            });
        }
        Ok(value)
    }

    /// What this writer last wrote for `obj`, while the cache is older than
    /// that write; None once the cache shows it (or something newer).
    fn fresher<K: Resource>(&self, obj: &K) -> Option<serde_json::Value> {
        let uid = obj.meta().uid.as_deref().unwrap_or_default();
        let cached_rv = obj.meta().resource_version.as_deref().unwrap_or_default();
        let (text, rv) = self.written.get(&uid.to_owned())?;
        older(cached_rv, &rv)
            .then(|| serde_json::from_str(&text).ok())
            .flatten()
    }

    /// The status a reconcile starts from: the object's, or what this
    /// writer wrote after the version the cache shows.
    pub fn base<K>(&self, obj: &K) -> K::Status
    where
        K: Resource + Conditioned,
    {
        let written = self
            .fresher(obj)
            .and_then(|v| serde_json::from_value::<K::Status>(v).ok());
        let Some(mut status) = written else {
            return obj.status().cloned().unwrap_or_default();
        };
        // What was written holds no foreign condition: the draft keeps what
        // their owners last said.
        let theirs = obj.status().map(K::conditions).unwrap_or_default();
        let theirs = theirs
            .iter()
            .filter(|c| self.foreign.contains(&c.type_.as_str()))
            .cloned();
        K::conditions_mut(&mut status).extend(theirs);
        status
    }

    /// Whether `status` differs from what the object shows (or this writer
    /// just wrote for it): whether [`StatusWriter::write`] would write.
    pub fn differs<K: Resource + Conditioned>(&self, obj: &K, status: &K::Status) -> bool {
        obj.status() != Some(status) && self.ours(status).ok() != self.fresher(obj)
    }

    /// Writes `status` unless the object already has it (or this writer
    /// just wrote it and the cache is behind). The whole status is applied,
    /// so a field that went away is removed. Ok(true) when written.
    pub async fn write<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        status: &K::Status,
    ) -> Result<bool, ControlError>
    where
        K: Resource<DynamicType = ()> + Conditioned + Clone + DeserializeOwned + Debug,
    {
        if obj.status() == Some(status) {
            return Ok(false);
        }
        let value = self
            .ours(status)
            .map_err(|e| ControlError::new("serialize the status", kube::Error::SerdeError(e)))?;
        if self.fresher(obj).as_ref() == Some(&value) {
            return Ok(false);
        }
        let written =
            match ssa::apply_status(api, &obj.name_any(), value.clone(), &self.field_manager).await
            {
                Ok(w) => w,
                // Deleted meanwhile: there is no status to show, and
                // nothing failed (its deletion wakes what must know).
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
                Err(e) => return Err(ControlError::new("write the status", e)),
            };
        if let (Some(uid), Some(rv)) = (
            obj.meta().uid.clone(),
            written.meta().resource_version.clone(),
        ) {
            self.written.insert(uid, (value.to_string(), rv));
        }
        Ok(true)
    }

    /// Forgets what was written for an object that is gone.
    pub fn forget<K: Resource>(&self, obj: &K) {
        if let Some(uid) = obj.meta().uid.as_ref() {
            self.written.remove(uid);
        }
    }
}

/// Whether resourceVersion `a` is older than `b`. The API server's
/// resourceVersions are etcd revisions, which only grow; when either is not
/// a number nothing is assumed (false).
pub fn older(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_writer_never_applies_a_condition_another_binary_owns_but_drafts_keep_it() {
        let writer =
            StatusWriter::new("crossplane-rs/package-manager".into()).leaving(&["RBACReady"]);
        let status = json!({"conditions": [
            {"type": "Installed", "status": "True"},
            {"type": "RBACReady", "status": "False", "reason": "Refused"},
        ], "foo": 1});
        let applied = writer.ours(&status).unwrap();
        assert_eq!(
            applied["conditions"],
            json!([{"type": "Installed", "status": "True"}])
        );
        assert_eq!(applied["foo"], json!(1));
        // A writer that leaves nothing applies everything.
        let all = StatusWriter::new("m".into());
        assert_eq!(all.ours(&status).unwrap(), status);

        // A draft from what was applied, the cache still behind that write,
        // shows the owner's latest word.
        let cached: types::kubernetes::v1alpha1::Object = serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "o", "uid": "u", "resourceVersion": "5"},
            "spec": {"forProvider": {"manifest": {}}},
            "status": {"conditions": [
                {"type": "Healthy", "status": "False", "reason": "Unhealthy"},
                {"type": "RBACReady", "status": "True", "reason": "Bound"},
            ]},
        }))
        .unwrap();
        let written =
            json!({"conditions": [{"type": "Healthy", "status": "True", "reason": "Healthy"}]});
        writer
            .written
            .insert("u".to_owned(), (written.to_string(), "9".to_owned()));
        let draft = writer.base(&cached);
        let types: Vec<(&str, &str)> = draft
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(types, [("Healthy", "True"), ("RBACReady", "True")]);
    }

    #[test]
    fn resource_versions_compare_as_numbers_and_assume_nothing_otherwise() {
        assert!(older("9", "10"));
        assert!(!older("10", "9"));
        assert!(!older("10", "10"));
        assert!(!older("abc", "10"));
        assert!(!older("10", ""));
    }
}
