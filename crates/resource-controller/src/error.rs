//! Why submitting (or removing) a KubernetesApplicationResource failed. Each
//! message says what to fix.

use runtime::{
    events::ReconcileError,
    limits::NotAnswering,
    managed::{ConnectError, KindError, ManagedError, RequestFailed},
    reconciler::{CONTROL_REQUEST_FAILED, ControlError},
};

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster could not be connected to: the KubernetesCluster or its
    /// connection Secret is missing or unreadable, or the kubeconfig is
    /// unusable (worded by [`crate::context::WORDING`]).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// Reading from the control cluster failed.
    #[error("failed to read {0} from the control cluster")]
    Read(String, #[source] kube::Error),
    /// The template is unusable.
    #[error("{0}")]
    InvalidTemplate(String),
    /// The remote cluster does not serve the template's kind, or did not
    /// answer discovery.
    #[error(transparent)]
    Kind(#[from] KindError),
    /// A Secret listed in spec.secrets does not exist locally.
    #[error(
        "Secret {0} listed in spec.secrets not found: create it, or remove it from spec.secrets"
    )]
    LocalSecretNotFound(String),
    /// A remote object exists that is not ours.
    #[error("{0}")]
    Conflict(String),
    /// The remote cluster refused or failed a request.
    #[error(transparent)]
    Remote(#[from] RequestFailed),
    /// A request to the control cluster (finalizer, status) failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Serializing failed.
    #[error("failed to serialize {0}")]
    Serialize(&'static str, #[source] serde_json::Error),
    /// The remote cluster did not answer in time (--remote-timeout).
    #[error(transparent)]
    NotAnswering(#[from] NotAnswering),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Connect(e) => e.category(),
            Error::Read(..) => "CannotReadLocalObject",
            Error::InvalidTemplate(_) => "InvalidTemplate",
            Error::Kind(KindError::NotServed { .. }) => "KindNotServed",
            Error::Kind(KindError::Request(_)) | Error::Remote(_) => "RemoteRequestFailed",
            Error::LocalSecretNotFound(_) => "SecretNotFound",
            Error::Conflict(_) => "RemoteObjectConflict",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
            Error::Serialize(..) => "CannotSerialize",
            Error::NotAnswering(_) => "ClusterNotAnswering",
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
    /// The cluster or its Secret is gone: the remote objects can never be
    /// reached again.
    fn target_gone(&self) -> bool {
        matches!(self, Error::Connect(e) if e.target_gone())
    }

    /// Nothing of that kind can exist there: nothing to remove.
    fn nothing_made(&self) -> bool {
        matches!(
            self,
            Error::InvalidTemplate(_) | Error::Kind(KindError::NotServed { .. })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_gone_cluster_orphans_at_once_and_only_a_bad_kind_made_nothing() {
        let gone = Error::Connect(ConnectError::SecretNotFound {
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
        let stalled = Error::NotAnswering(runtime::limits::NotAnswering {
            cluster: "KubernetesCluster ns/c".into(),
            why: "nothing came back within 10s".into(),
            skipped: true,
        });
        assert_eq!(stalled.retry_within(), Some(runtime::limits::PROBE_CAP));
        assert_eq!(Error::InvalidTemplate("x".into()).retry_within(), None);
    }
}
