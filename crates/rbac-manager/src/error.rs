//! The rbac-manager's reconcile error: why rendering a revision's or an
//! Extension's roles failed, shared by both controllers ([`crate::revisions`],
//! [`crate::extensions`]) and the RBACReady writer ([`crate::status`]).

use runtime::{
    events::ReconcileError,
    reconciler::{CONTROL_REQUEST_FAILED, ControlError},
};

/// Why rendering a revision's or an Extension's roles failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing a role or binding failed.
    #[error("failed to {0}")]
    Request(&'static str, #[source] kube::Error),
    /// The package asks for rules outside the boundary (the allow-list or
    /// the never-grantable list), names kinds it may not have, or its
    /// requests cannot be read; the message says which and what to do.
    #[error("{0}")]
    Refused(String),
    /// Another request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Request(..) => "CannotRenderRoles",
            Error::Refused(_) => "PermissionRequestRefused",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }
}
