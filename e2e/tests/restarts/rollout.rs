//! Both Object versions answer throughout a rollout of the object-provider:
//! the new pod serves the conversion webhook before it is Ready, and the
//! old one keeps serving while the Service forgets it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use e2e::{kubectl::kubectl, shipped::NS};
use kube::api::{DynamicObject, PostParams};

use super::*;

/// Objects read at both versions during the rollout.
const READ: usize = 20;

/// Reads of one version: how many answered all Objects, and what the
/// others said.
#[derive(Default)]
struct Reads {
    answered: AtomicUsize,
    failed: Mutex<Vec<String>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_object_versions_answer_throughout_a_rollout_of_the_object_provider() {
    let _turn = ONE_AT_A_TIME.lock().await;
    blocking(|| {
        shipped();
    });
    let (client, _) = clients().await;
    let id = testenv::unique_name("rollout");
    let label = format!("{LABEL}={id}");
    let v1 = Api::<DynamicObject>::all_with(client.clone(), &e2e::objects::at_version("v1alpha1"));
    for i in 0..READ {
        let mut body = object(
            &format!("{id}-{i}"),
            "default",
            configmap("unused", "default", json!({})),
            json!({}),
        );
        // Paused: this test is about what the API server answers.
        body["metadata"] = json!({"name": format!("{id}-{i}"), "labels": {LABEL: id},
            "annotations": {"crossplane.io/paused": "true"}});
        let o: DynamicObject = serde_json::from_value(body).unwrap();
        v1.create(&PostParams::default(), &o).await.unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = ["v1alpha1", "v1alpha2"]
        .into_iter()
        .map(|version| {
            let (api, label, stop) = (
                Api::<DynamicObject>::all_with(client.clone(), &e2e::objects::at_version(version)),
                label.clone(),
                stop.clone(),
            );
            let reads = Arc::new(Reads::default());
            let counted = reads.clone();
            let task = tokio::spawn(async move {
                while !stop.load(Ordering::Acquire) {
                    match api.list(&ListParams::default().labels(&label)).await {
                        Ok(l) if l.items.len() == READ => {
                            counted.answered.fetch_add(1, Ordering::AcqRel);
                        }
                        Ok(l) => counted
                            .failed
                            .lock()
                            .unwrap()
                            .push(format!("{} Objects", l.items.len())),
                        Err(e) => counted.failed.lock().unwrap().push(e.to_string()),
                    }
                    // Paced, not synchronised: reads every 50 ms.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
            (version, reads, task)
        })
        .collect();

    let (old, _) = pod_of_provider();
    blocking(|| {
        kubectl(&["rollout", "restart", "deployment/object-provider", "-n", NS]);
        kubectl(&[
            "rollout",
            "status",
            "deployment/object-provider",
            "-n",
            NS,
            "--timeout=180s",
        ]);
    });
    // Until the old pod is gone, and a little after: reads go on.
    wait(WAIT, &format!("the old pod {old} gone"), || async {
        let (gone, out) = blocking(|| {
            e2e::kubectl::kubectl_try(&["get", "pod", &old, "-n", NS, "--ignore-not-found"])
        });
        (gone && out.trim().is_empty()).then_some(()).ok_or(out)
    })
    .await;
    let after: Vec<usize> = readers
        .iter()
        .map(|(_, r, _)| r.answered.load(Ordering::Acquire))
        .collect();
    wait(WAIT, "ten more reads of each version", || async {
        readers
            .iter()
            .zip(&after)
            .all(|((_, r, _), n)| r.answered.load(Ordering::Acquire) >= n + 10)
            .then_some(())
            .ok_or("reading".to_owned())
    })
    .await;
    stop.store(true, Ordering::Release);
    for (version, reads, task) in readers {
        task.await.unwrap();
        let failed = reads.failed.lock().unwrap();
        let answered = reads.answered.load(Ordering::Acquire);
        eprintln!(
            "{version}: {answered} reads answered, {} failed",
            failed.len()
        );
        assert!(
            failed.is_empty(),
            "{version}: {} of {} reads failed during the rollout: {:?}",
            failed.len(),
            answered + failed.len(),
            &failed[..failed.len().min(5)]
        );
    }
    v1.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&label),
    )
    .await
    .unwrap();
}

/// The running object-provider pod.
fn pod_of_provider() -> (String, i64) {
    blocking(|| e2e::shipped::pod_of("object-provider"))
}
