//! Small object operations every controller does the same way.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Api, Resource, api::DeleteParams};
use serde::de::DeserializeOwned;

/// Deletes the object called `name` (background propagation: its
/// dependents go after it); one that is already gone is not an error.
pub async fn delete<K>(api: &Api<K>, name: &str) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `refs` (an object's ownerReferences) name the object of `uid`
/// as its controller. An empty `uid` controls nothing.
pub fn controlled_by(refs: &[OwnerReference], uid: &str) -> bool {
    !uid.is_empty()
        && refs
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == uid)
}
