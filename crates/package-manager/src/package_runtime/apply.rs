//! Applying and stopping a runtime. What was applied is remembered per
//! runtime (a revision, an Extension) by a [`runtime::ssa::Applier`], so a
//! reconcile that renders the same runtime while its Deployment is there
//! writes nothing.

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Service, ServiceAccount},
};
use kube::{
    Api, Resource,
    api::{DeleteParams, ListParams},
};
use serde_json::Value;

use super::render::Rendered;

/// A request about a runtime that failed: which step, and the API server's
/// answer.
#[derive(Debug)]
pub struct ApplyError {
    /// The step, as "failed to …" continues it.
    pub what: &'static str,
    /// The API server's answer.
    pub source: kube::Error,
    /// Whether the object was a Deployment (whose spec, for a stack's
    /// controller, is package content).
    pub deployment: bool,
}

impl ApplyError {
    /// The API server's answer when it refused a Deployment as invalid
    /// (400, 422): what the package wrote, not a failed request.
    pub fn refused_deployment(&self) -> Option<&kube::core::Status> {
        match &self.source {
            kube::Error::Api(a) if self.deployment && (a.code == 400 || a.code == 422) => Some(a),
            _ => None,
        }
    }
}

/// Applies and stops runtimes with one field manager.
#[derive(Clone)]
pub struct Runtimes {
    client: kube::Client,
    applier: runtime::ssa::Applier,
}

impl Runtimes {
    /// Runtimes applied through `client` as `field_manager`.
    pub fn new(client: kube::Client, field_manager: &str) -> Self {
        Self {
            client,
            applier: runtime::ssa::Applier::new(field_manager),
        }
    }

    /// Applies a revision's rendered runtime in `namespace` (ServiceAccount,
    /// Service, then Deployment), unless it is what was last applied under
    /// `key` and its Deployment is `live`. `Ok(true)` when it was written.
    pub async fn apply(
        &self,
        key: &str,
        namespace: &str,
        rendered: &Rendered,
        live: bool,
    ) -> Result<bool, ApplyError> {
        let wanted = [
            &rendered.service_account,
            &rendered.service,
            &rendered.deployment,
        ];
        self.applier
            .apply_with(key, &wanted, live, || async {
                let ns = namespace;
                self.apply_one::<ServiceAccount>(
                    ns,
                    &rendered.service_account,
                    "apply the runtime's ServiceAccount",
                )
                .await?;
                self.apply_one::<Service>(ns, &rendered.service, "apply the runtime's Service")
                    .await?;
                self.apply_one::<Deployment>(
                    ns,
                    &rendered.deployment,
                    "apply the runtime's Deployment",
                )
                .await
            })
            .await
    }

    /// Applies a stack Extension's controller in `namespace` (its
    /// ServiceAccount, then its Deployment), unless it is what was last
    /// applied under `key` and its Deployment is `live`. `Ok(true)` when it
    /// was written.
    pub async fn apply_controller(
        &self,
        key: &str,
        namespace: &str,
        service_account: &Value,
        deployment: &Value,
        live: bool,
    ) -> Result<bool, ApplyError> {
        // What was compared before the Applier: the Deployment and the
        // ServiceAccount's name (the rest of it follows from the Extension).
        let sa_name = name_of(service_account);
        let wanted = (deployment, sa_name);
        self.applier
            .apply_with(key, &wanted, live, || async {
                self.apply_one::<ServiceAccount>(
                    namespace,
                    service_account,
                    "apply the controller's ServiceAccount",
                )
                .await?;
                self.apply_one::<Deployment>(
                    namespace,
                    deployment,
                    "apply the controller Deployment",
                )
                .await
            })
            .await
    }

    async fn apply_one<K>(
        &self,
        namespace: &str,
        object: &Value,
        what: &'static str,
    ) -> Result<(), ApplyError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api = Api::<K>::namespaced(self.client.clone(), namespace);
        runtime::ssa::apply(&api, name_of(object), object, self.applier.field_manager())
            .await
            .map_err(|source| ApplyError {
                what,
                source,
                deployment: K::kind(&()) == "Deployment",
            })?;
        Ok(())
    }

    /// Whether a runtime was applied under `key` lately.
    pub fn applied(&self, key: &str) -> bool {
        self.applier.remembers(key)
    }

    /// Forgets what was applied under `key` (its owner is gone).
    pub fn forget(&self, key: &str) {
        self.applier.forget(key);
    }

    /// Deletes the Deployments in `namespace` that `selector` selects (a
    /// revision's runtime) and forgets what was applied under `key`.
    pub async fn stop(&self, key: &str, namespace: &str, selector: &str) -> Result<(), ApplyError> {
        Api::<Deployment>::namespaced(self.client.clone(), namespace)
            .delete_collection(
                &DeleteParams::background(),
                &ListParams::default().labels(selector),
            )
            .await
            .map_err(|source| ApplyError {
                what: "delete the runtime's Deployment",
                source,
                deployment: true,
            })?;
        self.applier.forget(key);
        Ok(())
    }
}

/// Why applying `wanted` over the live object with metadata `live` would
/// take over something the package-manager did not make for this runtime:
/// `wanted` is controlled by its Provider or revision (uid), and `live` is
/// controlled by something else or by nothing; or `wanted` is owned by
/// nobody (a ServiceAccount a runtime config names) and `live` is
/// controlled by something. `None` when it may be applied. Pure.
pub fn takes_over(
    live: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    wanted: &Value,
) -> Option<String> {
    let controller = live
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let wanted_uid = wanted
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|o| o.get("uid"))
        .and_then(Value::as_str);
    match (wanted_uid, controller) {
        (Some(uid), Some(c)) if c.uid == uid => None,
        (Some(_), Some(c)) => Some(format!("it is controlled by {} {}", c.kind, c.name)),
        (Some(_), None) => Some("it was not made for this Provider".to_owned()),
        (None, Some(c)) => Some(format!("it is controlled by {} {}", c.kind, c.name)),
        (None, None) => None,
    }
}

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use serde_json::json;

    use super::*;

    fn meta(controller: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            owner_references: controller.map(|uid| {
                vec![OwnerReference {
                    api_version: "pkg.crossplane.io/v1".into(),
                    kind: "Provider".into(),
                    name: "other".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_runtime_never_takes_over_what_was_not_made_for_it() {
        let ours = json!({"metadata": {"ownerReferences": [{"uid": "p1", "controller": true}]}});
        let named = json!({"metadata": {"name": "irsa"}});
        assert_eq!(takes_over(&meta(Some("p1")), &ours), None);
        assert!(
            takes_over(&meta(Some("p2")), &ours)
                .unwrap()
                .contains("Provider other")
        );
        assert!(takes_over(&meta(None), &ours).is_some());
        // A ServiceAccount a runtime config names: one nobody controls is
        // used (an administrator made it for this), another runtime's is not.
        assert_eq!(takes_over(&meta(None), &named), None);
        assert!(takes_over(&meta(Some("p2")), &named).is_some());
    }
}
