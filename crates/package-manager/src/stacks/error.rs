//! Why a stack could not be installed or run: one enum for the two stack
//! controllers, each message saying what to fix.

use std::time::Duration;

use runtime::{events::ReconcileError, reconciler::ControlError};

use crate::failure::PackageError;

/// Why a stack could not be installed or run; each message says what to
/// fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request or Extension says something that cannot work.
    #[error("{0}")]
    Invalid(String),
    /// A package could not be read, a CRD of it was refused, or a request
    /// about its objects failed.
    #[error(transparent)]
    Package(#[from] PackageError),
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
    /// A request made by the skeleton failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl Error {
    /// A request to the control cluster about a stack's objects that failed.
    pub fn request(what: &'static str, e: kube::Error) -> Self {
        Self::Package(PackageError::Request(what, e))
    }
}

impl From<crate::packages::FetchError> for Error {
    fn from(e: crate::packages::FetchError) -> Self {
        Self::Package(e.into())
    }
}

impl From<crate::crds::DryRunError> for Error {
    fn from(e: crate::crds::DryRunError) -> Self {
        Self::Package(e.into())
    }
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Invalid(_) => "InvalidExtensionRequest",
            Error::Package(p) => p.reason(),
            Error::NotFound(_) | Error::Ambiguous(_) => "CannotResolvePackage",
            Error::Cycle(_) => "UnresolvedDependencies",
            Error::Conflict(_) => "ConflictingCustomResourceDefinition",
            Error::Control(_) => runtime::reconciler::CONTROL_REQUEST_FAILED,
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            // A package pushed later, an owner going away and a registry
            // coming back are noticed within these bounds.
            Error::NotFound(_) => Some(Duration::from_secs(15)),
            Error::Conflict(_) => Some(Duration::from_secs(10)),
            Error::Package(p) => p.retry_within(),
            _ => None,
        }
    }
}
