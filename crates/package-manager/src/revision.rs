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

/// How a CRD that exists relates to this revision.
enum Control {
    /// Nobody, this revision or an older sibling controls it: ours to apply.
    Ours,
    /// A newer revision of the same Provider controls it.
    Newer,
    /// Something else controls it; the message names it.
    Foreign(String),
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
    /// Resolves the package's dependencies, installing missing ones.
    async fn dependencies(
        &self,
        r: &ProviderRevision,
        declared: &[oci::xpkg::Dependency],
        status: &mut Draft<ProviderRevision>,
    ) -> Result<(), Error> {
        let revisions = self.revisions.state();
        let report = deps::resolve(
            self.sk.client(),
            &self.packages,
            &self.providers,
            &revisions,
            r,
            declared,
        )
        .await
        .map_err(|e| Error::Request("install a dependency", e))?;
        for name in &report.created {
            self.sk
                .reporting
                .events
                .normal(
                    &r.object_ref(&()),
                    "InstallDependency",
                    format!("installed Provider {name} as a dependency"),
                )
                .await;
        }
        let count = |n: usize| Some(i64::try_from(n).unwrap_or(i64::MAX));
        status.found_dependencies = count(report.found);
        status.installed_dependencies = count(report.installed);
        status.invalid_dependencies = count(report.problems.len());
        if report.problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Dependencies(report.problems.join("; ")))
        }
    }

    /// Removes the dependency Providers (installed by the package manager,
    /// not the user) that nothing depends on once this revision is gone.
    async fn release_dependencies(&self, r: &ProviderRevision) -> Result<(), Error> {
        let wanted = deps::dependencies_of(r);
        if wanted.is_empty() {
            return Ok(());
        }
        let providers = self.providers.state();
        let revisions: Vec<_> = self
            .revisions
            .state()
            .into_iter()
            .filter(|o| o.name_any() != r.name_any())
            .collect();
        let api = Api::<Provider>::all(self.sk.client().clone());
        for p in providers.iter().filter(|p| {
            p.labels()
                .get(labels::DEPENDENCY)
                .is_some_and(|v| v == "true")
                && wanted.contains(&oci::xpkg::repository_of(&p.spec.package))
                && p.metadata.deletion_timestamp.is_none()
        }) {
            if deps::depended_on(p, &providers, &revisions) {
                continue;
            }
            runtime::objects::delete(&api, &p.name_any())
                .await
                .map_err(|e| Error::Request("remove a dependency", e))?;
            self.sk
                .reporting
                .events
                .normal(
                    &r.object_ref(&()),
                    "RemoveDependency",
                    format!(
                        "removed Provider {}: no installed package depends on it",
                        p.name_any()
                    ),
                )
                .await;
        }
        Ok(())
    }

    fn crds_api(&self) -> Api<CustomResourceDefinition> {
        Api::all(self.sk.client().clone())
    }

    fn exists(&self, revision: &str) -> bool {
        self.revisions.get(&ObjectRef::new(revision)).is_some()
    }

    /// Reads the revision's package (from the cache; the registry only
    /// when the cache lost it).
    async fn package(&self, r: &ProviderRevision) -> Result<oci::xpkg::Contents, Error> {
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

    /// The Provider's other revisions, by name → revision number.
    fn siblings(&self, r: &ProviderRevision) -> BTreeMap<String, i64> {
        let package = r.labels().get(labels::PACKAGE).cloned();
        self.revisions
            .state()
            .iter()
            .filter(|o| {
                o.labels().get(labels::PACKAGE) == package.as_ref() && o.name_any() != r.name_any()
            })
            .map(|o| (o.name_any(), o.spec.revision))
            .collect()
    }

    fn control(
        &self,
        r: &ProviderRevision,
        siblings: &BTreeMap<String, i64>,
        live: &CustomResourceDefinition,
    ) -> Control {
        self.control_of(
            r,
            siblings,
            &format!("CustomResourceDefinition {}", live.name_any()),
            &live.metadata,
        )
    }

    /// How the object `what` (its `meta`) that exists relates to this
    /// revision: a package never takes over what it did not make.
    fn control_of(
        &self,
        r: &ProviderRevision,
        siblings: &BTreeMap<String, i64>,
        what: &str,
        meta: &kube::api::ObjectMeta,
    ) -> Control {
        let refs = meta.owner_references.as_deref().unwrap_or_default();
        let Some(owner) = refs.iter().find(|o| o.controller == Some(true)) else {
            // Uncontrolled: ours only when this revision or a sibling still
            // references it (a sibling let go of control on its way out).
            // A CRD nobody of this Provider references was made by someone
            // else (by hand, by Helm, by crossplane-rs's own crds/) and is
            // never taken over.
            let delivered = refs.iter().any(|o| {
                Some(&o.uid) == r.uid().as_ref()
                    || (o.kind == "ProviderRevision" && siblings.contains_key(&o.name))
            });
            return if delivered {
                Control::Ours
            } else {
                Control::Foreign(format!(
                    "{what} exists and was not installed by this Provider ({}); a package never takes over what it did not create: delete it, or remove it from the package",
                    crate::crds::maker_of(meta)
                ))
            };
        };
        if Some(&owner.uid) == r.uid().as_ref() {
            return Control::Ours;
        }
        if owner.kind == "ProviderRevision"
            && let Some(n) = siblings.get(&owner.name)
        {
            return if *n > r.spec.revision {
                Control::Newer
            } else {
                Control::Ours
            };
        }
        let provider = (owner.kind == "ProviderRevision")
            .then(|| self.revisions.get(&ObjectRef::new(&owner.name)))
            .flatten()
            .and_then(|o| o.labels().get(labels::PACKAGE).cloned());
        Control::Foreign(match provider {
            Some(p) => format!(
                "{what} is already controlled by ProviderRevision {} of Provider {p}; delete one of the two Providers",
                owner.name
            ),
            None => format!(
                "{what} is already controlled by {} {}; remove it or that owner first",
                owner.kind, owner.name
            ),
        })
    }

    /// Installs the package's CRDs. `Ok(Some(action))` when the revision
    /// must wait (a newer sibling took over, or CRDs are not established
    /// yet).
    async fn install(
        &self,
        r: &ProviderRevision,
        contents: &oci::xpkg::Contents,
        webhooks: Option<&crate::crds::WebhookTarget<'_>>,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Option<Action>, Error> {
        let objects = &contents.objects;
        let crds = self.crds_api();
        let siblings = self.siblings(r);
        // Nothing of a package installs when any of its CRDs or webhook
        // configurations may never be.
        let own = crate::webhooks::kinds(objects);
        if let Some(why) = objects
            .iter()
            .find_map(|o| crate::crds::refused(o, true))
            .or_else(|| {
                contents
                    .webhooks
                    .iter()
                    .find_map(|w| crate::webhooks::refused(w, &own))
            })
        {
            return Err(Error::Conflict(why));
        }
        let mut bodies = Vec::new();
        for object in objects {
            let name = object
                .pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_owned();
            let live = crds
                .get_opt(&name)
                .await
                .map_err(|e| Error::Request("read a CRD", e))?;
            if let Some(live) = &live {
                match self.control(r, &siblings, live) {
                    Control::Ours => {}
                    Control::Newer => {
                        // A newer revision took over: this one is on its way
                        // out; leave everything to it.
                        return Ok(Some(Action::requeue(self.settings.resync)));
                    }
                    Control::Foreign(message) => return Err(Error::Conflict(message)),
                }
            }
            let mut body = self.crd_body(r, object, live.as_ref(), &siblings);
            if let Some(target) = webhooks {
                crate::crds::point_conversion(&mut body, target);
            }
            // A CRD that already is what this revision would apply is not
            // written again.
            let current = live.filter(|l| {
                ssa::unchanged(l, &body) && !ssa::drops_owned(l, &body, &self.field_manager)
            });
            bodies.push((name, body, current));
        }
        // All or nothing: every CRD to write is checked by the API server
        // before any is written.
        crate::crds::dry_run(
            &crds,
            &self.field_manager,
            &bodies
                .iter()
                .filter(|b| b.2.is_none())
                .map(|(name, body, _)| (name.as_str(), body))
                .collect::<Vec<_>>(),
        )
        .await?;
        let mut pending = Vec::new();
        let mut refs = Vec::new();
        for (name, body, current) in bodies {
            let applied = match current {
                Some(live) => live,
                None => ssa::apply(&crds, &name, &body, &self.field_manager)
                    .await
                    .map_err(|e| Error::Request("apply a CRD", e))?,
            };
            if !crate::crds::established(&applied) {
                pending.push(name.clone());
            }
            refs.push(TypedReference {
                api_version: "apiextensions.k8s.io/v1".into(),
                kind: "CustomResourceDefinition".into(),
                name: name.clone(),
                uid: applied.uid(),
            });
        }
        status.object_refs = refs;
        if status.found_dependencies.is_none() {
            status.found_dependencies = Some(0);
            status.installed_dependencies = Some(0);
            status.invalid_dependencies = Some(0);
        }
        if !pending.is_empty() {
            set(
                status,
                TYPE_HEALTHY,
                false,
                "UnhealthyPackageRevision",
                Some(format!(
                    "waiting for CRDs to become established: {}",
                    pending.join(", ")
                )),
            );
            return Ok(Some(Action::requeue(Duration::from_secs(1))));
        }
        if let Some(target) = webhooks {
            for w in &contents.webhooks {
                match self.install_webhook(r, &siblings, w, target).await? {
                    Some(reference) => status.object_refs.push(reference),
                    // A newer revision took over.
                    None => return Ok(Some(Action::requeue(self.settings.resync))),
                }
            }
        }
        set(status, TYPE_HEALTHY, true, "HealthyPackageRevision", None);
        Ok(None)
    }

    /// Installs one of the package's webhook configurations, pointed at
    /// `target` and controlled by the revision. `None` when a newer
    /// revision of the Provider controls it.
    async fn install_webhook(
        &self,
        r: &ProviderRevision,
        siblings: &BTreeMap<String, i64>,
        object: &serde_json::Value,
        target: &crate::crds::WebhookTarget<'_>,
    ) -> Result<Option<TypedReference>, Error> {
        let kind = object
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        let name = object
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or_default();
        let resource = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            &format!("{}s", kind.to_lowercase()),
        );
        let api = Api::<kube::api::DynamicObject>::all_with(self.sk.client().clone(), &resource);
        let live = api
            .get_opt(name)
            .await
            .map_err(|e| Error::Request("read a webhook configuration", e))?;
        if let Some(live) = &live {
            match self.control_of(r, siblings, &format!("{kind} {name}"), &live.metadata) {
                Control::Ours => {}
                Control::Newer => return Ok(None),
                Control::Foreign(message) => return Err(Error::Conflict(message)),
            }
        }
        let mut owner = r
            .controller_owner_ref(&())
            .and_then(|o| serde_json::to_value(o).ok())
            .unwrap_or_default();
        if let Some(o) = owner.as_object_mut() {
            o.insert("blockOwnerDeletion".into(), true.into());
        }
        let mut labels = serde_json::Map::new();
        for (k, v) in r.common_labels() {
            labels.insert(k, v.into());
        }
        if let Some(p) = r.labels().get(labels::PACKAGE) {
            labels.insert(labels::PACKAGE.into(), p.clone().into());
        }
        let body = crate::webhooks::body(object, target, &owner, &labels);
        let applied = match live {
            Some(l)
                if ssa::unchanged(&l, &body)
                    && !ssa::drops_owned(&l, &body, &self.field_manager) =>
            {
                l
            }
            _ => ssa::apply(&api, name, &body, &self.field_manager)
                .await
                .map_err(|e| Error::Request("apply a webhook configuration", e))?,
        };
        Ok(Some(TypedReference {
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            uid: applied.uid(),
        }))
    }

    /// A CRD of the package as this revision applies it: controlled by the
    /// revision, referenced (not controlled) by its siblings that already
    /// reference it.
    fn crd_body(
        &self,
        r: &ProviderRevision,
        object: &serde_json::Value,
        live: Option<&CustomResourceDefinition>,
        siblings: &BTreeMap<String, i64>,
    ) -> serde_json::Value {
        let mut owners: Vec<OwnerReference> = live
            .map(|l| l.owner_references().to_vec())
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.kind == "ProviderRevision" && siblings.contains_key(&o.name))
            .map(|mut o| {
                o.controller = Some(false);
                o.block_owner_deletion = None;
                o
            })
            .collect();
        if let Some(mut own) = r.controller_owner_ref(&()) {
            own.block_owner_deletion = Some(true);
            owners.push(own);
        }
        let mut body = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": object.pointer("/metadata/name").cloned().unwrap_or_default(),
                "labels": object.pointer("/metadata/labels").cloned().unwrap_or_else(|| serde_json::json!({})),
                "ownerReferences": owners,
            },
            "spec": object.get("spec").cloned().unwrap_or_default(),
        });
        // The package's annotations, if it has any (an empty map would
        // never read back equal, so the CRD would be written every time).
        if let Some(a) = object
            .pointer("/metadata/annotations")
            .filter(|a| a.as_object().is_some_and(|a| !a.is_empty()))
            && let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut())
        {
            meta.insert("annotations".into(), a.clone());
        }
        if let Some(l) = body
            .pointer_mut("/metadata/labels")
            .and_then(|l| l.as_object_mut())
        {
            for (k, v) in r.common_labels() {
                l.entry(k).or_insert(v.into());
            }
            if let Some(p) = r.labels().get(labels::PACKAGE) {
                l.insert(labels::PACKAGE.into(), p.clone().into());
            }
        }
        let common_annotations = r.common_annotations();
        if !common_annotations.is_empty()
            && let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut())
        {
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| serde_json::json!({}));
            if let Some(a) = annotations.as_object_mut() {
                for (k, v) in common_annotations {
                    a.entry(k).or_insert(v.into());
                }
            }
        }
        body
    }

    /// The runtime config the revision's runtime is rendered from, and
    /// whether it came from a ControllerConfig (whose image wins).
    async fn runtime_config(
        &self,
        r: &ProviderRevision,
    ) -> Result<(DeploymentRuntimeConfigSpec, bool), Error> {
        if !self.settings.enable_runtime_config
            && let Some(cc) = &r.spec.controller_config_ref
        {
            let api = Api::<ControllerConfig>::all(self.sk.client().clone());
            let found = api
                .get_opt(&cc.name)
                .await
                .map_err(|e| Error::Request("read a ControllerConfig", e))?;
            let Some(found) = found else {
                return Err(Error::RuntimeConfig(format!(
                    "ControllerConfig {} (spec.controllerConfigRef) does not exist; create it or remove the reference",
                    cc.name
                )));
            };
            return Ok((convert::spec_from_controller_config(&found.spec), true));
        }
        if self.settings.enable_runtime_config && r.spec.controller_config_ref.is_some() {
            self.warn_once(
                r,
                "ControllerConfigIgnored",
                "spec.controllerConfigRef is ignored: the package manager runs with --enable-runtime-config=true; convert it with `package-manager convert controllerconfig` and use spec.runtimeConfigRef",
            )
            .await;
        }
        let (kind, api_version, name) = match &r.spec.runtime_config_ref {
            Some(c) => (
                c.kind
                    .clone()
                    .unwrap_or_else(|| "DeploymentRuntimeConfig".into()),
                c.api_version
                    .clone()
                    .unwrap_or_else(|| "pkg.crossplane.io/v1beta1".into()),
                c.name.clone(),
            ),
            None => (
                "DeploymentRuntimeConfig".into(),
                "pkg.crossplane.io/v1beta1".into(),
                DEFAULT_RUNTIME_CONFIG.into(),
            ),
        };
        let group_ok = api_version.split('/').next() == Some("pkg.crossplane.io");
        if kind != "DeploymentRuntimeConfig" || !group_ok {
            return Err(Error::RuntimeConfig(format!(
                "spec.runtimeConfigRef names {api_version} {kind} {name}, which --package-runtime=Deployment cannot use; name a pkg.crossplane.io DeploymentRuntimeConfig"
            )));
        }
        let api = Api::<DeploymentRuntimeConfig>::all(self.sk.client().clone());
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| Error::Request("read a DeploymentRuntimeConfig", e))?;
        match found {
            Some(c) => Ok((c.spec, false)),
            None => Err(Error::RuntimeConfig(format!(
                "DeploymentRuntimeConfig {name} (spec.runtimeConfigRef) does not exist; create it or name another"
            ))),
        }
    }

    async fn warn_once(&self, r: &ProviderRevision, reason: &str, note: &str) {
        let key = format!("{}/{reason}", r.name_any());
        if self.applied.get(&key).is_some() {
            return;
        }
        self.applied.insert(key, 0);
        self.sk
            .reporting
            .events
            .warning(&r.object_ref(&()), reason, note.to_owned())
            .await;
    }

    /// Renders and applies the runtime, then reports its health.
    async fn run_runtime(
        &self,
        r: &ProviderRevision,
        config: Option<Result<(DeploymentRuntimeConfigSpec, bool), Error>>,
        tls: bool,
        webhooks: bool,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Action, Error> {
        let Some(image) = r.spec.image.as_deref() else {
            // A package of CRDs alone has nothing to run, and no runtime
            // is claimed healthy.
            self.stop_runtime(r).await?;
            status
                .conditions
                .retain(|c| c.type_ != TYPE_RUNTIME_HEALTHY);
            return Ok(Action::requeue(self.settings.resync));
        };
        let (config, config_image_wins) = match config {
            Some(c) => c?,
            None => self.runtime_config(r).await?,
        };
        let provider = r.labels().get(labels::PACKAGE).cloned().unwrap_or_default();
        let secrets: Vec<String> = r
            .spec
            .package_pull_secrets
            .iter()
            .map(|s| s.name.clone())
            .collect();
        let uid = r.uid().unwrap_or_default();
        let name = r.name_any();
        let provider_owner = provider_owner(r).and_then(|o| serde_json::to_value(o).ok());
        let (_, server_secret, client_secret) = crate::tls::secret_names(&provider);
        let common_labels = r.common_labels();
        let common_annotations = r.common_annotations();
        let input = render::Input {
            revision: &name,
            revision_uid: &uid,
            provider: &provider,
            namespace: &self.settings.namespace,
            image,
            pull_policy: r.spec.package_pull_policy.as_deref(),
            pull_secrets: &secrets,
            config: &config,
            config_image_wins,
            provider_owner: provider_owner.as_ref(),
            tls: tls.then_some((server_secret.as_str(), client_secret.as_str())),
            webhooks,
            common_labels: &common_labels,
            common_annotations: &common_annotations,
        };
        let mut rendered = render::render(&input).map_err(|e| Error::Render(e.to_string()))?;
        if !self.settings.allow_unrestricted_runtimes {
            let pod = rendered
                .deployment
                .pointer("/spec/template/spec")
                .unwrap_or(&serde_json::Value::Null);
            let mut broken =
                crate::podsecurity::violations(pod, "spec.deploymentTemplate.spec.template.spec");
            // A runtime never borrows the identity of a controller of this
            // control plane (the rbac-manager's may escalate and bind).
            let field = |f: &str| pod.get(f).and_then(serde_json::Value::as_str);
            let account =
                types::pod_service_account(field("serviceAccountName"), field("serviceAccount"));
            if let Some(why) = types::borrowed_identity(&account) {
                broken.push(format!(
                    "serviceAccountTemplate.metadata.name: a runtime may not run as ServiceAccount {}/{account} ({why})",
                    self.settings.namespace
                ));
            }
            if !broken.is_empty() {
                return Err(Error::RuntimeConfig(format!(
                    "the runtime config would make the runtime break the Pod Security Standard \"restricted\" or borrow a controller's identity: {}; change the runtime config, or start the package-manager with --allow-unrestricted-runtimes true",
                    broken.join("; ")
                )));
            }
        }
        // Only the Deployment is the revision's: the Service and the
        // ServiceAccount are the Provider's, the same across revisions.
        label(&mut rendered.deployment, &name);
        let hash = runtime_hash(&rendered);
        let deployment_name = rendered
            .deployment
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or(&name)
            .to_owned();
        let live = self
            .deployments
            .get(&ObjectRef::new(&deployment_name).within(&self.settings.namespace));
        if self.applied.get(&name) != Some(hash) || live.is_none() {
            self.apply_runtime(&rendered).await?;
            self.applied.insert(name.clone(), hash);
        }
        self.runtime_health(r, live.as_deref(), &deployment_name, status)
            .await
    }

    async fn apply_runtime(&self, rendered: &render::Rendered) -> Result<(), Error> {
        let client = self.sk.client().clone();
        let ns = &self.settings.namespace;
        self.apply_one(
            &Api::<ServiceAccount>::namespaced(client.clone(), ns),
            &rendered.service_account,
            "apply the runtime's ServiceAccount",
        )
        .await?;
        self.apply_one(
            &Api::<Service>::namespaced(client.clone(), ns),
            &rendered.service,
            "apply the runtime's Service",
        )
        .await?;
        self.apply_one(
            &Api::<Deployment>::namespaced(client, ns),
            &rendered.deployment,
            "apply the runtime's Deployment",
        )
        .await
    }

    async fn apply_one<K>(
        &self,
        api: &Api<K>,
        object: &serde_json::Value,
        what: &'static str,
    ) -> Result<(), Error>
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let name = object
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or_default();
        ssa::apply(api, name, object, &self.field_manager)
            .await
            .map_err(|e| Error::Request(what, e))?;
        Ok(())
    }

    /// RuntimeHealthy from the Deployment's Available condition, naming the
    /// pods' waiting reasons while it is not.
    async fn runtime_health(
        &self,
        r: &ProviderRevision,
        live: Option<&Deployment>,
        deployment: &str,
        status: &mut Draft<ProviderRevision>,
    ) -> Result<Action, Error> {
        let available = live
            .and_then(|d| d.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Available"));
        if available.is_some_and(|c| c.status == "True") {
            set(status, TYPE_RUNTIME_HEALTHY, true, "HealthyRuntime", None);
            return Ok(Action::requeue(self.settings.resync));
        }
        let pods = Api::<Pod>::namespaced(self.sk.client().clone(), &self.settings.namespace)
            .list(&ListParams::default().labels(&format!("{}={}", labels::REVISION, r.name_any())))
            .await
            .map_err(|e| Error::Request("list the runtime's pods", e))?;
        let mut reasons = Vec::new();
        for p in &pods.items {
            let statuses = p.status.iter().flat_map(|s| {
                s.container_statuses
                    .iter()
                    .flatten()
                    .chain(s.init_container_statuses.iter().flatten())
            });
            for c in statuses {
                let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
                if let Some(w) =
                    waiting.filter(|w| w.reason.as_deref() != Some("ContainerCreating"))
                {
                    let mut line = format!(
                        "pod {} container {}: {}",
                        p.name_any(),
                        c.name,
                        w.reason.clone().unwrap_or_default()
                    );
                    if let Some(m) = &w.message {
                        line.push_str(&format!(" ({})", m.chars().take(200).collect::<String>()));
                    }
                    reasons.push(line);
                }
            }
        }
        let mut message = format!(
            "Deployment {}/{deployment} is not available",
            self.settings.namespace
        );
        if let Some(m) = available.and_then(|c| c.message.as_ref()) {
            message.push_str(&format!(": {m}"));
        }
        if !reasons.is_empty() {
            message.push_str(&format!("; {}", reasons.join("; ")));
        }
        // Pods are not watched: look again soon while the picture changes,
        // and seldom once it stays the same (an image that cannot be pulled
        // stays so until someone acts, which the watches see).
        let unchanged = r
            .status
            .as_ref()
            .and_then(|s| conditions::get(&s.conditions, TYPE_RUNTIME_HEALTHY))
            .is_some_and(|c| c.message.as_deref() == Some(message.as_str()));
        set(
            status,
            TYPE_RUNTIME_HEALTHY,
            false,
            "UnhealthyRuntime",
            Some(message),
        );
        Ok(Action::requeue(if unchanged {
            STEADY_POLL
        } else {
            WAIT_POLL
        }))
    }

    /// Deletes the runtime objects the revision owns (a ServiceAccount the
    /// runtime config named is the user's and stays).
    async fn stop_runtime(&self, r: &ProviderRevision) -> Result<(), Error> {
        let selector = format!("{}={}", labels::REVISION, r.name_any());
        let running = self
            .deployments
            .state()
            .iter()
            .any(|d| d.labels().get(labels::REVISION) == Some(&r.name_any()));
        if !running && self.applied.get(&r.name_any()).is_none() {
            return Ok(());
        }
        let client = self.sk.client().clone();
        let ns = &self.settings.namespace;
        let lp = ListParams::default().labels(&selector);
        let dp = DeleteParams::background();
        Api::<Deployment>::namespaced(client, ns)
            .delete_collection(&dp, &lp)
            .await
            .map_err(|e| Error::Request("delete the runtime's Deployment", e))?;
        self.applied.remove(&r.name_any());
        Ok(())
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

/// The revision's Provider as the controller of what outlives a revision
/// (certificates, Service, ServiceAccount). Not blocking the Provider's
/// deletion: they go after it.
fn provider_owner(r: &ProviderRevision) -> Option<OwnerReference> {
    r.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "Provider")
        .cloned()
        .map(|mut o| {
            o.block_owner_deletion = None;
            o
        })
}

/// Adds the revision label to an object the revision owns.
fn label(object: &mut serde_json::Value, revision: &str) {
    let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) else {
        return;
    };
    let labels = meta
        .entry("labels")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(l) = labels.as_object_mut() {
        l.insert(labels::REVISION.into(), revision.into());
    }
}

fn runtime_hash(rendered: &render::Rendered) -> u64 {
    reconciler::value_hash(&serde_json::json!([
        rendered.service_account,
        rendered.service,
        rendered.deployment,
    ]))
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
