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
    pub mod contract;
    mod image_config;
    mod runtime_config;
    pub mod v1;
    pub mod v1alpha1;
    /// `pkg.crossplane.io/v1beta1`: DeploymentRuntimeConfig (stored) and
    /// ImageConfig.
    pub mod v1beta1 {
        pub use super::image_config::*;
        pub use super::runtime_config::v1beta1::*;
    }
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

/// The ServiceAccount a pod spec runs as: `serviceAccountName`, else the
/// deprecated `serviceAccount`, else `default`, as the API server decides.
pub fn pod_service_account(name: Option<&str>, deprecated: Option<&str>) -> String {
    name.filter(|n| !n.is_empty())
        .or(deprecated.filter(|n| !n.is_empty()))
        .unwrap_or("default")
        .to_owned()
}

/// Why no package runtime may run as, or be granted to, ServiceAccount
/// `name` of the controllers' namespace: `default` (every pod without one
/// of its own runs as it) and the controllers' own ([`CONTROLLERS`]).
/// `None` when it may.
pub fn borrowed_identity(name: &str) -> Option<String> {
    if name == "default" {
        return Some("every pod without a ServiceAccount of its own runs as it".to_owned());
    }
    CONTROLLERS
        .contains(&name)
        .then(|| format!("it is the {name} controller's own"))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_runs_as_its_service_account_name_else_the_old_field_else_default() {
        assert_eq!(pod_service_account(Some("a"), Some("b")), "a");
        assert_eq!(pod_service_account(Some(""), Some("b")), "b");
        assert_eq!(pod_service_account(None, None), "default");
        assert_eq!(pod_service_account(Some(""), Some("")), "default");
    }

    #[test]
    fn no_runtime_borrows_default_or_a_controllers_service_account() {
        let cases: &[(&str, bool)] = &[
            ("provider-kubernetes-abc123", true),
            ("shared", true),
            ("default", false),
            ("scheduler", false),
            ("application-controller", false),
            ("resource-controller", false),
            ("object-provider", false),
            ("package-manager", false),
            ("rbac-manager", false),
        ];
        for (name, may) in cases {
            assert_eq!(borrowed_identity(name).is_none(), *may, "{name}");
        }
    }
}
