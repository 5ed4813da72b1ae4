//! Extensions (seed 001): a ClusterRole with the Extension's
//! `permissions.rules` (checked against the allow-list), everything on the
//! kinds it owns and read access to the kinds it depends on, bound to the
//! ServiceAccount its controller Deployment names. A namespaced Extension
//! cannot own cluster-scoped objects, so a finalizer removes them.

use std::sync::Arc;

use k8s_openapi::{
    api::rbac::v1::{ClusterRole, ClusterRoleBinding},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, ResourceExt,
    runtime::{Controller, controller::Action, watcher},
};
use runtime::{
    controller::Runtime,
    reconciler::{self, Cleanup, Draft, Reconciler, Skeleton},
    ssa,
};
use types::extensions::v1alpha1::{CrdRef, Extension};

use crate::{
    revisions::{Error, write_rbac_ready},
    roles,
};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "extension";
/// Holds an Extension until its role and binding are gone.
pub const FINALIZER: &str = "rbac.crossplane.io/extension";

/// The reconciler.
pub struct Extensions {
    sk: Skeleton,
    field_manager: String,
    allowed_role: String,
}

impl Reconciler for Extensions {
    type Object = Extension;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn api(&self, e: &Extension) -> Api<Extension> {
        Api::namespaced(self.sk.client().clone(), &e.namespace().unwrap_or_default())
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    /// The package-manager owns the Extension's status (Ready, Synced);
    /// this controller writes its one condition itself.
    fn writes_status(&self) -> bool {
        false
    }

    async fn apply(
        &self,
        e: &Arc<Extension>,
        _status: &mut Draft<Extension>,
    ) -> Result<Action, Error> {
        let ns = e.namespace().unwrap_or_default();
        let name = e.name_any();
        let rules: Vec<serde_json::Value> = e
            .spec
            .permissions
            .as_ref()
            .map(|p| {
                p.rules
                    .iter()
                    .filter_map(|r| serde_json::to_value(r).ok())
                    .collect()
            })
            .unwrap_or_default();
        let allowed = Api::<ClusterRole>::all(self.sk.client().clone())
            .get_opt(&self.allowed_role)
            .await
            .map_err(|e| Error::Request("read the allow-list ClusterRole", e))?
            .and_then(|c| c.rules)
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(|r| serde_json::to_value(r).ok())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let refused = roles::refused(&rules, &allowed);
        if !refused.is_empty() {
            let why = format!(
                "spec.permissions asks for what the allow-list does not grant: {}; add them to ClusterRole {} (--allowed-permissions-clusterrole) to allow them",
                refused.join(", "),
                self.allowed_role
            );
            self.set(e, false, "PermissionRequestRefused", &why).await?;
            return Err(Error::Refused(why));
        }
        let crds = e
            .spec
            .custom_resource_definitions
            .clone()
            .unwrap_or_default();
        let owns = self.kinds(&crds.owns).await?;
        let depends_on = self.kinds(&crds.depends_on).await?;
        let role = roles::extension_role(&ns, &name, &owns, &depends_on, &rules);
        let role_name = roles::extension_role_name(&ns, &name);
        ssa::apply(
            &Api::<ClusterRole>::all(self.sk.client().clone()),
            &role_name,
            &role,
            &self.field_manager,
        )
        .await
        .map_err(|e| Error::Request("apply the Extension's ClusterRole", e))?;
        let service_account = e
            .spec
            .controller
            .as_ref()
            .and_then(|c| c.deployment.as_ref())
            .and_then(|d| d.spec.pointer("/template/spec/serviceAccountName"))
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let message = match &service_account {
            Some(sa) => {
                let binding = roles::extension_binding(&ns, &name, sa);
                ssa::apply(
                    &Api::<ClusterRoleBinding>::all(self.sk.client().clone()),
                    &role_name,
                    &binding,
                    &self.field_manager,
                )
                .await
                .map_err(|e| Error::Request("apply the Extension's ClusterRoleBinding", e))?;
                format!("ClusterRole {role_name} bound to ServiceAccount {ns}/{sa}")
            }
            None => format!(
                "ClusterRole {role_name} rendered; the Extension names no controller ServiceAccount to bind"
            ),
        };
        self.set(e, true, "RolesRendered", &message).await?;
        Ok(Action::requeue(std::time::Duration::from_secs(3600)))
    }

    async fn cleanup(
        &self,
        e: &Arc<Extension>,
        _status: &mut Draft<Extension>,
    ) -> Result<Cleanup, Error> {
        let role_name =
            roles::extension_role_name(&e.namespace().unwrap_or_default(), &e.name_any());
        runtime::objects::delete(
            &Api::<ClusterRoleBinding>::all(self.sk.client().clone()),
            &role_name,
        )
        .await
        .map_err(|e| Error::Request("delete the Extension's ClusterRoleBinding", e))?;
        runtime::objects::delete(
            &Api::<ClusterRole>::all(self.sk.client().clone()),
            &role_name,
        )
        .await
        .map_err(|e| Error::Request("delete the Extension's ClusterRole", e))?;
        Ok(Cleanup::Done)
    }
}

impl Extensions {
    /// Writes RBACReady, only when it changed.
    async fn set(&self, e: &Extension, ok: bool, reason: &str, message: &str) -> Result<(), Error> {
        write_rbac_ready(
            &Api::namespaced(self.sk.client().clone(), &e.namespace().unwrap_or_default()),
            e,
            (ok, reason, message),
            &self.field_manager,
        )
        .await
    }

    /// The kinds of CRD references (kind + apiVersion): the plural from the
    /// CRD when it is installed, else the lower-case kind plus "s".
    async fn kinds(&self, refs: &[CrdRef]) -> Result<Vec<roles::Kind>, Error> {
        let crds = if refs.is_empty() {
            Vec::new()
        } else {
            Api::<CustomResourceDefinition>::all(self.sk.client().clone())
                .list(&Default::default())
                .await
                .map_err(|e| Error::Request("list CRDs", e))?
                .items
        };
        let mut kinds: Vec<roles::Kind> = refs
            .iter()
            .map(|r| {
                let group = r
                    .api_version
                    .split_once('/')
                    .map_or("", |(g, _)| g)
                    .to_owned();
                let plural = crds
                    .iter()
                    .find(|c| c.spec.group == group && c.spec.names.kind == r.kind)
                    .map(|c| c.spec.names.plural.clone())
                    .unwrap_or_else(|| format!("{}s", r.kind.to_lowercase()));
                roles::Kind { group, plural }
            })
            .collect();
        kinds.sort();
        kinds.dedup();
        Ok(kinds)
    }
}

/// The controller, ready to run.
pub fn controller(
    rt: &Runtime,
    allowed_role: String,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let ctrl = Controller::new(rt.api::<Extension>(), watcher::Config::default())
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(Extensions {
        sk: Skeleton::new(rt, CONTROLLER),
        field_manager: rt.field_manager(),
        allowed_role,
    });
    reconciler::run(ctrl, reconciler)
}
