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

/// How long a policy's growing `status.activated` may wait for more MRDs
/// before it is written. A package's MRDs appear one by one (5000 for 50
/// Providers of 100 kinds), and the list is rewritten whole: written on
/// each, a burst costs as many writes as MRDs, each as long as the list.
/// Activation itself never waits ([`Policies::urgent`]).
const LISTED_WINDOW: Duration = Duration::from_secs(5);

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

    /// Only a list that grew, with the same conditions, waits: what a
    /// burst of new MRDs does. A first status, a name gone or a condition
    /// changed is written at once.
    fn may_wait(
        &self,
        before: &Draft<ManagedResourceActivationPolicy>,
        after: &Draft<ManagedResourceActivationPolicy>,
    ) -> Option<Duration> {
        listed_more(before, after).then_some(LISTED_WINDOW)
    }

    /// An MRD the policy matches that is not Active yet is activated at
    /// once, not at the end of a held write's window.
    fn urgent(
        &self,
        policy: &ManagedResourceActivationPolicy,
        _status: &Draft<ManagedResourceActivationPolicy>,
    ) -> bool {
        self.mrds.state().iter().any(|mrd| {
            mrd.spec.state != ManagedResourceDefinitionState::Active
                && policy.activates(&mrd.name_any())
        })
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

/// Whether `after` only lists more MRDs than `before` (already written,
/// with conditions) and says the same otherwise.
fn listed_more(
    before: &Draft<ManagedResourceActivationPolicy>,
    after: &Draft<ManagedResourceActivationPolicy>,
) -> bool {
    !before.conditions.is_empty()
        && before.conditions == after.conditions
        && after.activated.len() > before.activated.len()
        && before
            .activated
            .iter()
            .all(|n| after.activated.binary_search(n).is_ok())
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
        sk: Skeleton::new(rt, CONTROLLER).coalescing(LISTED_WINDOW),
        mrds,
    });
    reconciler::run(ctrl, reconciler)
}

#[cfg(test)]
mod tests {
    use super::*;
    use types::apiextensions::v1alpha1::ManagedResourceActivationPolicyStatus as Status;

    fn status(activated: &[&str], healthy: bool) -> Status {
        let mut s = Status {
            activated: activated.iter().map(|n| (*n).to_owned()).collect(),
            ..Status::default()
        };
        conditions::set(
            &mut s.conditions,
            conditions::custom(TYPE_HEALTHY, healthy, "Running", None),
            "2026-12-03T00:00:00Z",
        );
        s
    }

    #[test]
    fn only_a_list_that_grew_waits_for_more() {
        let two = status(&["a.example.org", "b.example.org"], true);
        let three = status(&["a.example.org", "b.example.org", "c.example.org"], true);
        assert!(listed_more(&two, &three), "more MRDs listed: may wait");
        assert!(!listed_more(&three, &two), "a name gone: written at once");
        assert!(!listed_more(&two, &two), "nothing new");
        let swapped = status(&["a.example.org", "c.example.org", "d.example.org"], true);
        assert!(!listed_more(&two, &swapped), "b gone: written at once");
        let unhealthy = status(&["a.example.org", "b.example.org", "c.example.org"], false);
        assert!(!listed_more(&two, &unhealthy), "a condition changed");
        assert!(
            !listed_more(&Status::default(), &three),
            "a first status is written at once"
        );
    }
}
