//! How an upgrade moves the API server's webhook calls (conversion,
//! admission) from the old revision's runtime to the new one without a
//! failed call.
//!
//! The API server keeps its HTTP/1.1 connections to a webhook open and
//! reuses them, one pool per webhook client configuration, for as long as
//! calls keep coming: a Service that starts selecting the new runtime's pods
//! changes where *new* connections go, not the ones already open to the old
//! pod. When the old pod then stops, a call sent on a kept connection at the
//! moment the pod closes it fails (`EOF`): a POST is not retried. So the
//! calls must leave the old pod before it stops, which takes a new client
//! configuration:
//!
//! - The Provider's Service selects the pods of one revision, the serving
//!   one, and has two ports to the webhook ([`WEBHOOK_PORT`],
//!   [`WEBHOOK_ALT_PORT`]); its annotation [`ANNOTATION_WEBHOOK_PORT`] says
//!   which one the CRDs and webhook configurations point at.
//! - A newer revision whose runtime is available takes over: the Service
//!   selects its pods and the other port ([`decide`]). The next reconcile
//!   points the CRDs and webhook configurations at that port (the API server
//!   builds a new client, whose connections reach the new pods only, once
//!   the Service's endpoints list them alone), and only then is the runtime
//!   reported healthy, so that the old revision is deactivated and its pod
//!   stops with no call left on its connections.
//!
//! [`WEBHOOK_PORT`]: super::render::WEBHOOK_PORT
//! [`WEBHOOK_ALT_PORT`]: super::render::WEBHOOK_ALT_PORT
//! [`ANNOTATION_WEBHOOK_PORT`]: super::render::ANNOTATION_WEBHOOK_PORT

use k8s_openapi::api::core::v1::Service;

use super::render::{ANNOTATION_WEBHOOK_PORT, Serving, WEBHOOK_ALT_PORT, WEBHOOK_PORT};
use crate::labels;

/// What a Provider's Service shows of the hand-over: whether there is one,
/// the revision whose pods it selects (none: every revision's, as before
/// hand-overs) and the webhook port the API server is pointed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    /// Whether the Service exists.
    pub exists: bool,
    /// The serving revision.
    pub revision: Option<String>,
    /// The port the CRDs and webhook configurations name.
    pub port: i64,
}

impl Live {
    /// Read from the Service, if there is one yet.
    pub fn of(service: Option<&Service>) -> Self {
        let revision = service
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.selector.as_ref())
            .and_then(|s| s.get(labels::REVISION))
            .cloned();
        let port = service
            .and_then(|s| s.metadata.annotations.as_ref())
            .and_then(|a| a.get(ANNOTATION_WEBHOOK_PORT))
            .and_then(|p| p.parse().ok())
            .filter(|p| *p == WEBHOOK_ALT_PORT)
            .unwrap_or(WEBHOOK_PORT);
        Self {
            exists: service.is_some(),
            revision,
            port,
        }
    }
}

/// The other of the Service's two webhook ports.
pub fn other(port: i64) -> i64 {
    if port == WEBHOOK_ALT_PORT {
        WEBHOOK_PORT
    } else {
        WEBHOOK_ALT_PORT
    }
}

/// What a revision knows of another one of its Provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its `spec.revision`.
    pub number: i64,
    /// Whether it is Active.
    pub active: bool,
}

/// What the revision `me` (number `number`, its runtime `available` or not)
/// renders its Provider's Service with, given what the Service shows and
/// what `peer` says of the revision it serves. A revision takes over when
/// nobody serves (no Service yet, or a Service from before hand-overs), or
/// the serving revision is gone, inactive or older, and its own runtime is
/// available: the Service then selects it, on the other port. Otherwise
/// the Service stays as it is (`None`: a Service from before hand-overs,
/// selecting every revision's pods, until a runtime is available to take
/// over).
pub fn decide<'a>(
    live: &'a Live,
    me: &'a str,
    number: i64,
    available: bool,
    peer: impl FnOnce(&str) -> Option<Peer>,
) -> Option<Serving<'a>> {
    let Some(serving) = live.revision.as_deref() else {
        return if !live.exists {
            // A first install serves at once: nothing else could.
            Some(Serving {
                revision: me,
                port: live.port,
            })
        } else if available {
            Some(Serving {
                revision: me,
                port: other(live.port),
            })
        } else {
            None
        };
    };
    if serving == me {
        return Some(Serving {
            revision: me,
            port: live.port,
        });
    }
    let outdated = peer(serving).is_none_or(|p| !p.active || p.number < number);
    Some(if outdated && available {
        Serving {
            revision: me,
            port: other(live.port),
        }
    } else {
        Serving {
            revision: serving,
            port: live.port,
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn live(revision: Option<&str>, port: i64) -> Live {
        Live {
            exists: true,
            revision: revision.map(str::to_owned),
            port,
        }
    }

    fn serving(revision: &str, port: i64) -> Option<Serving<'_>> {
        Some(Serving { revision, port })
    }

    fn peer(number: i64, active: bool) -> Option<Peer> {
        Some(Peer { number, active })
    }

    #[test]
    fn a_new_revision_takes_over_only_once_its_runtime_is_available() {
        let l = live(Some("p-old"), WEBHOOK_PORT);
        let waiting = decide(&l, "p-new", 2, false, |_| peer(1, true));
        assert_eq!(waiting, serving("p-old", WEBHOOK_PORT));
        let taken = decide(&l, "p-new", 2, true, |_| peer(1, true));
        assert_eq!(taken, serving("p-new", WEBHOOK_ALT_PORT));
        // It keeps it, and the next upgrade moves to the first port again.
        let l = live(Some("p-new"), WEBHOOK_ALT_PORT);
        assert_eq!(
            decide(&l, "p-new", 2, true, |_| peer(1, true)),
            serving("p-new", WEBHOOK_ALT_PORT)
        );
        let next = decide(&l, "p-next", 3, true, |_| peer(2, true));
        assert_eq!(next, serving("p-next", WEBHOOK_PORT));
    }

    #[test]
    fn an_older_revision_never_takes_the_service_back_while_the_newer_serves() {
        let l = live(Some("p-new"), WEBHOOK_ALT_PORT);
        let kept = decide(&l, "p-old", 1, true, |_| peer(2, true));
        assert_eq!(kept, serving("p-new", WEBHOOK_ALT_PORT));
    }

    #[test]
    fn an_active_revision_takes_over_from_an_inactive_or_gone_one() {
        // A rollback: the newer revision was made Inactive by hand.
        let l = live(Some("p-new"), WEBHOOK_ALT_PORT);
        let back = decide(&l, "p-old", 1, true, |_| peer(2, false));
        assert_eq!(back, serving("p-old", WEBHOOK_PORT));
        let gone = decide(&l, "p-old", 1, true, |_| None);
        assert_eq!(gone, serving("p-old", WEBHOOK_PORT));
    }

    #[test]
    fn a_first_install_serves_at_once_and_a_service_from_before_moves_when_it_can() {
        let none = Live::of(None);
        assert!(!none.exists);
        assert_eq!(
            decide(&none, "p-1", 1, false, |_| None),
            serving("p-1", WEBHOOK_PORT)
        );
        let before = live(None, WEBHOOK_PORT);
        assert_eq!(decide(&before, "p-2", 2, false, |_| None), None);
        assert_eq!(
            decide(&before, "p-2", 2, true, |_| None),
            serving("p-2", WEBHOOK_ALT_PORT)
        );
    }

    #[test]
    fn the_port_is_read_from_the_annotation_and_anything_else_is_the_first() {
        let service = |port: &str| -> Service {
            serde_json::from_value(serde_json::json!({
                "metadata": {"annotations": {ANNOTATION_WEBHOOK_PORT: port}},
                "spec": {"selector": {labels::REVISION: "p-1"}},
            }))
            .unwrap()
        };
        assert_eq!(
            Live::of(Some(&service("9444"))),
            live(Some("p-1"), WEBHOOK_ALT_PORT)
        );
        for junk in ["9443", "22", "", "x"] {
            assert_eq!(Live::of(Some(&service(junk))).port, WEBHOOK_PORT, "{junk}");
        }
    }
}
