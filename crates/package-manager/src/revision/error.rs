//! Why reconciling a revision failed: one variant per failed step, each
//! with its category (the Warning event's reason) and how soon to retry.

use std::time::Duration;

use runtime::{
    events::ReconcileError,
    reconciler::{CONTROL_REQUEST_FAILED, ControlError},
};

use crate::{
    failure::{CANNOT_READ_PACKAGE, PackageError},
    labels,
};

/// Why reconciling a revision failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The package could not be read, a CRD of it was refused, or a
    /// request about its objects failed.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// The revision carries no digest annotation.
    #[error(
        "revision has no {} annotation; delete it and the Provider makes it again",
        labels::DIGEST
    )]
    NoDigest,
    /// A CRD belongs to someone else.
    #[error("{0}")]
    Conflict(String),
    /// The package is not made for the Crossplane version implemented here.
    #[error("{0}")]
    Constraint(String),
    /// The package's meta says something that cannot be read.
    #[error("{0}")]
    Meta(String),
    /// Dependencies are missing, incompatible or cyclic.
    #[error("{0}")]
    Dependencies(String),
    /// The runtime config is missing or of a kind the package manager
    /// cannot use.
    #[error("{0}")]
    RuntimeConfig(String),
    /// The runtime could not be rendered from the runtime config.
    #[error("cannot render the package runtime: {0}")]
    Render(String),
    /// Another request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// An ImageConfig requires a signature that was not verified.
    #[error("{0}")]
    Verification(String),
    /// The provider's certificates could not be made.
    #[error("cannot make the provider's TLS certificates: {0}")]
    Tls(#[from] crate::tls::Error),
}

impl Error {
    /// A request about the revision's CRDs or runtime that failed.
    pub fn request(what: &'static str, e: kube::Error) -> Self {
        Self::Package(PackageError::Request(what, e))
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
            Error::Package(p) => p.reason(),
            Error::NoDigest => CANNOT_READ_PACKAGE,
            Error::Conflict(_) => "ConflictingCustomResourceDefinition",
            Error::Dependencies(_) => "UnresolvedDependencies",
            Error::Constraint(_) => "IncompatibleCrossplaneVersion",
            Error::Verification(_) => "SignatureVerificationFailed",
            Error::Meta(_) => "InvalidPackage",
            Error::RuntimeConfig(_) | Error::Render(_) | Error::Tls(_) => "CannotRunPackageRuntime",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            // The owner going away, a registry coming back and a runtime
            // config being created are noticed within this bound.
            Error::Conflict(_)
            | Error::RuntimeConfig(_)
            | Error::Dependencies(_)
            | Error::Verification(_) => Some(Duration::from_secs(10)),
            Error::Package(p) => p.retry_within(),
            _ => None,
        }
    }
}
