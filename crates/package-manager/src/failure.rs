//! One vocabulary for what fails around a package, shared by the Provider,
//! revision and stack controllers: a package that cannot be read, a CRD the
//! API server refuses, a request about the package's objects that failed.
//! Each has one reason (the Warning event's reason and the error metric's
//! category) and one retry rule, whichever controller meets it; each
//! controller's own error enum embeds it.

use std::time::Duration;

use crate::{crds::DryRunError, packages::FetchError};

/// The package could not be read: its registry, its credentials, its
/// content.
pub const CANNOT_READ_PACKAGE: &str = "CannotReadPackage";
/// The package's objects (CRDs, runtime, roles' inputs) could not be made.
pub const CANNOT_ESTABLISH_PACKAGE_OBJECTS: &str = "CannotEstablishPackageObjects";

/// How soon a package that could not be read is looked at again when the
/// registry may come back or credentials may be given (a pull Secret is
/// read, not watched).
pub const FETCH_RETRY: Duration = Duration::from_secs(30);

/// What failed around a package.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// The package could not be read (the message names the package).
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The API server refused a CRD of the package.
    #[error("the API server refuses CustomResourceDefinition {name} of the package: {message}")]
    InvalidCrd {
        /// The CRD.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// A request about the package's objects failed.
    #[error("failed to {0}")]
    Request(&'static str, #[source] kube::Error),
}

impl PackageError {
    /// The reason a Warning event and the error metric give it.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Fetch(_) => CANNOT_READ_PACKAGE,
            Self::InvalidCrd { .. } | Self::Request(..) => CANNOT_ESTABLISH_PACKAGE_OBJECTS,
        }
    }

    /// How soon to look again, when sooner than the backoff: a registry
    /// that is down or slow, and credentials that are missing or refused,
    /// mend without any watched object changing.
    pub fn retry_within(&self) -> Option<Duration> {
        match self {
            Self::Fetch(f) if f.is_transient() || f.is_credentials() => Some(FETCH_RETRY),
            _ => None,
        }
    }

    /// Whether trying again later may succeed without anyone changing
    /// anything (the registry is down or slow).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Fetch(f) if f.is_transient())
    }
}

impl From<DryRunError> for PackageError {
    fn from(e: DryRunError) -> Self {
        match e {
            DryRunError::Refused { name, message } => Self::InvalidCrd { name, message },
            DryRunError::Failed(e) => Self::Request("check a CRD (dry run)", e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_found() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("gone", "NotFound")
                .with_code(404)
                .boxed(),
        )
    }

    #[test]
    fn a_package_that_cannot_be_read_is_one_reason_in_every_controller() {
        let e = PackageError::from(FetchError::PullSecret("Secret s is missing".into()));
        assert_eq!(e.reason(), CANNOT_READ_PACKAGE);
        // Missing credentials are looked at again soon: a Secret is read,
        // not watched.
        assert_eq!(e.retry_within(), Some(FETCH_RETRY));
        assert!(!e.is_transient());
    }

    #[test]
    fn a_refused_crd_and_a_failed_request_are_objects_not_established() {
        let refused = PackageError::from(DryRunError::Refused {
            name: "widgets.example.org".into(),
            message: "spec.versions: Required value".into(),
        });
        assert_eq!(refused.reason(), CANNOT_ESTABLISH_PACKAGE_OBJECTS);
        assert_eq!(
            refused.to_string(),
            "the API server refuses CustomResourceDefinition widgets.example.org of the package: spec.versions: Required value"
        );
        assert_eq!(refused.retry_within(), None);
        let failed = PackageError::from(DryRunError::Failed(not_found()));
        assert_eq!(failed.reason(), CANNOT_ESTABLISH_PACKAGE_OBJECTS);
        assert!(
            failed
                .to_string()
                .starts_with("failed to check a CRD (dry run)")
        );
    }
}
