//! Extensions (seed 001): one Role per Extension in its namespace, bound
//! there to its controller's ServiceAccount. An Extension is namespaced,
//! and so are its rights; the one cluster-wide binding it gets marks its
//! controller as a package identity for the admission policy
//! ([`types::package_identity`]), which grants nothing.
//!
//! The role holds the Extension's `permissions.rules`, every verb on the
//! kinds it owns and read on the kinds it depends on (which, like its
//! rules, must be within the allow-list), each within the boundary
//! ([`crate::boundary`], [`crate::kinds`]): a kind whose CRD is not served
//! yet is left out (RBACReady stays True and says which kinds
//! wait; the Extension is looked at again every [`WAIT_POLL`]), and
//! anything refused leaves the Extension without a role or binding (both
//! are deleted if they exist: a role that passed an older, wider boundary
//! must not outlive it) and RBACReady=False naming what was refused.
//!
//! The binding goes only to the ServiceAccount the package-manager made for
//! the Extension ([`crate::subjects`]); until it exists, or while one of
//! that name is not the Extension's, there is no binding and RBACReady is
//! False saying so, looked at again every [`WAIT_POLL`].
//!
//! Kinds are resolved through discovery and CRDs read by name (metadata
//! only): the rbac-manager holds no watch on CRDs or ServiceAccounts, so no
//! one can grow its caches by creating them. The Role and RoleBinding are
//! controlled by the Extension; the identity binding is cluster-scoped,
//! which a namespaced Extension cannot own, so a finalizer removes it.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{
    api::{
        core::v1::ServiceAccount,
        rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{Controller, controller::Action, watcher},
};
use runtime::{
    controller::{Runtime, cache_ready},
    reconciler::{self, Cleanup, Draft, Reconciler, Skeleton},
    ssa,
};
use types::extensions::v1alpha1::{Extension, OWNER_ANNOTATION};

use crate::{
    allow_list::AllowList,
    boundary,
    error::Error,
    kinds::{self, Found, Target},
    metrics::RbacMetrics,
    roles,
    status::write_rbac_ready,
    subjects::{self, ExtensionSubject},
};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "extension";
/// Holds an Extension until its role and binding are gone.
pub const FINALIZER: &str = "rbac.crossplane.io/extension";
/// How soon an Extension that waits (for a kind's CRD, or for its
/// ServiceAccount) is looked at again: the package-manager makes both
/// within seconds of each other, and the rbac-manager watches neither (a
/// watch on every CRD or ServiceAccount would let anyone who can create
/// them grow its caches). One discovery request and a few reads by name
/// per waiting Extension every 10 s is cheap.
pub const WAIT_POLL: Duration = Duration::from_secs(10);
/// How often an Extension whose role is bound is looked at again.
const RESYNC: Duration = Duration::from_secs(3600);
/// Reason of RBACReady while the controller's ServiceAccount is not there
/// yet (as a revision's while its runtime is not).
const WAITING_FOR_RUNTIME: &str = "WaitingForRuntime";
/// Reason of RBACReady (and of the Warning event) while a ServiceAccount of
/// the controller's name exists that the Extension does not control.
const SERVICE_ACCOUNT_CONFLICT: &str = "ServiceAccountConflict";

/// The reconciler.
pub struct Extensions {
    sk: Skeleton,
    field_manager: String,
    allow_list: AllowList,
    metrics: RbacMetrics,
    /// Extensions (by uid) whose cluster-wide role from an older
    /// rbac-manager this process has removed.
    dropped: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Reconciler for Extensions {
    type Object = Extension;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn ready(&self) -> bool {
        cache_ready(&self.allow_list.store).await
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
        let role_name = roles::extension_role_name(&ns, &name);
        let rules: Vec<PolicyRule> = e
            .spec
            .permissions
            .as_ref()
            .map(|p| p.rules.clone())
            .unwrap_or_default();
        let refs = e
            .spec
            .custom_resource_definitions
            .clone()
            .unwrap_or_default();
        let found = self.look_up(&kinds::targets(&refs)).await?;
        let plan = kinds::plan(&format!("{ns}/{name}"), &refs, &found);
        let uid = e.uid().unwrap_or_default();
        let ext = (ns.as_str(), name.as_str(), uid.as_str());
        let role = roles::extension_role(ext, &plan.owns, &plan.depends_on, &rules);
        // What it depends on is asked for like its own rules: reading
        // another stack's kinds passes the allow-list too. Only what it owns
        // (CRDs its own stack installed) is granted without it.
        let mut requested = rules.clone();
        requested.extend(roles::read_rules(&plan.depends_on));
        let mut refused = boundary::check(
            &requested,
            role.rules.as_deref().unwrap_or_default(),
            &self.allow_list.rules(),
        );
        for why in &plan.refused {
            refused.refuse(why.clone());
        }
        if !refused.is_empty() {
            // Nothing of a refused Extension stays: a role from before may
            // hold what is refused now.
            self.remove(ext).await?;
            self.metrics.requests_refused.inc();
            let why = refused.message(&self.allow_list.name);
            self.set(e, false, "PermissionRequestRefused", &why).await?;
            return Err(Error::Refused(why));
        }
        self.drop_cluster_role(ext).await?;
        ssa::apply(
            &Api::<Role>::namespaced(self.sk.client().clone(), &ns),
            &role_name,
            &role,
            &self.field_manager,
        )
        .await
        .map_err(|e| Error::Request("apply the Extension's Role", e))?;
        let waiting = (!plan.waiting.is_empty()).then(|| {
            format!(
                "; not granted until their CRDs are installed: {} (looked at again every {}s)",
                plan.waiting.join(", "),
                WAIT_POLL.as_secs()
            )
        });
        let waiting = waiting.unwrap_or_default();
        let (ok, reason, message) = match self.bind(e, ext).await? {
            Bound::Yes(sa) => (
                true,
                "RolesRendered",
                format!("Role {ns}/{role_name} bound to ServiceAccount {ns}/{sa}{waiting}"),
            ),
            Bound::NoController => (
                true,
                "RolesRendered",
                format!(
                    "Role {ns}/{role_name} rendered; the Extension runs no controller, so nothing is bound{waiting}"
                ),
            ),
            Bound::Missing(sa) => (
                false,
                WAITING_FOR_RUNTIME,
                format!(
                    "Role {ns}/{role_name} rendered, not bound yet: waiting for ServiceAccount {ns}/{sa}, which the package-manager creates for the Extension's controller (looked at again every {}s){waiting}",
                    WAIT_POLL.as_secs()
                ),
            ),
            Bound::NotControlled(sa) => (
                false,
                SERVICE_ACCOUNT_CONFLICT,
                format!(
                    "Role {ns}/{role_name} rendered but not bound: ServiceAccount {ns}/{sa} is not the Extension's (it has no controller ownerReference to this Extension); the role is bound only to the ServiceAccount the package-manager creates for the controller: delete that ServiceAccount, or name another one in the controller's pod template{waiting}"
                ),
            ),
        };
        let changed = self.set(e, ok, reason, &message).await?;
        if changed && reason == SERVICE_ACCOUNT_CONFLICT {
            self.sk
                .reporting
                .events
                .warning(&e.object_ref(&()), reason, message)
                .await;
        }
        let poll = !ok || !plan.waiting.is_empty();
        Ok(Action::requeue(if poll { WAIT_POLL } else { RESYNC }))
    }

    async fn cleanup(
        &self,
        e: &Arc<Extension>,
        _status: &mut Draft<Extension>,
    ) -> Result<Cleanup, Error> {
        let (ns, name, uid) = (
            e.namespace().unwrap_or_default(),
            e.name_any(),
            e.uid().unwrap_or_default(),
        );
        self.remove((&ns, &name, &uid)).await?;
        Ok(Cleanup::Done)
    }
}

/// Whether an Extension's role is bound, and to which ServiceAccount.
enum Bound {
    Yes(String),
    NoController,
    Missing(String),
    NotControlled(String),
}

impl Extensions {
    /// Writes RBACReady, only when it changed; says whether it did.
    async fn set(
        &self,
        e: &Extension,
        ok: bool,
        reason: &str,
        message: &str,
    ) -> Result<bool, Error> {
        write_rbac_ready(
            &Api::namespaced(self.sk.client().clone(), &e.namespace().unwrap_or_default()),
            e,
            (ok, reason, message),
            &self.field_manager,
        )
        .await
    }

    /// Binds the role to the Extension's own controller ServiceAccount (and
    /// marks that ServiceAccount as a package identity), or deletes both
    /// bindings when there is none to bind to.
    async fn bind(&self, e: &Extension, ext: (&str, &str, &str)) -> Result<Bound, Error> {
        let (ns, name, uid) = ext;
        let client = self.sk.client().clone();
        let bindings = Api::<RoleBinding>::namespaced(client.clone(), ns);
        let marks = Api::<ClusterRoleBinding>::all(client.clone());
        let binding_name = roles::extension_role_name(ns, name);
        let mark_name = roles::extension_identity_name(ns, name);
        let bound = match e.controller_service_account() {
            None => Bound::NoController,
            Some(sa) => {
                let meta = Api::<ServiceAccount>::namespaced(client.clone(), ns)
                    .get_metadata_opt(&sa)
                    .await
                    .map_err(|e| Error::Request("read the controller's ServiceAccount", e))?;
                match subjects::extension(uid, meta.as_ref().map(|m| &m.metadata)) {
                    ExtensionSubject::Bind => Bound::Yes(sa),
                    ExtensionSubject::Missing => Bound::Missing(sa),
                    ExtensionSubject::NotControlled => Bound::NotControlled(sa),
                }
            }
        };
        match &bound {
            Bound::Yes(sa) => {
                // The mark first: the controller never holds the Role
                // without the admission policy holding it.
                ssa::apply(
                    &marks,
                    &mark_name,
                    &roles::extension_identity(ext, sa),
                    &self.field_manager,
                )
                .await
                .map_err(|e| Error::Request("apply the Extension's identity binding", e))?;
                ssa::apply(
                    &bindings,
                    &binding_name,
                    &roles::extension_binding(ext, sa),
                    &self.field_manager,
                )
                .await
                .map_err(|e| Error::Request("apply the Extension's RoleBinding", e))?;
            }
            _ => {
                runtime::objects::delete(&bindings, &binding_name)
                    .await
                    .map_err(|e| Error::Request("delete the Extension's RoleBinding", e))?;
                runtime::objects::delete(&marks, &mark_name)
                    .await
                    .map_err(|e| Error::Request("delete the Extension's identity binding", e))?;
            }
        }
        Ok(bound)
    }

    /// Deletes the Extension `(namespace, name, uid)`'s binding, its mark
    /// and its role.
    async fn remove(&self, ext: (&str, &str, &str)) -> Result<(), Error> {
        let (ns, name, _) = ext;
        let client = self.sk.client().clone();
        let role_name = roles::extension_role_name(ns, name);
        runtime::objects::delete(
            &Api::<RoleBinding>::namespaced(client.clone(), ns),
            &role_name,
        )
        .await
        .map_err(|e| Error::Request("delete the Extension's RoleBinding", e))?;
        runtime::objects::delete(
            &Api::<ClusterRoleBinding>::all(client.clone()),
            &roles::extension_identity_name(ns, name),
        )
        .await
        .map_err(|e| Error::Request("delete the Extension's identity binding", e))?;
        runtime::objects::delete(&Api::<Role>::namespaced(client, ns), &role_name)
            .await
            .map_err(|e| Error::Request("delete the Extension's Role", e))?;
        self.drop_cluster_role(ext).await
    }

    /// Deletes the ClusterRole and ClusterRoleBinding an older rbac-manager
    /// gave the Extension `(namespace, name, uid)` (its rights were
    /// cluster-wide then), once per Extension and process.
    async fn drop_cluster_role(&self, (ns, name, uid): (&str, &str, &str)) -> Result<(), Error> {
        if self.dropped.lock().is_ok_and(|d| d.contains(uid)) {
            return Ok(());
        }
        let client = self.sk.client().clone();
        let legacy = roles::extension_role_name(ns, name);
        runtime::objects::delete(&Api::<ClusterRoleBinding>::all(client.clone()), &legacy)
            .await
            .map_err(|e| Error::Request("delete the Extension's old ClusterRoleBinding", e))?;
        runtime::objects::delete(&Api::<ClusterRole>::all(client), &legacy)
            .await
            .map_err(|e| Error::Request("delete the Extension's old ClusterRole", e))?;
        if let Ok(mut d) = self.dropped.lock() {
            d.insert(uid.to_owned());
        }
        Ok(())
    }

    /// What the API server says about each target: discovery of its group
    /// version gives the plural (one request per group version), the CRD
    /// `<plural>.<group>`'s metadata its owner. A kind served by something
    /// other than a CRD (an aggregated API) counts as missing.
    async fn look_up(&self, targets: &[Target]) -> Result<BTreeMap<Target, Found>, Error> {
        let client = self.sk.client();
        let crds = Api::<CustomResourceDefinition>::all(client.clone());
        let mut served: BTreeMap<String, Vec<_>> = BTreeMap::new();
        let mut found = BTreeMap::new();
        for t in targets {
            let gv = t.api_version();
            if !served.contains_key(&gv) {
                let resources = match client.list_api_group_resources(&gv).await {
                    Ok(list) => list.resources,
                    Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
                    Err(e) => {
                        return Err(Error::Request("discover the kinds an Extension names", e));
                    }
                };
                served.insert(gv.clone(), resources);
            }
            let plural = served
                .get(&gv)
                .and_then(|resources| kinds::plural_of(resources, &t.kind));
            let crd = match &plural {
                Some(p) => crds
                    .get_metadata_opt(&format!("{p}.{}", t.group))
                    .await
                    .map_err(|e| Error::Request("read the CRD of a kind an Extension names", e))?,
                None => None,
            };
            let what = match (plural, crd) {
                (Some(plural), Some(crd)) => Found::Crd {
                    plural,
                    owner: crd.annotations().get(OWNER_ANNOTATION).cloned(),
                },
                _ => Found::Missing,
            };
            found.insert(t.clone(), what);
        }
        Ok(found)
    }
}

/// The controller, ready to run.
pub fn controller(
    rt: &Runtime,
    allow_list: AllowList,
    metrics: RbacMetrics,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let ctrl = Controller::new(rt.api::<Extension>(), watcher::Config::default())
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(Extensions {
        sk: Skeleton::new(rt, CONTROLLER),
        field_manager: rt.field_manager(),
        allow_list,
        metrics,
        dropped: std::sync::Mutex::default(),
    });
    reconciler::run(ctrl, reconciler)
}
