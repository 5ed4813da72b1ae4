//! The ProviderRevision controller of the rbac-manager: renders each
//! revision's ClusterRoles from the CRDs it installed and, without
//! SafeStart, its MRDs ([`granted_kinds`], [`crate::roles`]),
//! binds the `system` role to the ServiceAccount its runtime Deployment runs
//! as while the revision is Active (an Inactive one keeps its roles and
//! loses the binding), and says so in the revision's `RBACReady` condition.
//! The runtime's leader-election Leases are granted apart, by a RoleBinding
//! in the runtime's own namespace ([`roles::leader_election_binding`]).
//! Roles and bindings are controlled by the revision, so they go with it.
//!
//! Every rule passes the boundary first ([`crate::boundary`]): the package's
//! permission requests (its `status.permissionRequests`) must be
//! within the allow-list, nothing rendered may be never grantable, and a
//! CRD of a protected group gets no rules ([`crate::kinds::installed`]).
//! Anything refused deletes the revision's roles and binding (a role that
//! passed an older, wider boundary must not outlive it) and sets
//! RBACReady=False with reason `PermissionRequestRefused` naming each
//! refused item. The binding never goes to `default` or to a control-plane
//! controller's ServiceAccount ([`crate::subjects::revision`]).
//!
//! Watches: the revisions (cluster-scoped, made by the package-manager),
//! the runtime Deployments in the runtimes' namespace that carry
//! the revision label (made by the package-manager), and the one allow-list
//! ClusterRole (by name). None of them can be grown by a tenant.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding},
};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{Controller, WatchStreamExt, controller::Action, reflector::Store, watcher},
};
use runtime::{
    controller::{Runtime, cache_ready},
    reconciler::{self, Cleanup, Draft, Reconciler, Skeleton},
    ssa,
};
use types::pkg::{
    contract::conditions::{PERMISSION_REQUEST_REFUSED, SERVICE_ACCOUNT_REFUSED},
    v1::{ProviderRevision, RevisionState},
};

use crate::{
    allow_list::AllowList, boundary, error::Error, kinds, metrics::RbacMetrics, roles,
    status::write_rbac_ready,
};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "providerrevision";
/// Holds a revision until its roles and binding are gone.
pub const FINALIZER: &str = "rbac.crossplane.io/revision";
/// The label the package-manager puts on a revision's runtime objects.
const REVISION_LABEL: &str = types::pkg::contract::labels::REVISION;
/// How often a revision is looked at again; its Deployment, the allow-list
/// and the revision itself wake it sooner when they change.
const RESYNC: Duration = Duration::from_secs(3600);

/// What a bound revision's runtime is bound with: its `system` role,
/// cluster-wide, and its Leases in its own namespace (its Secrets and
/// ConfigMaps are [`crate::secrets`]'s: one binding per namespace for
/// every bound runtime).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Bindings {
    system: ClusterRoleBinding,
    namespaced: Vec<RoleBinding>,
}

/// The reconciler.
pub struct ProviderRevisions {
    sk: Skeleton,
    field_manager: String,
    /// The runtimes' namespace.
    namespace: String,
    /// Whether `--runtime-secret-namespaces` named namespaces (then
    /// Secrets and ConfigMaps are granted only there).
    narrowed: bool,
    deployments: Store<Deployment>,
    /// The ClusterRole whose rules bound what packages may ask for.
    allow_list: AllowList,
    /// What was last applied for a revision, so an unchanged revision
    /// writes nothing.
    applier: ssa::Applier,
    metrics: RbacMetrics,
}

impl Reconciler for ProviderRevisions {
    type Object = ProviderRevision;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    /// Roles and binding are owned by the revision, but the revision also
    /// removes them itself on deletion, without waiting for garbage
    /// collection.
    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn ready(&self) -> bool {
        cache_ready(&self.deployments).await && cache_ready(&self.allow_list.store).await
    }

    /// The package-manager owns the revision's status; this controller
    /// writes its one condition itself.
    fn writes_status(&self) -> bool {
        false
    }

    async fn apply(
        &self,
        r: &Arc<ProviderRevision>,
        _status: &mut Draft<ProviderRevision>,
    ) -> Result<Action, Error> {
        let (kinds, protected) = kinds::installed(&granted_kinds(r));
        if kinds.is_empty() && protected.is_empty() {
            // Nothing installed yet: the revision's status change wakes us.
            return Ok(Action::await_change());
        }
        let name = r.name_any();
        let uid = r.uid().unwrap_or_default();
        let mut refused = boundary::Refusals::default();
        for why in protected {
            refused.refuse(why);
        }
        // What the package asks for (the package-manager read it from the
        // package's meta).
        let requested = r
            .status
            .as_ref()
            .map(|s| s.permission_requests.clone())
            .unwrap_or_default();
        let common_labels = r.common_labels();
        let common_annotations = r.common_annotations();
        let revision = roles::Revision {
            name: &name,
            uid: &uid,
            common_labels: &common_labels,
            common_annotations: &common_annotations,
            safe_start: r.safe_start(),
            secrets_cluster_wide: !self.narrowed,
        };
        let rendered = roles::provider_roles(&revision, &kinds, &requested);
        refused.merge(boundary::check(
            &requested,
            &roles::rules_of(&rendered),
            &self.allow_list.rules(),
        ));
        if !refused.is_empty() {
            // Nothing of this revision is created or widened, and what a
            // wider boundary granted before goes.
            self.remove(&name).await?;
            self.metrics.requests_refused.inc();
            let why = refused.message(&self.allow_list.name);
            self.condition(r, false, PERMISSION_REQUEST_REFUSED, &why)
                .await?;
            return Err(Error::Refused(why));
        }
        let active = r.spec.desired_state == RevisionState::Active;
        let runtime = active
            .then(|| self.runtime_service_account(&name))
            .flatten();
        let service_account = runtime
            .as_ref()
            .and_then(|(_, sa)| types::borrowed_identity(sa).is_none().then(|| sa.clone()));
        let binding = service_account.as_ref().map(|sa| {
            let namespaced = vec![roles::leader_election_binding(
                &name,
                &uid,
                sa,
                &self.namespace,
            )];
            Bindings {
                system: roles::system_binding(&name, &uid, sa, &self.namespace),
                namespaced,
            }
        });
        self.write(&name, &rendered, binding.as_ref()).await?;
        let n = rendered.len();
        let ns = &self.namespace;
        let (ok, reason, message) = match (&runtime, active) {
            (Some((deployment, sa)), _) => match types::borrowed_identity(sa) {
                None => (
                    true,
                    "RolesRendered",
                    format!(
                        "{n} roles rendered; the system role is bound to ServiceAccount {ns}/{sa}"
                    ),
                ),
                Some(why) => (
                    false,
                    SERVICE_ACCOUNT_REFUSED,
                    format!(
                        "{n} roles rendered, the system role not bound: the runtime Deployment {ns}/{deployment} runs as ServiceAccount {ns}/{sa}, to which no package's role is bound ({why}); name a ServiceAccount of the runtime's own in its DeploymentRuntimeConfig (serviceAccountTemplate)"
                    ),
                ),
            },
            // An Active revision whose runtime is not bound yet is not
            // ready: the package-manager keeps the old revision serving
            // until it is.
            (None, true) if r.expects_runtime() => (
                false,
                "WaitingForRuntime",
                format!("{n} roles rendered; no runtime Deployment to bind the system role to yet"),
            ),
            (None, true) => (
                true,
                "RolesRendered",
                format!("{n} roles rendered; no runtime Deployment to bind the system role to yet"),
            ),
            (None, false) => (
                true,
                "RolesRendered",
                format!(
                    "{n} roles rendered; the revision is inactive, so its runtime is not bound"
                ),
            ),
        };
        let changed = self.condition(r, ok, reason, &message).await?;
        if changed && reason == SERVICE_ACCOUNT_REFUSED {
            self.sk
                .reporting
                .events
                .warning(&r.object_ref(&()), reason, message)
                .await;
        }
        Ok(Action::requeue(RESYNC))
    }

    async fn cleanup(
        &self,
        r: &Arc<ProviderRevision>,
        _status: &mut Draft<ProviderRevision>,
    ) -> Result<Cleanup, Error> {
        // The roles go last: until the package-manager has finished with
        // the revision (its runtime stopped, its CRDs checked for custom
        // resources, which it lists through the view role), they stay.
        if r.finalizers().iter().any(|f| f != FINALIZER) {
            return Ok(Cleanup::Wait(Action::await_change()));
        }
        self.remove(&r.name_any()).await?;
        Ok(Cleanup::Done)
    }
}

impl ProviderRevisions {
    /// The revision's runtime Deployment (its name) and the ServiceAccount
    /// it runs as.
    fn runtime_service_account(&self, revision: &str) -> Option<(String, String)> {
        let deployment = self.deployments.state().into_iter().find(|d| {
            d.labels()
                .get(REVISION_LABEL)
                .is_some_and(|v| v == revision)
        })?;
        let pod = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref());
        let sa = types::pod_service_account(
            pod.and_then(|p| p.service_account_name.as_deref()),
            pod.and_then(|p| p.service_account.as_deref()),
        );
        Some((deployment.name_any(), sa))
    }

    /// Applies the revision's roles, then its binding (or deletes the
    /// binding when there is none), each unless exactly it was applied
    /// last: a runtime bound later writes its binding, not the roles again.
    async fn write(
        &self,
        name: &str,
        rendered: &[ClusterRole],
        binding: Option<&Bindings>,
    ) -> Result<(), Error> {
        self.applier
            .apply_with(&roles_key(name), &rendered, true, || {
                self.apply_roles(rendered)
            })
            .await?;
        self.applier
            .apply_with(&binding_key(name), &binding, true, || {
                self.bind(name, binding)
            })
            .await?;
        Ok(())
    }

    async fn apply_roles(&self, rendered: &[ClusterRole]) -> Result<(), Error> {
        let api = Api::<ClusterRole>::all(self.sk.client().clone());
        for role in rendered {
            let role_name = role.metadata.name.as_deref().unwrap_or_default();
            ssa::apply(&api, role_name, role, &self.field_manager)
                .await
                .map_err(|e| Error::Request("apply a ClusterRole", e))?;
            self.metrics.roles_rendered.inc();
        }
        Ok(())
    }

    async fn bind(&self, name: &str, binding: Option<&Bindings>) -> Result<(), Error> {
        match binding {
            Some(b) => {
                let bindings = Api::<ClusterRoleBinding>::all(self.sk.client().clone());
                let binding_name = roles::role_name(name, "system");
                ssa::apply(&bindings, &binding_name, &b.system, &self.field_manager)
                    .await
                    .map_err(|e| Error::Request("apply the ClusterRoleBinding", e))?;
                for rb in &b.namespaced {
                    let api = Api::<RoleBinding>::namespaced(
                        self.sk.client().clone(),
                        rb.metadata.namespace.as_deref().unwrap_or_default(),
                    );
                    let rb_name = rb.metadata.name.as_deref().unwrap_or_default();
                    ssa::apply(&api, rb_name, rb, &self.field_manager)
                        .await
                        .map_err(|e| Error::Request("apply a RoleBinding", e))?;
                }
                self.prune_role_bindings(name, &b.namespaced).await?;
            }
            None => self.unbind(name).await?,
        }
        Ok(())
    }

    /// Deletes every binding of revision `name`: its RoleBindings, then its
    /// ClusterRoleBinding.
    async fn unbind(&self, name: &str) -> Result<(), Error> {
        self.prune_role_bindings(name, &[]).await?;
        runtime::objects::delete(
            &Api::<ClusterRoleBinding>::all(self.sk.client().clone()),
            &roles::role_name(name, "system"),
        )
        .await
        .map_err(|e| Error::Request("delete the ClusterRoleBinding", e))
    }

    /// Deletes every RoleBinding of revision `name` (by its label, in any
    /// namespace) that is not one of `keep` (the revision's runtime
    /// unbound, or bound by an older version of this controller).
    async fn prune_role_bindings(&self, name: &str, keep: &[RoleBinding]) -> Result<(), Error> {
        let client = self.sk.client().clone();
        let live = Api::<RoleBinding>::all(client.clone())
            .list_metadata(
                &kube::api::ListParams::default().labels(&format!("{REVISION_LABEL}={name}")),
            )
            .await
            .map_err(|e| Error::Request("list the revision's RoleBindings", e))?;
        for rb in live.items {
            let (ns, rb_name) = (rb.namespace().unwrap_or_default(), rb.name_any());
            let wanted = keep.iter().any(|k| {
                k.metadata.namespace.as_deref() == Some(ns.as_str())
                    && k.metadata.name.as_deref() == Some(rb_name.as_str())
            });
            if !wanted {
                runtime::objects::delete(
                    &Api::<RoleBinding>::namespaced(client.clone(), &ns),
                    &rb_name,
                )
                .await
                .map_err(|e| Error::Request("delete a RoleBinding", e))?;
            }
        }
        Ok(())
    }

    /// Deletes the revision's bindings, then its roles.
    async fn remove(&self, name: &str) -> Result<(), Error> {
        self.applier.forget(&roles_key(name));
        self.applier.forget(&binding_key(name));
        self.unbind(name).await?;
        let api = Api::<ClusterRole>::all(self.sk.client().clone());
        for role in roles::role_names(name) {
            runtime::objects::delete(&api, &role)
                .await
                .map_err(|e| Error::Request("delete a ClusterRole", e))?;
        }
        Ok(())
    }

    /// Writes RBACReady with `message`, only when it changed; says whether
    /// it did.
    async fn condition(
        &self,
        r: &ProviderRevision,
        ok: bool,
        reason: &str,
        message: &str,
    ) -> Result<bool, Error> {
        write_rbac_ready(
            &Api::<ProviderRevision>::all(self.sk.client().clone()),
            r,
            (ok, reason, message),
            &self.field_manager,
        )
        .await
    }
}

/// Under what the revision `name`'s roles, and its binding, were applied.
fn roles_key(name: &str) -> String {
    format!("{name}/roles")
}

fn binding_key(name: &str) -> String {
    format!("{name}/binding")
}

/// The CRDs whose kinds the revision's roles grant: those it delivered
/// and, without SafeStart, also those of its MRDs (which it makes Active:
/// each serves its CRD in a moment), so the roles are written once with
/// every kind rather than again as each CRD appears. With SafeStart an
/// MRD is granted only once a policy activated it and its CRD is there.
fn granted_kinds(r: &ProviderRevision) -> Vec<String> {
    let mut names = r.crd_names();
    if !r.safe_start() {
        // The same name twice is one kind ([`roles::kinds_of`]).
        names.extend(r.mrd_names());
    }
    names
}

/// The controller, ready to run: it watches the runtime Deployments of
/// revisions (to bind their ServiceAccounts) and the allow-list ClusterRole
/// (a change looks at every revision again).
pub fn controller<S>(
    rt: &Runtime,
    (namespace, narrowed): (String, bool),
    (allow_list, allow_stream): (AllowList, S),
    metrics: RbacMetrics,
) -> impl Future<Output = ()> + Send + 'static + use<S>
where
    S: futures::Stream<Item = Result<ClusterRole, watcher::Error>> + Send + 'static,
{
    let (deployments, writer) = kube::runtime::reflector::store();
    let owned = watcher(
        Api::<Deployment>::namespaced(rt.client.clone(), &namespace),
        watcher::Config::default().labels(REVISION_LABEL),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    let ctrl = Controller::new(
        Api::<ProviderRevision>::all(rt.client.clone()),
        watcher::Config::default(),
    );
    let revisions = ctrl.store();
    let ctrl = ctrl
        .owns_stream(owned)
        .watches_stream(allow_stream, move |_| {
            revisions
                .state()
                .iter()
                .map(|r| kube::runtime::reflector::ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(ProviderRevisions {
        sk: Skeleton::new(rt, CONTROLLER),
        field_manager: rt.field_manager(),
        namespace,
        narrowed,
        deployments,
        allow_list,
        applier: ssa::Applier::new(rt.field_manager()),
        metrics,
    });
    reconciler::run(ctrl, reconciler)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn revision(capabilities: &str) -> ProviderRevision {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "pkg.crossplane.io/v1",
            "kind": "ProviderRevision",
            "metadata": {
                "name": "p-1",
                "annotations": {"pkg.crossplane.io/capabilities": capabilities},
            },
            "spec": {"package": "p:v1", "revision": 1, "desiredState": "Active"},
            "status": {"objectRefs": [
                {"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition", "name": "buckets.example.org"},
                {"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition", "name": "queues.example.org"},
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "name": "buckets.example.org"},
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "name": "providerconfigs.example.org"},
            ]},
        }))
        .unwrap()
    }

    fn plurals(r: &ProviderRevision) -> Vec<String> {
        roles::kinds_of(&granted_kinds(r))
            .into_iter()
            .map(|k| k.plural)
            .collect()
    }

    #[test]
    fn a_revision_without_safe_start_is_granted_its_mrds_kinds_before_their_crds_appear() {
        assert_eq!(
            plurals(&revision("")),
            ["buckets", "providerconfigs", "queues"]
        );
    }

    #[test]
    fn a_safe_start_revision_is_granted_only_the_kinds_whose_crds_are_there() {
        assert_eq!(
            plurals(&revision("SafeStart")),
            ["buckets", "providerconfigs"]
        );
    }
}
