//! The ways reaching a managed object's target can fail, mapped once for
//! every remote controller: the event reason and metric category of each,
//! how soon it is worth trying again, and what it means to a deletion. A
//! controller's error embeds a [`RemoteFailure`] as one variant and keeps
//! its own words for it in a [`RemoteReasons`].

use std::time::Duration;

use crate::{
    events::ReconcileError,
    limits::{NotAnswering, PROBE_CAP},
};

use super::{ConnectError, KindError, RequestFailed};

/// The reason when the target does not serve the object's kind, the same
/// for every controller.
pub const KIND_NOT_SERVED: &str = "KindNotServed";

/// How one controller names a failed request and a cluster that did not
/// answer (event reason, metric category). The reasons of a failed connect
/// are the [`super::Reasons`] of its [`super::Wording`]: each
/// [`ConnectError`] carries them.
#[derive(Debug)]
pub struct RemoteReasons {
    /// The target refused or failed a request, or did not answer discovery:
    /// "RemoteRequestFailed".
    pub request_failed: &'static str,
    /// The target did not answer in time (--remote-timeout), or is only
    /// probed until it answers again: "ClusterNotAnswering".
    pub not_answering: &'static str,
}

/// Why the target of a managed object could not be reached, or did not do
/// what was asked. The message is the one of the failure it wraps, which
/// says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum RemoteFailure {
    /// The target could not be connected to: its owner or the owner's
    /// Secret is missing or unreadable, or the kubeconfig is unusable.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The target does not serve the object's kind, or did not answer
    /// discovery.
    #[error(transparent)]
    Kind(#[from] KindError),
    /// The target refused or failed a request.
    #[error(transparent)]
    Request(#[from] RequestFailed),
    /// The target did not answer in time (--remote-timeout), or is only
    /// probed until it answers again.
    #[error(transparent)]
    NotAnswering(#[from] NotAnswering),
}

impl RemoteFailure {
    /// The event reason and metric category, in the words of the
    /// controller whose `reasons` these are (a failed connect in those of
    /// its wording).
    pub fn category(&self, reasons: &RemoteReasons) -> &'static str {
        match self {
            RemoteFailure::Connect(e) => e.category(),
            RemoteFailure::Kind(KindError::NotServed { .. }) => KIND_NOT_SERVED,
            RemoteFailure::Kind(KindError::Request(_)) | RemoteFailure::Request(_) => {
                reasons.request_failed
            }
            RemoteFailure::NotAnswering(_) => reasons.not_answering,
        }
    }

    /// The longest a retry may wait. A cluster that did not answer is
    /// probed at least every [`PROBE_CAP`]: its objects are retried as
    /// often, so they follow within that time once it answers again. Any
    /// other failure: no bound beyond the backoff's own.
    pub fn retry_within(&self) -> Option<Duration> {
        matches!(self, RemoteFailure::NotAnswering(_)).then_some(PROBE_CAP)
    }

    /// The owner or its Secret is gone: the target can never be reached
    /// again, and its objects are left in place at once on deletion.
    pub fn target_gone(&self) -> bool {
        matches!(self, RemoteFailure::Connect(e) if e.target_gone())
    }

    /// The target does not serve the object's kind: nothing of it can have
    /// been made there, and a deletion has nothing to do.
    pub fn nothing_made(&self) -> bool {
        matches!(self, RemoteFailure::Kind(KindError::NotServed { .. }))
    }
}

/// For a controller's error whose variant `$error::$variant` holds a
/// [`RemoteFailure`], implements `From` of each failure that wraps, so `?`
/// (and [`crate::limits::Clusters::call`]) turns a [`ConnectError`],
/// [`KindError`], [`RequestFailed`] or [`NotAnswering`] straight into it:
/// `runtime::remote_failure_from!(Error::Remote);`.
#[macro_export]
macro_rules! remote_failure_from {
    ($error:ident :: $variant:ident) => {
        $crate::remote_failure_from!(@one $error::$variant, $crate::managed::ConnectError);
        $crate::remote_failure_from!(@one $error::$variant, $crate::managed::KindError);
        $crate::remote_failure_from!(@one $error::$variant, $crate::managed::RequestFailed);
        $crate::remote_failure_from!(@one $error::$variant, $crate::limits::NotAnswering);
    };
    (@one $error:ident :: $variant:ident, $failure:ty) => {
        impl ::std::convert::From<$failure> for $error {
            fn from(e: $failure) -> Self {
                $error::$variant($crate::managed::RemoteFailure::from(e))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managed::{Reasons, Wording};

    /// The resource-controller's words.
    static CLUSTER: Wording = Wording {
        owner: "KubernetesCluster",
        fix: "fix spec.clusterRef",
        secret: "connection Secret",
        connect: "to",
        read_from: " from the control cluster",
        reasons: Reasons {
            owner_not_found: "ClusterNotFound",
            secret_not_found: "ConnectionSecretNotFound",
            cannot_connect: "CannotConnectToCluster",
            cannot_read: "CannotReadLocalObject",
        },
    };
    const CLUSTER_REASONS: RemoteReasons = RemoteReasons {
        request_failed: "RemoteRequestFailed",
        not_answering: "ClusterNotAnswering",
    };

    /// The object-provider's words.
    static TARGET: Wording = Wording {
        owner: "ProviderConfig",
        fix: "set spec.providerConfigRef.name",
        secret: "credentials Secret",
        connect: "with",
        read_from: "",
        reasons: Reasons {
            owner_not_found: "ProviderConfigNotFound",
            secret_not_found: "CredentialsNotFound",
            cannot_connect: "CannotConnectToTarget",
            cannot_read: crate::reconciler::CONTROL_REQUEST_FAILED,
        },
    };
    const TARGET_REASONS: RemoteReasons = RemoteReasons {
        request_failed: "TargetRequestFailed",
        not_answering: "TargetNotAnswering",
    };

    fn cause() -> kube::Error {
        kube::Error::LinesCodecMaxLineLengthExceeded
    }

    fn connect_failures(wording: &'static Wording) -> [RemoteFailure; 4] {
        [
            ConnectError::OwnerNotFound {
                wording,
                owner: "o".into(),
            },
            ConnectError::SecretNotFound {
                wording,
                secret: "ns/s".into(),
                owner: "o".into(),
            },
            ConnectError::Unusable {
                wording,
                owner: "o".into(),
                source: Box::new(crate::remote::RemoteError::MissingKey {
                    secret: "ns/s".into(),
                    key: "kubeconfig".into(),
                }),
            },
            ConnectError::Read {
                wording,
                what: "Secret ns/s".into(),
                source: Box::new(cause()),
            },
        ]
        .map(RemoteFailure::from)
    }

    fn request_failed() -> RequestFailed {
        RequestFailed::new("applying ConfigMap a/b".into(), "the cluster", "f", cause())
    }

    #[test]
    fn a_failed_connect_keeps_its_wordings_reason_and_only_a_missing_owner_or_secret_is_gone() {
        for (wording, reasons) in [(&CLUSTER, &CLUSTER_REASONS), (&TARGET, &TARGET_REASONS)] {
            let r = &wording.reasons;
            let expected = [
                (r.owner_not_found, true),
                (r.secret_not_found, true),
                (r.cannot_connect, false),
                (r.cannot_read, false),
            ];
            for (e, (reason, gone)) in connect_failures(wording).iter().zip(expected) {
                assert_eq!(e.category(reasons), reason, "{e}");
                assert_eq!(e.target_gone(), gone, "{e}");
                assert!(!e.nothing_made(), "{e}");
                assert_eq!(e.retry_within(), None, "{e}");
            }
        }
    }

    #[test]
    fn a_kind_not_served_is_kind_not_served_and_made_nothing() {
        let e = RemoteFailure::from(KindError::NotServed {
            cluster: "the cluster".into(),
            kind: "Widget".into(),
            api_version: "example.org/v1".into(),
            field: "spec.template",
            source: Box::new(cause()),
        });
        assert_eq!(e.category(&CLUSTER_REASONS), "KindNotServed");
        assert_eq!(e.category(&TARGET_REASONS), "KindNotServed");
        assert!(e.nothing_made() && !e.target_gone());
        assert_eq!(e.retry_within(), None);
    }

    #[test]
    fn a_failed_discovery_is_a_failed_request() {
        let e = RemoteFailure::from(KindError::from(request_failed()));
        assert_eq!(e.category(&CLUSTER_REASONS), "RemoteRequestFailed");
        assert_eq!(e.category(&TARGET_REASONS), "TargetRequestFailed");
        assert!(!e.nothing_made() && !e.target_gone());
        assert_eq!(e.retry_within(), None);
    }

    #[test]
    fn a_failed_request_is_the_controllers_request_failed() {
        let e = RemoteFailure::from(request_failed());
        assert_eq!(e.category(&CLUSTER_REASONS), "RemoteRequestFailed");
        assert_eq!(e.category(&TARGET_REASONS), "TargetRequestFailed");
        assert!(!e.nothing_made() && !e.target_gone());
        assert_eq!(e.retry_within(), None);
        assert!(
            e.to_string()
                .starts_with("applying ConfigMap a/b in the cluster failed")
        );
    }

    #[test]
    fn a_cluster_that_did_not_answer_is_retried_within_the_probe_cap() {
        let e = RemoteFailure::from(NotAnswering {
            cluster: "KubernetesCluster ns/c".into(),
            why: "nothing came back within 10s".into(),
            skipped: true,
        });
        assert_eq!(e.category(&CLUSTER_REASONS), "ClusterNotAnswering");
        assert_eq!(e.category(&TARGET_REASONS), "TargetNotAnswering");
        assert_eq!(e.retry_within(), Some(PROBE_CAP));
        assert!(!e.nothing_made() && !e.target_gone());
    }
}
