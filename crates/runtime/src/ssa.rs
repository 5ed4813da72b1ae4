//! Server-side apply helpers: one field manager per binary, forced apply so
//! that a controller owns the fields it sets, status through its subresource.

use kube::{
    Api, Resource,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

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
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(name, &params(field_manager), &Patch::Apply(&body))
        .await
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
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"resourceVersion": resource_version},
        "status": status,
    });
    api.patch_status(name, &params(field_manager), &Patch::Apply(&body))
        .await
}
