//! Whom a package's role is bound to: pure decisions, so a package cannot
//! pick an identity to receive its grants.
//!
//! - An Extension's role goes only to [`Extension::controller_service_account`]
//!   in the Extension's namespace, and only once that ServiceAccount exists
//!   with a controller ownerReference to this Extension (by uid): the
//!   package-manager creates it so, and refuses to run the controller as a
//!   ServiceAccount of that name it did not create. Anything else (a
//!   tenant's ServiceAccount, `default`, one of another Extension) would
//!   receive the Extension's grants without anyone having installed it.
//! - A revision's `system` role goes to the ServiceAccount its runtime
//!   Deployment runs as (the package-manager renders it in the
//!   rbac-manager's namespace), never to one [`types::borrowed_identity`]
//!   refuses: `default` or one of this control plane's six controllers,
//!   whose rights a package must not add to or use.
//!
//! [`Extension::controller_service_account`]: types::extensions::v1alpha1::Extension::controller_service_account

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What an Extension's ServiceAccount allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtensionSubject {
    /// It exists and the Extension controls it: bind.
    Bind,
    /// It does not exist (yet): wait for the package-manager.
    Missing,
    /// It exists, but the Extension does not control it: never bind.
    NotControlled,
}

/// Whether the Extension with uid `extension_uid` may have its role bound
/// to `service_account` (its metadata, `None` when it does not exist).
pub fn extension(extension_uid: &str, service_account: Option<&ObjectMeta>) -> ExtensionSubject {
    let Some(meta) = service_account else {
        return ExtensionSubject::Missing;
    };
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    if runtime::objects::controlled_by(refs, extension_uid) {
        ExtensionSubject::Bind
    } else {
        ExtensionSubject::NotControlled
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn sa(owners: &[(&str, Option<bool>)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("redis-controller".into()),
            owner_references: Some(
                owners
                    .iter()
                    .map(|(uid, controller)| OwnerReference {
                        api_version: "extensions.crossplane.io/v1alpha1".into(),
                        kind: "Extension".into(),
                        name: "redis".into(),
                        uid: (*uid).into(),
                        controller: *controller,
                        block_owner_deletion: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn an_extensions_role_is_bound_only_to_a_service_account_it_controls() {
        let cases: &[(&str, &str, Option<ObjectMeta>, ExtensionSubject)] = &[
            (
                "one the Extension controls is bound",
                "uid-1",
                Some(sa(&[("uid-1", Some(true))])),
                ExtensionSubject::Bind,
            ),
            (
                "one that does not exist yet is waited for",
                "uid-1",
                None,
                ExtensionSubject::Missing,
            ),
            (
                "one nobody owns is not bound",
                "uid-1",
                Some(sa(&[])),
                ExtensionSubject::NotControlled,
            ),
            (
                "one another Extension controls is not bound",
                "uid-1",
                Some(sa(&[("uid-2", Some(true))])),
                ExtensionSubject::NotControlled,
            ),
            (
                "one the Extension owns without controlling it is not bound",
                "uid-1",
                Some(sa(&[("uid-1", None), ("uid-2", Some(true))])),
                ExtensionSubject::NotControlled,
            ),
            (
                "an Extension without a uid binds nothing",
                "",
                Some(sa(&[("", Some(true))])),
                ExtensionSubject::NotControlled,
            ),
        ];
        for (name, uid, meta, want) in cases {
            assert_eq!(extension(uid, meta.as_ref()), *want, "{name}");
        }
    }
}
