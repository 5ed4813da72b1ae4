//! The application controller: keeps one KubernetesApplicationResource per
//! template of each scheduled application, deletes the ones no template asks
//! for, and reports desired/submitted/state/Ready. Deleting an application
//! deletes its resources (and through their finalizers, the remote objects)
//! before the application goes.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use futures::StreamExt as _;

use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, controller::Action, reflector::Store, watcher},
};
use runtime::{
    conditions,
    controller::{Runtime, cache_ready, trim},
    events::ReconcileError,
    finalizers,
    index::Index,
    reconciler::{
        self, CONTROL_REQUEST_FAILED, Cleanup, ControlError, Draft, Reconciler, Skeleton,
    },
    ssa,
};
use types::{
    common::Condition,
    workload::v1alpha1::{
        KubernetesApplication, KubernetesApplicationResource, KubernetesApplicationState,
    },
};

use crate::desired;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "kubernetesapplication";
/// Finalizer that holds an application until its resources are gone.
pub const FINALIZER: &str = "workload.crossplane.io/application-controller";
/// How often a deleting application looks at its remaining resources.
const DELETE_POLL: Duration = Duration::from_secs(2);
/// How long the progress of a submission may wait for more. An application
/// holds all its templates: a GitLab-sized one is ~110 KB, 40 times one of
/// its resources, and every write of its status costs the API server (and
/// every watcher) the whole object. Its resources are submitted over a burst
/// of seconds to tens of seconds; measured with 100 GitLab applications at
/// once, a 5 s window wrote 3.5 statuses per application (the null writer
/// writes one), and each cost the control API server ~1 s. So the progress
/// (the first look, PartiallySubmitted, the counts, Ready's message) is
/// written at most every 15 s; an end of the submission (Submitted,
/// Failed), a Ready that turns True or False, a new generation or cluster
/// is written at once (`urgent`), with whatever was held.
const COALESCE: Duration = Duration::from_secs(15);
/// How long the progress of an application that waited for the backlog
/// ([`BACKLOG`]) may wait for more. Its resources are made behind up to
/// that many others, so its submission takes as long as the
/// resource-controller needs for them: measured with 100 GitLab
/// applications at once, ~35 s from making an application's resources to
/// Submitted, so most wrote their progress once in between with a 15 s
/// window (three status writes: the wait, the progress, Submitted). With
/// this window most write two; a submission that takes longer still shows
/// its progress, once per window.
const AFTER_BACKLOG: Duration = Duration::from_secs(45);
/// How many resources may wait for the resource-controller (created, not
/// yet submitted or failed) before a new application's submission waits, by
/// default (--max-waiting-resources).
/// The resource-controller takes resources in the order they came; one
/// created long before its turn only makes the control API server busier
/// for those being submitted now (measured with 100 GitLab applications at
/// once: their resources were all created in 140 s, and while they were,
/// the resource-controller's writes took 3 times as long and it submitted
/// 15 a second instead of 20). 400 is ~20 s of its work on a small machine.
pub const BACKLOG: usize = 400;
/// Ready's reason while an application waits for the backlog.
pub const WAITING: &str = "WaitingForResourceController";
/// How often an application waiting for the backlog looks again.
const BACKLOG_RETRY: Duration = Duration::from_secs(2);
/// How many of an application's resources are applied at once.
pub const APPLY_AT_ONCE: usize = 8;

/// Why reconciling an application failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Some templates could not be submitted; each says what to fix.
    #[error("{0}")]
    Submit(String),
    /// Deleting a resource failed.
    #[error("failed to delete KubernetesApplicationResource {0}")]
    Delete(String, #[source] kube::Error),
    /// Another request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Submit(_) => "CannotSubmitResource",
            Error::Delete(..) => "CannotDeleteResource",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }
}

/// The application controller's reconciler.
pub struct KubernetesApplications {
    sk: Skeleton,
    field_manager: String,
    resources: Store<KubernetesApplicationResource>,
    /// The cached resources by the UID of the application that controls
    /// them.
    controlled: Index<KubernetesApplicationResource>,
    /// How often a healthy application is looked at again (--sync-interval).
    resync: Duration,
    /// --max-waiting-resources (0: no limit).
    backlog: usize,
}

fn scheduled_to(app: &KubernetesApplication) -> Option<&str> {
    app.status
        .as_ref()
        .and_then(|s| s.cluster_ref.as_ref())
        .map(|c| c.name.as_str())
}

impl Reconciler for KubernetesApplications {
    type Object = KubernetesApplication;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    /// The progress of a submission waits for the burst of resource
    /// changes to settle: one status write per window, not one per
    /// resource ([`progress_only`]); longer after a wait for the backlog.
    fn may_wait(
        &self,
        before: &Draft<KubernetesApplication>,
        after: &Draft<KubernetesApplication>,
    ) -> Option<Duration> {
        progress_only(before, after).then(|| window(before))
    }

    /// A held change may not wait once the resources end the submission
    /// (all submitted, or failed) or turn Ready: a user waits for those,
    /// not for the window.
    fn urgent(&self, app: &KubernetesApplication, status: &Draft<KubernetesApplication>) -> bool {
        let owned: Vec<_> = self.owned(app).collect();
        let (state, _) = desired::progress(app, owned.iter().map(Arc::as_ref));
        let ready = owned.len() == app.spec.resource_templates.len()
            && owned.iter().all(|r| desired::ready(r));
        !progressing(status.state, state)
            || ready != conditions::is_true(&status.conditions, conditions::TYPE_READY)
    }

    /// Unscheduled applications belong to the scheduler.
    fn wanted(&self, app: &KubernetesApplication) -> bool {
        scheduled_to(app).is_some() || finalizers::has(app, FINALIZER)
    }

    async fn ready(&self) -> bool {
        cache_ready(&self.resources).await
    }

    async fn apply(
        &self,
        app: &Arc<KubernetesApplication>,
        status: &mut Draft<KubernetesApplication>,
    ) -> Result<Action, Error> {
        let cluster = scheduled_to(app).unwrap_or_default().to_owned();
        if self.behind(app) {
            // Written at once ([`progress_only`]) and the same on every look
            // while it waits: one status write, then looks without writes.
            counts(app, status, KubernetesApplicationState::Scheduled, 0);
            let waiting = conditions::custom(
                conditions::TYPE_READY,
                false,
                WAITING,
                Some(format!(
                    "{} or more resources of other applications wait for the \
                     resource-controller (--max-waiting-resources); this application's \
                     resources are created when fewer do",
                    self.backlog
                )),
            );
            conditions::set(&mut status.conditions, waiting, &conditions::now());
            return Ok(Action::requeue(BACKLOG_RETRY));
        }
        let (wanted, problems) = self.submit(app, &cluster).await;
        let owned: Vec<_> = self.owned(app).collect();
        self.delete_stale(app, &owned, &wanted).await?;
        let current: Vec<_> = owned
            .iter()
            .filter(|r| wanted.contains(&r.name_any()))
            .collect();
        report(app, status, &wanted, &current, &problems);
        if !problems.is_empty() {
            // A conflicting resource is not ours to watch: the error is
            // reported and the application looked at again with backoff.
            return Err(Error::Submit(problems.join("; ")));
        }
        Ok(Action::requeue(self.resync))
    }

    async fn cleanup(
        &self,
        app: &Arc<KubernetesApplication>,
        status: &mut Draft<KubernetesApplication>,
    ) -> Result<Cleanup, Error> {
        let remaining: Vec<_> = self.owned(app).collect();
        if remaining.is_empty() {
            return Ok(Cleanup::Done);
        }
        let submitted = remaining.iter().filter(|r| desired::submitted(r)).count();
        counts(app, status, KubernetesApplicationState::Deleting, submitted);
        conditions::set(
            &mut status.conditions,
            conditions::deleting(),
            &conditions::now(),
        );
        let resources = self.resources_api(app);
        for r in remaining
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
        {
            // The resource's own finalizer removes its remote object first.
            delete(&resources, &r.name_any()).await?;
        }
        Ok(Cleanup::Wait(Action::requeue(DELETE_POLL)))
    }

    /// `apply` set Ready itself, also when some templates failed.
    fn failed(
        &self,
        _app: &KubernetesApplication,
        _status: &mut Draft<KubernetesApplication>,
        _message: &str,
    ) {
    }

    /// Announces a new state.
    async fn written(&self, app: &KubernetesApplication, status: &Draft<KubernetesApplication>) {
        let Some(state) = status.state else {
            return;
        };
        if app.status.as_ref().and_then(|s| s.state) == Some(state) {
            return;
        }
        let note = format!(
            "{} of {} resources submitted",
            status.submitted_resources.unwrap_or_default(),
            status.desired_resources.unwrap_or_default()
        );
        let oref = kube::Resource::object_ref(app, &());
        self.sk
            .reporting
            .events
            .normal(&oref, &format!("{state:?}"), note)
            .await;
    }
}

impl KubernetesApplications {
    fn resources_api(&self, app: &KubernetesApplication) -> Api<KubernetesApplicationResource> {
        Api::namespaced(
            self.sk.client().clone(),
            &app.namespace().unwrap_or_default(),
        )
    }

    /// Whether `app` has no resource yet and --max-waiting-resources or
    /// more wait for the resource-controller: its submission waits.
    fn behind(&self, app: &KubernetesApplication) -> bool {
        if self.backlog == 0
            || app.spec.resource_templates.is_empty()
            || self.owned(app).next().is_some()
        {
            return false;
        }
        let waiting = self
            .resources
            .state()
            .iter()
            .filter(|r| r.status.as_ref().and_then(|s| s.state).is_none())
            .take(self.backlog)
            .count();
        waiting >= self.backlog
    }

    /// The resources this application controls, from the cache (found by
    /// the index, not by reading every cached resource: each of a burst's
    /// thousands of resource changes looks at its application).
    fn owned<'a>(
        &'a self,
        app: &'a KubernetesApplication,
    ) -> impl Iterator<Item = Arc<KubernetesApplicationResource>> + 'a {
        let uid = app.metadata.uid.as_deref().unwrap_or_default();
        self.controlled
            .objects_with(uid)
            .into_iter()
            .filter_map(|r| self.resources.get(&r))
            .filter(move |r| {
                r.metadata.namespace == app.metadata.namespace && desired::controlled_by(r, app)
            })
    }

    /// Applies one resource per template unless it is up to date (up to
    /// [`APPLY_AT_ONCE`] at a time: an application's resources are
    /// independent, and the first reconcile of a large one would otherwise
    /// wait for each answer in turn); returns the names the templates ask
    /// for and what stood in the way.
    async fn submit(
        &self,
        app: &KubernetesApplication,
        cluster: &str,
    ) -> (BTreeSet<String>, Vec<String>) {
        let ns = app.namespace().unwrap_or_default();
        let resources = self.resources_api(app);
        let mut problems: Vec<String> = Vec::new();
        let mut wanted = BTreeSet::new();
        let mut writes = Vec::new();
        for index in 0..app.spec.resource_templates.len() {
            let (name, body) = match desired::resource_for(app, index, cluster) {
                Ok(r) => r,
                Err(msg) => {
                    problems.push(msg);
                    continue;
                }
            };
            wanted.insert(name.clone());
            let existing = self
                .resources
                .get(&kube::runtime::reflector::ObjectRef::new(&name).within(&ns));
            match existing.as_deref().map(|e| current(e, app, &body)) {
                Some(Err(problem)) => {
                    problems.push(problem);
                    continue;
                }
                Some(Ok(true)) => continue,
                Some(Ok(false)) | None => {}
            }
            writes.push((name, desired::unpacked_template(body)));
        }
        let (resources, ns) = (&resources, &ns);
        let failed: Vec<String> = futures::stream::iter(writes)
            .map(|(name, body)| async move {
                let e = ssa::apply(resources, &name, &body, &self.field_manager)
                    .await
                    .err()?;
                Some(format!(
                    "cannot apply KubernetesApplicationResource {ns}/{name}: {}",
                    runtime::events::error_chain(&e)
                ))
            })
            .buffered(APPLY_AT_ONCE)
            .filter_map(std::future::ready)
            .collect()
            .await;
        problems.extend(failed);
        (wanted, problems)
    }

    /// Deletes the resources no template asks for any more.
    async fn delete_stale(
        &self,
        app: &KubernetesApplication,
        owned: &[Arc<KubernetesApplicationResource>],
        wanted: &BTreeSet<String>,
    ) -> Result<(), Error> {
        let resources = self.resources_api(app);
        for name in desired::stale(owned.iter().map(Arc::as_ref), wanted) {
            delete(&resources, &name).await?;
            tracing::info!(resource = %name, "deleted a resource no template asks for");
        }
        Ok(())
    }
}

/// Whether an existing resource is this application's and up to date
/// (Ok(true)), its but stale (Ok(false)), or someone else's (Err: why it
/// is left alone).
fn current(
    existing: &KubernetesApplicationResource,
    app: &KubernetesApplication,
    body: &serde_json::Value,
) -> Result<bool, String> {
    if desired::controlled_by(existing, app) {
        return Ok(desired::up_to_date(existing, body));
    }
    let by = match desired::controller_of(existing) {
        Some(o) => format!("{} {}", o.kind, o.name),
        None => "no controller".to_owned(),
    };
    Err(format!(
        "KubernetesApplicationResource {}/{} already exists and is controlled by {by}; \
         it is left alone: rename the template or delete that resource",
        existing.namespace().unwrap_or_default(),
        existing.name_any()
    ))
}

/// Deletes one resource; one already gone is fine.
async fn delete(resources: &Api<KubernetesApplicationResource>, name: &str) -> Result<(), Error> {
    runtime::objects::delete(resources, name)
        .await
        .map_err(|e| {
            let ns = resources.namespace().unwrap_or_default();
            Error::Delete(format!("{ns}/{name}"), e)
        })
}

/// Whether going from `before` to `now` is a step of the submission that
/// may wait: the same state, or the first resources submitted.
fn progressing(
    before: Option<KubernetesApplicationState>,
    now: KubernetesApplicationState,
) -> bool {
    use KubernetesApplicationState::{PartiallySubmitted, Pending, Scheduled};
    before == Some(now)
        || matches!(
            (before, now),
            (
                None | Some(Pending | Scheduled),
                Scheduled | PartiallySubmitted
            )
        )
}

/// Whether `after` only reports the progress of the submission `before`
/// showed: the same cluster and generation (or the first look at the
/// application), a state that is a step of the submission, Ready neither
/// turning True nor back (nor saying the application waits for the
/// backlog), and no other condition changed but the first Synced.
/// Everything else is news a user waits for.
fn progress_only(
    before: &Draft<KubernetesApplication>,
    after: &Draft<KubernetesApplication>,
) -> bool {
    let first_look = before.observed_generation.is_none();
    let unchanged_but_first = |c: &Condition| {
        let then = conditions::get(&before.conditions, &c.type_);
        (c.type_ == conditions::TYPE_READY && c.reason.as_deref() != Some(WAITING))
            || then == Some(c)
            || (first_look && then.is_none() && c.status == "True")
    };
    before.cluster_ref == after.cluster_ref
        && (first_look || before.observed_generation == after.observed_generation)
        && after.state.is_some_and(|s| progressing(before.state, s))
        && conditions::is_true(&before.conditions, conditions::TYPE_READY)
            == conditions::is_true(&after.conditions, conditions::TYPE_READY)
        && after.conditions.iter().all(unchanged_but_first)
        && before
            .conditions
            .iter()
            .all(|c| conditions::get(&after.conditions, &c.type_).is_some())
}

/// How long progress from `before` may wait: [`AFTER_BACKLOG`] once the
/// application stops waiting for the backlog, [`COALESCE`] otherwise.
fn window(before: &Draft<KubernetesApplication>) -> Duration {
    let waited = conditions::get(&before.conditions, conditions::TYPE_READY)
        .is_some_and(|c| c.reason.as_deref() == Some(WAITING));
    if waited { AFTER_BACKLOG } else { COALESCE }
}

/// State, counts and the generation they describe.
fn counts(
    app: &KubernetesApplication,
    status: &mut Draft<KubernetesApplication>,
    state: KubernetesApplicationState,
    submitted: usize,
) {
    status.state = Some(state);
    status.desired_resources = Some(app.spec.resource_templates.len() as i64);
    status.submitted_resources = Some(submitted as i64);
    status.observed_generation = app.metadata.generation;
}

/// The status from the resources this application controls and still
/// wants: state, counts and Ready.
fn report(
    app: &KubernetesApplication,
    status: &mut Draft<KubernetesApplication>,
    wanted: &BTreeSet<String>,
    current: &[&Arc<KubernetesApplicationResource>],
    problems: &[String],
) {
    let (state, submitted) = desired::progress(app, current.iter().map(|r| r.as_ref()));
    counts(app, status, state, submitted);
    let not_ready = not_ready(wanted, current);
    let ready = if not_ready.is_empty() && problems.is_empty() {
        conditions::available()
    } else if not_ready.is_empty() {
        conditions::unavailable(problems.join("; "))
    } else {
        conditions::unavailable(format!(
            "not every remote object is healthy: {}",
            not_ready.join("; ")
        ))
    };
    conditions::set(&mut status.conditions, ready, &conditions::now());
}

/// Why each wanted resource is not Ready.
fn not_ready(
    wanted: &BTreeSet<String>,
    current: &[&Arc<KubernetesApplicationResource>],
) -> Vec<String> {
    let mut not_ready = Vec::new();
    for name in wanted {
        let ready = current
            .iter()
            .find(|r| &r.name_any() == name)
            .and_then(|r| {
                r.status
                    .as_ref()
                    .and_then(|s| conditions::get(&s.conditions, conditions::TYPE_READY))
                    .cloned()
            });
        match ready {
            Some(c) if c.status == "True" => {}
            Some(c) => not_ready.push(format!(
                "{name}: {}",
                c.message.unwrap_or_else(|| c.reason.unwrap_or_default())
            )),
            None => not_ready.push(format!("{name}: not yet submitted")),
        }
    }
    not_ready
}

/// The application controller; it also watches the resources it controls.
pub fn controller(rt: &Runtime, backlog: usize) -> impl Future<Output = ()> + use<> {
    // The resources are watched once: the reflector updates the store that
    // reconciles read *before* it wakes the owning application, so a
    // reconcile never sees a resource older than the change that woke it.
    let (reader, resources) = trim::reflected(
        rt.api::<KubernetesApplicationResource>(),
        watcher::Config::default(),
        desired::cached,
    );
    let controlled = Index::new(desired::controller_uid);
    let indexing = controlled.clone();
    let resources = resources
        .inspect(move |event| {
            if let Ok(event) = event {
                indexing.event(event);
            }
        })
        .touched_objects();
    let applications = Arc::new(KubernetesApplications {
        sk: Skeleton::new(rt, CONTROLLER).coalescing(AFTER_BACKLOG),
        field_manager: rt.field_manager(),
        resources: reader,
        controlled,
        resync: rt.args.sync_interval,
        backlog,
    });
    let ctrl = trim::controller(
        rt.api::<KubernetesApplication>(),
        watcher::Config::default(),
        desired::packed_templates,
    )
    .owns_stream(resources)
    .with_config(rt.controller_config())
    .graceful_shutdown_on(rt.shutdown());
    reconciler::run(ctrl, applications)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(templates: usize) -> KubernetesApplication {
        let template =
            json!({"metadata": {"name": "t"}, "spec": {"template": {"kind": "ConfigMap"}}});
        let spec = serde_json::from_value(json!({
            "resourceTemplates": vec![template; templates],
        }))
        .unwrap();
        let mut app = KubernetesApplication::new("demo", spec);
        app.metadata.namespace = Some("ns".into());
        app.metadata.uid = Some("uid-1".into());
        app.metadata.generation = Some(3);
        app
    }

    fn resource(name: &str, ready: Option<(&str, &str)>) -> Arc<KubernetesApplicationResource> {
        let conditions: Vec<_> = ready
            .map(|(status, message)| {
                json!({"type": "Ready", "status": status, "reason": "R", "message": message,
                       "lastTransitionTime": "2024-01-01T00:00:00Z"})
            })
            .into_iter()
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "workload.crossplane.io/v1alpha1",
                "kind": "KubernetesApplicationResource",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"template": {"kind": "ConfigMap"}},
                "status": {"conditions": conditions},
            }))
            .unwrap(),
        )
    }

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A status as the application controller writes it.
    fn draft(
        state: KubernetesApplicationState,
        generation: Option<i64>,
        submitted: i64,
        ready: (&str, &str),
    ) -> Draft<KubernetesApplication> {
        let mut d = Draft::<KubernetesApplication> {
            state: Some(state),
            observed_generation: generation,
            desired_resources: Some(43),
            submitted_resources: Some(submitted),
            cluster_ref: serde_json::from_value(json!({"name": "c"})).unwrap(),
            ..Default::default()
        };
        let (status, message) = ready;
        let at = "2024-01-01T00:00:00Z".to_owned();
        for c in [
            conditions::reconcile_success(),
            if status == "True" {
                conditions::available()
            } else {
                conditions::unavailable(message)
            },
        ] {
            conditions::set(&mut d.conditions, c, &at);
        }
        d
    }

    #[test]
    fn the_progress_of_a_submission_waits_and_its_news_does_not() {
        use KubernetesApplicationState::*;
        let scheduled = {
            // As the scheduler leaves it: no generation, no Synced, no Ready.
            let mut d = draft(Scheduled, None, 0, ("False", ""));
            d.conditions.clear();
            d.desired_resources = None;
            d.submitted_resources = None;
            d
        };
        let first = draft(Scheduled, Some(3), 0, ("False", "a: not yet submitted"));
        let partly = draft(
            PartiallySubmitted,
            Some(3),
            5,
            ("False", "b: not yet submitted"),
        );
        let more = draft(
            PartiallySubmitted,
            Some(3),
            30,
            ("False", "c: not yet submitted"),
        );
        // May wait: the first look, the first resources submitted, the counts
        // and Ready's message.
        assert!(progress_only(&scheduled, &first));
        assert!(progress_only(&scheduled, &partly));
        assert!(progress_only(&first, &partly));
        assert!(progress_only(&partly, &more));
        // Written at once: the end of the submission, Ready turning, a new
        // generation or cluster, a failure.
        let all = draft(Submitted, Some(3), 43, ("False", "c: not available"));
        assert!(!progress_only(&more, &all));
        assert!(!progress_only(
            &more,
            &draft(Failed, Some(3), 0, ("False", "x"))
        ));
        assert!(!progress_only(
            &all,
            &draft(Submitted, Some(3), 43, ("True", ""))
        ));
        assert!(!progress_only(
            &more,
            &draft(PartiallySubmitted, Some(4), 30, ("False", "c"))
        ));
        let mut moved = more.clone();
        moved.cluster_ref = serde_json::from_value(json!({"name": "d"})).unwrap();
        assert!(!progress_only(&more, &moved));
        let mut failing = more.clone();
        conditions::set(
            &mut failing.conditions,
            conditions::reconcile_error("cannot apply"),
            "2024-01-01T00:00:01Z",
        );
        assert!(!progress_only(&more, &failing));
        assert!(!progress_only(&failing, &more), "a recovery is news too");
        // So is an application waiting for the resource-controller's backlog
        // (it is looked at again every few seconds, and written once).
        let mut waiting = first.clone();
        let mut held = conditions::unavailable("400 or more resources wait");
        held.reason = Some(WAITING.to_owned());
        conditions::set(&mut waiting.conditions, held, "2024-01-01T00:00:00Z");
        assert!(!progress_only(&scheduled, &waiting));
        assert!(
            progress_only(&waiting, &partly),
            "its resources made: progress"
        );
        // Which waits longer: its resources are made behind the backlog.
        assert_eq!(window(&waiting), AFTER_BACKLOG);
        assert_eq!(window(&first), COALESCE);
        assert_eq!(window(&partly), COALESCE);
        // Going back is news.
        assert!(!progress_only(&more, &first));
        assert!(!progress_only(&all, &more));
    }

    #[test]
    fn a_held_application_is_looked_at_at_once_when_its_resources_end_the_submission() {
        assert!(progressing(None, KubernetesApplicationState::Scheduled));
        assert!(progressing(
            Some(KubernetesApplicationState::Scheduled),
            KubernetesApplicationState::PartiallySubmitted
        ));
        assert!(!progressing(
            Some(KubernetesApplicationState::PartiallySubmitted),
            KubernetesApplicationState::Submitted
        ));
        assert!(!progressing(
            Some(KubernetesApplicationState::PartiallySubmitted),
            KubernetesApplicationState::Failed
        ));
        assert!(!progressing(
            Some(KubernetesApplicationState::Submitted),
            KubernetesApplicationState::PartiallySubmitted
        ));
    }

    #[test]
    fn not_ready_names_each_resource_with_its_reason() {
        let ok = resource("a", Some(("True", "")));
        let bad = resource(
            "b",
            Some(("False", "the remote Deployment is not available")),
        );
        let current = [&ok, &bad];
        let got = not_ready(&names(&["a", "b", "c"]), &current);
        assert_eq!(
            got,
            [
                "b: the remote Deployment is not available",
                "c: not yet submitted"
            ]
        );
    }

    #[test]
    fn a_problem_makes_ready_false_with_its_message_when_everything_else_is_healthy() {
        let ok = resource("a", Some(("True", "")));
        let mut status = Draft::<KubernetesApplication>::default();
        let problems = ["template 1 is invalid".to_owned()];
        report(&app(2), &mut status, &names(&["a"]), &[&ok], &problems);
        let ready = conditions::get(&status.conditions, conditions::TYPE_READY).unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.message.as_deref(), Some("template 1 is invalid"));
        assert_eq!(status.desired_resources, Some(2));
        assert_eq!(status.observed_generation, Some(3));
    }

    #[test]
    fn unhealthy_resources_say_so_in_ready_before_any_problem() {
        let bad = resource("a", Some(("False", "down")));
        let mut status = Draft::<KubernetesApplication>::default();
        let problems = ["template 1 is invalid".to_owned()];
        report(&app(1), &mut status, &names(&["a"]), &[&bad], &problems);
        let ready = conditions::get(&status.conditions, conditions::TYPE_READY).unwrap();
        assert_eq!(
            ready.message.as_deref(),
            Some("not every remote object is healthy: a: down")
        );
    }

    #[test]
    fn a_resource_of_another_controller_is_left_alone_and_named() {
        let theirs = resource("a", None);
        let why = current(&theirs, &app(1), &json!({})).unwrap_err();
        assert!(
            why.contains("ns/a already exists and is controlled by no controller"),
            "{why}"
        );
    }
}
