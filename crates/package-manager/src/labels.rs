//! The labels and annotations the package manager writes.

/// On a revision and everything it makes: the Provider (package) it
/// belongs to.
pub const PACKAGE: &str = "pkg.crossplane.io/package";
/// On a runtime's pods: the Provider they run for (upstream's label, which
/// the runtime reads as `PROVIDER_NAME` and its Service selects).
pub const PROVIDER: &str = "pkg.crossplane.io/provider";
/// On a runtime's objects: the revision that made them.
pub const REVISION: &str = "pkg.crossplane.io/revision";
/// On a revision: the package reference (as the Provider spelt it) the
/// revision was made from.
pub const SOURCE: &str = "pkg.crossplane.io/source";
/// On a revision: the manifest digest of its package.
pub const DIGEST: &str = "pkg.crossplane.io/digest";
/// On a revision: the repositories its package depends on (spec.dependsOn),
/// comma-separated, so dependencies are worked out from installed packages.
pub const DEPENDENCIES: &str = "pkg.crossplane.io/dependencies";
/// On a Provider the package manager installed only as a dependency: it is
/// removed when no installed package depends on it any more.
pub const DEPENDENCY: &str = "pkg.crossplane.io/dependency";
/// On a revision: the extra rules its package asks for its runtime
/// (`spec.controller.permissionRequests` of the meta), as JSON, for the
/// rbac-manager to check against its allow-list.
pub const PERMISSION_REQUESTS: &str = "pkg.crossplane.io/permission-requests";

/// On a revision: the capabilities its package declares
/// (`spec.capabilities` of the meta), comma-separated, for the
/// rbac-manager (`SafeStart` grants reading CRDs).
pub const CAPABILITIES: &str = "pkg.crossplane.io/capabilities";
