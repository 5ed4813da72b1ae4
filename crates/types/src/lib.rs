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
    pub mod conversion;
    pub mod v1alpha1;
    pub mod v1alpha2;
}

/// `kubernetes.m.crossplane.io`: the namespaced Objects of Crossplane v2.
pub mod kubernetes_m {
    pub mod v1alpha1;
}

/// `apiextensions.crossplane.io`: managed resource definitions and their
/// activation (Crossplane v2).
pub mod apiextensions {
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

/// How the cluster tells a package identity (a Provider's runtime, an
/// Extension's stack controller) from every other one: the rbac-manager
/// grants each such identity the verb [`package_identity::VERB`] on
/// [`package_identity::PACKAGE`] (in [`package_identity::GROUP`]) and
/// nothing can grant it [`package_identity::CONTROL_PLANE`] short of a
/// wildcard. The admission policy `deploy/` ships
/// (`crossplane-rs-package-identities`) asks the authorizer for both, so
/// it refuses a package identity's token Secrets and writes to the
/// controllers' objects without a list of names to keep up to date, and
/// leaves every other identity (cluster-admin holds both) as the cluster
/// has it.
pub mod package_identity {
    /// The API group of the marker (no API server serves it: RBAC rules
    /// may name any group). No package is ever granted anything in it.
    pub const GROUP: &str = "identity.crossplane-rs.io";
    /// Its resource.
    pub const RESOURCE: &str = "identities";
    /// Its verb.
    pub const VERB: &str = "mark";
    /// The name only package identities are granted.
    pub const PACKAGE: &str = "package";
    /// The name nobody is granted by name: only a wildcard reaches it, so
    /// holding it tells a cluster-admin from a package identity.
    pub const CONTROL_PLANE: &str = "control-plane";
    /// The ClusterRole `deploy/` ships that holds the marker, which the
    /// rbac-manager binds to each Extension's controller (a revision's
    /// `system` role carries the rule itself).
    pub const CLUSTER_ROLE: &str = "crossplane-rs:package-identity";
    /// The namespace Provider runtimes run in by default, apart from the
    /// controllers: their Deployments, ServiceAccounts, Services and
    /// certificate Secrets, and the pull Secrets their images need. No
    /// runtime may read a Secret there; elsewhere runtimes read and write
    /// Secrets and ConfigMaps (credentials, connection details), so the
    /// controllers' namespace stays where credentials live.
    pub const RUNTIME_NAMESPACE: &str = "crossplane-rs-runtimes";
}

/// `s` with every control character (C0, DEL and C1: an escape sequence
/// that retitles a terminal or moves its cursor, a newline that forges a
/// line) and every bidirectional override written as a Rust escape
/// (`\u{1b}`, `\n`), so text a package, a registry or a user wrote can be
/// shown in a condition, an event, a log line or a terminal as the
/// characters it is. Borrowed when there is nothing to escape.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    fn unsafe_char(c: char) -> bool {
        c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

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
pub const OWN_API_GROUPS: [&str; 5] = [
    "pkg.crossplane.io",
    "apiextensions.crossplane.io",
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
    fn control_characters_and_bidi_overrides_are_shown_escaped() {
        let cases = [
            (
                "plain text, unicode é and → stay",
                "plain text, unicode é and → stay",
            ),
            ("\u{1b}]0;pwned\u{7}", "\\u{1b}]0;pwned\\u{7}"),
            ("a\nforged line", "a\\nforged line"),
            ("\u{9b}31m C1 CSI", "\\u{9b}31m C1 CSI"),
            ("\u{202e}txt.exe", "\\u{202e}txt.exe"),
        ];
        for (input, want) in cases {
            assert_eq!(printable(input), want, "{input:?}");
        }
        assert!(matches!(printable("ok"), std::borrow::Cow::Borrowed(_)));
    }

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
