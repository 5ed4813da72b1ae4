//! Why reconciling a Provider failed, and the Provider controller's
//! settings: what the rooms of [`super`] share.

use std::time::Duration;

use runtime::{
    events::ReconcileError,
    reconciler::{CONTROL_REQUEST_FAILED, ControlError},
};

use crate::failure::{CANNOT_READ_PACKAGE, PackageError};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "provider";
/// Finalizer that holds a Provider until its revisions are gone.
pub const FINALIZER: &str = types::pkg::contract::finalizers::PROVIDER;
/// How often a deleting Provider looks again.
pub const DELETE_POLL: Duration = Duration::from_secs(2);

/// Provider condition types.
pub const TYPE_INSTALLED: &str = types::pkg::contract::conditions::INSTALLED;
/// Healthy: the active revision and its runtime are healthy.
pub const TYPE_HEALTHY: &str = types::pkg::contract::conditions::HEALTHY;

/// Why reconciling a Provider failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The package could not be read or is not a valid package (the
    /// message names the package).
    #[error(transparent)]
    Package(#[from] PackageError),
    /// The pull policy forbids pulling and nothing was pulled before.
    #[error(
        "package {0} has never been pulled and spec.packagePullPolicy is Never; pull it once (IfNotPresent) or name it by digest"
    )]
    NeverPulled(String),
    /// A request about the Provider's revisions failed.
    #[error("failed to {0}")]
    Revisions(&'static str, #[source] kube::Error),
    /// Another request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Package(p) => p.reason(),
            Error::NeverPulled(_) => CANNOT_READ_PACKAGE,
            Error::Revisions(..) => "CannotManageRevisions",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            Error::Package(p) => p.retry_within(),
            _ => None,
        }
    }
}

/// Settings of the Provider controller.
#[derive(Clone)]
pub struct Settings {
    /// How often a package with packagePullPolicy Always is resolved again.
    pub pull_interval: Duration,
    /// How often a healthy Provider is looked at again.
    pub resync: Duration,
    /// Whether runtimes are Deployments the rbac-manager binds roles to:
    /// then an old revision serves until the new one's roles are bound.
    pub runtime_bound: bool,
}
