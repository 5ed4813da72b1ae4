//! Why reconciling an Object failed; each message says what to fix.

use runtime::{
    events::{ReconcileError, error_chain},
    managed::{ManagedError, RemoteFailure, RemoteReasons},
    reconciler::{CONTROL_REQUEST_FAILED, ControlError},
};

use crate::policy;

/// How this provider names a failed request to the target and a target
/// that did not answer.
pub const REASONS: RemoteReasons = RemoteReasons {
    request_failed: "TargetRequestFailed",
    not_answering: "TargetNotAnswering",
};

/// Why reconciling an Object failed; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The target could not be reached: the ProviderConfig or its
    /// credentials Secret is missing or unreadable, or the kubeconfig is
    /// unusable (worded by [`super::context::WORDING`]); it does not serve
    /// the manifest's kind; a request to it failed; or it did not answer in
    /// time (--remote-timeout).
    #[error(transparent)]
    Remote(#[from] RemoteFailure),
    /// The manifest is unusable.
    #[error("{0}")]
    InvalidManifest(String),
    /// A reference is not resolvable yet (its object or field is missing).
    #[error("reference {index} ({what}) cannot be resolved yet: {why}; waiting")]
    ReferenceNotReady {
        /// Position in spec.references.
        index: usize,
        /// The referenced object.
        what: String,
        /// Why.
        why: String,
    },
    /// A reference is malformed.
    #[error("reference {0}: {1}")]
    InvalidReference(usize, String),
    /// References form a cycle.
    #[error("reference cycle: {0}: remove one of these references")]
    Cycle(String),
    /// The policy forbids what is needed.
    #[error("{0}")]
    NotAllowed(String),
    /// spec.managementPolicies is a list this provider cannot reconcile
    /// (it does not observe); nothing is done until it is fixed.
    #[error("{0}")]
    InvalidPolicies(String),
    /// The ProviderConfig names credentials this provider does not use.
    #[error("{0}")]
    UnsupportedCredentials(String),
    /// A namespaced Object names something outside its namespace that its
    /// config does not let it reach: the field, and what it names.
    #[error(
        "{0} is outside namespace {1:?}: {2}; a namespaced Object reaches only its own namespace unless its ClusterProviderConfig says spec.reach: Cluster"
    )]
    OutsideNamespace(String, String, String),
    /// A request to the control cluster failed.
    #[error("failed to {0}")]
    Control(String, #[source] Box<kube::Error>),
    /// Serializing failed.
    #[error("failed to serialize")]
    Serialize(#[from] serde_json::Error),
    /// An error whose text held a value read from a Secret: the same error,
    /// with the value replaced, so it reaches no condition, event or log.
    #[error("{message}")]
    Redacted {
        /// The category of the original error.
        category: &'static str,
        /// The original error's text, redacted.
        message: String,
        /// Whether the original error was a lost race.
        conflict: bool,
    },
}

runtime::remote_failure_from!(Error::Remote);

impl From<ControlError> for Error {
    fn from(e: ControlError) -> Self {
        Error::Control(e.what.to_owned(), e.source)
    }
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Remote(e) => e.category(&REASONS),
            Error::InvalidManifest(_) => "InvalidManifest",
            Error::ReferenceNotReady { .. } => "ReferenceNotResolved",
            Error::InvalidReference(..) => "InvalidReference",
            Error::Cycle(_) => "ReferenceCycle",
            Error::NotAllowed(_) => "NotAllowedByPolicy",
            Error::InvalidPolicies(_) => "InvalidManagementPolicies",
            Error::UnsupportedCredentials(_) => "UnsupportedCredentials",
            Error::OutsideNamespace(..) => "OutsideNamespace",
            Error::Control(..) => CONTROL_REQUEST_FAILED,
            Error::Serialize(_) => "CannotSerialize",
            Error::Redacted { category, .. } => category,
        }
    }

    fn is_conflict(&self) -> bool {
        match self {
            Error::Redacted { conflict, .. } => *conflict,
            other => runtime::events::is_conflict(other),
        }
    }

    /// A target that did not answer: within [`runtime::limits::PROBE_CAP`]
    /// (see [`RemoteFailure::retry_within`]).
    fn retry_within(&self) -> Option<std::time::Duration> {
        match self {
            Error::Remote(e) => e.retry_within(),
            _ => None,
        }
    }
}

impl ManagedError for Error {
    fn target_gone(&self) -> bool {
        // Credentials this provider does not use reach nothing, like a
        // ProviderConfig that is gone.
        matches!(self, Error::Remote(e) if e.target_gone())
            || matches!(self, Error::UnsupportedCredentials(_))
    }

    fn nothing_made(&self) -> bool {
        self.unresolvable() || matches!(self, Error::Remote(e) if e.nothing_made())
    }
}

impl Error {
    /// This error, with any value read from a Secret cut out of its text.
    pub fn redacted(self, secrets: &policy::Redactions) -> Error {
        if secrets.is_empty() {
            return self;
        }
        let text = error_chain(&self);
        let message = secrets.text(&text);
        if message == text {
            return self;
        }
        Error::Redacted {
            category: self.category(),
            conflict: self.is_conflict(),
            message,
        }
    }

    /// The manifest cannot be worked out (as opposed to: the target could
    /// not be reached).
    pub fn unresolvable(&self) -> bool {
        matches!(
            self,
            Error::InvalidManifest(_)
                | Error::ReferenceNotReady { .. }
                | Error::Cycle(_)
                | Error::InvalidReference(..)
        )
    }

    /// A failed request to the control cluster.
    pub fn control(what: impl Into<String>, source: kube::Error) -> Error {
        Error::Control(what.into(), Box::new(source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::managed::{ConnectError, KindError, RequestFailed};

    #[test]
    fn a_redacted_error_keeps_its_category_and_loses_the_value() {
        let mut secrets = policy::Redactions::default();
        secrets.add(&serde_json::json!("s3cr3t"));
        let e = Error::InvalidManifest("bad value s3cr3t here".to_owned()).redacted(&secrets);
        assert_eq!(e.category(), "InvalidManifest");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }

    #[test]
    fn only_a_missing_config_or_secret_means_the_target_is_gone() {
        let wording = &super::super::context::WORDING;
        let config_not_found = |owner: &str| {
            Error::from(ConnectError::OwnerNotFound {
                wording,
                owner: owner.to_owned(),
            })
        };
        let credentials_not_found = |secret: &str, owner: &str| {
            Error::from(ConnectError::SecretNotFound {
                wording,
                secret: secret.to_owned(),
                owner: owner.to_owned(),
            })
        };
        assert!(config_not_found("a").target_gone());
        assert!(credentials_not_found("a", "b").target_gone());
        assert!(!Error::InvalidManifest("x".into()).target_gone());
        assert!(Error::Cycle("a → a".into()).nothing_made());
        assert!(!config_not_found("a").nothing_made());
    }

    #[test]
    fn remote_failures_keep_this_providers_reasons() {
        let cause = || kube::Error::LinesCodecMaxLineLengthExceeded;
        let failed = || RequestFailed::new("applying a".into(), "the target", "f", cause());
        let not_served = Error::from(KindError::NotServed {
            cluster: "the target".into(),
            kind: "Widget".into(),
            api_version: "example.org/v1".into(),
            field: "spec.forProvider.manifest",
            source: Box::new(cause()),
        });
        assert_eq!(not_served.category(), "KindNotServed");
        assert!(not_served.nothing_made() && !not_served.target_gone());
        let discovery = Error::from(KindError::from(failed()));
        assert_eq!(discovery.category(), "TargetRequestFailed");
        assert_eq!(Error::from(failed()).category(), "TargetRequestFailed");
        let stalled = Error::from(runtime::limits::NotAnswering {
            cluster: "ProviderConfig pc".into(),
            why: "nothing came back within 10s".into(),
            skipped: true,
        });
        assert_eq!(stalled.category(), "TargetNotAnswering");
        assert_eq!(stalled.retry_within(), Some(runtime::limits::PROBE_CAP));
        assert_eq!(Error::Cycle("a → a".into()).retry_within(), None);
    }
}
