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
//!   rbac-manager's namespace), never to `default` (every pod without a
//!   ServiceAccount of its own runs as it) nor to one of this control
//!   plane's six controllers (`deploy/base/*/serviceaccount.yaml`), whose
//!   rights a package must not add to or use.
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
    let controlled = !extension_uid.is_empty()
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == extension_uid);
    if controlled {
        ExtensionSubject::Bind
    } else {
        ExtensionSubject::NotControlled
    }
}

/// The ServiceAccount a pod spec runs as: `serviceAccountName`, else the
/// deprecated `serviceAccount`, else `default`, as the API server decides.
pub fn pod_service_account(name: Option<&str>, deprecated: Option<&str>) -> String {
    name.filter(|n| !n.is_empty())
        .or(deprecated.filter(|n| !n.is_empty()))
        .unwrap_or("default")
        .to_owned()
}

/// Whether a revision's `system` role may be bound to ServiceAccount
/// `name` of its runtime; if not, why.
pub fn revision(name: &str) -> Result<(), String> {
    if name == "default" {
        return Err("every pod without a ServiceAccount of its own runs as it".to_owned());
    }
    if types::CONTROLLERS.contains(&name) {
        return Err(format!("it is the {name} controller's own"));
    }
    Ok(())
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

    #[test]
    fn a_pod_runs_as_its_service_account_name_else_the_old_field_else_default() {
        assert_eq!(pod_service_account(Some("a"), Some("b")), "a");
        assert_eq!(pod_service_account(Some(""), Some("b")), "b");
        assert_eq!(pod_service_account(None, None), "default");
        assert_eq!(pod_service_account(Some(""), Some("")), "default");
    }

    #[test]
    fn a_revisions_role_is_never_bound_to_default_or_a_controllers_service_account() {
        let cases: &[(&str, bool)] = &[
            ("provider-kubernetes-abc123", true),
            ("shared", true),
            ("default", false),
            ("scheduler", false),
            ("application-controller", false),
            ("resource-controller", false),
            ("object-provider", false),
            ("package-manager", false),
            ("rbac-manager", false),
        ];
        for (name, bound) in cases {
            assert_eq!(revision(name).is_ok(), *bound, "{name}");
        }
    }
}
