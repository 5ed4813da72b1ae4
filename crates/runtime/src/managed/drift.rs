//! Drift reports: when a managed object's fields were changed by someone
//! else and put back, which paths changed, which field manager changed them
//! (from the object's managedFields), and how often that happened in the
//! last hour, kept in the resource's status (so a restart forgets nothing)
//! and bounded. Paths only: no value of the object ever reaches a report, an
//! event or a condition, so a Secret's data cannot either.
//!
//! A resource corrected more than the threshold within an hour is in a
//! drift loop: [`loop_condition`] says so, naming the other manager, so a
//! fight with an HPA or another controller is seen instead of going on
//! silently.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use prometheus::IntCounterVec;
use serde_json::Value;
use types::common::{Condition, DriftReport, TYPE_DRIFT_LOOP};

use crate::fieldpath::{self, Segment};

/// The most paths one report names.
pub const MAX_PATHS: usize = 16;
/// The most correction times a report keeps.
pub const MAX_RECENT: usize = 32;
/// The window corrections are counted over.
pub const WINDOW: SignedDuration = SignedDuration::from_hours(1);
/// Reason of the DriftLoop condition while a loop is on.
pub const REASON_FIGHTING: &str = "FightingAnotherManager";
/// Reason of the DriftLoop condition once it is over.
pub const REASON_SETTLED: &str = "NoRecentDrift";
/// Reason of the event of one correction.
pub const REASON_CORRECTED: &str = "DriftCorrected";

/// What one correction found: the paths that differed and who changed them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Correction {
    /// Paths of the managed fields that differed (at most [`MAX_PATHS`]).
    pub paths: Vec<String>,
    /// The field manager other than this controller that owns one of them,
    /// the latest to have written, if the object says.
    pub manager: Option<String>,
}

impl Correction {
    /// What changed in `live` (as the target serves it, managedFields
    /// included when it was read from the server) against `desired`, the
    /// object this controller applies with manager `ours`.
    pub fn found(desired: &Value, live: &Value, ours: &str) -> Self {
        let mut changed = changed_paths(desired, live);
        let manager = changed_by(live, &changed, ours);
        // Fields the target only normalised (1000m read back as 1) differ
        // too: when another manager is known, the paths it owns are what
        // it changed.
        if manager.is_some() {
            let theirs: Vec<_> = changed
                .iter()
                .filter(|p| changed_by(live, std::slice::from_ref(*p), ours).is_some())
                .cloned()
                .collect();
            if !theirs.is_empty() {
                changed = theirs;
            }
        }
        let paths = changed
            .iter()
            .take(MAX_PATHS)
            .map(|p| fieldpath::display(p))
            .collect();
        Self { paths, manager }
    }

    /// "spec.replicas (changed by kubectl-edit)", for events and
    /// conditions.
    pub fn describe(&self) -> String {
        let paths = if self.paths.is_empty() {
            "its fields".to_owned()
        } else {
            self.paths.join(", ")
        };
        match &self.manager {
            Some(m) => format!("{paths} (changed by {m})"),
            None => paths,
        }
    }
}

/// What reading a drifted object from the server says.
#[derive(Clone, Debug, PartialEq)]
pub enum Confirmed {
    /// Nothing `desired` sets differs on the server after all (the watch
    /// had shown an older version): the object as the server has it, and
    /// nothing to apply or report.
    NoDrift(Value),
    /// Drift: what changed, and who changed it when the server said.
    Drift(Correction),
}

/// Judges drift seen in `cached` (the watch's object) by `fresh`, the
/// object read from the server with its managedFields (None when that read
/// failed: the paths the watch showed, who changed them unknown).
pub fn confirm(
    desired: &Value,
    fresh: Option<Value>,
    cached: Option<&Value>,
    ours: &str,
) -> Confirmed {
    match (fresh, cached) {
        (Some(live), _) => {
            let c = Correction::found(desired, &live, ours);
            if c.paths.is_empty() {
                Confirmed::NoDrift(live)
            } else {
                Confirmed::Drift(c)
            }
        }
        (None, Some(cached)) => Confirmed::Drift(Correction::found(desired, cached, ours)),
        (None, None) => Confirmed::Drift(Correction::default()),
    }
}

/// The paths of `desired`'s leaves that `live` does not have as desired.
/// Lists of the same length are compared item by item; others whole.
pub fn changed_paths(desired: &Value, live: &Value) -> Vec<Vec<Segment>> {
    let mut out = Vec::new();
    walk(desired, Some(live), &mut Vec::new(), &mut out);
    out
}

fn walk(desired: &Value, live: Option<&Value>, at: &mut Vec<Segment>, out: &mut Vec<Vec<Segment>>) {
    if out.len() > MAX_PATHS {
        return;
    }
    match (desired, live) {
        (Value::Object(d), Some(Value::Object(l))) => {
            for (k, sub) in d {
                at.push(Segment::Field(k.clone()));
                walk(sub, l.get(k), at, out);
                at.pop();
            }
        }
        (Value::Array(d), Some(Value::Array(l))) if d.len() == l.len() && !d.is_empty() => {
            for (i, (sub, live)) in d.iter().zip(l).enumerate() {
                at.push(Segment::Index(i));
                walk(sub, Some(live), at, out);
                at.pop();
            }
        }
        (d, Some(l)) if super::project(l, d) == *d => {}
        _ => out.push(at.clone()),
    }
}

/// The latest field manager other than `ours` (or one named after it) that
/// owns one of `paths` in `live`'s managedFields.
pub fn changed_by(live: &Value, paths: &[Vec<Segment>], ours: &str) -> Option<String> {
    let entries = live
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)?;
    entries
        .iter()
        .filter_map(|e| {
            let manager = e.get("manager").and_then(Value::as_str)?;
            let fields = e.get("fieldsV1")?;
            (!manager.starts_with(ours) && paths.iter().any(|p| owns(fields, p)))
                .then(|| (e.get("time").and_then(Value::as_str).unwrap_or(""), manager))
        })
        .max_by(|a, b| a.0.cmp(b.0))
        .map(|(_, m)| m.to_owned())
}

/// Whether a managedFields `fieldsV1` set holds `path` (or, at a list
/// index, anything in that list).
fn owns(fields: &Value, path: &[Segment]) -> bool {
    let mut node = fields;
    for seg in path {
        match seg {
            Segment::Field(f) => match node.get(format!("f:{f}")) {
                Some(next) => node = next,
                None => return false,
            },
            // Items of a list are keyed by their merge keys or values,
            // which an index does not say: owning any of them counts.
            Segment::Index(_) => {
                return node.as_object().is_some_and(|o| o.keys().any(|k| k != "."));
            }
        }
    }
    true
}

/// The report after one more correction at `now`: the times of the last
/// hour (bounded), this correction's paths and manager.
pub fn record(previous: Option<&DriftReport>, c: &Correction, now: Timestamp) -> DriftReport {
    let mut recent = recent(previous, now);
    recent.push(now.to_string());
    let keep = recent.len().saturating_sub(MAX_RECENT);
    recent.drain(..keep);
    DriftReport {
        last_corrected_time: Some(now.to_string()),
        paths: c.paths.clone(),
        // Not known this time (the object could not be read with its
        // managedFields): the one that changed the same paths last time.
        manager: c.manager.clone().or_else(|| {
            previous
                .filter(|p| p.paths == c.paths)
                .and_then(|p| p.manager.clone())
        }),
        corrections_in_last_hour: recent.len() as i64,
        recent,
    }
}

/// The correction times of `report` within the hour before `now`.
fn recent(report: Option<&DriftReport>, now: Timestamp) -> Vec<String> {
    let since = now - WINDOW;
    report
        .map(|r| r.recent.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|t| t.parse::<Timestamp>().is_ok_and(|t| t > since))
        .cloned()
        .collect()
}

/// How many corrections `report` counts within the hour before `now`.
pub fn in_last_hour(report: Option<&DriftReport>, now: Timestamp) -> usize {
    recent(report, now).len()
}

/// The DriftLoop condition `report` calls for at `now` with `threshold`
/// corrections an hour allowed: True naming the paths and the other
/// manager while over it; False once it is not, only when `conditions`
/// had it (a resource that never fought carries no such condition).
pub fn loop_condition(
    report: Option<&DriftReport>,
    threshold: u32,
    conditions: &[Condition],
    now: Timestamp,
) -> Option<Condition> {
    let count = in_last_hour(report, now);
    if count > threshold as usize
        && let Some(r) = report
    {
        let who = r.manager.as_deref().map_or_else(
            || "another writer".to_owned(),
            |m| format!("field manager {m}"),
        );
        let paths = if r.paths.is_empty() {
            "its fields".to_owned()
        } else {
            r.paths.join(", ")
        };
        return Some(crate::conditions::custom(
            TYPE_DRIFT_LOOP,
            true,
            REASON_FIGHTING,
            Some(format!(
                "{paths} put back {count} times in the last hour, each time changed again by {who}: \
                 let it own them (writeStrategy.ignoreFields, or drop them from the template) or stop it"
            )),
        ));
    }
    crate::conditions::get(conditions, TYPE_DRIFT_LOOP)
        .filter(|c| c.status == "True")
        .map(|_| {
            crate::conditions::custom(
                TYPE_DRIFT_LOOP,
                false,
                REASON_SETTLED,
                Some(format!(
                    "{count} corrections in the last hour, at most {threshold} allowed"
                )),
            )
        })
}

/// What a controller reports drift with: its corrections metric, its
/// events and --drift-loop-threshold.
pub struct Reporter<'a> {
    /// crossplane_rs_drift_corrections_total ([`corrections_metric`]).
    pub metric: &'a IntCounterVec,
    /// The controller's events.
    pub events: &'a crate::events::EventReporter,
    /// Corrections an hour allowed before a drift loop.
    pub threshold: u32,
}

impl Reporter<'_> {
    /// Records one correction of the managed object (of `kind`; `changed`
    /// says in the event what was changed outside what) in `report`,
    /// counts it, and says it:
    /// a Normal event naming what was put back, or once over the
    /// threshold a Warning naming the other manager.
    pub async fn corrected(
        &self,
        report: &mut Option<DriftReport>,
        at: &k8s_openapi::api::core::v1::ObjectReference,
        kind: &str,
        changed: &str,
        correction: &Correction,
    ) {
        let now = Timestamp::now();
        let recorded = record(report.as_ref(), correction, now);
        let count = recorded.corrections_in_last_hour;
        *report = Some(recorded);
        self.metric.with_label_values(&[kind]).inc();
        match loop_condition(report.as_ref(), self.threshold, &[], now) {
            Some(looping) if looping.status == "True" => {
                let why = looping.message.unwrap_or_default();
                self.events.warning(at, TYPE_DRIFT_LOOP, why).await;
            }
            _ => {
                let why = format!(
                    "{changed} and put back: {}; {count} time(s) in the last hour",
                    correction.describe()
                );
                self.events.normal(at, REASON_CORRECTED, why).await;
            }
        }
    }

    /// Sets the DriftLoop condition among `conditions` when `report` calls
    /// for it.
    pub fn loop_condition(&self, report: Option<&DriftReport>, conditions: &mut Vec<Condition>) {
        if let Some(c) = loop_condition(report, self.threshold, conditions, Timestamp::now()) {
            crate::conditions::set(conditions, c, &crate::conditions::now());
        }
    }
}

/// The drift corrections metric, by the managed object's kind.
pub fn corrections_metric(
    metrics: &crate::Metrics,
    what: &str,
) -> Result<IntCounterVec, prometheus::Error> {
    let counter = IntCounterVec::new(
        prometheus::Opts::new(
            "crossplane_rs_drift_corrections_total",
            format!("{what} changed by someone else and put back, by kind."),
        ),
        &["kind"],
    )?;
    metrics.register(counter)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn deployment(replicas: i64, managers: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "managedFields": managers,
                         "annotations": {"a": "1"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:1", "resources": {"limits": {"cpu": "1"}}}]}}}
        })
    }

    fn desired() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "annotations": {"a": "1"}},
               "spec": {"replicas": 3, "template": {"spec": {"containers": [
                   {"name": "web", "image": "nginx:1"}]}}}})
    }

    fn managers() -> Value {
        json!([
            {"manager": "crossplane-rs-resource-controller", "operation": "Apply",
             "time": "2026-12-02T10:00:00Z",
             "fieldsV1": {"f:spec": {"f:template": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-12-02T10:01:00Z",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update",
             "time": "2026-12-02T10:02:00Z",
             "fieldsV1": {"f:status": {"f:replicas": {}}}}
        ])
    }

    #[test]
    fn a_correction_names_the_changed_paths_and_who_changed_them() {
        let live = deployment(5, managers());
        let c = Correction::found(&desired(), &live, "crossplane-rs-resource-controller");
        assert_eq!(c.paths, vec!["spec.replicas"]);
        assert_eq!(c.manager.as_deref(), Some("kubectl-edit"));
        assert_eq!(c.describe(), "spec.replicas (changed by kubectl-edit)");
    }

    #[test]
    fn list_items_are_compared_one_by_one_and_values_never_appear() {
        let mut live = deployment(3, json!([]));
        fieldpath::set(
            &mut live,
            &fieldpath::parse("spec.template.spec.containers[0].image").unwrap(),
            json!("evil:latest"),
        )
        .unwrap();
        let c = Correction::found(&desired(), &live, "me");
        assert_eq!(c.paths, vec!["spec.template.spec.containers[0].image"]);
        assert_eq!(c.manager, None);
        assert!(!c.describe().contains("evil"));
        // A list of another length is named whole.
        let mut longer = live.clone();
        longer
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
            .unwrap()
            .push(json!({"name": "sidecar"}));
        let c = Correction::found(&desired(), &longer, "me");
        assert_eq!(c.paths, vec!["spec.template.spec.containers"]);
    }

    #[test]
    fn drift_the_server_does_not_show_is_none_and_a_failed_read_keeps_the_paths() {
        let cached = deployment(5, json!([]));
        let fresh = deployment(3, json!([]));
        assert!(matches!(
            confirm(&desired(), Some(fresh), Some(&cached), "me"),
            Confirmed::NoDrift(_)
        ));
        let Confirmed::Drift(c) = confirm(&desired(), None, Some(&cached), "me") else {
            panic!("a failed read is drift")
        };
        assert_eq!(
            (c.paths, c.manager),
            (vec!["spec.replicas".to_owned()], None)
        );
    }

    #[test]
    fn our_own_managers_are_never_named() {
        let live = deployment(
            5,
            json!([{"manager": "crossplane-rs-resource-controller-initial", "operation": "Apply",
                    "time": "2026-12-02T10:05:00Z", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]),
        );
        let c = Correction::found(&desired(), &live, "crossplane-rs-resource-controller");
        assert_eq!(c.manager, None);
    }

    #[test]
    fn reports_count_the_last_hour_and_stay_bounded() {
        let c = Correction {
            paths: vec!["spec.replicas".into()],
            manager: Some("hpa".into()),
        };
        let t0: Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
        let mut report = None;
        for i in 0..40 {
            report = Some(record(
                report.as_ref(),
                &c,
                t0 + SignedDuration::from_secs(i),
            ));
        }
        let r = report.unwrap();
        assert_eq!(r.recent.len(), MAX_RECENT);
        assert_eq!(r.corrections_in_last_hour, MAX_RECENT as i64);
        // Two hours later only the new one counts.
        let later = t0 + SignedDuration::from_hours(2);
        let r = record(Some(&r), &c, later);
        assert_eq!(r.corrections_in_last_hour, 1);
        assert_eq!(r.last_corrected_time, Some(later.to_string()));
    }

    #[test]
    fn a_loop_is_named_while_over_the_threshold_and_settles_after() {
        let c = Correction {
            paths: vec!["spec.replicas".into()],
            manager: Some("hpa".into()),
        };
        let t0: Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
        let mut report = None;
        for i in 0..3 {
            report = Some(record(
                report.as_ref(),
                &c,
                t0 + SignedDuration::from_secs(i),
            ));
        }
        let now = t0 + SignedDuration::from_secs(5);
        assert_eq!(loop_condition(report.as_ref(), 3, &[], now), None);
        let report = Some(record(report.as_ref(), &c, now));
        let on = loop_condition(report.as_ref(), 3, &[], now).unwrap();
        assert_eq!(on.status, "True");
        let message = on.message.clone().unwrap();
        assert!(message.contains("spec.replicas"), "{message}");
        assert!(message.contains("field manager hpa"), "{message}");
        assert!(message.contains("4 times"), "{message}");
        let later = now + SignedDuration::from_hours(2);
        let off = loop_condition(report.as_ref(), 3, &[on], later).unwrap();
        assert_eq!(off.status, "False");
        assert_eq!(off.reason.as_deref(), Some(REASON_SETTLED));
    }
}
