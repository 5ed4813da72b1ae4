//! The rbac-manager's own metrics, registered once and shared by the
//! revision and Extension controllers ([`crate::revisions`],
//! [`crate::extensions`]).

use runtime::controller::Runtime;

/// The rbac-manager's own metrics.
#[derive(Clone)]
pub struct RbacMetrics {
    /// ClusterRoles written (created or changed).
    pub roles_rendered: prometheus::IntCounter,
    /// Reconciles that refused a package's or an Extension's permissions.
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
            "Reconciles that refused a package's or an Extension's permissions (outside the allow-list, never grantable, or kinds it may not have).",
        )?;
        let roles_rendered = rt.metrics.register(roles_rendered)?;
        let requests_refused = rt.metrics.register(requests_refused)?;
        Ok(Self {
            roles_rendered,
            requests_refused,
        })
    }
}
