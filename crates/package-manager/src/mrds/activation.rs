//! ManagedResourceActivationPolicies: each makes Active the MRDs whose
//! names match one of its `spec.activate` patterns (upstream's wildcard
//! rules, [`types::apiextensions::v1alpha1::pattern_matches`]) and lists
//! them in `status.activated`. An MRD once Active stays Active when the
//! policy goes (as upstream); an operator sets it Inactive by hand.

use std::{sync::Arc, time::Duration};

use kube::{
    Api, Resource as _, ResourceExt as _,
    api::{Patch, PatchParams},
    runtime::{Controller, WatchStreamExt as _, controller::Action, reflector::ObjectRef, watcher},
};
use runtime::{
    conditions,
    controller::{Runtime, summaries::Summaries},
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

/// How long a change of a policy's `status.activated` may wait for more
/// before it is written. A package's MRDs appear (and a deleted Provider's
/// go) one by one, 5000 for 50 Providers of 100 kinds, and the list is
/// rewritten whole: written on each, a burst costs as many writes as MRDs,
/// each as long as the list.
/// Activation itself never waits ([`Policies::urgent`]).
const LISTED_WINDOW: Duration = Duration::from_secs(5);

/// The MRAP controller's reconciler.
pub struct Policies {
    sk: Skeleton,
    mrds: States,
}

/// Every MRD's name and whether it is Active: all a policy reads of MRDs
/// (a hundred bytes an MRD where a cached MRD object is 800 before its
/// strings), by name, so `status.activated` comes out sorted.
type States = Summaries<bool>;

fn is_active(mrd: &ManagedResourceDefinition) -> bool {
    mrd.spec.state == ManagedResourceDefinitionState::Active
}

/// The MRDs `policy` activates, by name, and whether each is Active.
fn matching(states: &States, policy: &ManagedResourceActivationPolicy) -> Vec<(String, bool)> {
    states.read(|all| {
        all.iter()
            .filter(|(name, _)| policy.activates(name))
            .map(|(name, active)| (name.to_string(), *active))
            .collect()
    })
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
        self.mrds.ready().await
    }

    /// Only a list that changed, with the same conditions, waits: what a
    /// burst of new MRDs, or of deleted ones, does. A first status or a
    /// condition changed is written at once.
    fn may_wait(
        &self,
        before: &Draft<ManagedResourceActivationPolicy>,
        after: &Draft<ManagedResourceActivationPolicy>,
    ) -> Option<Duration> {
        only_listed_other(before, after).then_some(LISTED_WINDOW)
    }

    /// An MRD the policy matches that is not Active yet is activated at
    /// once, not at the end of a held write's window.
    fn urgent(
        &self,
        policy: &ManagedResourceActivationPolicy,
        _status: &Draft<ManagedResourceActivationPolicy>,
    ) -> bool {
        self.mrds.read(|all| {
            all.iter()
                .any(|(name, active)| !active && policy.activates(name))
        })
    }

    async fn apply(
        &self,
        policy: &Arc<ManagedResourceActivationPolicy>,
        status: &mut Draft<ManagedResourceActivationPolicy>,
    ) -> Result<Action, super::Error> {
        let api = Api::<ManagedResourceDefinition>::all(self.sk.client().clone());
        let mut activated: Vec<String> = Vec::new();
        for (name, active) in matching(&self.mrds, policy) {
            if !active {
                let patch = serde_json::json!({"spec": {"state": "Active"}});
                let patched = api
                    .patch(
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
                        &patched.object_ref(&()),
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
        // By name already (States keeps them so).
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

/// Whether `after` says what `before` (already written, with conditions)
/// said but for the MRDs it lists: more of them as a package's MRDs
/// appear, fewer as a deleted Provider's go.
fn only_listed_other(
    before: &Draft<ManagedResourceActivationPolicy>,
    after: &Draft<ManagedResourceActivationPolicy>,
) -> bool {
    !before.conditions.is_empty()
        && before.conditions == after.conditions
        && after.activated != before.activated
}

/// The MRAP controller, ready to run: an MRD that is made or changes
/// wakes every policy (there are few).
pub fn controller(rt: &Runtime) -> impl Future<Output = ()> + Send + 'static + use<> {
    // Only names and states are read (States), off the wire without the
    // CRD spec an MRD carries (super::body::Listed).
    let mrds = States::new();
    let mrd_stream = mrds
        .follow(
            super::body::watch(rt.client.clone(), super::body::Listed::name_and_state),
            is_active,
        )
        .touched_objects();
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

    fn mrd(name: &str, state: ManagedResourceDefinitionState) -> ManagedResourceDefinition {
        let mut m = ManagedResourceDefinition::new(name, Default::default());
        m.spec.state = state;
        m
    }

    fn policy(patterns: &[&str]) -> ManagedResourceActivationPolicy {
        let mut p = ManagedResourceActivationPolicy::new("p", Default::default());
        p.spec.activate = patterns.iter().map(|s| (*s).to_owned()).collect();
        p
    }

    #[test]
    fn a_policy_matches_mrds_by_name_and_knows_the_inactive_ones() {
        use ManagedResourceDefinitionState::{Active, Inactive};
        use watcher::Event;
        let states = States::new();
        for m in [
            mrd("b.example.org", Inactive),
            mrd("a.example.org", Active),
            mrd("c.other.org", Inactive),
        ] {
            states.apply(&Event::Apply(m), is_active);
        }
        let all = policy(&["*.example.org"]);
        assert_eq!(
            matching(&states, &all),
            vec![
                ("a.example.org".into(), true),
                ("b.example.org".into(), false)
            ],
            "by name, only the matching"
        );
    }

    #[test]
    fn only_a_list_that_changed_waits_for_more_changes() {
        let two = status(&["a.example.org", "b.example.org"], true);
        let three = status(&["a.example.org", "b.example.org", "c.example.org"], true);
        assert!(
            only_listed_other(&two, &three),
            "more MRDs listed: may wait"
        );
        assert!(only_listed_other(&three, &two), "a name gone: may wait");
        assert!(!only_listed_other(&two, &two), "nothing new");
        let unhealthy = status(&["a.example.org", "b.example.org", "c.example.org"], false);
        assert!(!only_listed_other(&two, &unhealthy), "a condition changed");
        assert!(
            !only_listed_other(&Status::default(), &three),
            "a first status is written at once"
        );
    }
}
