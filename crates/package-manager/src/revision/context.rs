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
/// How Healthy begins while CRDs are not established yet; the names follow.
pub(super) const PENDING: &str = "waiting for CRDs to become established: ";
/// How long a revision still waiting for its CRDs may hold a new list of
/// them before writing it ([`still_pending`]).
pub(super) const PENDING_WINDOW: Duration = Duration::from_secs(5);

/// Whether `after` says what `before` (as written) said, but for which
/// CRDs the revision still waits: a Provider of 100 CRDs is established
/// one CRD after another, and each new list was a write of the revision's
/// status and then of its Provider's (at 50 x 100, 866 and 699 in the
/// install, against 50 of each done).
pub(super) fn still_pending(
    before: &Draft<ProviderRevision>,
    after: &Draft<ProviderRevision>,
) -> bool {
    let waiting = |s: &Draft<ProviderRevision>| {
        s.conditions
            .iter()
            .find(|c| c.type_ == TYPE_HEALTHY && c.status == "False")
            .and_then(|c| c.message.clone())
            .filter(|m| m.starts_with(PENDING))
    };
    let (Some(was), Some(is)) = (waiting(before), waiting(after)) else {
        return false;
    };
    let mut same = after.clone();
    for c in same
        .conditions
        .iter_mut()
        .filter(|c| c.type_ == TYPE_HEALTHY)
    {
        c.message = Some(was.clone());
    }
    was != is && same == *before
}
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
    /// What the MRD controller in this process knows of each MRD's CRD:
    /// told when a revision serves one itself ([`super::deliver`]).
    pub(super) served: crate::mrds::Served,
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

    /// Whether the revision named `revision` exists and is not being
    /// deleted: it still delivers what it references. Of two revisions
    /// of a deleted Provider, neither counts on the other, so whichever
    /// lets go of a kind first deletes it.
    pub(super) fn stays(&self, revision: &str) -> bool {
        self.revisions
            .get(&ObjectRef::new(revision))
            .is_some_and(|r| r.metadata.deletion_timestamp.is_none())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(names: &str) -> Draft<ProviderRevision> {
        let mut s = Draft::<ProviderRevision>::default();
        set(
            &mut s,
            TYPE_HEALTHY,
            false,
            "UnhealthyPackageRevision",
            Some(format!("{PENDING}{names}")),
        );
        s
    }

    #[test]
    fn only_another_list_of_pending_crds_may_wait() {
        let two = waiting("a.example.org, b.example.org");
        let one = waiting("b.example.org");
        assert!(still_pending(&two, &one), "fewer pending: may wait");
        assert!(!still_pending(&two, &two), "nothing new");
        let mut healthy = two.clone();
        set(
            &mut healthy,
            TYPE_HEALTHY,
            true,
            "HealthyPackageRevision",
            None,
        );
        assert!(!still_pending(&two, &healthy), "Healthy: written at once");
        let mut more = one.clone();
        more.object_refs.push(Default::default());
        assert!(!still_pending(&two, &more), "something else changed too");
    }
}
