//! The one status condition the rbac-manager writes, RBACReady, on
//! revisions and Extensions alike ([`crate::revisions`],
//! [`crate::extensions`]): the package-manager owns the rest of their
//! status, so only this condition is applied, and only when it changed.

use kube::{Api, ResourceExt};
use runtime::{conditions, ssa};

use crate::error::Error;

/// The revision's (and the Extension's) condition the rbac-manager owns.
pub const TYPE_RBAC_READY: &str = types::pkg::contract::conditions::RBAC_READY;

/// Writes an object's RBACReady condition (and only it: the package-manager
/// owns the rest of the status) as `(ok, reason, message)`, only when it
/// changed; says whether it did.
pub async fn write_rbac_ready<K>(
    api: &Api<K>,
    obj: &K,
    (ok, reason, message): (bool, &str, &str),
    field_manager: &str,
) -> Result<bool, Error>
where
    K: kube::Resource<DynamicType = ()>
        + types::common::Conditioned
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    // conditions::set says whether anything would change (it also bounds
    // the message, so a long one is compared as it would be kept).
    let mut conds = conditions::of(obj).to_vec();
    let changed = conditions::set(
        &mut conds,
        conditions::custom(TYPE_RBAC_READY, ok, reason, Some(message.to_owned())),
        &conditions::now(),
    );
    if !changed {
        return Ok(false);
    }
    let ours: Vec<_> = conds
        .into_iter()
        .filter(|c| c.type_ == TYPE_RBAC_READY)
        .collect();
    ssa::apply_status(
        api,
        &obj.name_any(),
        serde_json::json!({"conditions": ours}),
        field_manager,
    )
    .await
    .map_err(|e| Error::Request("write RBACReady", e))?;
    Ok(true)
}
