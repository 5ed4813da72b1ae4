//! Feedback rules bring back only the fields they name, typed; Jobs are
//! healthy once they complete on the node.

use k8s_openapi::api::core::v1::Service;

use super::*;

/// Imports upstream's kubectl as an image on the node, once.
fn kubectl_image() {
    static IMPORTED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    IMPORTED.get_or_init(|| {
        let node = plane().node.as_ref().expect("the test node");
        let work = std::env::temp_dir().join(testenv::unique_name("kubectl-image"));
        std::fs::create_dir_all(&work).unwrap();
        let kubectl = testenv::bin_dir().unwrap().join("kubectl");
        let archive = testenv::image::binary_image_archive(&work, KUBECTL_IMAGE, &kubectl).unwrap();
        node.import_image(&archive).unwrap();
        std::fs::remove_dir_all(&work).unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_rules_bring_back_ready_replicas_and_a_load_balancers_ingress_and_nothing_else() {
    let s = setup("feedback", None).await;
    let web = json!({
        "metadata": {"name": "web"},
        "spec": {
            "template": deployment("web", &s.tns, 2),
            "feedbackRules": [{"type": "WellKnownStatus"}],
        },
    });
    let lb = json!({
        "metadata": {"name": "lb"},
        "spec": {
            "template": {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "lb", "namespace": s.tns},
                "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 80}]},
            },
            "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
                {"name": "ingress", "path": "status.loadBalancer.ingress"},
                {"name": "type", "path": ".spec.type"},
            ]}],
        },
    });
    s.apply("app", json!([web, lb])).await;
    // Two pods run on the node: readyReplicas comes back, typed.
    let res = s
        .wait_res("web", "ReadyReplicas 2", |r| {
            (feedback(r, "ReadyReplicas")? == "2").then(|| r.clone())
        })
        .await;
    let status = res.status.clone().unwrap();
    assert_eq!(status.remote, None, "status.remote beside feedback rules");
    let values = status.feedback.unwrap();
    let names: Vec<&str> = values.iter().map(|v| v.name.as_str()).collect();
    assert!(
        names
            .iter()
            .all(|n| ["ReadyReplicas", "Replicas", "AvailableReplicas"].contains(n)),
        "{names:?}"
    );
    let ready = values.iter().find(|v| v.name == "ReadyReplicas").unwrap();
    assert_eq!(format!("{:?}", ready.field_value.type_), "Integer");
    s.wait_ready("web", "True").await;

    // The load balancer controller (here, the test) gives the Service an
    // address: it comes back as JSON, and nothing of the rest of status.
    let lb = s
        .wait_res("lb", "type LoadBalancer", |r| {
            (feedback(r, "type")? == "LoadBalancer").then(|| r.clone())
        })
        .await;
    assert_eq!(lb.status.as_ref().unwrap().remote, None);
    assert_eq!(
        feedback(&lb, "ingress"),
        None,
        "no ingress before it has one"
    );
    Api::<Service>::namespaced(s.client.clone(), &s.tns)
        .patch_status(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}),
            ),
        )
        .await
        .unwrap();
    let ingress = s
        .wait_res("lb", "the ingress", |r| feedback(r, "ingress"))
        .await;
    let parsed: Value = serde_json::from_str(&ingress).unwrap();
    assert_eq!(parsed[0]["ip"], "203.0.113.10", "{ingress}");
    let lb = get_res(&s.client, &s.ns, "lb").await.unwrap();
    let values = lb.status.unwrap().feedback.unwrap();
    assert_eq!(values.len(), 2, "{values:?}");
    assert_eq!(
        format!("{:?}", values[0].field_value.type_),
        "JsonRaw",
        "{values:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_healthy_once_it_completed_on_the_node_and_a_failed_one_says_why() {
    let s = setup("jobs", None).await;
    blocking(kubectl_image);
    let job = |name: &str, args: Value| {
        json!({
            "metadata": {"name": name},
            "spec": {
                "template": {
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": name, "namespace": s.tns},
                    "spec": {"backoffLimit": 0, "template": {"spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "kubectl", "image": KUBECTL_IMAGE, "imagePullPolicy": "Never", "args": args}],
                    }}},
                },
                "healthRules": [{"type": "WellKnown"}],
                "feedbackRules": [{"type": "WellKnownStatus"}],
            },
        })
    };
    s.apply(
        "app",
        json!([
            job("done", json!(["version", "--client"])),
            job("broken", json!(["no-such-command"])),
        ]),
    )
    .await;
    let done = s.wait_ready("done", "True").await;
    assert_eq!(feedback(&done, "JobComplete").as_deref(), Some("true"));
    assert_eq!(feedback(&done, "JobSucceeded").as_deref(), Some("1"));
    let broken = s
        .wait_res("broken", "Ready=False saying the Job failed", |r| {
            let ready = condition(&r.status.as_ref()?.conditions, "Ready")?;
            let message = ready.message.clone().unwrap_or_default();
            (ready.status == "False" && message.starts_with("Job failed")).then_some(message)
        })
        .await;
    assert!(broken.contains("BackoffLimitExceeded"), "{broken}");
    let res = get_res(&s.client, &s.ns, "broken").await.unwrap();
    assert_eq!(feedback(&res, "JobComplete").as_deref(), Some("false"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_or_malformed_rule_is_a_condition_and_the_pod_never_restarts() {
    let s = setup("runaway", None).await;
    let (pod, restarts) = blocking(|| e2e::shipped::pod_of("resource-controller"));
    let with_rule = |name: &str, expression: &str| {
        json!({
            "metadata": {"name": name},
            "spec": {
                "template": {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": name, "namespace": s.tns},
                             "data": {"a": "1", "b": "2", "c": "3"}},
                "healthRules": [{"type": "CEL", "expression": expression}],
            },
        })
    };
    s.apply(
        "app",
        json!([
            with_rule(
                "runaway",
                "object.data.all(k, object.data.all(j, k == j || k != j))"
            ),
            with_rule("malformed", "object.data.a =="),
        ]),
    )
    .await;
    for name in ["runaway", "malformed"] {
        let message = s
            .wait_res(name, "Ready=False HealthRuleFailed", |r| {
                let ready = condition(&r.status.as_ref()?.conditions, "Ready")?;
                (ready.reason.as_deref() == Some("HealthRuleFailed"))
                    .then(|| ready.message.clone().unwrap_or_default())
            })
            .await;
        assert!(message.starts_with("healthRules[0]: "), "{message}");
    }
    assert_eq!(
        blocking(|| e2e::shipped::pod_of("resource-controller")),
        (pod, restarts),
        "the resource-controller restarted"
    );
}
