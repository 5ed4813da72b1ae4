//! The phases of a run, in the order they run: each changes something,
//! waits for the provider to catch up, and returns its JSON.

use std::{collections::HashMap, time::Instant};

use benchmarks::{Reached, latency_json, scaled_timeout};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch},
};
use serde_json::{Value, json};

use crate::{
    run::{
        REFS_NS, REMOTE_NS, apply_all, data_is, latency_phase, merge, name, object, ref_name, ssa,
    },
    setup::Run,
};

/// N Objects each managing a remote ConfigMap: Objects/s, create→Ready.
pub async fn create(run: &Run) -> Value {
    let Run {
        args,
        bench,
        objects,
        object_probe,
        null_writer,
        null_provider,
        names,
        ..
    } = run;
    let n = args.objects;
    eprintln!("object-bench: creating {n} Objects");
    for nm in names {
        object_probe.expect(
            nm,
            Box::new(|o: &Value| {
                o["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            }),
        );
    }
    let before = bench.mark();
    let started = Instant::now();
    let bodies = (0..n)
        .map(|i| {
            (
                name(i),
                object(args.shape, &name(i), json!({"i": i.to_string()}), None),
            )
        })
        .collect();
    let (sent, errors) = apply_all(objects, "object-bench", bodies, args.concurrency).await;
    let reached = object_probe.wait(names, scaled_timeout(n)).await;
    let duration = started.elapsed();
    let after = bench.settle_and_mark().await;
    let latencies = object_probe.latencies(&sent);
    let objects_per_s = reached.done as f64 / duration.as_secs_f64();
    let ceiling = null_writer["creates_per_s"].as_f64().unwrap_or(f64::NAN);
    let like_for_like = null_provider["objects_per_s"].as_f64().unwrap_or(f64::NAN);
    merge(
        merge(reached.json(), bench.between(&before, &after, n as f64)),
        json!({
            "request_errors": errors,
            "duration_s": duration.as_secs_f64(),
            "objects_per_s": objects_per_s,
            "fraction_of_null_writer": objects_per_s / ceiling,
            "fraction_of_null_provider": objects_per_s / like_for_like,
            "ready": latency_json(&latencies),
        }),
    )
}

/// Nothing to do for `--idle`: requests per Object-hour.
pub async fn idle(run: &Run) -> Value {
    let Run { args, bench, .. } = run;
    let n = args.objects;
    let resync = format!("{}s", args.resync.as_secs());
    eprintln!(
        "object-bench: idle for {:?} (provider --poll-interval {resync})",
        args.idle
    );
    let before = bench.mark();
    tokio::time::sleep(args.idle).await;
    let after = bench.mark();
    let hours = args.idle.as_secs_f64() / 3600.0;
    let idle = bench.between(&before, &after, n as f64);
    let per_object_hour = |v: &Value| v.as_f64().map(|x| x / hours);
    merge(
        json!({
            "window_s": args.idle.as_secs_f64(),
            "poll_interval_s": args.resync.as_secs(),
            "metrics_requests_per_object_hour": per_object_hour(&idle["requests"]["metrics"]["per_unit_total"]),
            "audit_requests_per_object_hour": per_object_hour(&idle["requests"]["audit"]["per_unit_total"]),
        }),
        idle,
    )
}

/// Every Object's data changes: until the remote ConfigMaps carry it.
pub async fn update(run: &Run) -> Value {
    let Run {
        args,
        bench,
        objects,
        remote_probe,
        names,
        ..
    } = run;
    let n = args.objects;
    eprintln!("object-bench: updating {n} Objects");
    for (i, nm) in names.iter().enumerate() {
        remote_probe.expect(nm, data_is("i", format!("u{i}")));
    }
    let before = bench.mark();
    let started = Instant::now();
    let bodies = (0..n)
        .map(|i| {
            (
                name(i),
                object(args.shape, &name(i), json!({"i": format!("u{i}")}), None),
            )
        })
        .collect();
    let (sent, errors) = apply_all(objects, "object-bench", bodies, args.concurrency).await;
    let reached = remote_probe.wait(names, scaled_timeout(n)).await;
    let duration = started.elapsed();
    let after = bench.settle_and_mark().await;
    merge(
        merge(reached.json(), bench.between(&before, &after, n as f64)),
        json!({
            "request_errors": errors,
            "duration_s": duration.as_secs_f64(),
            "objects_per_s": reached.done as f64 / duration.as_secs_f64(),
            "remote_changed": latency_json(&remote_probe.latencies(&sent)),
        }),
    )
}

/// Another manager labels K remote ConfigMaps: until the Objects' status
/// shows it.
pub async fn remote_change(run: &Run) -> Value {
    let Run {
        args,
        bench,
        remote_cms,
        object_probe,
        changed,
        stamp,
        ..
    } = run;
    let k = args.changes;
    eprintln!("object-bench: another manager labels {k} remote ConfigMaps");
    for nm in changed {
        let want = stamp.clone();
        object_probe.expect(
            nm,
            Box::new(move |o: &Value| {
                o["status"]["atProvider"]["manifest"]["metadata"]["labels"]["bench/changed"]
                    .as_str()
                    == Some(want.as_str())
            }),
        );
    }
    let before = bench.mark();
    let bodies = changed
        .iter()
        .map(|nm| {
            (nm.clone(), json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": nm, "namespace": REMOTE_NS, "labels": {"bench/changed": stamp}}}))
        })
        .collect();
    let (sent, errors) = apply_all(remote_cms, "bench-labeller", bodies, args.concurrency).await;
    let reached = object_probe.wait(changed, args.latency_timeout).await;
    let after = bench.settle_and_mark().await;
    latency_phase(
        bench,
        reached,
        errors,
        &before,
        &after,
        k,
        "status_shows_it",
        object_probe.latencies(&sent),
    )
}

/// Another manager changes data the Objects set on K remote ConfigMaps:
/// until it is put back.
pub async fn drift(run: &Run) -> Value {
    let Run {
        args,
        bench,
        remote_cms,
        remote_probe,
        changed,
        ..
    } = run;
    let k = args.changes;
    eprintln!("object-bench: another manager changes data.i on {k} remote ConfigMaps");
    let before = bench.mark();
    let mut sent = HashMap::new();
    let mut errors = 0;
    for (i, nm) in changed.iter().enumerate() {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": nm, "namespace": REMOTE_NS}, "data": {"i": "drifted"}});
        // Expected before the edit is sent: the provider may put the value
        // back before the edit's answer reaches this benchmark. Met by the
        // first event with our value after one with the drifted value.
        let want = format!("u{i}");
        let seen_drift = std::sync::atomic::AtomicBool::new(false);
        remote_probe.expect(
            nm,
            Box::new(move |o: &Value| {
                use std::sync::atomic::Ordering::SeqCst;
                match o["data"]["i"].as_str() {
                    Some("drifted") => {
                        seen_drift.store(true, SeqCst);
                        false
                    }
                    Some(v) => v == want && seen_drift.load(SeqCst),
                    None => false,
                }
            }),
        );
        sent.insert(nm.clone(), Instant::now());
        if remote_cms
            .patch(nm, &ssa("bench-drifter"), &Patch::Apply(&body))
            .await
            .is_err()
        {
            errors += 1;
        }
    }
    let reached = remote_probe.wait(changed, args.latency_timeout).await;
    let after = bench.settle_and_mark().await;
    latency_phase(
        bench,
        reached,
        errors,
        &before,
        &after,
        k,
        "reverted",
        remote_probe.latencies(&sent),
    )
}

/// K Objects copy a value from control-cluster ConfigMaps, which change:
/// until the remote objects carry the new value.
pub async fn referenced_change(run: &Run) -> Value {
    let Run {
        args,
        bench,
        objects,
        control,
        remote_probe,
        stamp,
        ..
    } = run;
    let k = args.changes;
    eprintln!("object-bench: {k} Objects referencing control-cluster ConfigMaps");
    let refs: Vec<String> = (0..k).map(ref_name).collect();
    let control_cms: Api<ConfigMap> = Api::namespaced(control.clone(), REFS_NS);
    let cm = |nm: &str, v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": nm, "namespace": REFS_NS}, "data": {"v": v}});
    apply_all(
        &control_cms,
        "object-bench",
        refs.iter().map(|r| (r.clone(), cm(r, "a0"))).collect(),
        args.concurrency,
    )
    .await;
    for r in &refs {
        remote_probe.expect(r, data_is("v", "a0".to_owned()));
    }
    let bodies = refs
        .iter()
        .map(|r| {
            (
                r.clone(),
                object(args.shape, r, json!({"i": "ref"}), Some(r)),
            )
        })
        .collect();
    apply_all(objects, "object-bench", bodies, args.concurrency).await;
    let setup = remote_probe.wait(&refs, scaled_timeout(k)).await;
    let new_value = format!("b-{stamp}");
    for r in &refs {
        remote_probe.expect(r, data_is("v", new_value.clone()));
    }
    let before = bench.settle_and_mark().await;
    let (sent, errors) = apply_all(
        &control_cms,
        "object-bench",
        refs.iter()
            .map(|r| (r.clone(), cm(r, &new_value)))
            .collect(),
        args.concurrency,
    )
    .await;
    let reached = remote_probe.wait(&refs, args.latency_timeout).await;
    let after = bench.settle_and_mark().await;
    merge(
        latency_phase(
            bench,
            reached,
            errors,
            &before,
            &after,
            k,
            "remote_carries_it",
            remote_probe.latencies(&sent),
        ),
        json!({"setup": setup.json()}),
    )
}

/// Every Object, the referencing ones too: Objects/s.
pub async fn delete(run: &Run) -> Value {
    let Run {
        args,
        bench,
        objects,
        names,
        ..
    } = run;
    let k = args.changes;
    let refs: Vec<String> = (0..k).map(ref_name).collect();
    let all: Vec<String> = names.iter().chain(&refs).cloned().collect();
    eprintln!("object-bench: deleting {} Objects", all.len());
    let before = bench.mark();
    let started = Instant::now();
    futures::stream::iter(all.clone())
        .for_each_concurrent(args.concurrency, |nm| {
            let objects = Api::clone(objects);
            async move {
                let _ = objects.delete(&nm, &DeleteParams::default()).await;
            }
        })
        .await;
    let (gone, waited) = benchmarks::wait_until(scaled_timeout(all.len()), || async {
        objects
            .list_metadata(&ListParams::default().limit(1))
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    let left = objects
        .list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(all.len());
    let duration = started.elapsed();
    let after = bench.settle_and_mark().await;
    let deleted = Reached {
        done: all.len() - left.min(all.len()),
        of: all.len(),
        waited,
    };
    debug_assert_eq!(gone, deleted.all());
    merge(
        merge(
            deleted.json(),
            bench.between(&before, &after, all.len() as f64),
        ),
        json!({"duration_s": duration.as_secs_f64(), "objects_per_s": deleted.done as f64 / duration.as_secs_f64()}),
    )
}
