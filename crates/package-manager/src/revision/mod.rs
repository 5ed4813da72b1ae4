//! The ProviderRevision controller: an Active revision installs its
//! package's CRDs (server-side apply, all or nothing: every CRD is dry-run
//! first) and, with `--package-runtime=Deployment`, runs the package's
//! runtime (a ServiceAccount, Deployment and Service rendered from its
//! runtime config). An Inactive revision stops its runtime and keeps a
//! non-controller reference on its CRDs. Deleting a revision removes its
//! runtime and the CRDs no other revision of the Provider delivers.
//!
//! CRD control moves within a Provider by revision number: a revision takes
//! a CRD from an older sibling and leaves one a newer sibling controls, so
//! an upgrade never reports a conflict with itself. A CRD controlled by
//! anything else is a conflict: nothing is written, Healthy=False names the
//! owner, and the revision looks again until the owner is gone.
//!
//! Rooms: this module decides (the reconcile, its conditions and errors);
//! [`establish`] installs the package's objects and says who controls one
//! that exists; [`runtime_objects`] renders, applies, reads the health of
//! and stops the runtime; [`dependencies`] resolves and releases the
//! package's dependencies.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{Pod, Service, ServiceAccount},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
    runtime::{
        Controller, WatchStreamExt, controller::Action, reflector::ObjectRef, reflector::Store,
        watcher,
    },
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
use types::{
    common::{Condition, TypedReference},
    pkg::{
        v1::{Provider, ProviderRevision, RevisionState},
        v1alpha1::ControllerConfig,
        v1beta1::{DeploymentRuntimeConfig, DeploymentRuntimeConfigSpec},
    },
};

mod dependencies;
mod establish;
mod runtime_objects;

use runtime_objects::provider_owner;

use crate::{
    PackageRuntime, convert, deps, labels,
    packages::{FetchError, Packages},
    render, usage,
};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "providerrevision";
/// Finalizer that holds a revision until its runtime and CRDs are gone.
pub const FINALIZER: &str = types::pkg::contract::finalizers::REVISION;
/// Healthy: the package's CRDs are installed and established.
pub const TYPE_HEALTHY: &str = types::pkg::contract::conditions::HEALTHY;
/// RuntimeHealthy: the package runtime runs (its Deployment is Available).
pub const TYPE_RUNTIME_HEALTHY: &str = types::pkg::contract::conditions::RUNTIME_HEALTHY;
/// The runtime config a revision uses when it names none.
pub const DEFAULT_RUNTIME_CONFIG: &str = "default";
/// How often a revision waiting on something the watches do not show
/// (pods, CRDs becoming established, a conflicting owner) looks again.
const WAIT_POLL: Duration = Duration::from_secs(3);
/// How often an unavailable runtime whose reasons stay the same is looked
/// at again.
const STEADY_POLL: Duration = Duration::from_secs(30);

/// Why reconciling a revision failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The package could not be read (the source names the package).
    #[error("{source}")]
    Package {
        /// The package reference.
        package: String,
        /// Why.
        #[source]
        source: FetchError,
    },
    /// The revision carries no digest annotation.
    #[error(
        "revision has no {} annotation; delete it and the Provider makes it again",
        labels::DIGEST
    )]
    NoDigest,
    /// A CRD belongs to someone else.
    #[error("{0}")]
    Conflict(String),
    /// The package is not made for the Crossplane version implemented here.
    #[error("{0}")]
    Constraint(String),
    /// The package's meta says something that cannot be read.
    #[error("{0}")]
    Meta(String),
    /// Dependencies are missing, incompatible or cyclic.
    #[error("{0}")]
    Dependencies(String),
    /// The API server refused a CRD of the package.
    #[error("the API server refuses CustomResourceDefinition {name} of the package: {message}")]
    InvalidCrd {
        /// The CRD.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// The runtime config is missing or of a kind the package manager
    /// cannot use.
    #[error("{0}")]
    RuntimeConfig(String),
    /// The runtime could not be rendered from the runtime config.
    #[error("cannot render the package runtime: {0}")]
    Render(String),
    /// A request for the revision's CRDs or runtime failed.
    #[error("failed to {0}")]
    Request(&'static str, #[source] kube::Error),
    /// Another request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The provider's certificates could not be made.
    #[error("cannot make the provider's TLS certificates: {0}")]
    Tls(#[from] crate::tls::Error),
}

impl From<crate::crds::DryRunError> for Error {
    fn from(e: crate::crds::DryRunError) -> Self {
        match e {
            crate::crds::DryRunError::Refused { name, message } => {
                Error::InvalidCrd { name, message }
            }
            crate::crds::DryRunError::Failed(e) => Error::Request("check a CRD (dry run)", e),
        }
    }
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Package { .. } | Error::NoDigest => "CannotReadPackage",
            Error::Conflict(_) => "ConflictingCustomResourceDefinition",
            Error::Dependencies(_) => "UnresolvedDependencies",
            Error::Constraint(_) => "IncompatibleCrossplaneVersion",
            Error::Meta(_) => "InvalidPackage",
            Error::InvalidCrd { .. } => "CannotEstablishPackageObjects",
            Error::RuntimeConfig(_) | Error::Render(_) | Error::Tls(_) => "CannotRunPackageRuntime",
            Error::Request(..) => "CannotEstablishPackageObjects",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            // The owner going away, a registry coming back and a runtime
            // config being created are noticed within this bound.
            Error::Conflict(_) | Error::RuntimeConfig(_) | Error::Dependencies(_) => {
                Some(Duration::from_secs(10))
            }
            Error::Package { source, .. } if source.is_transient() => Some(Duration::from_secs(30)),
            _ => None,
        }
    }
}

/// Settings of the revision controller.
#[derive(Clone)]
pub struct Settings {
    /// Where runtimes run (the package manager's namespace).
    pub namespace: String,
    /// Deployment or External.
    pub mode: PackageRuntime,
    /// Honour runtimeConfigRef (true) or the deprecated
    /// controllerConfigRef (false).
    pub enable_runtime_config: bool,
    /// How often a healthy revision is looked at again.
    pub resync: Duration,
    /// Whether a runtime config may make a runtime break the Pod Security
    /// Standard "restricted" (host access, privilege, root): the
    /// operator's explicit choice, off by default.
    pub allow_unrestricted_runtimes: bool,
}

/// The revision controller's reconciler.
pub struct Revisions {
    sk: Skeleton,
    field_manager: String,
    packages: Packages,
    settings: Settings,
    revisions: Store<ProviderRevision>,
    deployments: Store<Deployment>,
    providers: Store<Provider>,
    /// What was last applied for a revision's runtime (a hash), so an
    /// unchanged runtime is not written again.
    applied: Expiring<String, u64>,
    /// The Providers' certificates.
    certificates: crate::tls::Certificates,
}

/// What is wrong with an unhealthy revision, as its conditions say.
pub fn unhealthy_message(r: &ProviderRevision) -> Option<String> {
    let conds = conditions::of(r);
    [TYPE_HEALTHY, TYPE_RUNTIME_HEALTHY]
        .iter()
        .filter_map(|t| conditions::get(conds, t))
        .find(|c| c.status != "True")
        .map(|c| {
            format!(
                "revision {}: {}",
                r.name_any(),
                c.message
                    .clone()
                    .or_else(|| c.reason.clone())
                    .unwrap_or_default()
            )
        })
}

fn set(
    status: &mut Draft<ProviderRevision>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: Option<String>,
) {
    conditions::set(
        &mut status.conditions,
        conditions::custom(type_, ok, reason, message),
        &conditions::now(),
    );
}

/// Healthy=False with the error's message.
fn unhealthy(status: &mut Draft<ProviderRevision>, reason: &str, e: &Error) {
    set(
        status,
        TYPE_HEALTHY,
        false,
        reason,
        Some(runtime::events::error_chain(e)),
    );
}

fn condition_true(status: &Draft<ProviderRevision>, type_: &str) -> bool {
    conditions::get(&status.conditions, type_).is_some_and(|c: &Condition| c.status == "True")
}

impl Reconciler for Revisions {
    type Object = ProviderRevision;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    async fn ready(&self) -> bool {
        cache_ready(&self.revisions).await
            && cache_ready(&self.deployments).await
            && cache_ready(&self.providers).await
    }

    async fn apply(
        &self,
        r: &Arc<ProviderRevision>,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Action, Error> {
        if r.spec.desired_state != RevisionState::Active {
            self.stop_runtime(r).await?;
            set(
                status,
                TYPE_RUNTIME_HEALTHY,
                false,
                "InactivePackageRevision",
                Some("the revision is inactive: its runtime is stopped".into()),
            );
            return Ok(Action::requeue(self.settings.resync));
        }
        let contents = match self.package(r).await {
            Ok(c) => c,
            Err(e) => {
                let keep = matches!(&e, Error::Package { source, .. } if source.is_transient())
                    && condition_true(status, TYPE_HEALTHY);
                if !keep {
                    unhealthy(status, "UnhealthyPackageRevision", &e);
                }
                return Err(e);
            }
        };
        if r.spec.ignore_crossplane_constraints != Some(true)
            && let Some(constraint) = &contents.meta.crossplane_version
            && let Err(why) = deps::crossplane_admits(constraint)
        {
            let e = Error::Constraint(why);
            unhealthy(status, "IncompatibleCrossplaneVersion", &e);
            return Err(e);
        }
        // What the package asks for its runtime, for the rbac-manager.
        match permission_requests(&contents.meta.raw) {
            Ok(rules) => status.permission_requests = rules,
            Err(e) => {
                unhealthy(status, "InvalidPackage", &e);
                return Err(e);
            }
        }
        if r.spec.skip_dependency_resolution != Some(true)
            && !contents.meta.depends_on.is_empty()
            && let Err(e) = self
                .dependencies(r, &contents.meta.depends_on, status)
                .await
        {
            unhealthy(status, "UnresolvedDependencies", &e);
            return Err(e);
        }
        let provider = r.labels().get(labels::PACKAGE).cloned().unwrap_or_default();
        let config = match self.settings.mode {
            PackageRuntime::Deployment => Some(self.runtime_config(r).await),
            PackageRuntime::External => None,
        };
        let service = match &config {
            Some(Ok((c, _))) => render::service_name(c, &provider),
            _ => provider.clone(),
        };
        let webhooks = contents
            .objects
            .iter()
            .any(crate::crds::converts_by_webhook)
            || !contents.webhooks.is_empty();
        // Certificates for a runtime, and for the API server to call its
        // webhooks (whoever runs it).
        let tls = if r.spec.image.is_some() || webhooks {
            let owner = provider_owner(r);
            match self
                .certificates
                .ensure(
                    &provider,
                    &service,
                    &self.settings.namespace,
                    owner.as_ref(),
                )
                .await
            {
                Ok(bundle) => Some(bundle),
                Err(e) => {
                    let e = Error::Tls(e);
                    unhealthy(status, "UnhealthyPackageRevision", &e);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let webhook_target = tls.as_deref().map(|bundle| crate::crds::WebhookTarget {
            service: &service,
            namespace: &self.settings.namespace,
            ca_bundle: bundle,
        });
        match self
            .install(r, &contents, webhook_target.as_ref(), status)
            .await
        {
            Ok(Some(action)) => return Ok(action),
            Ok(None) => {}
            Err(e) => {
                unhealthy(status, "UnhealthyPackageRevision", &e);
                return Err(e);
            }
        }
        match self.settings.mode {
            PackageRuntime::External => {
                set(
                    status,
                    TYPE_RUNTIME_HEALTHY,
                    true,
                    types::pkg::contract::conditions::EXTERNAL_RUNTIME,
                    Some("the runtime is left to an external controller (--package-runtime=External)".into()),
                );
                Ok(Action::requeue(self.settings.resync))
            }
            PackageRuntime::Deployment => match self
                .run_runtime(r, config, tls.is_some(), webhooks, status)
                .await
            {
                Ok(action) => Ok(action),
                Err(e) => {
                    set(
                        status,
                        TYPE_RUNTIME_HEALTHY,
                        false,
                        "UnhealthyRuntime",
                        Some(runtime::events::error_chain(&e)),
                    );
                    Err(e)
                }
            },
        }
    }

    async fn cleanup(
        &self,
        r: &Arc<ProviderRevision>,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Cleanup, Error> {
        self.stop_runtime(r).await?;
        let crds = self.crds_api();
        let uid = r.uid().unwrap_or_default();
        let mut waiting = Vec::new();
        for name in r.crd_names() {
            let Some(live) = crds
                .get_opt(&name)
                .await
                .map_err(|e| Error::Request("read a CRD", e))?
            else {
                continue;
            };
            let refs = live.owner_references();
            if !refs.iter().any(|o| o.uid == uid) {
                continue;
            }
            let others: Vec<OwnerReference> = refs
                .iter()
                .filter(|o| o.uid != uid && o.kind == "ProviderRevision" && self.exists(&o.name))
                .cloned()
                .map(|mut o| {
                    o.controller = Some(false);
                    o
                })
                .collect();
            if !others.is_empty() {
                // Another revision of the Provider still delivers it: only
                // this revision's reference goes. Guarded by the
                // resourceVersion, so two revisions letting go at once
                // cannot both leave (and orphan the CRD): the second looks
                // again and deletes it.
                let patch = serde_json::json!({
                    "metadata": {
                        "resourceVersion": live.resource_version(),
                        "ownerReferences": others,
                    },
                });
                crds.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| Error::Request("release a CRD", e))?;
                continue;
            }
            let users = usage::custom_resources(self.sk.client(), std::slice::from_ref(&name))
                .await
                .map_err(|e| Error::Request("list custom resources", e))?;
            if let Some(users) = users {
                waiting.push(users);
                continue;
            }
            runtime::objects::delete(&crds, &name)
                .await
                .map_err(|e| Error::Request("delete a CRD", e))?;
        }
        if waiting.is_empty() {
            self.release_dependencies(r).await?;
            self.applied.remove(&r.name_any());
            return Ok(Cleanup::Done);
        }
        set(
            status,
            TYPE_HEALTHY,
            false,
            "Deleting",
            Some(format!("{}; the CRDs go when they do", waiting.join("; "))),
        );
        Ok(Cleanup::Wait(Action::requeue(WAIT_POLL)))
    }

    /// `apply` set the conditions itself.
    fn failed(&self, _r: &ProviderRevision, _status: &mut Draft<ProviderRevision>, _message: &str) {
    }
}

impl Revisions {
    pub(super) fn crds_api(&self) -> Api<CustomResourceDefinition> {
        Api::all(self.sk.client().clone())
    }

    pub(super) fn exists(&self, revision: &str) -> bool {
        self.revisions.get(&ObjectRef::new(revision)).is_some()
    }

    /// Reads the revision's package (from the cache; the registry only
    /// when the cache lost it).
    pub(super) async fn package(&self, r: &ProviderRevision) -> Result<oci::xpkg::Contents, Error> {
        let digest = r
            .annotations()
            .get(labels::DIGEST)
            .and_then(|d| oci::Digest::parse(d))
            .ok_or(Error::NoDigest)?;
        let fetched = self
            .packages
            .fetch(&r.spec.package, &digest, &r.spec.package_pull_secrets)
            .await
            .map_err(|source| Error::Package {
                package: r.spec.package.clone(),
                source,
            })?;
        Ok(fetched.contents)
    }
}

/// The rules a package's meta asks for its runtime
/// (`spec.controller.permissionRequests`), or why they cannot be read.
fn permission_requests(
    meta: &serde_json::Value,
) -> Result<Vec<k8s_openapi::api::rbac::v1::PolicyRule>, Error> {
    match meta.pointer("/spec/controller/permissionRequests") {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            Error::Meta(format!(
                "spec.controller.permissionRequests of the package is not a list of RBAC rules: {e}"
            ))
        }),
    }
}

/// The revision controller, ready to run: it watches the runtime
/// Deployments it owns and wakes the revisions that use a runtime config
/// when it changes.
pub fn controller(
    rt: &Runtime,
    packages: Packages,
    settings: Settings,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    let (deployments, writer) = kube::runtime::reflector::store();
    let owned = watcher(
        Api::<Deployment>::namespaced(rt.client.clone(), &settings.namespace),
        watcher::Config::default().labels(labels::REVISION),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    let (providers, provider_writer) = kube::runtime::reflector::store();
    let provider_stream = watcher(
        Api::<Provider>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(provider_writer)
    .applied_objects();
    let ctrl = Controller::new(
        Api::<ProviderRevision>::all(rt.client.clone()),
        watcher::Config::default(),
    );
    let revisions = ctrl.store();
    let by_config = revisions.clone();
    let ctrl = ctrl
        .owns_stream(owned)
        .watches(
            Api::<DeploymentRuntimeConfig>::all(rt.client.clone()),
            watcher::Config::default(),
            move |config| {
                let name = config.name_any();
                by_config
                    .state()
                    .iter()
                    .filter(|r| {
                        r.spec
                            .runtime_config_ref
                            .as_ref()
                            .map_or(DEFAULT_RUNTIME_CONFIG, |c| c.name.as_str())
                            == name
                    })
                    .map(|r| ObjectRef::from_obj(r.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    // Providers are read for dependencies; their changes wake nobody here
    // (the Provider controller reconciles them), so the stream only feeds
    // the store.
    let providers_fed = {
        use futures::StreamExt as _;
        provider_stream.for_each(|_| futures::future::ready(()))
    };
    let reconciler = Arc::new(Revisions {
        sk: Skeleton::new(rt, CONTROLLER),
        field_manager: rt.field_manager(),
        packages,
        revisions,
        deployments,
        providers,
        applied: Expiring::new(Duration::from_secs(3600)),
        certificates: crate::tls::Certificates::new(
            rt.client.clone(),
            &settings.namespace,
            &rt.field_manager(),
        ),
        settings,
    });
    async move {
        tokio::select! {
            () = reconciler::run(ctrl, reconciler) => {}
            () = providers_fed => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn permission_requests_are_read_from_the_meta_or_named_as_unreadable() {
        let meta =
            |v: serde_json::Value| json!({"spec": {"controller": {"permissionRequests": v}}});
        let rules = permission_requests(&meta(json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
        ])))
        .unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get"]);
        assert!(
            permission_requests(&json!({"spec": {}}))
                .unwrap()
                .is_empty()
        );
        let why = permission_requests(&meta(json!("all of it")))
            .unwrap_err()
            .to_string();
        assert!(why.contains("not a list of RBAC rules"), "{why}");
    }
}
