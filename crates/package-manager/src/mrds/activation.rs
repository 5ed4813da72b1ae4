//! ManagedResourceActivationPolicies: each makes Active the MRDs whose
//! names match one of its `spec.activate` patterns (upstream's wildcard
//! rules, [`types::apiextensions::v1alpha1::pattern_matches`]) and lists
//! them in `status.activated`. An MRD once Active stays Active when the
//! policy goes (as upstream); an operator sets it Inactive by hand.

use std::{sync::Arc, time::Duration};

use kube::{
    Api, Resource as _, ResourceExt as _,
    api::{Patch, PatchParams},
    runtime::{
        Controller,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use runtime::{
    conditions,
    controller::{Runtime, cache_ready},
    reconciler::{self, Cleanup, ControlError, Draft, Reconciler, Skeleton},
};
use types::apiextensions::v1alpha1::{
    ManagedResourceActivationPolicy, ManagedResourceDefinition, ManagedResourceDefinitionState,
};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "managedresourceactivationpolicy";
/// The field manager of the state an MRD is activated to (not the
/// revision's: a revision of a SafeStart package leaves the state alone).
pub const ACTIVATION_MANAGER: &str = "package-manager-activation";
/// Healthy: every matching MRD is Active.
pub const TYPE_HEALTHY: &str = types::pkg::contract::conditions::HEALTHY;

/// The MRAP controller's reconciler.
pub struct Policies {
    sk: Skeleton,
    mrds: Store<ManagedResourceDefinition>,
}

impl Reconciler for Policies {
    type Object = ManagedResourceActivationPolicy;
    type Error = super::Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    async fn ready(&self) -> bool {
        cache_ready(&self.mrds).await
    }

    async fn apply(
        &self,
        policy: &Arc<ManagedResourceActivationPolicy>,
        status: &mut Draft<ManagedResourceActivationPolicy>,
    ) -> Result<Action, super::Error> {
        let api = Api::<ManagedResourceDefinition>::all(self.sk.client().clone());
        let mut activated: Vec<String> = Vec::new();
        for mrd in self.mrds.state() {
            let name = mrd.name_any();
            if !policy.activates(&name) {
                continue;
            }
            if mrd.spec.state != ManagedResourceDefinitionState::Active {
                let patch = serde_json::json!({"spec": {"state": "Active"}});
                api.patch(
                    &name,
                    &PatchParams {
                        field_manager: Some(ACTIVATION_MANAGER.to_owned()),
                        ..PatchParams::default()
                    },
                    &Patch::Merge(&patch),
                )
                .await
                .map_err(|e| ControlError::new("activate a ManagedResourceDefinition", e))?;
                self.sk
                    .reporting
                    .events
                    .normal(
                        &mrd.object_ref(&()),
                        "Activated",
                        format!(
                            "activated by ManagedResourceActivationPolicy {}",
                            policy.name_any()
                        ),
                    )
                    .await;
            }
            activated.push(name);
        }
        activated.sort();
        status.activated = activated;
        conditions::set(
            &mut status.conditions,
            conditions::custom(TYPE_HEALTHY, true, "Running", None),
            &conditions::now(),
        );
        Ok(Action::requeue(Duration::from_secs(600)))
    }

    async fn cleanup(
        &self,
        _policy: &Arc<ManagedResourceActivationPolicy>,
        _status: &mut Draft<ManagedResourceActivationPolicy>,
    ) -> Result<Cleanup, super::Error> {
        Ok(Cleanup::Done)
    }
}

/// The MRAP controller, ready to run: an MRD that is made or changes
/// wakes every policy (there are few).
pub fn controller(rt: &Runtime) -> impl Future<Output = ()> + Send + 'static + use<> {
    let (mrds, writer) = kube::runtime::reflector::store();
    // Only names and states are read: the MRDs are kept without their
    // CRD spec (super::body::Listed).
    let mrd_stream =
        kube::runtime::WatchStreamExt::touched_objects(kube::runtime::WatchStreamExt::reflect(
            super::body::watch(rt.client.clone(), super::body::Listed::name_and_state),
            writer,
        ));
    let ctrl = Controller::new(
        Api::<ManagedResourceActivationPolicy>::all(rt.client.clone()),
        watcher::Config::default(),
    );
    let policies = ctrl.store();
    let ctrl = ctrl
        .watches_stream(mrd_stream, move |_mrd: ManagedResourceDefinition| {
            policies
                .state()
                .iter()
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        })
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown());
    let reconciler = Arc::new(Policies {
        sk: Skeleton::new(rt, CONTROLLER),
        mrds,
    });
    reconciler::run(ctrl, reconciler)
}
