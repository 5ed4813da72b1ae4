//! What one health rule (or Object readiness query) costs: the project's
//! one CEL engine (`runtime::cel`) compiling a rule once and evaluating it
//! against representative remote objects, as the resource-controller and
//! the object-provider do on every observation of an object with rules.
//! A benchmark command, not a test: no API server is involved.
//!
//!   cargo run --release -p benchmarks --bin cel-bench -- [--evaluations N] [--out FILE]
//!
//! Writes bench/cel.json: per rule, the compile time and the time of one
//! evaluation (p50, p99, mean over N in a row), and two callers at once.

use std::time::Instant;

use anyhow::Context as _;
use benchmarks::percentile;
use runtime::cel::{Queries, Query};
use serde_json::{Value, json};

/// A Deployment with the status a controller writes, and a custom
/// resource with many conditions: what rules read.
fn objects() -> Vec<(&'static str, Value)> {
    let conditions: Vec<Value> = (0..50)
        .map(|i| json!({"type": format!("Check{i}"), "status": "True", "reason": "Fine", "message": "x".repeat(80)}))
        .chain(std::iter::once(json!({"type": "Ready", "status": "True"})))
        .collect();
    vec![
        (
            "deployment",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "apps", "labels": {"app": "web"}},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
                "status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "observedGeneration": 4,
                           "conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}]},
            }),
        ),
        (
            "custom-50-conditions",
            json!({
                "apiVersion": "example.org/v1", "kind": "Database",
                "metadata": {"name": "orders", "namespace": "apps"},
                "spec": {"size": 1},
                "status": {"phase": "Running", "conditions": conditions},
            }),
        ),
    ]
}

/// The rules: a field compared, a condition found, a message built.
const RULES: [(&str, &str); 4] = [
    (
        "phase",
        "has(object.status.phase) ? object.status.phase == 'Running' : object.status.readyReplicas == object.spec.replicas",
    ),
    (
        "condition-exists",
        "object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
    ),
    (
        "all-conditions-true",
        "object.status.conditions.all(c, c.status == 'True')",
    ),
    (
        "message",
        "'ready: ' + string(size(object.status.conditions)) + ' conditions'",
    ),
];

fn stats(mut micros: Vec<f64>) -> Value {
    micros.sort_by(f64::total_cmp);
    let mean = micros.iter().sum::<f64>() / micros.len().max(1) as f64;
    json!({
        "p50_us": percentile(&micros, 0.5),
        "p99_us": percentile(&micros, 0.99),
        "max_us": micros.last(),
        "mean_us": mean,
        "samples": micros.len(),
    })
}

async fn evaluate(query: &Query, object: &Value, text: bool) -> anyhow::Result<()> {
    if text {
        query.evaluate_text(object).await.map(drop)?;
    } else {
        query.evaluate(object).await.map(drop)?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let n: usize = flag("--evaluations")
        .map(|s| s.parse())
        .transpose()
        .context("--evaluations")?
        .unwrap_or(2000);
    let out = flag("--out").unwrap_or_else(|| "bench/cel.json".to_owned());
    let mut results = Vec::new();
    for (rule, source) in RULES {
        let text = rule == "message";
        let mut compile = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            Query::compile(source).map_err(|e| anyhow::anyhow!("{rule}: {e}"))?;
            compile.push(t.elapsed().as_secs_f64() * 1e6);
        }
        // What a reconcile pays once compiled: the cache's answer.
        let cache = Queries::new(16);
        cache
            .get(source)
            .map_err(|e| anyhow::anyhow!("{rule}: {e}"))?;
        let t = Instant::now();
        for _ in 0..n {
            cache
                .get(source)
                .map_err(|e| anyhow::anyhow!("{rule}: {e}"))?;
        }
        let cached_get = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let query = Query::compile(source).map_err(|e| anyhow::anyhow!("{rule}: {e}"))?;
        for (object_name, object) in objects() {
            let mut one = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                evaluate(&query, &object, text)
                    .await
                    .with_context(|| format!("{rule} on {object_name}"))?;
                one.push(t.elapsed().as_secs_f64() * 1e6);
            }
            // Two reconciles at once (the engine's parallelism).
            let t = Instant::now();
            let (a, b) = tokio::join!(
                async {
                    for _ in 0..n / 2 {
                        evaluate(&query, &object, text).await?;
                    }
                    anyhow::Ok(())
                },
                async {
                    for _ in 0..n / 2 {
                        evaluate(&query, &object, text).await?;
                    }
                    anyhow::Ok(())
                }
            );
            a?;
            b?;
            let per_second = (n / 2 * 2) as f64 / t.elapsed().as_secs_f64();
            eprintln!(
                "{rule} on {object_name}: p50 {:.1} us",
                stats(one.clone())["p50_us"].as_f64().unwrap_or_default()
            );
            results.push(json!({
                "rule": rule,
                "expression": source,
                "object": object_name,
                "object_bytes": object.to_string().len(),
                "compile": stats(compile.clone()),
                "cached_compile_us": cached_get,
                "evaluate": stats(one),
                "evaluations_per_second_two_callers": per_second,
            }));
        }
    }
    let report = json!({
        "benchmark": "cel",
        "what": "runtime::cel: one health rule or readiness query, compiled once per source and evaluated per observation",
        "evaluations": n,
        "machine": {"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
        "results": results,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {out}"))?;
    eprintln!("wrote {out}");
    Ok(())
}
