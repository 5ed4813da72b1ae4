//! Server-side apply helpers: one field manager per binary, forced apply so
//! that a controller owns the fields it sets, status through its subresource.

use kube::{
    Api, Resource,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

/// Whether every field `desired` sets already has that value in `live` (so
/// applying `desired` would change nothing it controls). Lists compare item
/// by item; a null in `desired` is satisfied by an absent field.
pub fn unchanged_by(live: &serde_json::Value, desired: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (desired, live) {
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, v)| {
            h.get(k).is_some_and(|hv| unchanged_by(hv, v)) || (v.is_null() && !h.contains_key(k))
        }),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(wv, hv)| unchanged_by(hv, wv))
        }
        (w, h) => w == h,
    }
}

/// Apply parameters for a field manager (forced: the controller is the
/// authority for the fields it sets).
pub fn params(field_manager: &str) -> PatchParams {
    PatchParams::apply(field_manager).force()
}

/// Applies `object` (a full or partial object with apiVersion and kind) to
/// the object called `name`.
pub async fn apply<K, T>(
    api: &Api<K>,
    name: &str,
    object: &T,
    field_manager: &str,
) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    T: Serialize + std::fmt::Debug,
{
    api.patch(name, &params(field_manager), &Patch::Apply(object))
        .await
}

/// Applies the status subresource of the object called `name`. `status` is
/// the object's `status` value; apiVersion and kind are added here.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: serde_json::Value,
    field_manager: &str,
) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    patch_status(api, name, None, status, field_manager).await
}

/// Applies the status subresource only if the object is still at
/// `resource_version`: a 409 means someone else changed it first and the
/// caller must look again (used where a decision must never be overwritten,
/// such as a scheduling decision).
pub async fn apply_status_at<K>(
    api: &Api<K>,
    name: &str,
    resource_version: &str,
    status: serde_json::Value,
    field_manager: &str,
) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    patch_status(api, name, Some(resource_version), status, field_manager).await
}

async fn patch_status<K>(
    api: &Api<K>,
    name: &str,
    resource_version: Option<&str>,
    status: serde_json::Value,
    field_manager: &str,
) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({"resourceVersion": rv});
    }
    api.patch_status(name, &params(field_manager), &Patch::Apply(&body))
        .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::unchanged_by;

    #[test]
    fn a_live_object_with_every_desired_field_needs_no_apply() {
        let want = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80}]}});
        let live = json!({"metadata": {"name": "a", "uid": "z", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80, "protocol": "TCP"}]}, "status": {}});
        assert!(unchanged_by(&live, &want));
    }

    #[test]
    fn a_changed_desired_field_needs_an_apply() {
        let want = json!({"metadata": {"labels": {"x": "1"}}, "data": {"k": "v"}});
        assert!(!unchanged_by(
            &json!({"metadata": {"labels": {"x": "2"}}, "data": {"k": "v"}}),
            &want
        ));
        assert!(!unchanged_by(
            &json!({"metadata": {"labels": {"x": "1"}}}),
            &want
        ));
    }

    #[test]
    fn lists_compare_item_by_item() {
        let want = json!({"l": [{"a": 1}, {"a": 2}]});
        assert!(!unchanged_by(&json!({"l": [{"a": 1}]}), &want));
        assert!(!unchanged_by(&json!({"l": [{"a": 2}, {"a": 1}]}), &want));
    }
}
