//! The managed-resource contract (crossplane-runtime's, in Rust): a
//! controller whose objects each stand for one object in a target cluster
//! implements [`External`] for that object, and the lifecycle here does the
//! rest the same way for every such controller: observe, then create or
//! update when the policies allow and something differs; on deletion,
//! delete and wait until the target confirms it gone, or leave the object
//! in place, with a Warning event, when the target can never be reached
//! again or has not answered for `--deletion-timeout`.
//!
//! The rooms beside the contract: [`Connector`] turns an owner's kubeconfig
//! Secret into a client and reads targets through their shared watch, else
//! with one GET; [`locate`] resolves a kind in the target and words the
//! fix-it hints of failed requests, so both controllers word them alike;
//! [`RemoteFailure`] is every way reaching a target fails, with its reason
//! (in each controller's [`RemoteReasons`]), its retry bound and what it
//! means to a deletion; [`AppliedMemory`] tells drift from change.

use std::time::Duration;

use kube::{Resource, runtime::controller::Action};
use serde_json::Value;

use crate::{
    events::{EventReporter, ReconcileError, error_chain},
    reconciler::Cleanup,
};

mod applied;
mod connector;
pub mod drift;
mod failure;
mod locate;

pub use applied::{AppliedMemory, project};
pub use connector::{
    ConnectError, Connector, Found, Known, Reasons, SecretKey, Wording, read_cached, read_through,
};
pub use failure::{KIND_NOT_SERVED, RemoteFailure, RemoteReasons};
pub use locate::{KindError, Located, RequestFailed, hint, locate, not_found};

/// How soon a deletion that is under way is looked at again if no watch
/// event arrives first (the target's watch normally wakes it at once).
pub const DELETE_RECHECK: Duration = Duration::from_secs(30);

/// What observing the external object found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    /// The external object exists.
    pub exists: bool,
    /// It is as desired: nothing to apply.
    pub up_to_date: bool,
    /// It differs although what this controller wants did not change since
    /// it last applied it: someone else changed it (drift).
    pub drifted: bool,
    /// The live object, as the target (or its watch cache) has it.
    pub live: Option<Value>,
}

impl Observation {
    /// The external object does not exist.
    pub fn absent() -> Self {
        Self::default()
    }
}

/// One managed object's external side. Each call is idempotent and returns
/// without waiting for the target to settle.
pub trait External: Send + Sync {
    /// Why a call failed.
    type Error: ManagedError;
    /// Looks at the external object.
    fn observe(&self) -> impl Future<Output = Result<Observation, Self::Error>> + Send;
    /// Creates it; answers the object as the target stored it.
    fn create(&self) -> impl Future<Output = Result<Value, Self::Error>> + Send;
    /// Brings it in line; answers the object as the target stored it.
    fn update(&self) -> impl Future<Output = Result<Value, Self::Error>> + Send;
    /// Deletes it: `Gone` when nothing is left, `InProgress` when the target
    /// accepted the deletion but still shows the object (finalizers).
    fn delete(&self) -> impl Future<Output = Result<Deletion, Self::Error>> + Send;
}

/// What a delete found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// Nothing is left.
    Gone,
    /// The target is still removing it.
    InProgress,
}

/// What the lifecycle needs to know about a failure.
pub trait ManagedError: ReconcileError {
    /// The target can never be reached again (its cluster, its config or
    /// its credentials are gone): deleting leaves the object in place at
    /// once rather than waiting.
    fn target_gone(&self) -> bool;
    /// Nothing can have been made from the object (its manifest cannot be
    /// worked out, or its kind is not served): deleting has nothing to do.
    fn nothing_made(&self) -> bool;
}

/// What the object's policies allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// Creating the external object.
    pub create: bool,
    /// Changing it.
    pub update: bool,
    /// Deleting it.
    pub delete: bool,
}

impl Allowed {
    /// Everything.
    pub const ALL: Allowed = Allowed {
        create: true,
        update: true,
        delete: true,
    };
}

/// What a sync did.
#[derive(Clone, Debug, PartialEq)]
pub enum Synced {
    /// Created; the live object.
    Created(Value),
    /// Changed; the live object, and whether it had drifted.
    Updated {
        /// The live object.
        live: Value,
        /// Someone else had changed it.
        drifted: bool,
    },
    /// Already as desired, or it differs and updating is not allowed: the
    /// live object.
    Observed(Value),
    /// It does not exist and creating it is not allowed.
    Missing,
}

impl Synced {
    /// The live object, if there is one.
    pub fn live(&self) -> Option<&Value> {
        match self {
            Synced::Created(l) | Synced::Updated { live: l, .. } | Synced::Observed(l) => Some(l),
            Synced::Missing => None,
        }
    }
}

/// Observes, then creates or updates as allowed.
pub async fn sync<E: External>(external: &E, allowed: Allowed) -> Result<Synced, E::Error> {
    let observed = external.observe().await?;
    match observed {
        Observation { exists: false, .. } if allowed.create => {
            Ok(Synced::Created(external.create().await?))
        }
        Observation { exists: false, .. } => Ok(Synced::Missing),
        Observation {
            up_to_date: false,
            drifted,
            ..
        } if allowed.update => Ok(Synced::Updated {
            live: external.update().await?,
            drifted,
        }),
        Observation { live, .. } => Ok(Synced::Observed(live.unwrap_or(Value::Null))),
    }
}

/// How a controller's deletions end.
#[derive(Clone, Debug)]
pub struct Lifecycle {
    /// How long a deletion keeps trying against a target that does not
    /// answer before it leaves the object in place (--deletion-timeout).
    pub deletion_timeout: Duration,
    /// Reason of the Warning event when an object is left in place.
    pub orphaned_reason: &'static str,
    /// What is left in place, as the event says it ("the managed object").
    pub what: &'static str,
}

impl Lifecycle {
    /// Removes the external side of `obj`. `external` is the connected
    /// external client, or why it could not be had. Returns when the
    /// finalizer may go ([`Cleanup::Done`]) or when to look again.
    pub async fn remove<K, E>(
        &self,
        events: &EventReporter,
        obj: &K,
        external: Result<E, E::Error>,
        allowed: Allowed,
    ) -> Result<Cleanup, E::Error>
    where
        K: Resource<DynamicType = ()>,
        E: External,
    {
        if !allowed.delete {
            return Ok(Cleanup::Done);
        }
        let attempt = match external {
            Ok(external) => external.delete().await,
            Err(e) => Err(e),
        };
        let failure = match attempt {
            Ok(Deletion::Gone) => return Ok(Cleanup::Done),
            Ok(Deletion::InProgress) => return Ok(Cleanup::Wait(Action::requeue(DELETE_RECHECK))),
            Err(e) if e.nothing_made() => {
                tracing::info!(reason = %error_chain(&e), "nothing to delete");
                return Ok(Cleanup::Done);
            }
            Err(e) => e,
        };
        let why = if failure.target_gone() {
            error_chain(&failure)
        } else if deleted_for(obj) >= self.deletion_timeout {
            format!(
                "the target could not be reached for {:?}: {}",
                self.deletion_timeout,
                error_chain(&failure)
            )
        } else {
            return Err(failure);
        };
        events
            .warning(
                &obj.object_ref(&()),
                self.orphaned_reason,
                format!("left {} in place: {why}", self.what),
            )
            .await;
        Ok(Cleanup::Done)
    }
}

/// How long ago the object was deleted (zero when it is not).
pub fn deleted_for<K: Resource>(obj: &K) -> Duration {
    obj.meta()
        .deletion_timestamp
        .as_ref()
        .map(|t| k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond())
        .map(|ms| Duration::from_millis(ms.max(0) as u64))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake {
        observed: Observation,
        calls: std::sync::Mutex<Vec<&'static str>>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("no")]
    struct NoError;
    impl ReconcileError for NoError {
        fn category(&self) -> &'static str {
            "No"
        }
    }
    impl ManagedError for NoError {
        fn target_gone(&self) -> bool {
            false
        }
        fn nothing_made(&self) -> bool {
            false
        }
    }

    impl External for Fake {
        type Error = NoError;
        async fn observe(&self) -> Result<Observation, NoError> {
            self.calls.lock().unwrap().push("observe");
            Ok(self.observed.clone())
        }
        async fn create(&self) -> Result<Value, NoError> {
            self.calls.lock().unwrap().push("create");
            Ok(Value::Null)
        }
        async fn update(&self) -> Result<Value, NoError> {
            self.calls.lock().unwrap().push("update");
            Ok(Value::Null)
        }
        async fn delete(&self) -> Result<Deletion, NoError> {
            self.calls.lock().unwrap().push("delete");
            Ok(Deletion::Gone)
        }
    }

    fn fake(observed: Observation) -> Fake {
        Fake {
            observed,
            calls: Default::default(),
        }
    }

    #[tokio::test]
    async fn sync_does_only_what_the_observation_and_the_policy_call_for() {
        let present = |up_to_date| Observation {
            exists: true,
            up_to_date,
            drifted: !up_to_date,
            live: Some(Value::Null),
        };
        let cases = [
            (
                Observation::absent(),
                Allowed::ALL,
                vec!["observe", "create"],
            ),
            (
                Observation::absent(),
                Allowed {
                    create: false,
                    ..Allowed::ALL
                },
                vec!["observe"],
            ),
            (present(true), Allowed::ALL, vec!["observe"]),
            (present(false), Allowed::ALL, vec!["observe", "update"]),
            (
                present(false),
                Allowed {
                    update: false,
                    ..Allowed::ALL
                },
                vec!["observe"],
            ),
        ];
        for (observed, allowed, calls) in cases {
            let f = fake(observed.clone());
            let synced = sync(&f, allowed).await.unwrap();
            assert_eq!(*f.calls.lock().unwrap(), calls, "{observed:?} {allowed:?}");
            if !observed.exists && !allowed.create {
                assert_eq!(synced, Synced::Missing);
            }
            if observed.exists && !observed.up_to_date && allowed.update {
                assert_eq!(
                    synced,
                    Synced::Updated {
                        live: Value::Null,
                        drifted: true
                    }
                );
            }
        }
    }

    #[test]
    fn the_fields_as_stored_decide_up_to_date_and_drift() {
        use serde_json::json;
        let memory = AppliedMemory::default();
        let desired = json!({"kind": "Deployment", "spec": {"cpu": "1000m", "replicas": 1}});
        // Before any apply: literal comparison, never drift.
        let live =
            json!({"kind": "Deployment", "spec": {"cpu": "1", "replicas": 1, "paused": false}});
        assert_eq!(memory.judge("u", &desired, &live), (false, false));
        // The target normalised a value: after the apply that is up to date.
        memory.remember("u", &desired, &live);
        assert_eq!(memory.judge("u", &desired, &live), (true, false));
        // Someone else's field does not matter; ours changed is drift.
        let theirs =
            json!({"kind": "Deployment", "spec": {"cpu": "1", "replicas": 1, "paused": true}});
        assert_eq!(memory.judge("u", &desired, &theirs), (true, false));
        let drifted = json!({"kind": "Deployment", "spec": {"cpu": "1", "replicas": 3}});
        assert_eq!(memory.judge("u", &desired, &drifted), (false, true));
        // A new desired object is an update, not drift.
        let next = json!({"kind": "Deployment", "spec": {"cpu": "1000m", "replicas": 2}});
        assert_eq!(memory.judge("u", &next, &live), (false, false));
        memory.forget("u");
        assert!(memory.is_empty());
    }

    #[test]
    fn hints_say_what_to_do() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, "x")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(
            hint(&api(404, "namespaces \"x\" not found"), "spec.template")
                .contains("namespace does not exist there yet")
        );
        assert!(hint(&api(422, "bad"), "spec.template").contains("fix spec.template"));
        assert!(
            hint(&kube::Error::LinesCodecMaxLineLengthExceeded, "x").contains("did not answer")
        );
    }
}
