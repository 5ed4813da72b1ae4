//! What the revision controller works with: its settings, the reconciler's
//! state (caches, the runtime applier, certificates) and the conditions it
//! writes. The other rooms of [`super`] read it; it reads none of them.

use std::time::Duration;

use k8s_openapi::{
    api::apps::v1::Deployment,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};
use runtime::{
    conditions,
    expiring::Expiring,
    reconciler::{Draft, Skeleton},
};
use types::pkg::v1::{Provider, ProviderRevision};

use super::error::Error;
use crate::{args::PackageRuntime, labels, packages::Packages};

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
pub(super) const WAIT_POLL: Duration = Duration::from_secs(3);
/// How often an unavailable runtime whose reasons stay the same is looked
/// at again.
pub(super) const STEADY_POLL: Duration = Duration::from_secs(30);

/// Settings of the revision controller.
#[derive(Clone)]
pub struct Settings {
    /// Where runtimes run (--runtime-namespace).
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
    /// Whether a dependency may be moved to an older version
    /// (--enable-dependency-version-downgrades).
    pub allow_dependency_downgrades: bool,
    /// The ConfigMap (in `namespace`) whose `trusted_root.json` keyless
    /// signatures are checked with (--trusted-root).
    pub trusted_root: String,
}

/// The revision controller's reconciler.
pub struct ProviderRevisions {
    pub(super) sk: Skeleton,
    pub(super) field_manager: String,
    pub(super) packages: Packages,
    /// Verifies packages and runtime images as ImageConfigs require.
    pub(super) signatures: crate::signatures::Signatures,
    pub(super) settings: Settings,
    pub(super) revisions: Store<ProviderRevision>,
    pub(super) deployments: Store<Deployment>,
    pub(super) providers: Store<Provider>,
    /// Applies and stops the revisions' runtimes (an unchanged runtime is
    /// not written again).
    pub(super) runtimes: crate::package_runtime::apply::Runtimes,
    /// The Warning events said once per revision and reason.
    pub(super) warned: Expiring<String, ()>,
    /// The Providers' certificates.
    pub(super) certificates: crate::tls::Certificates,
    /// Every CRD's resourceVersion, and every MRD's version
    /// ([`crate::mrds::body::version`]), as their watches last saw them.
    pub(super) crds_known: crate::stacks::known::Known,
    pub(super) mrd_versions: runtime::controller::summaries::Summaries<Option<String>>,
    /// The DeploymentRuntimeConfigs, as their watch last saw them.
    pub(super) runtime_configs: Store<types::pkg::v1beta1::DeploymentRuntimeConfig>,
    /// What was last read or written of them ([`super::seen`]).
    pub(super) seen: super::seen::Seen,
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

pub(super) fn set(
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
pub(super) fn unhealthy(status: &mut Draft<ProviderRevision>, reason: &str, e: &Error) {
    set(
        status,
        TYPE_HEALTHY,
        false,
        reason,
        Some(runtime::events::error_chain(e)),
    );
}

/// A step of a reconcile whose failure makes the revision unhealthy.
pub(super) trait Unhealthy<T> {
    /// Healthy=False for `reason`, with the error's message, when this
    /// failed; the result unchanged.
    fn unhealthy(self, status: &mut Draft<ProviderRevision>, reason: &str) -> Result<T, Error>;
}

impl<T, E: Into<Error>> Unhealthy<T> for Result<T, E> {
    fn unhealthy(self, status: &mut Draft<ProviderRevision>, reason: &str) -> Result<T, Error> {
        self.map_err(|e| {
            let e = e.into();
            unhealthy(status, reason, &e);
            e
        })
    }
}

pub(super) fn condition_true(status: &Draft<ProviderRevision>, type_: &str) -> bool {
    conditions::is_true(&status.conditions, type_)
}

impl ProviderRevisions {
    pub(super) fn crds_api(&self) -> Api<CustomResourceDefinition> {
        Api::all(self.sk.client().clone())
    }

    pub(super) fn exists(&self, revision: &str) -> bool {
        self.revisions.get(&ObjectRef::new(revision)).is_some()
    }

    /// Reads the revision's package (from the cache; the registry only
    /// when the cache lost it).
    pub(super) async fn package(
        &self,
        r: &ProviderRevision,
    ) -> Result<crate::packages::Held<oci::xpkg::Contents>, Error> {
        let digest = r
            .annotations()
            .get(labels::DIGEST)
            .and_then(|d| oci::Digest::parse(d))
            .ok_or(Error::NoDigest)?;
        let fetched = self
            .packages
            .fetch(&r.spec.package, &digest, &r.spec.package_pull_secrets)
            .await
            .map_err(|e| Error::Package(e.into()))?;
        Ok(fetched.map(|p| p.contents))
    }
}

/// The revision's Provider as the controller of what outlives a revision
/// (certificates, Service, ServiceAccount). Not blocking the Provider's
/// deletion: they go after it.
pub(super) fn provider_owner(r: &ProviderRevision) -> Option<OwnerReference> {
    r.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "Provider")
        .cloned()
        .map(|mut o| {
            o.block_owner_deletion = None;
            o
        })
}
