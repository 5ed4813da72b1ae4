//! The package API's contract between the package-manager and the
//! rbac-manager, spelt once: the labels and annotations the package-manager
//! writes on revisions and what it makes for them, the condition types
//! either binary writes and the other reads, and the questions both ask of
//! a revision. No binary spells these strings itself (a test in this crate
//! greps their sources).

use std::collections::BTreeMap;

use super::v1::{Provider, ProviderRevision, RevisionState};
use crate::common::Conditioned as _;

/// Every label and annotation key the package-manager owns starts so; a
/// Provider's common labels and annotations never replace one.
pub const KEY_PREFIX: &str = "pkg.crossplane.io/";

/// Labels.
pub mod labels {
    /// On a revision and everything it makes: the Provider (package) it
    /// belongs to.
    pub const PACKAGE: &str = "pkg.crossplane.io/package";
    /// On a runtime's pods: the Provider they run for (upstream's label,
    /// which the runtime reads as `PROVIDER_NAME` and its Service selects).
    pub const PROVIDER: &str = "pkg.crossplane.io/provider";
    /// On a runtime's Deployment and pods, and the rbac-manager's roles:
    /// the revision that made them.
    pub const REVISION: &str = "pkg.crossplane.io/revision";
    /// On a Provider the package-manager installed only as a dependency: it
    /// is removed when no installed package depends on it any more.
    pub const DEPENDENCY: &str = "pkg.crossplane.io/dependency";
}

/// Annotations of a revision.
pub mod annotations {
    /// The package reference (as the Provider spelt it) the revision was
    /// made from.
    pub const SOURCE: &str = "pkg.crossplane.io/source";
    /// The manifest digest of its package.
    pub const DIGEST: &str = "pkg.crossplane.io/digest";
    /// The repositories its package depends on (spec.dependsOn),
    /// comma-separated.
    pub const DEPENDENCIES: &str = "pkg.crossplane.io/dependencies";
    /// The capabilities its package declares (`spec.capabilities`),
    /// comma-separated.
    pub const CAPABILITIES: &str = "pkg.crossplane.io/capabilities";
    /// The version each dependency must have (`spec.dependsOn[].version`),
    /// as a JSON object repository → range or digest: what the other
    /// dependents of a dependency accept when it must move.
    pub const DEPENDENCY_VERSIONS: &str = "pkg.crossplane.io/dependency-versions";

    /// The entries of a comma-separated record ([`DEPENDENCIES`],
    /// [`CAPABILITIES`]), empty ones left out.
    pub fn entries(record: &str) -> Vec<String> {
        record
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// The package-manager's finalizers.
pub mod finalizers {
    /// Holds a Provider until its revisions are gone.
    pub const PROVIDER: &str = "pkg.crossplane.io/provider";
    /// Holds a revision until its runtime and CRDs are gone.
    pub const REVISION: &str = "pkg.crossplane.io/revision";
}

/// Condition types and the reasons another binary reads.
pub mod conditions {
    /// A Provider: its current revision is Healthy and active.
    pub const INSTALLED: &str = "Installed";
    /// A Provider or revision: the package's CRDs (and other objects) are
    /// installed and established.
    pub const HEALTHY: &str = "Healthy";
    /// A revision: its runtime runs (its Deployment is Available).
    pub const RUNTIME_HEALTHY: &str = "RuntimeHealthy";
    /// A revision (written by the rbac-manager): its roles are rendered and
    /// its runtime's ServiceAccount bound.
    pub const RBAC_READY: &str = "RBACReady";
    /// RBACReady's reasons when the rbac-manager refused the revision's
    /// roles (permission requests outside the boundary) or the
    /// ServiceAccount its runtime runs as: the runtime holds no role, so
    /// the revision cannot work.
    pub const RBAC_REFUSED: [&str; 2] = [PERMISSION_REQUEST_REFUSED, SERVICE_ACCOUNT_REFUSED];
    /// RBACReady's reason when a permission request is outside the boundary.
    pub const PERMISSION_REQUEST_REFUSED: &str = "PermissionRequestRefused";
    /// RBACReady's reason when the runtime runs as a ServiceAccount no
    /// package's role is bound to.
    pub const SERVICE_ACCOUNT_REFUSED: &str = "ServiceAccountRefused";
    /// RuntimeHealthy's reason when the runtime is left to an external
    /// controller (`--package-runtime=External`).
    pub const EXTERNAL_RUNTIME: &str = "ExternalRuntime";
}

impl ProviderRevision {
    fn condition(&self, type_: &str) -> Option<&crate::common::Condition> {
        self.status()
            .map(Self::conditions)
            .unwrap_or_default()
            .iter()
            .find(|c| c.type_ == type_)
    }

    /// Whether the revision's CRDs and runtime are healthy. A package of
    /// CRDs alone runs nothing: no runtime is needed, and none is claimed.
    pub fn healthy(&self) -> bool {
        let ok = |t| self.condition(t).is_some_and(|c| c.status == "True");
        ok(conditions::HEALTHY) && (ok(conditions::RUNTIME_HEALTHY) || self.spec.image.is_none())
    }

    /// Whether the rbac-manager has bound the revision's roles: RBACReady
    /// is True, or absent (no rbac-manager runs, nothing to wait for).
    pub fn rbac_ready(&self) -> bool {
        self.condition(conditions::RBAC_READY)
            .is_none_or(|c| c.status == "True")
    }

    /// Why the rbac-manager refused the revision's roles (RBACReady's
    /// message), when it did: its runtime holds no role.
    pub fn rbac_refused(&self) -> Option<&str> {
        self.condition(conditions::RBAC_READY)
            .filter(|c| {
                c.status == "False"
                    && conditions::RBAC_REFUSED.contains(&c.reason.as_deref().unwrap_or_default())
            })
            .map(|c| c.message.as_deref().unwrap_or_default())
    }

    /// Whether the package-manager runs a Deployment for the revision: it
    /// has a runtime image and the runtime is not left to an external
    /// controller.
    pub fn expects_runtime(&self) -> bool {
        self.spec.image.is_some()
            && self
                .condition(conditions::RUNTIME_HEALTHY)
                .and_then(|c| c.reason.as_deref())
                != Some(conditions::EXTERNAL_RUNTIME)
    }

    /// Whether the revision is the active one.
    pub fn is_active(&self) -> bool {
        self.spec.desired_state == RevisionState::Active
    }

    /// The Provider (package) the revision belongs to.
    pub fn package(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(labels::PACKAGE)
            .map(String::as_str)
    }

    /// Whether its package declares the SafeStart capability (matched as
    /// upstream does: letters and digits only, any case).
    pub fn safe_start(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::CAPABILITIES))
            .is_some_and(|c| {
                c.split(',').any(|c| {
                    c.chars()
                        .filter(char::is_ascii_alphanumeric)
                        .collect::<String>()
                        .eq_ignore_ascii_case("safestart")
                })
            })
    }

    /// The common labels its Provider puts on everything, without keys of
    /// the package-manager's own.
    pub fn common_labels(&self) -> BTreeMap<String, String> {
        common(self.spec.common_labels.as_ref())
    }

    /// The common annotations, likewise.
    pub fn common_annotations(&self) -> BTreeMap<String, String> {
        common(self.spec.common_annotations.as_ref())
    }
}

impl Provider {
    /// The common labels it puts on everything, without keys of the
    /// package-manager's own.
    pub fn common_labels(&self) -> BTreeMap<String, String> {
        common(self.spec.common_labels.as_ref())
    }

    /// The common annotations, likewise.
    pub fn common_annotations(&self) -> BTreeMap<String, String> {
        common(self.spec.common_annotations.as_ref())
    }
}

/// `m` without the package-manager's own keys.
pub fn common(m: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    m.into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with(KEY_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::common::Condition;

    fn revision(image: Option<&str>, conds: &[(&str, &str, &str)]) -> ProviderRevision {
        let mut r = ProviderRevision::new("r", Default::default());
        r.spec.image = image.map(str::to_owned);
        r.status = Some(super::super::v1::ProviderRevisionStatus {
            conditions: conds
                .iter()
                .map(|(t, s, reason)| Condition {
                    type_: (*t).to_owned(),
                    status: (*s).to_owned(),
                    reason: Some((*reason).to_owned()),
                    ..Condition::default()
                })
                .collect(),
            ..Default::default()
        });
        r
    }

    #[test]
    fn a_revision_without_a_runtime_is_healthy_on_its_crds_alone() {
        assert!(revision(None, &[("Healthy", "True", "")]).healthy());
        assert!(!revision(Some("img"), &[("Healthy", "True", "")]).healthy());
        assert!(
            revision(
                Some("img"),
                &[("Healthy", "True", ""), ("RuntimeHealthy", "True", "")]
            )
            .healthy()
        );
        assert!(!revision(None, &[("Healthy", "False", "")]).healthy());
    }

    #[test]
    fn an_external_runtime_or_none_is_not_expected() {
        assert!(revision(Some("img"), &[]).expects_runtime());
        assert!(!revision(None, &[]).expects_runtime());
        assert!(
            !revision(
                Some("img"),
                &[("RuntimeHealthy", "True", "ExternalRuntime")]
            )
            .expects_runtime()
        );
    }

    #[test]
    fn rbac_is_ready_unless_the_rbac_manager_says_otherwise() {
        assert!(revision(None, &[]).rbac_ready());
        assert!(!revision(None, &[("RBACReady", "False", "Refused")]).rbac_ready());
    }

    #[test]
    fn safe_start_is_matched_as_upstream_does() {
        let mut r = revision(None, &[]);
        for (caps, want) in [
            ("SafeStart", true),
            ("safe-start", true),
            ("Other,SAFE_START", true),
            ("Start", false),
            ("", false),
        ] {
            r.metadata.annotations = Some(BTreeMap::from([(
                annotations::CAPABILITIES.to_owned(),
                caps.to_owned(),
            )]));
            assert_eq!(r.safe_start(), want, "{caps}");
        }
    }

    #[test]
    fn common_keys_of_the_package_manager_are_dropped() {
        let m = BTreeMap::from([
            ("team".to_owned(), "a".to_owned()),
            ("pkg.crossplane.io/digest".to_owned(), "x".to_owned()),
        ]);
        assert_eq!(
            common(Some(&m)),
            BTreeMap::from([("team".to_owned(), "a".to_owned())])
        );
    }
}
