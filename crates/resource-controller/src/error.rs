//! Why submitting (or removing) a KubernetesApplicationResource failed. Each
//! message says what to fix.

use runtime::{
    events::ReconcileError,
    managed::{ManagedError, RemoteFailure, RemoteReasons},
    reconciler::{CONTROL_REQUEST_FAILED, ControlError},
};

/// How this controller names a failed request to a remote cluster and a
/// remote cluster that did not answer.
pub const REASONS: RemoteReasons = RemoteReasons {
    request_failed: "RemoteRequestFailed",
    not_answering: "ClusterNotAnswering",
};

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The remote cluster could not be reached: the KubernetesCluster or
    /// its connection Secret is missing or unreadable, or the kubeconfig is
    /// unusable (worded by [`crate::context::WORDING`]); it does not serve
    /// the template's kind; it refused or failed a request; or it did not
    /// answer in time (--remote-timeout).
    #[error(transparent)]
    Remote(#[from] RemoteFailure),
    /// Reading from the control cluster failed.
    #[error("failed to read {0} from the control cluster")]
    Read(String, #[source] kube::Error),
    /// The template is unusable.
    #[error("{0}")]
    InvalidTemplate(String),
    /// A Secret listed in spec.secrets does not exist locally.
    #[error(
        "Secret {0} listed in spec.secrets not found: create it, or remove it from spec.secrets"
    )]
    LocalSecretNotFound(String),
    /// spec.writeStrategy cannot be followed.
    #[error("{0}")]
    InvalidStrategy(String),
    /// A ReadOnly object does not exist in the remote cluster.
    #[error("{0}")]
    NotObserved(String),
    /// A remote object exists that is not ours.
    #[error("{0}")]
    Conflict(String),
    /// A request to the control cluster (finalizer, status) failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Serializing failed.
    #[error("failed to serialize {0}")]
    Serialize(&'static str, #[source] serde_json::Error),
}

runtime::remote_failure_from!(Error::Remote);

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Remote(e) => e.category(&REASONS),
            Error::Read(..) => "CannotReadLocalObject",
            Error::InvalidTemplate(_) => "InvalidTemplate",
            Error::LocalSecretNotFound(_) => "SecretNotFound",
            Error::Conflict(_) => "RemoteObjectConflict",
            Error::InvalidStrategy(_) => "InvalidWriteStrategy",
            Error::NotObserved(_) => "RemoteObjectNotFound",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
            Error::Serialize(..) => "CannotSerialize",
        }
    }

    /// A remote cluster that did not answer: within
    /// [`runtime::limits::PROBE_CAP`] (see [`RemoteFailure::retry_within`]).
    fn retry_within(&self) -> Option<std::time::Duration> {
        match self {
            Error::Remote(e) => e.retry_within(),
            _ => None,
        }
    }
}

impl ManagedError for Error {
    /// The cluster or its Secret is gone: the remote objects can never be
    /// reached again.
    fn target_gone(&self) -> bool {
        matches!(self, Error::Remote(e) if e.target_gone())
    }

    /// Nothing of that kind can exist there: nothing to remove.
    fn nothing_made(&self) -> bool {
        match self {
            Error::InvalidTemplate(_) => true,
            Error::Remote(e) => e.nothing_made(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::managed::{ConnectError, KindError, RequestFailed};

    #[test]
    fn only_a_gone_cluster_orphans_at_once_and_only_a_bad_kind_made_nothing() {
        let gone = Error::from(ConnectError::SecretNotFound {
            wording: &crate::context::WORDING,
            secret: "ns/s".into(),
            owner: "ns/c".into(),
        });
        assert!(gone.target_gone() && !gone.nothing_made());
        assert!(runtime::events::error_chain(&gone).contains("connection Secret ns/s"));
        let bad = Error::InvalidTemplate("spec.template has no kind".into());
        assert!(bad.nothing_made() && !bad.target_gone());
        let conflict = Error::Conflict("x".into());
        assert_eq!(conflict.category(), "RemoteObjectConflict");
        assert!(!conflict.target_gone() && !conflict.nothing_made());
    }

    #[test]
    fn a_cluster_that_did_not_answer_is_retried_within_the_probe_cap() {
        let stalled = Error::from(runtime::limits::NotAnswering {
            cluster: "KubernetesCluster ns/c".into(),
            why: "nothing came back within 10s".into(),
            skipped: true,
        });
        assert_eq!(stalled.retry_within(), Some(runtime::limits::PROBE_CAP));
        assert_eq!(Error::InvalidTemplate("x".into()).retry_within(), None);
    }

    #[test]
    fn remote_failures_keep_this_controllers_reasons() {
        let cause = || kube::Error::LinesCodecMaxLineLengthExceeded;
        let failed = || RequestFailed::new("applying a".into(), "the cluster", "f", cause());
        let not_served = Error::from(KindError::NotServed {
            cluster: "the cluster".into(),
            kind: "Widget".into(),
            api_version: "example.org/v1".into(),
            field: "spec.template",
            source: Box::new(cause()),
        });
        assert_eq!(not_served.category(), "KindNotServed");
        assert!(not_served.nothing_made() && !not_served.target_gone());
        let discovery = Error::from(KindError::from(failed()));
        assert_eq!(discovery.category(), "RemoteRequestFailed");
        assert_eq!(Error::from(failed()).category(), "RemoteRequestFailed");
        let stalled = Error::from(runtime::limits::NotAnswering {
            cluster: "KubernetesCluster ns/c".into(),
            why: "nothing came back within 10s".into(),
            skipped: false,
        });
        assert_eq!(stalled.category(), "ClusterNotAnswering");
        let gone = Error::from(ConnectError::OwnerNotFound {
            wording: &crate::context::WORDING,
            owner: "ns/c".into(),
        });
        assert_eq!(gone.category(), "ClusterNotFound");
    }
}
