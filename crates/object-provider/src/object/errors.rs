//! Why reconciling an Object failed; each message says what to fix.

use runtime::{
    events::{ReconcileError, error_chain},
    limits::NotAnswering,
    managed::{ConnectError, KindError, ManagedError, RequestFailed},
    reconciler::{CONTROL_REQUEST_FAILED, ControlError},
};

use crate::policy;

/// Why reconciling an Object failed; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The target could not be connected to: the ProviderConfig or its
    /// credentials Secret is missing or unreadable, or the kubeconfig is
    /// unusable (worded by [`super::context::WORDING`]).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The manifest is unusable.
    #[error("{0}")]
    InvalidManifest(String),
    /// The target does not serve the manifest's kind, or did not answer
    /// discovery.
    #[error(transparent)]
    Kind(#[from] KindError),
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
    /// A request to the target failed.
    #[error(transparent)]
    Target(#[from] RequestFailed),
    /// A request to the control cluster failed.
    #[error("failed to {0}")]
    Control(String, #[source] Box<kube::Error>),
    /// Serializing failed.
    #[error("failed to serialize")]
    Serialize(#[from] serde_json::Error),
    /// The target cluster did not answer in time (--remote-timeout).
    #[error(transparent)]
    NotAnswering(#[from] NotAnswering),
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

impl From<ControlError> for Error {
    fn from(e: ControlError) -> Self {
        Error::Control(e.what.to_owned(), e.source)
    }
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Connect(e) => e.category(),
            Error::InvalidManifest(_) => "InvalidManifest",
            Error::Kind(KindError::NotServed { .. }) => "KindNotServed",
            Error::Kind(KindError::Request(_)) | Error::Target(_) => "TargetRequestFailed",
            Error::ReferenceNotReady { .. } => "ReferenceNotResolved",
            Error::InvalidReference(..) => "InvalidReference",
            Error::Cycle(_) => "ReferenceCycle",
            Error::NotAllowed(_) => "NotAllowedByPolicy",
            Error::Control(..) => CONTROL_REQUEST_FAILED,
            Error::Serialize(_) => "CannotSerialize",
            Error::NotAnswering(_) => "TargetNotAnswering",
            Error::Redacted { category, .. } => category,
        }
    }

    fn is_conflict(&self) -> bool {
        match self {
            Error::Redacted { conflict, .. } => *conflict,
            other => runtime::events::is_conflict(other),
        }
    }

    /// A cluster that did not answer is probed at least every
    /// `limits::PROBE_CAP`: its objects are retried as often, so they follow
    /// within that time once it answers again.
    fn retry_within(&self) -> Option<std::time::Duration> {
        matches!(self, Error::NotAnswering(_)).then_some(runtime::limits::PROBE_CAP)
    }
}

impl ManagedError for Error {
    fn target_gone(&self) -> bool {
        matches!(self, Error::Connect(e) if e.target_gone())
    }

    fn nothing_made(&self) -> bool {
        self.unresolvable() || matches!(self, Error::Kind(KindError::NotServed { .. }))
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
            Error::Connect(ConnectError::OwnerNotFound {
                wording,
                owner: owner.to_owned(),
            })
        };
        let credentials_not_found = |secret: &str, owner: &str| {
            Error::Connect(ConnectError::SecretNotFound {
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
}
