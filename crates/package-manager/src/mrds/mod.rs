//! ManagedResourceDefinitions (Crossplane v2): a Provider revision delivers
//! its managed-resource kinds as MRDs ([`body`]); this controller serves
//! the CRD of every Active MRD and removes it when the MRD is set Inactive
//! and no object of the kind is left; [`activation`] makes MRDs Active as
//! ManagedResourceActivationPolicies say.
//!
//! An MRD never takes over a CRD it did not make ([`body::crd_control`]):
//! the one exception is a CRD its own ProviderRevision installed before the
//! package's kinds became MRDs.

use std::{sync::Arc, time::Duration};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, ResourceExt as _,
    runtime::{Controller, WatchStreamExt as _, controller::Action, reflector::ObjectRef},
};
use runtime::{
    conditions,
    controller::Runtime,
    events::ReconcileError,
    reconciler::{
        self, CONTROL_REQUEST_FAILED, Cleanup, ControlError, Draft, Reconciler, Skeleton,
    },
    ssa,
};
use types::apiextensions::v1alpha1::ManagedResourceDefinition;

pub mod activation;
pub mod body;
mod served;

pub use served::Served;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "managedresourcedefinition";
/// Established: the MRD's CRD is served.
pub const TYPE_ESTABLISHED: &str = "Established";
/// The MRD is Active and its CRD established.
pub const REASON_ESTABLISHED: &str = "EstablishedManagedResource";
/// The MRD is Active and its CRD not established yet.
pub const REASON_PENDING: &str = "PendingManagedResource";
/// The MRD is Inactive: no CRD.
pub const REASON_INACTIVE: &str = "InactiveManagedResource";
/// The MRD was set Inactive while objects of its kind exist: the CRD stays.
pub const REASON_DEACTIVATION_REFUSED: &str = "DeactivationRefused";
/// How often an MRD waiting for its CRD or for its objects to go looks
/// again (neither is watched).
const WAIT_POLL: Duration = Duration::from_secs(3);
/// How long an MRD's first word that its CRD is not established yet waits
/// for the CRD to be, counted from when the CRD is first seen applied: the
/// API server establishes CRDs one at a time, so while a Provider alone is
/// served within a second or two, 50 Providers of 100 kinds installed at
/// once wait up to two minutes for theirs. Within the hold the MRD is
/// written once, Established; a CRD not established by then is said
/// Pending, and a refusal is said at once. (At 5 s, 84 % of those 5000
/// MRDs wrote Pending first: 4200 status writes, each waking every
/// watcher, while the API server was busy establishing.)
const PENDING_HOLD: Duration = Duration::from_secs(120);

/// Why reconciling an MRD failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CRD belongs to someone else, or may never be made.
    #[error("{0}")]
    Conflict(String),
    /// Objects of the kind hold a deactivation.
    #[error("{0}")]
    Deactivation(String),
    /// A request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Conflict(_) => "ConflictingCustomResourceDefinition",
            Error::Deactivation(_) => REASON_DEACTIVATION_REFUSED,
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            Error::Conflict(_) | Error::Deactivation(_) => Some(Duration::from_secs(10)),
            Error::Control(_) => None,
        }
    }
}

/// The MRD controller's reconciler.
pub struct Mrds {
    sk: Skeleton,
    field_manager: String,
    /// Every CRD's version and whether it is established, as the watch
    /// last saw it.
    crds: crate::stacks::known::Known,
    /// What is known of each Active MRD's CRD, also told by the revision
    /// controller of the MRDs it makes ([`served`]).
    served: Served,
}

fn established(
    status: &mut Draft<ManagedResourceDefinition>,
    ok: Option<bool>,
    reason: &str,
    message: String,
) {
    let mut c = conditions::custom(TYPE_ESTABLISHED, ok.unwrap_or(false), reason, Some(message));
    if ok.is_none() {
        c.status = "Unknown".into();
    }
    conditions::set(&mut status.conditions, c, &conditions::now());
}

/// Whether `after` newly says the CRD is pending where `before` (as
/// written) said nothing yet, or that the MRD was Inactive: the change
/// that waits for the CRD to be established ([`PENDING_HOLD`]).
fn newly_pending(
    before: &Draft<ManagedResourceDefinition>,
    after: &Draft<ManagedResourceDefinition>,
) -> bool {
    let was_nothing = conditions::get(&before.conditions, TYPE_ESTABLISHED)
        .is_none_or(|c| c.reason.as_deref() == Some(REASON_INACTIVE));
    was_nothing
        && conditions::get(&after.conditions, TYPE_ESTABLISHED)
            .is_some_and(|c| c.status == "Unknown" && c.reason.as_deref() == Some(REASON_PENDING))
}

/// Established: the CRD `name` is served; nothing to do until a change.
fn served(status: &mut Draft<ManagedResourceDefinition>, name: &str) -> Action {
    established(
        status,
        Some(true),
        REASON_ESTABLISHED,
        format!("the CRD {name} is served"),
    );
    Action::await_change()
}

/// Waiting for the CRD `name` to become established. The view of CRDs
/// wakes the MRD once it is ([`crate::stacks::known::Known::changes`]);
/// looking again is the fallback, and reads nothing while the CRD's
/// version is the one last found.
fn pending(status: &mut Draft<ManagedResourceDefinition>, name: &str) -> Action {
    established(
        status,
        None,
        REASON_PENDING,
        format!("waiting for the CRD {name} to become established"),
    );
    Action::requeue(WAIT_POLL)
}

impl Reconciler for Mrds {
    type Object = ManagedResourceDefinition;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        // The CRD is controlled by the MRD: garbage-collected with it. A
        // Provider's deletion waits for the kind's objects before it
        // deletes its MRDs.
        None
    }

    /// An MRD whose CRD the revision that made it is serving waits for the
    /// revision to say how that went: the view of CRDs wakes it once it
    /// shows the CRD (a claim dropped instead is found by looking again).
    /// Its first status is then written from the CRD as applied, and the
    /// wait for the CRD to be established ([`PENDING_HOLD`]) counts from
    /// there rather than from the MRD's creation.
    fn deferred(&self, mrd: &ManagedResourceDefinition) -> Option<Duration> {
        (body::active(mrd) && self.served.claimed(&mrd.name_any())).then_some(WAIT_POLL)
    }

    fn may_wait(
        &self,
        before: &Draft<ManagedResourceDefinition>,
        after: &Draft<ManagedResourceDefinition>,
    ) -> Option<Duration> {
        newly_pending(before, after).then_some(PENDING_HOLD)
    }

    /// The view shows the CRD established: written at once, the pending
    /// word held never is.
    fn urgent(
        &self,
        mrd: &ManagedResourceDefinition,
        _status: &Draft<ManagedResourceDefinition>,
    ) -> bool {
        self.crds
            .state(&mrd.name_any())
            .is_some_and(|c| c.established)
    }

    async fn apply(
        &self,
        mrd: &Arc<ManagedResourceDefinition>,
        status: &mut Draft<ManagedResourceDefinition>,
    ) -> Result<Action, Error> {
        let name = mrd.name_any();
        let crds = Api::<CustomResourceDefinition>::all(self.sk.client().clone());
        // The MRD as the cache has it (body::Listed): what is compared
        // next time.
        let version = body::made_from(mrd.as_ref()).filter(|_| body::active(mrd));
        if let Some(v) = version.as_deref() {
            match self.served.holds(&name, v, self.crds.state(&name).as_ref()) {
                Some(true) => return Ok(served(status, &name)),
                Some(false) => return Ok(pending(status, &name)),
                None => {}
            }
        }
        // The cache keeps MRDs without their CRD spec (body::Listed): an
        // Active one is read whole.
        let mrd = if body::active(mrd) {
            match Api::<ManagedResourceDefinition>::all(self.sk.client().clone())
                .get_opt(&name)
                .await
                .map_err(|e| ControlError::new("read a ManagedResourceDefinition", e))?
            {
                Some(full) => Arc::new(full),
                // Deleted meanwhile: its deletion is the next event.
                None => return Ok(Action::await_change()),
            }
        } else {
            Arc::clone(mrd)
        };
        let mrd = &mrd;
        let live = crds
            .get_opt(&name)
            .await
            .map_err(|e| ControlError::new("read a CRD", e))?;
        let control = live.as_ref().map(|l| body::crd_control(mrd, &l.metadata));
        let live_version = live.as_ref().and_then(body::version);
        if body::active(mrd) {
            let desired = body::crd_of(mrd);
            if let Some(why) = crate::crds::refused(&desired, true) {
                established(status, Some(false), REASON_PENDING, why.clone());
                return Err(Error::Conflict(why));
            }
            if let Some(body::CrdControl::Foreign(why)) = &control {
                established(status, Some(false), REASON_PENDING, why.clone());
                return Err(Error::Conflict(why.clone()));
            }
            let applied = match live {
                Some(l) if ssa::applied(&l, &desired, &self.field_manager) => l,
                _ => ssa::apply(&crds, &name, &desired, &self.field_manager)
                    .await
                    .map_err(|e| ControlError::new("apply a CRD", e))?,
            };
            let served_now = crate::crds::established(&applied);
            // Recorded as the cache has the MRD (the whole one read here is
            // never older), so the next wake compares alike.
            if version.is_some() {
                self.served
                    .settle(&name, version.clone(), &applied, live_version);
            }
            return Ok(if served_now {
                served(status, &name)
            } else {
                pending(status, &name)
            });
        }
        // Inactive: the CRD goes, unless objects of the kind would go with it.
        if matches!(
            control,
            Some(body::CrdControl::Ours | body::CrdControl::Adopt)
        ) {
            let users = crate::usage::custom_resources(
                self.sk.client(),
                &self.crds,
                std::slice::from_ref(&name),
            )
            .await
            .map_err(|e| ControlError::new("list the kind's objects", e))?;
            if let Some(users) = users {
                let why = format!(
                    "spec.state is Inactive, but the CRD {name} stays while objects of its kind exist ({users}); delete them, and the CRD goes"
                );
                established(status, Some(true), REASON_DEACTIVATION_REFUSED, why.clone());
                return Err(Error::Deactivation(why));
            }
            runtime::objects::delete(&crds, &name)
                .await
                .map_err(|e| ControlError::new("delete a CRD", e))?;
            established(
                status,
                Some(false),
                REASON_INACTIVE,
                format!("Inactive: the CRD {name} was removed"),
            );
            return Ok(Action::requeue(WAIT_POLL));
        }
        established(
            status,
            Some(false),
            REASON_INACTIVE,
            "Inactive: no CRD is served until a ManagedResourceActivationPolicy activates this MRD"
                .into(),
        );
        Ok(Action::await_change())
    }

    async fn cleanup(
        &self,
        _mrd: &Arc<ManagedResourceDefinition>,
        _status: &mut Draft<ManagedResourceDefinition>,
    ) -> Result<Cleanup, Error> {
        Ok(Cleanup::Done)
    }

    /// `apply` set Established itself.
    fn failed(
        &self,
        _mrd: &ManagedResourceDefinition,
        _status: &mut Draft<ManagedResourceDefinition>,
        _message: &str,
    ) {
    }
}

/// The MRD controller, ready to run: it watches MRDs, and is told of the
/// CRDs that changed by the package-manager's view of them.
pub fn controller(
    rt: &Runtime,
    crds_known: crate::stacks::known::Known,
    served: Served,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    use futures::StreamExt as _;
    // MRDs kept without their CRD spec (body::Listed). A CRD's name is its
    // MRD's: a change of one wakes the MRD of that name, if there is one,
    // once the view has it.
    let (store, writer) = kube::runtime::reflector::store();
    let mrds = body::watch(rt.client.clone(), body::Listed::for_reconcile)
        .reflect(writer)
        .touched_objects();
    let forget = served.clone();
    let crds = crds_known.changes().map(move |change| {
        if change.gone {
            forget.forget(&change.name);
        }
        ObjectRef::<ManagedResourceDefinition>::new(&change.name)
    });
    let ctrl = Controller::for_stream(mrds, store)
        .reconcile_on(crds)
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(Mrds {
        sk: Skeleton::new(rt, CONTROLLER).coalescing(PENDING_HOLD),
        field_manager: rt.field_manager(),
        crds: crds_known,
        served,
    });
    reconciler::run(ctrl, reconciler)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_a_first_pending_word_waits_for_the_crd() {
        let said = |ok: Option<bool>, reason: &str| {
            let mut s = Draft::<ManagedResourceDefinition>::default();
            established(&mut s, ok, reason, "m".into());
            s
        };
        let new = Draft::<ManagedResourceDefinition>::default();
        let pending = said(None, REASON_PENDING);
        let inactive = said(Some(false), REASON_INACTIVE);
        let served = said(Some(true), REASON_ESTABLISHED);
        assert!(newly_pending(&new, &pending), "a new MRD");
        assert!(newly_pending(&inactive, &pending), "an MRD just activated");
        assert!(
            !newly_pending(&served, &pending),
            "a served CRD lost: at once"
        );
        assert!(!newly_pending(&new, &served), "served: at once");
        let refused = said(Some(false), REASON_PENDING);
        assert!(!newly_pending(&new, &refused), "a refusal: at once");
    }
}
