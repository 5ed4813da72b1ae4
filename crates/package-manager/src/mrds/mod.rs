//! ManagedResourceDefinitions (Crossplane v2): a Provider revision delivers
//! its managed-resource kinds as MRDs ([`body`]); this controller serves
//! the CRD of every Active MRD and removes it when the MRD is set Inactive
//! and no object of the kind is left; [`activation`] makes MRDs Active as
//! ManagedResourceActivationPolicies say.
//!
//! An MRD never takes over a CRD it did not make ([`body::crd_control`]):
//! the one exception is a CRD its own ProviderRevision installed before the
//! package's kinds became MRDs.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, ResourceExt as _,
    core::PartialObjectMeta,
    runtime::{Controller, WatchStreamExt as _, controller::Action, watcher},
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
    /// Every CRD's resourceVersion, as the watch last saw it.
    crds: crate::stacks::known::Known,
    /// Each Active MRD whose CRD was last found applied: what the MRD was
    /// then ([`Settled::of`]) and the CRD's resourceVersion, and whether
    /// the CRD was established. While both are the same, a reconcile (woken
    /// by the MRD's own status write, or looking again at a CRD not
    /// established yet) reads and writes nothing: thousands of MRDs waiting
    /// for their CRDs cost no requests while they wait.
    settled: Mutex<HashMap<String, (Settled, bool)>>,
}

/// An Active MRD as its CRD was made from it ([`body::version`]), and the
/// CRD's resourceVersion.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Settled {
    mrd: String,
    crd: String,
}

impl Settled {
    /// `mrd` as the cache keeps it (body::Listed: what it is compared
    /// with next time), and the CRD at `crd`.
    fn of(mrd: &ManagedResourceDefinition, crd: Option<&str>) -> Option<Self> {
        Some(Self {
            mrd: body::version(mrd)?,
            crd: crd?.to_owned(),
        })
    }
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

/// Waiting for the CRD `name` to become established. The watch of CRDs
/// wakes the MRD once it is (its status write bumps the CRD's
/// resourceVersion); looking again is the fallback, and reads nothing
/// while the CRD's resourceVersion is the one last found.
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

    async fn apply(
        &self,
        mrd: &Arc<ManagedResourceDefinition>,
        status: &mut Draft<ManagedResourceDefinition>,
    ) -> Result<Action, Error> {
        let name = mrd.name_any();
        let crds = Api::<CustomResourceDefinition>::all(self.sk.client().clone());
        let crd_rv = self.crds.resource_version(&name);
        let cached = Arc::clone(mrd);
        let now = Settled::of(&cached, crd_rv.as_deref()).filter(|_| body::active(mrd));
        {
            let mut settled = self.settled.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(now) = &now
                && let Some((then, established)) = settled.get(&name)
                && then == now
            {
                return Ok(if *established {
                    served(status, &name)
                } else {
                    pending(status, &name)
                });
            }
            settled.remove(&name);
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
            if let Some(settled) = Settled::of(&cached, applied.resource_version().as_deref()) {
                self.settled
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(name.clone(), (settled, served_now));
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
            let users =
                crate::usage::custom_resources(self.sk.client(), std::slice::from_ref(&name))
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

/// The MRD controller, ready to run: it watches MRDs and the CRDs they
/// control.
pub fn controller(
    rt: &Runtime,
    crds_known: crate::stacks::known::Known,
) -> impl Future<Output = ()> + Send + 'static + use<> {
    // MRDs kept without their CRD spec (body::Listed); CRDs seen as metadata only, to wake
    // the MRD that controls one (every CRD of the cluster passes by).
    let (store, writer) = kube::runtime::reflector::store();
    let mrds = body::watch(rt.client.clone(), body::Listed::for_reconcile)
        .reflect(writer)
        .touched_objects();
    let crds = watcher(
        Api::<PartialObjectMeta<CustomResourceDefinition>>::all(rt.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects();
    let ctrl = Controller::for_stream(mrds, store)
        .owns_stream(crds)
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(Mrds {
        sk: Skeleton::new(rt, CONTROLLER),
        field_manager: rt.field_manager(),
        crds: crds_known,
        settled: Mutex::new(HashMap::new()),
    });
    reconciler::run(ctrl, reconciler)
}
