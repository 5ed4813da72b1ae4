//! Adding and removing a finalizer with a JSON Patch that first tests the
//! list it read, so a concurrent change (another controller's finalizer)
//! fails with a conflict instead of being overwritten. The API server answers
//! a failed test with 422; it is returned here as a 409 Conflict, which the
//! reconcile skeleton retries quietly (see [`crate::events::is_conflict`]).
//!
//! NB: kube's `runtime::finalizer` helper removes the finalizer as soon as
//! cleanup returns Ok, and can only wait by returning an error. Controllers
//! whose cleanup waits on other objects (children with finalizers of their
//! own) use these two functions so that waiting is not reported as failure.

use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

fn patch(current: &[String], next: Vec<String>) -> serde_json::Value {
    if current.is_empty() {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": next},
        ])
    } else {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "replace", "path": "/metadata/finalizers", "value": next},
        ])
    }
}

/// Adds `finalizer` to `obj` unless present.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer: &str) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    add_with_labels(api, obj, finalizer, &BTreeMap::new()).await
}

/// Adds `finalizer` and sets `labels` on `obj`, in one request, unless it
/// already carries them all. Other labels are left as they are.
pub async fn add_with_labels<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    labels: &BTreeMap<String, String>,
) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let current = obj.finalizers().to_vec();
    let ops = label_ops(obj.meta().labels.as_ref(), labels);
    let has_finalizer = current.iter().any(|f| f == finalizer);
    if has_finalizer && ops.is_empty() {
        return Ok(());
    }
    let mut next = current.clone();
    if !has_finalizer {
        next.push(finalizer.to_owned());
    }
    guarded_patch(api, obj, &current, next, ops).await
}

/// JSON Patch operations that give `current` labels the `wanted` values.
fn label_ops(
    current: Option<&BTreeMap<String, String>>,
    wanted: &BTreeMap<String, String>,
) -> Vec<serde_json::Value> {
    let missing: BTreeMap<&String, &String> = wanted
        .iter()
        .filter(|(k, v)| current.and_then(|c| c.get(*k)) != Some(*v))
        .collect();
    if missing.is_empty() {
        return Vec::new();
    }
    match current {
        None => vec![serde_json::json!({"op": "add", "path": "/metadata/labels", "value": missing})],
        Some(_) => missing
            .into_iter()
            .map(|(k, v)| {
                let key = k.replace('~', "~0").replace('/', "~1");
                serde_json::json!({"op": "add", "path": format!("/metadata/labels/{key}"), "value": v})
            })
            .collect(),
    }
}

/// Removes `finalizer` from `obj` if present.
pub async fn remove<K>(api: &Api<K>, obj: &K, finalizer: &str) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let current = obj.finalizers().to_vec();
    if !current.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let next: Vec<String> = current
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    match guarded_patch(api, obj, &current, next, Vec::new()).await {
        // Already gone: nothing left to finalize.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}

/// Replaces the finalizers, provided they still are `current`.
async fn guarded_patch<K>(
    api: &Api<K>,
    obj: &K,
    current: &[String],
    next: Vec<String>,
    more: Vec<serde_json::Value>,
) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let name = obj.name_any();
    let mut ops = patch(current, next);
    if let Some(list) = ops.as_array_mut() {
        list.extend(more);
    }
    let p: json_patch::Patch = serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
    match api
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(p))
        .await
    {
        Ok(_) => Ok(()),
        // 422 is also what an invalid finalizer name gets. The object
        // changed since it was read (its list may have changed and changed
        // back since): a lost race. Unchanged: the patch itself is wrong.
        Err(kube::Error::Api(s)) if s.code == 422 => {
            let now = api.get_metadata_opt(&name).await?;
            let read = obj.meta().resource_version.as_deref();
            let changed = now.is_none_or(|m| m.metadata.resource_version.as_deref() != read);
            if changed {
                Err(conflict(&name))
            } else {
                Err(kube::Error::Api(s))
            }
        }
        Err(e) => Err(e),
    }
}

/// The error a lost race on the finalizer list is reported as.
fn conflict(name: &str) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(
            &format!("the finalizers of {name} changed since they were read; looking again"),
            "Conflict",
        )
        .with_code(409)
        .boxed(),
    )
}

/// Whether `obj` carries `finalizer`.
pub fn has<K: Resource>(obj: &K, finalizer: &str) -> bool {
    obj.meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer)
}
