//! The ProviderRevision controller of the rbac-manager: renders each
//! revision's ClusterRoles from the CRDs it installed ([`crate::roles`]),
//! binds the `system` role to the ServiceAccount its runtime Deployment runs
//! as while the revision is Active (an Inactive one keeps its roles and
//! loses the binding), and says so in the revision's `RBACReady` condition.
//! Roles and binding are controlled by the revision, so they go with it.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::{
    Api, ResourceExt,
    runtime::{Controller, WatchStreamExt, controller::Action, reflector::Store, watcher},
};
use runtime::{
    conditions,
    controller::{Runtime, cache_ready},
    events::ReconcileError,
    expiring::Expiring,
    reconciler::{
        self, CONTROL_REQUEST_FAILED, Cleanup, ControlError, Draft, Reconciler, Skeleton,
    },
    ssa,
};
use types::pkg::v1::{ProviderRevision, RevisionState};

use crate::roles;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "providerrevision";
/// Holds a revision until its roles and binding are gone.
pub const FINALIZER: &str = "rbac.crossplane.io/revision";
/// The revision's condition this controller owns.
pub const TYPE_RBAC_READY: &str = "RBACReady";
/// The label the package-manager puts on a revision's runtime objects.
const REVISION_LABEL: &str = "pkg.crossplane.io/revision";
/// The annotation the package-manager puts on a revision: the rules its
/// package asks for (JSON).
const PERMISSION_REQUESTS: &str = "pkg.crossplane.io/permission-requests";

/// Why rendering a revision's or an Extension's roles failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing a role or binding failed.
    #[error("failed to {0}")]
    Request(&'static str, #[source] kube::Error),
    /// The package asks for rules the allow-list does not allow, or its
    /// requests cannot be read; the message says which and what to do.
    #[error("{0}")]
    Refused(String),
    /// Another request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Request(..) => "CannotRenderRoles",
            Error::Refused(_) => "PermissionRequestRefused",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }
}

/// The reconciler.
pub struct Revisions {
    sk: Skeleton,
    field_manager: String,
    namespace: String,
    deployments: Store<Deployment>,
    /// The ClusterRole whose rules bound what packages may ask for.
    allowed_role: String,
    allow_list: Store<ClusterRole>,
    /// What was last applied for a revision (a hash), so an unchanged
    /// revision writes nothing.
    applied: Expiring<String, u64>,
    metrics: RbacMetrics,
}

/// The rbac-manager's own metrics.
#[derive(Clone)]
pub struct RbacMetrics {
    /// ClusterRoles written (created or changed).
    pub roles_rendered: prometheus::IntCounter,
    /// Reconciles that refused a package's permission requests.
    pub requests_refused: prometheus::IntCounter,
}

impl RbacMetrics {
    /// Registers them with the binary's registry.
    pub fn new(rt: &Runtime) -> Result<Self, prometheus::Error> {
        let roles_rendered = prometheus::IntCounter::new(
            "crossplane_rs_rbac_roles_rendered_total",
            "ClusterRoles the rbac-manager wrote (created or changed) for package revisions and Extensions.",
        )?;
        let requests_refused = prometheus::IntCounter::new(
            "crossplane_rs_rbac_permission_requests_refused_total",
            "Reconciles that refused a package's permission requests (outside the allow-list).",
        )?;
        rt.metrics
            .registry()
            .register(Box::new(roles_rendered.clone()))?;
        rt.metrics
            .registry()
            .register(Box::new(requests_refused.clone()))?;
        Ok(Self {
            roles_rendered,
            requests_refused,
        })
    }
}

impl Reconciler for Revisions {
    type Object = ProviderRevision;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn api(&self, _r: &ProviderRevision) -> Api<ProviderRevision> {
        Api::all(self.sk.client().clone())
    }

    /// Roles and binding are owned by the revision, but the revision also
    /// removes them itself on deletion, without waiting for garbage
    /// collection.
    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn ready(&self) -> bool {
        cache_ready(&self.deployments).await && cache_ready(&self.allow_list).await
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
        let kinds = roles::kinds_of(&r.crd_names());
        if kinds.is_empty() {
            // Nothing installed yet: the revision's status change wakes us.
            return Ok(Action::await_change());
        }
        let name = r.name_any();
        let uid = r.uid().unwrap_or_default();
        let requested = match self.check_requests(r) {
            Ok(requested) => requested,
            Err(why) => {
                // Nothing of this revision is created or widened.
                self.metrics.requests_refused.inc();
                self.condition(r, false, "PermissionRequestRefused", &why)
                    .await?;
                return Err(Error::Refused(why));
            }
        };
        let rendered = roles::provider_roles(&name, &uid, &kinds, &requested);
        let active = r.spec.desired_state == RevisionState::Active;
        let service_account = active
            .then(|| self.runtime_service_account(&name))
            .flatten();
        let binding = service_account
            .as_ref()
            .map(|sa| roles::system_binding(&name, &uid, sa, &self.namespace));
        let hash = hash_of(&rendered, binding.as_ref());
        if self.applied.get(&name) != Some(hash) {
            let api = Api::<ClusterRole>::all(self.sk.client().clone());
            for role in &rendered {
                let role_name = role
                    .pointer("/metadata/name")
                    .and_then(|n| n.as_str())
                    .unwrap_or_default();
                ssa::apply(&api, role_name, role, &self.field_manager)
                    .await
                    .map_err(|e| Error::Request("apply a ClusterRole", e))?;
                self.metrics.roles_rendered.inc();
            }
            let bindings = Api::<ClusterRoleBinding>::all(self.sk.client().clone());
            let binding_name = roles::role_name(&name, "system");
            match &binding {
                Some(b) => {
                    ssa::apply(&bindings, &binding_name, b, &self.field_manager)
                        .await
                        .map_err(|e| Error::Request("apply the ClusterRoleBinding", e))?;
                }
                None => runtime::objects::delete(&bindings, &binding_name)
                    .await
                    .map_err(|e| Error::Request("delete the ClusterRoleBinding", e))?,
            }
            self.applied.insert(name.clone(), hash);
        }
        let message = match (&service_account, active) {
            (Some(sa), _) => format!(
                "{} roles rendered; the system role is bound to ServiceAccount {}/{sa}",
                rendered.len(),
                self.namespace
            ),
            (None, true) => format!(
                "{} roles rendered; no runtime Deployment to bind the system role to yet",
                rendered.len()
            ),
            (None, false) => format!(
                "{} roles rendered; the revision is inactive, so its runtime is not bound",
                rendered.len()
            ),
        };
        // An Active revision whose runtime is not bound yet is not ready:
        // the package-manager keeps the old revision serving until it is.
        let waiting = active && service_account.is_none() && expects_runtime(r);
        let reason = if waiting {
            "WaitingForRuntime"
        } else {
            "RolesRendered"
        };
        self.condition(r, !waiting, reason, &message).await?;
        Ok(Action::requeue(Duration::from_secs(3600)))
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
        let name = r.name_any();
        runtime::objects::delete(
            &Api::<ClusterRoleBinding>::all(self.sk.client().clone()),
            &roles::role_name(&name, "system"),
        )
        .await
        .map_err(|e| Error::Request("delete the ClusterRoleBinding", e))?;
        let api = Api::<ClusterRole>::all(self.sk.client().clone());
        for kind in ["system", "aggregate-to-edit", "aggregate-to-view"] {
            runtime::objects::delete(&api, &roles::role_name(&name, kind))
                .await
                .map_err(|e| Error::Request("delete a ClusterRole", e))?;
        }
        self.applied.remove(&name);
        Ok(Cleanup::Done)
    }
}

/// Whether the package-manager runs a Deployment for the revision (not
/// for a package without a runtime image, nor with
/// --package-runtime=External, which it says in RuntimeHealthy).
fn expects_runtime(r: &ProviderRevision) -> bool {
    let reason =
        conditions::get(conditions::of(r), "RuntimeHealthy").and_then(|c| c.reason.as_deref());
    r.spec.image.is_some() && !matches!(reason, Some("NoRuntime" | "ExternalRuntime"))
}

fn hash_of(roles: &[serde_json::Value], binding: Option<&serde_json::Value>) -> u64 {
    reconciler::value_hash(&serde_json::json!([roles, binding]))
}

impl Revisions {
    /// The ServiceAccount the revision's runtime Deployment runs as.
    fn runtime_service_account(&self, revision: &str) -> Option<String> {
        self.deployments
            .state()
            .iter()
            .find(|d| {
                d.labels()
                    .get(REVISION_LABEL)
                    .is_some_and(|v| v == revision)
            })
            .and_then(|d| d.spec.as_ref())
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.service_account_name.clone())
    }

    /// Writes RBACReady=True with `message`, only when it changed.
    /// The rules the revision's package asks for, if the allow-list allows
    /// them all; else what is refused and how to allow it.
    fn check_requests(&self, r: &ProviderRevision) -> Result<Vec<serde_json::Value>, String> {
        let Some(text) = r.annotations().get(PERMISSION_REQUESTS) else {
            return Ok(Vec::new());
        };
        let requested: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| {
            format!("the revision's {PERMISSION_REQUESTS} annotation is not a list of rules: {e}")
        })?;
        if requested.is_empty() {
            return Ok(requested);
        }
        let allowed: Vec<serde_json::Value> = self
            .allow_list
            .state()
            .iter()
            .find(|c| c.name_any() == self.allowed_role)
            .and_then(|c| c.rules.as_ref())
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(|r| serde_json::to_value(r).ok())
                    .collect()
            })
            .unwrap_or_default();
        let refused = roles::refused(&requested, &allowed);
        if refused.is_empty() {
            Ok(requested)
        } else {
            Err(format!(
                "the package asks for permissions the allow-list does not grant: {}; add them to ClusterRole {} (--allowed-permissions-clusterrole) to allow them",
                refused.join(", "),
                self.allowed_role
            ))
        }
    }

    /// Writes RBACReady with `message`, only when it changed.
    async fn condition(
        &self,
        r: &ProviderRevision,
        ok: bool,
        reason: &str,
        message: &str,
    ) -> Result<(), Error> {
        write_rbac_ready(
            &Api::<ProviderRevision>::all(self.sk.client().clone()),
            r,
            (ok, reason, message),
            &self.field_manager,
        )
        .await
    }
}

/// Writes an object's RBACReady condition (and only it: the package-manager
/// owns the rest of the status) as `(ok, reason, message)`, only when it
/// changed.
pub async fn write_rbac_ready<K>(
    api: &Api<K>,
    obj: &K,
    (ok, reason, message): (bool, &str, &str),
    field_manager: &str,
) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()>
        + types::common::Conditioned
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let status = if ok { "True" } else { "False" };
    let current = conditions::get(conditions::of(obj), TYPE_RBAC_READY);
    if current.is_some_and(|c| c.status == status && c.message.as_deref() == Some(message)) {
        return Ok(());
    }
    let mut conds = conditions::of(obj).to_vec();
    conditions::set(
        &mut conds,
        conditions::custom(TYPE_RBAC_READY, ok, reason, Some(message.to_owned())),
        &conditions::now(),
    );
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
    Ok(())
}

/// The controller, ready to run: it watches the runtime Deployments of
/// revisions (to bind their ServiceAccounts) and the allow-list ClusterRole
/// (a change looks at every revision again).
pub fn controller(
    rt: &Runtime,
    namespace: String,
    allowed_role: String,
    metrics: RbacMetrics,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let (allow_list, allow_writer) = kube::runtime::reflector::store();
    let allow_stream = watcher(
        Api::<ClusterRole>::all(rt.client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={allowed_role}")),
    )
    .default_backoff()
    .reflect(allow_writer)
    .touched_objects();
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
    let reconciler = Arc::new(Revisions {
        sk: Skeleton::new(rt, CONTROLLER),
        field_manager: rt.field_manager(),
        namespace,
        deployments,
        allowed_role,
        allow_list,
        applied: Expiring::new(Duration::from_secs(3600)),
        metrics,
    });
    reconciler::run(ctrl, reconciler)
}
