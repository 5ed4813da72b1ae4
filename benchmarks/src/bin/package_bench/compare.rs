//! The verdicts of one run: each side against the null writers, and
//! crossplane-rs against upstream axis by axis, from the phases' JSON.

use serde_json::{Map, Value, json};

/// A number at `pointer` of `v`.
fn num(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

/// Requests per unit of a phase's `requests…` JSON, leaving out lease
/// renewals (leader election's, the same for any number of Providers).
fn without_leases(requests: &Value) -> Option<f64> {
    let total = num(requests, "/total")?;
    let per_unit = num(requests, "/per_unit_total")?;
    let leases: f64 = requests
        .pointer("/by_cluster/control")?
        .as_object()?
        .values()
        .filter_map(|u| u.get("by_verb_and_resource")?.as_object())
        .flat_map(|m| m.iter())
        .filter(|(k, _)| k.ends_with(" leases"))
        .filter_map(|(_, n)| n.as_f64())
        .sum();
    // per_unit_total = total / units.
    let units = if per_unit > 0.0 {
        total / per_unit
    } else {
        1.0
    };
    Some((total - leases) / units)
}

/// The sum over a side's two binaries of `field` in a phase's usage.
fn summed(usage: &Value, field: &str) -> Option<f64> {
    let all: Vec<f64> = usage
        .as_object()?
        .values()
        .filter_map(|u| u.get(field)?.as_f64())
        .collect();
    (!all.is_empty()).then(|| all.iter().sum())
}

/// The largest over a side's binaries of `field` in a phase's usage.
fn largest(usage: &Value, field: &str) -> Option<f64> {
    usage
        .as_object()?
        .values()
        .filter_map(|u| u.get(field)?.as_f64())
        .reduce(f64::max)
}

/// One side's figures on each axis.
fn figures(side: &Value, null_ready_s: Option<f64>, with_mrds_ready_s: Option<f64>) -> Value {
    let healthy = num(side, "/install/all_healthy_s");
    json!({
        "one_provider_healthy_s": num(side, "/one_provider/seconds_from_apply/healthy"),
        "all_healthy_s": healthy,
        "each_healthy_p50_s": num(side, "/install/each_healthy_s/p50_s"),
        "each_healthy_p99_s": num(side, "/install/each_healthy_s/p99_s"),
        "fraction_of_null_writer": null_ready_s.zip(healthy).map(|(n, h)| n / h),
        "fraction_of_null_writer_with_mrds": with_mrds_ready_s.zip(healthy).map(|(n, h)| n / h),
        "requests_per_revision": num(side, "/install/requests_per_revision/per_unit_total"),
        "cpu_s_install": side.pointer("/install/usage").and_then(|u| summed(u, "cpu_s")),
        // VmHWM: each binary's peak over the run so far.
        "peak_rss_mib": side.pointer("/delete/usage").and_then(|u| largest(u, "peak_rss_mib")),
        "rss_growth_kib_per_crd": side.pointer("/install/rss_growth_kib_per_crd"),
        "idle_requests_per_provider_per_minute": num(side, "/idle/requests_per_provider_per_minute/per_unit_total"),
        "idle_requests_per_provider_per_minute_without_leases":
            side.pointer("/idle/requests_per_provider_per_minute").and_then(without_leases),
        "all_upgraded_s": num(side, "/upgrade/all_upgraded_s"),
        "upgrade_failed_reads": num(side, "/upgrade/failed_reads"),
        "delete_crds_gone_s": num(side, "/delete/crds_gone_s"),
        "delete_all_gone_s": num(side, "/delete/all_gone_s"),
        "orphaned_objects": num(side, "/delete/orphaned_objects"),
    })
}

/// Each side's figures, and upstream's divided by crossplane-rs's on each
/// axis where less is better (above 1: crossplane-rs is ahead).
pub fn verdicts(nulls: &[&Value], with_mrds: &Value, sides: &Map<String, Value>) -> Value {
    // The mean of the null writer's runs (before the sides, and again
    // after crossplane-rs's when there is one).
    let runs: Vec<f64> = nulls
        .iter()
        .filter_map(|n| num(n, "/all_ready_s"))
        .collect();
    let null_ready_s = (!runs.is_empty()).then(|| runs.iter().sum::<f64>() / runs.len() as f64);
    let with_mrds_ready_s = num(with_mrds, "/all_ready_s");
    let mut out = Map::new();
    out.insert("null_writer_runs_s".to_owned(), json!(runs));
    for (name, side) in sides {
        out.insert(name.clone(), figures(side, null_ready_s, with_mrds_ready_s));
    }
    if let (Some(ours), Some(theirs)) = (out.get("crossplane-rs"), out.get("upstream")) {
        let mut ratios = Map::new();
        for axis in [
            "one_provider_healthy_s",
            "all_healthy_s",
            "each_healthy_p50_s",
            "each_healthy_p99_s",
            "requests_per_revision",
            "cpu_s_install",
            "peak_rss_mib",
            "all_upgraded_s",
            "delete_crds_gone_s",
            "delete_all_gone_s",
        ] {
            let ratio = num(theirs, &format!("/{axis}"))
                .zip(num(ours, &format!("/{axis}")))
                .filter(|(_, o)| *o > 0.0)
                .map(|(t, o)| t / o);
            ratios.insert(axis.to_owned(), json!(ratio));
        }
        out.insert(
            "upstream_over_crossplane_rs".to_owned(),
            Value::Object(ratios),
        );
    }
    Value::Object(out)
}
