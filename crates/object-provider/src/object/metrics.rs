//! The Object controller's own metrics: drift corrections, time to first
//! Ready, and Objects by their Synced and Ready condition.

use std::collections::BTreeMap;

use super::kind::ObjectKind;
use kube::runtime::reflector::Store;
use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts};
use runtime::conditions;
use types::kubernetes::v1alpha2::Object;

/// The Object controller's metrics.
#[derive(Clone)]
pub struct ObjectMetrics {
    /// Managed objects changed outside their Object and put back, by kind.
    pub drift: IntCounterVec,
    /// Time from an Object's creation to its first Ready=True.
    pub first_ready: Histogram,
    managed: IntGaugeVec,
}

impl ObjectMetrics {
    /// Registers the metrics with the binary's (once: the same metrics
    /// when the controller is built again).
    pub fn register(registry: &runtime::Metrics) -> Result<Self, prometheus::Error> {
        let first_ready = Histogram::with_opts(
            HistogramOpts::new(
                "crossplane_rs_time_to_first_ready_seconds",
                "Time from an Object's creation to its first Ready=True.",
            )
            .buckets(vec![0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0]),
        )?;
        let managed = IntGaugeVec::new(
            Opts::new(
                "crossplane_rs_managed_objects",
                "Objects by their Synced and Ready condition status.",
            ),
            &["kind", "synced", "ready"],
        )?;
        let drift =
            runtime::managed::drift::corrections_metric(registry, "Managed objects of Objects")?;
        let first_ready = registry.register(first_ready)?;
        let managed = registry.register(managed)?;
        let metrics = Self {
            drift,
            first_ready,
            managed,
        };
        Ok(metrics)
    }

    /// Sets the managed-objects gauge from the Objects' cache.
    pub fn count_managed<K: ObjectKind>(&self, objects: &Store<K>) {
        let state = objects.state();
        self.count::<K>(state.iter().map(|o| o.view()));
    }

    /// Counts no Objects: what a replica that does not lead says (the one
    /// that leads counts them).
    pub fn count_none<K: ObjectKind>(&self) {
        self.count::<K>(std::iter::empty());
    }

    /// Objects of kind `K` by condition, labelled with the kind's
    /// resource (`objects.kubernetes.crossplane.io`).
    fn count<'a, K: ObjectKind>(&self, objects: impl Iterator<Item = &'a Object>) {
        let kind = format!("{}.{}", K::plural(&()), K::group(&()));
        for ((s, r), n) in by_condition(objects) {
            self.managed
                .with_label_values(&[kind.as_str(), s, r])
                .set(n);
        }
    }
}

const STATUSES: [&str; 3] = ["True", "False", "Unknown"];

/// Objects counted by (Synced, Ready) status; every pair is present.
fn by_condition<'a>(
    objects: impl Iterator<Item = &'a Object>,
) -> BTreeMap<(&'static str, &'static str), i64> {
    let mut counts = BTreeMap::new();
    for s in STATUSES {
        for r in STATUSES {
            counts.insert((s, r), 0);
        }
    }
    for o in objects {
        let get = |t: &str| {
            let status = o
                .status
                .as_ref()
                .and_then(|s| conditions::get(&s.conditions, t))
                .map(|c| c.status.as_str());
            STATUSES
                .into_iter()
                .find(|s| Some(*s) == status)
                .unwrap_or("Unknown")
        };
        *counts
            .entry((get(conditions::TYPE_SYNCED), get(conditions::TYPE_READY)))
            .or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_are_counted_by_synced_and_ready_and_odd_statuses_are_unknown() {
        let o = |synced: &str, ready: &str| -> Object {
            serde_json::from_value(json!({
                "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
                "metadata": {"name": "o"},
                "spec": {"forProvider": {"manifest": {}}},
                "status": {"conditions": [
                    {"type": "Synced", "status": synced, "lastTransitionTime": "2024-01-01T00:00:00Z"},
                    {"type": "Ready", "status": ready, "lastTransitionTime": "2024-01-01T00:00:00Z"},
                ]},
            }))
            .unwrap()
        };
        let objs = [o("True", "True"), o("True", "True"), o("False", "weird")];
        let counts = by_condition(objs.iter());
        assert_eq!(counts.len(), 9);
        assert_eq!(counts[&("True", "True")], 2);
        assert_eq!(counts[&("False", "Unknown")], 1);
        assert_eq!(counts[&("Unknown", "Unknown")], 0);
    }
}
