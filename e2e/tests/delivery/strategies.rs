//! Write strategies and deletion policies, and drift reports: what the
//! resource-controller writes, proven by the audit log of the cluster it
//! writes to.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::ResourceExt;
use types::workload::v1alpha1::ANNOTATION_RESOURCE_UID;

use super::*;

/// How long an ignored field is watched for writes, as the issue asks.
const QUIET: Duration = Duration::from_secs(120);

fn replicas_of(d: &Deployment) -> Option<i32> {
    d.spec.as_ref()?.replicas
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_fields_are_left_to_an_autoscaler_without_a_write_or_an_event() {
    let user = "delivery-ignore";
    let start = Utc::now();
    let s = setup("ignore", Some(user)).await;
    let template = json!({
        "metadata": {"name": "web"},
        "spec": {
            "template": deployment("web", &s.tns, 1),
            "writeStrategy": {"type": "ServerSideApply", "ignoreFields": ["spec.replicas"]},
            "feedbackRules": [{"type": "WellKnownStatus"}],
        },
    });
    // A second resource without ignoreFields, for now.
    let late = json!({
        "metadata": {"name": "late"},
        "spec": {"template": deployment("late", &s.tns, 2)},
    });
    s.apply("app", json!([template.clone(), late.clone()]))
        .await;
    let res = s
        .wait_res("web", "Replicas 1", |r| {
            (feedback(r, "Replicas")? == "1").then(|| r.clone())
        })
        .await;
    let delivery = res.status.unwrap().delivery.unwrap();
    assert_eq!(delivery.ignored_fields, ["spec.replicas"]);
    let deployments = Api::<Deployment>::namespaced(s.client.clone(), &s.tns);
    // Created with the template's replicas, which a second manager of the
    // controller's keeps until someone else takes them.
    let created = deployments.get("web").await.unwrap();
    let managers: Vec<String> = created
        .managed_fields()
        .iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m.ends_with("-initial")),
        "replicas owned by {managers:?}"
    );

    // The autoscaler takes replicas.
    let since = Utc::now();
    scale(&s.client, &s.tns, "web", 2).await;
    // The controller sees it (the status it brings back follows) ...
    s.wait_res("web", "ReadyReplicas 2", |r| {
        (feedback(r, "ReadyReplicas")? == "2").then_some(())
    })
    .await;
    // ... and for two minutes writes nothing, says nothing, reports no
    // drift; replicas stay the autoscaler's.
    let quiet = Instant::now();
    while quiet.elapsed() < QUIET {
        let d = deployments.get("web").await.unwrap();
        assert_eq!(replicas_of(&d), Some(2), "replicas put back");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    assert!(requests_by(user, start) > 0, "the controller never looked");
    assert_eq!(writes_by(user, since), vec![], "writes to the cluster");
    let res = get_res(&s.client, &s.ns, "web").await.unwrap();
    assert_eq!(res.status.unwrap().drift, None);
    let events = s.events("web").await;
    assert!(
        !events
            .iter()
            .any(|e| e.reason.as_deref() == Some("DriftCorrected")),
        "{events:?}"
    );

    // A change of the template is applied; the ignored field stays. A
    // resource that starts ignoring a field keeps its value too (the
    // controller's manager stops applying it, and server-side apply would
    // remove a field nobody else owns: 2 would become the default 1).
    let mut changed = template;
    changed["spec"]["template"]["metadata"]["labels"] = json!({"tier": "web"});
    let mut late = late;
    late["spec"]["template"]["metadata"]["labels"] = json!({"tier": "web"});
    late["spec"]["writeStrategy"] =
        json!({"type": "ServerSideApply", "ignoreFields": ["spec.replicas"]});
    s.apply("app", json!([changed, late])).await;
    for name in ["web", "late"] {
        wait::wait(
            WAIT,
            &format!("{name}: the template's new label"),
            || async {
                let d = deployments.get(name).await.ok()?;
                (d.labels().get("tier")? == "web").then_some(d)
            },
        )
        .await;
        let d = deployments.get(name).await.unwrap();
        assert_eq!(replicas_of(&d), Some(2), "{name}: replicas changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_fought_over_is_reported_with_its_manager_and_named_a_drift_loop() {
    let user = "delivery-fight";
    let s = setup("fight", Some(user)).await;
    let since = Utc::now();
    s.apply(
        "app",
        json!([{"metadata": {"name": "web"}, "spec": {"template": deployment("web", &s.tns, 0)}}]),
    )
    .await;
    s.wait_ready("web", "True").await;
    // An autoscaler that wants one replica, every time it sees another
    // number: the controller puts 0 back each time.
    let stop = Arc::new(AtomicBool::new(false));
    let fighter = {
        let (client, tns, stop) = (s.client.clone(), s.tns.clone(), stop.clone());
        tokio::spawn(async move {
            let deployments = Api::<Deployment>::namespaced(client.clone(), &tns);
            while !stop.load(Ordering::Relaxed) {
                if let Ok(d) = deployments.get("web").await
                    && replicas_of(&d) != Some(1)
                {
                    scale(&client, &tns, "web", 1).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    // Over the threshold (deploy/'s default, 5 an hour): a drift loop,
    // naming the path and the other manager.
    let looping = s
        .wait_res("web", "DriftLoop=True", |r| {
            let c = condition(&r.status.as_ref()?.conditions, "DriftLoop")?;
            (c.status == "True").then(|| c.message.clone().unwrap_or_default())
        })
        .await;
    stop.store(true, Ordering::Relaxed);
    fighter.await.unwrap();
    assert!(looping.contains("spec.replicas"), "{looping}");
    assert!(
        looping.contains("field manager e2e-autoscaler"),
        "{looping}"
    );
    let res = get_res(&s.client, &s.ns, "web").await.unwrap();
    let report = res.status.unwrap().drift.unwrap();
    assert_eq!(report.paths, ["spec.replicas"]);
    assert_eq!(report.manager.as_deref(), Some("e2e-autoscaler"));
    assert!(report.corrections_in_last_hour > 5, "{report:?}");
    // The events said so: each correction, then the loop.
    let events = s.events("web").await;
    let corrected: Vec<String> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("DriftCorrected"))
        .map(|e| e.message.clone().unwrap_or_default())
        .collect();
    assert!(
        corrected
            .iter()
            .any(|m| m.contains("spec.replicas (changed by e2e-autoscaler)")),
        "{corrected:?}"
    );
    assert!(
        corrected.iter().all(|m| m.contains("spec.replicas")),
        "{corrected:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("DriftLoop")
                && e.type_.as_deref() == Some("Warning")),
        "{events:?}"
    );
    // Each correction was one apply, and the metric counts them.
    let patches: u64 = writes_by(user, since)
        .iter()
        .filter(|(k, _)| k == "patch deployments")
        .map(|(_, n)| n)
        .sum();
    assert!(
        patches as i64 > report.corrections_in_last_hour,
        "{patches} patches"
    );
    let metrics = blocking(|| e2e::shipped::metrics_of("resource-controller"));
    let counted = e2e::metric_sum(
        &metrics,
        "crossplane_rs_drift_corrections_total",
        &[("kind", "Deployment")],
    );
    assert!(counted >= 6.0, "{counted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_only_objects_keep_hand_edits_and_are_never_written_again() {
    let user = "delivery-create-only";
    let start = Utc::now();
    let s = setup("create-only", Some(user)).await;
    let template = |x: &str| {
        json!([{
            "metadata": {"name": "settings"},
            "spec": {
                "template": {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "settings", "namespace": s.tns}, "data": {"x": x}},
                "writeStrategy": {"type": "CreateOnly"},
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "x", "path": "data.x"}]}],
            },
        }])
    };
    s.apply("app", template("1")).await;
    let res = s
        .wait_res("settings", "x 1", |r| {
            (feedback(r, "x")? == "1").then(|| r.clone())
        })
        .await;
    assert_eq!(
        format!("{:?}", res.status.unwrap().delivery.unwrap().write_strategy),
        "CreateOnly"
    );
    let since = Utc::now();
    let cms = Api::<ConfigMap>::namespaced(s.client.clone(), &s.tns);
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "by hand"}})),
    )
    .await
    .unwrap();
    s.wait_res("settings", "x by hand", |r| {
        (feedback(r, "x")? == "by hand").then_some(())
    })
    .await;
    // A new template is not written either.
    s.apply("app", template("2")).await;
    s.wait_res("settings", "the new generation observed", |r| {
        let status = r.status.as_ref()?;
        (status.observed_generation == r.metadata.generation
            && r.spec.template["data"]["x"] == "2"
            && state_of_res(r) == "Submitted")
            .then_some(())
    })
    .await;
    let cm = cms.get("settings").await.unwrap();
    assert_eq!(cm.data.unwrap()["x"], "by hand");
    // It was created by this cluster's user, with one apply; it was read
    // from a watch since.
    assert_eq!(
        writes_by(user, start),
        vec![("patch configmaps".to_owned(), 1)],
        "writes to the cluster"
    );
    assert_eq!(writes_by(user, since), vec![], "writes to the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_objects_are_observed_never_written_nor_deleted() {
    let user = "delivery-read-only";
    let start = Utc::now();
    let s = setup("read-only", Some(user)).await;
    s.apply(
        "app",
        json!([{
            "metadata": {"name": "theirs"},
            "spec": {
                "template": {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "theirs", "namespace": s.tns}, "data": {"owner": "us"}},
                "writeStrategy": {"type": "ReadOnly"},
                "deletionPolicy": "Delete",
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [{"name": "owner", "path": "data.owner"}]}],
            },
        }]),
    )
    .await;
    // Not there: the condition says what to do, and nothing is created.
    let missing = s
        .wait_res("theirs", "Synced=False", |r| {
            let c = condition(&r.status.as_ref()?.conditions, "Synced")?;
            (c.status == "False").then(|| c.message.clone().unwrap_or_default())
        })
        .await;
    assert!(missing.contains("does not exist"), "{missing}");
    assert!(missing.contains("ReadOnly"), "{missing}");
    // Someone else creates it: observed, theirs untouched.
    let cms = Api::<ConfigMap>::namespaced(s.client.clone(), &s.tns);
    let theirs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "theirs", "namespace": s.tns}, "data": {"owner": "them"},
    }))
    .unwrap();
    cms.create(&Default::default(), &theirs).await.unwrap();
    let res = s
        .wait_res("theirs", "owner them", |r| {
            (feedback(r, "owner")? == "them" && state_of_res(r) == "Submitted").then(|| r.clone())
        })
        .await;
    assert_eq!(
        format!("{:?}", res.status.unwrap().delivery.unwrap().write_strategy),
        "ReadOnly"
    );
    // Deleting the application leaves it where it was, as it was.
    Api::<types::workload::v1alpha1::KubernetesApplication>::namespaced(s.client.clone(), &s.ns)
        .delete("app", &Default::default())
        .await
        .unwrap();
    wait::wait(WAIT, "the resource gone", || async {
        get_res(&s.client, &s.ns, "theirs")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let cm = cms.get("theirs").await.unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["owner"], "them");
    assert!(!cm.annotations().contains_key(ANNOTATION_RESOURCE_UID));
    assert!(requests_by(user, start) > 0, "the controller never looked");
    assert_eq!(writes_by(user, start), vec![], "writes to the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_objects_outlive_their_application_unmarked() {
    let s = setup("orphan", None).await;
    s.apply(
        "app",
        json!([{
            "metadata": {"name": "kept"},
            "spec": {
                "template": {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "kept", "namespace": s.tns}, "data": {"x": "1"}},
                "deletionPolicy": "Orphan",
            },
        }]),
    )
    .await;
    let res = s.wait_ready("kept", "True").await;
    assert_eq!(
        format!(
            "{:?}",
            res.status.unwrap().delivery.unwrap().deletion_policy
        ),
        "Orphan"
    );
    let cms = Api::<ConfigMap>::namespaced(s.client.clone(), &s.tns);
    assert!(
        cms.get("kept")
            .await
            .unwrap()
            .annotations()
            .contains_key(ANNOTATION_RESOURCE_UID)
    );
    Api::<types::workload::v1alpha1::KubernetesApplication>::namespaced(s.client.clone(), &s.ns)
        .delete("app", &Default::default())
        .await
        .unwrap();
    wait::wait(WAIT, "the resource gone", || async {
        get_res(&s.client, &s.ns, "kept")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let cm = cms.get("kept").await.unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["x"], "1");
    assert!(
        !cm.annotations().contains_key(ANNOTATION_RESOURCE_UID),
        "{:?}",
        cm.annotations()
    );
}
