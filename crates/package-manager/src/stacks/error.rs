//! Why a stack could not be installed or run: one enum for the two stack
//! controllers, each message saying what to fix.

use std::time::Duration;

use runtime::{events::ReconcileError, reconciler::ControlError};

use crate::packages::FetchError;

/// Why a stack could not be installed or run; each message says what to
/// fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request or Extension says something that cannot work.
    #[error("{0}")]
    Invalid(String),
    /// A package could not be read.
    #[error("{0}")]
    Package(#[from] FetchError),
    /// No package in the registry owns a CRD asked for (yet).
    #[error("{0}")]
    NotFound(String),
    /// More than one package owns a CRD asked for.
    #[error("{0}")]
    Ambiguous(String),
    /// Dependencies form a cycle.
    #[error("{0}")]
    Cycle(String),
    /// A CRD belongs to another Extension.
    #[error("{0}")]
    Conflict(String),
    /// The API server refused a CRD of the package.
    #[error("the API server refuses CustomResourceDefinition {name} of the stack: {message}")]
    InvalidCrd {
        /// The CRD.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// A request to the control cluster failed.
    #[error("failed to {0}")]
    Request(&'static str, #[source] kube::Error),
    /// A request made by the skeleton failed.
    #[error(transparent)]
    Control(#[from] ControlError),
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
            Error::Invalid(_) => "InvalidExtensionRequest",
            Error::Package(_) => "CannotReadPackage",
            Error::NotFound(_) | Error::Ambiguous(_) => "CannotResolvePackage",
            Error::Cycle(_) => "UnresolvedDependencies",
            Error::Conflict(_) => "ConflictingCustomResourceDefinition",
            Error::InvalidCrd { .. } | Error::Request(..) => "CannotEstablishPackageObjects",
            Error::Control(_) => runtime::reconciler::CONTROL_REQUEST_FAILED,
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            // A package pushed later, an owner going away and a registry
            // coming back are noticed within these bounds.
            Error::NotFound(_) => Some(Duration::from_secs(15)),
            Error::Conflict(_) => Some(Duration::from_secs(10)),
            // A registry coming back, or credentials (a Secret the
            // package manager reads, not a watched object) being given.
            Error::Package(p)
                if p.is_transient()
                    || matches!(
                        p,
                        FetchError::PullSecret(_)
                            | FetchError::Oci(oci::Error::Unauthorized { .. })
                    ) =>
            {
                Some(Duration::from_secs(30))
            }
            _ => None,
        }
    }
}
