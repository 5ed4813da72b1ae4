//! The API of crossplane-rs: every CRD type, one module per group/version,
//! and the Kubernetes API types the binaries use, re-exported so that there is
//! one seam to Kubernetes types.

pub mod common;

/// `workload.crossplane.io`
pub mod workload {
    pub mod v1alpha1;
}

/// `compute.crossplane.io`
pub mod compute {
    pub mod v1alpha1;
}

/// `kubernetes.crossplane.io`
pub mod kubernetes {
    pub mod v1alpha1;
}

/// `extensions.crossplane.io`
pub mod extensions {
    pub mod v1alpha1;
}

/// `pkg.crossplane.io`
pub mod pkg {
    mod runtime_config;
    pub mod v1;
    pub mod v1alpha1;
    pub use runtime_config::v1beta1;
}

pub mod crds;

pub use k8s_openapi;
pub use kube;

/// The six controllers of this control plane: each is a binary of the
/// image and runs as a Deployment and a ServiceAccount of this name in
/// `deploy/`. No package runtime or stack controller ever runs as, or is
/// granted to, one of these ServiceAccounts.
pub const CONTROLLERS: [&str; 6] = [
    "scheduler",
    "application-controller",
    "resource-controller",
    "object-provider",
    "package-manager",
    "rbac-manager",
];

/// The API groups of the control plane itself (its `crds/`). No package
/// may install a CRD in them, and no package or Extension is ever granted
/// writes to them. `kubernetes.crossplane.io`, the Object provider's API,
/// is not one: like upstream's provider-kubernetes it may come as a
/// Provider package (where crds/ has not installed it already; an existing
/// CRD is never taken over).
pub const OWN_API_GROUPS: [&str; 4] = [
    "pkg.crossplane.io",
    "extensions.crossplane.io",
    "workload.crossplane.io",
    "compute.crossplane.io",
];

/// Whether `group` belongs to Kubernetes itself (the core group `""`,
/// `*.k8s.io`, `*.kubernetes.io`, and the unsuffixed built-in groups such
/// as `apps`, `batch`, `policy`, `autoscaling`) or to this project
/// ([`OWN_API_GROUPS`]): kinds a package can never own or be granted
/// because it installed them.
pub fn is_protected_group(group: &str) -> bool {
    const BUILT_IN: [&str; 5] = ["", "apps", "batch", "policy", "autoscaling"];
    BUILT_IN.contains(&group)
        || group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
        || OWN_API_GROUPS.contains(&group)
}
