//! Seed 000 end to end: KubernetesApplications applied to the control cluster
//! are scheduled, split into KubernetesApplicationResources and delivered to
//! the remote cluster; their state is visible from the control cluster.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use e2e::{wait, workloads::*};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Event, Namespace, Secret, Service},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use types::workload::v1alpha1::{
    ANNOTATION_RESOURCE_UID, KubernetesApplication, KubernetesApplicationResource,
};

/// The message of the RemoteObjectsOrphaned event in `ns` (there must be one).
async fn orphaned_message(client: &Client, ns: &str) -> String {
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    events
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("RemoteObjectsOrphaned"))
        .expect("a RemoteObjectsOrphaned event")
        .message
        .unwrap_or_default()
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test]
async fn the_seed_wordpress_demo_is_delivered_to_the_remote_cluster_and_cleaned_up() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    // The seed's application, applied verbatim, lives in namespace complex.
    let _ = plane.control.kubectl(&["create", "namespace", "complex"]);
    let controllers = Controllers::start("complex").await;
    let out = plane.control.kubectl(&[
        "-n",
        "complex",
        "create",
        "secret",
        "generic",
        "wordpress-demo-cluster",
        &format!(
            "--from-file=kubeconfig={}",
            plane.remote.kubeconfig_path.display()
        ),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in [
        "examples/wordpress-demo/cluster.yaml",
        "examples/wordpress-demo/sql-secret.yaml",
        "examples/seeds/000-wordpress-demo.yaml",
    ] {
        let out = plane.control.kubectl(&[
            "apply",
            "-f",
            &testenv::repo_root().join(file).to_string_lossy(),
        ]);
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let app = wait_app_state(&client, "complex", "wordpress-demo", "Submitted").await;
    let status = app.status.unwrap();
    assert_eq!(status.desired_resources, Some(3));
    assert_eq!(status.submitted_resources, Some(3));
    assert_eq!(status.cluster_ref.unwrap().name, "wordpress-demo-cluster");

    // The remote cluster has the namespace, Deployment and Service, each
    // annotated with the UID of the resource that templated it.
    let uid = |name: &str| {
        let client = client.clone();
        let name = name.to_owned();
        async move {
            get_res(&client, "complex", &name)
                .await
                .unwrap()
                .uid()
                .unwrap()
        }
    };
    let ns = Api::<Namespace>::all(remote.clone())
        .get("wordpress")
        .await
        .unwrap();
    assert_eq!(
        ns.annotations()[ANNOTATION_RESOURCE_UID],
        uid("wordpress-demo-namespace").await
    );
    let dep = Api::<Deployment>::namespaced(remote.clone(), "wordpress")
        .get("wordpress")
        .await
        .unwrap();
    assert_eq!(
        dep.annotations()[ANNOTATION_RESOURCE_UID],
        uid("wordpress-demo-deployment").await
    );
    let svc = Api::<Service>::namespaced(remote.clone(), "wordpress")
        .get("wordpress")
        .await
        .unwrap();
    assert_eq!(
        svc.annotations()[ANNOTATION_RESOURCE_UID],
        uid("wordpress-demo-service").await
    );

    // kubectl on the control cluster shows the seed's columns.
    let out = plane.control.kubectl(&[
        "-n",
        "complex",
        "get",
        "kubernetesapplication",
        "wordpress-demo",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        words(lines[0]),
        ["NAME", "CLUSTER", "STATUS", "DESIRED", "SUBMITTED"]
    );
    assert_eq!(
        words(lines[1]),
        [
            "wordpress-demo",
            "wordpress-demo-cluster",
            "Submitted",
            "3",
            "3"
        ]
    );
    let out = plane.control.kubectl(&[
        "-n",
        "complex",
        "get",
        "kubernetesapplicationresource",
        "--selector",
        "app=wordpress-demo",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<Vec<&str>> = text.lines().map(words).collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "TEMPLATE-KIND",
            "TEMPLATE-NAME",
            "CLUSTER",
            "STATUS"
        ]
    );
    assert_eq!(
        rows[1],
        [
            "wordpress-demo-deployment",
            "Deployment",
            "wordpress",
            "wordpress-demo-cluster",
            "Submitted"
        ]
    );
    assert_eq!(
        rows[2],
        [
            "wordpress-demo-namespace",
            "Namespace",
            "wordpress",
            "wordpress-demo-cluster",
            "Submitted"
        ]
    );
    assert_eq!(
        rows[3],
        [
            "wordpress-demo-service",
            "Service",
            "wordpress",
            "wordpress-demo-cluster",
            "Submitted"
        ]
    );

    // status.remote of the Deployment resource is the remote Deployment's status.
    let res = wait(
        WAIT,
        "status.remote to match the remote Deployment's status",
        || async {
            let res = get_res(&client, "complex", "wordpress-demo-deployment").await?;
            let live = Api::<Deployment>::namespaced(remote.clone(), "wordpress")
                .get("wordpress")
                .await
                .ok()?;
            let remote_status = serde_json::to_value(live.status?).ok()?;
            (res.status.as_ref()?.remote.as_ref()? == &remote_status).then_some(res)
        },
    )
    .await;
    assert!(
        res.status
            .unwrap()
            .remote
            .unwrap()
            .get("observedGeneration")
            .is_some()
    );

    // Editing the template's spec flows to the resource, the remote object,
    // and the remote object's new status back into status.remote.
    let out = plane.control.kubectl(&[
        "-n", "complex", "patch", "kubernetesapplication", "wordpress-demo", "--type=json",
        "-p", r#"[{"op":"add","path":"/spec/resourceTemplates/1/spec/template/spec/replicas","value":3}]"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait(
        WAIT,
        "the remote Deployment to want 3 replicas and status.remote to show it",
        || async {
            let live = Api::<Deployment>::namespaced(remote.clone(), "wordpress")
                .get("wordpress")
                .await
                .ok()?;
            let res = get_res(&client, "complex", "wordpress-demo-deployment").await?;
            let remote_status = res.status?.remote?;
            (live.spec?.replicas == Some(3) && remote_status["replicas"] == 3).then_some(())
        },
    )
    .await;

    // The sql Secret is propagated, and follows local changes.
    let remote_secrets = Api::<Secret>::namespaced(remote.clone(), "wordpress");
    let propagated = wait(
        WAIT,
        "wordpress-demo-deployment-sql in the remote cluster",
        || async {
            remote_secrets
                .get_opt("wordpress-demo-deployment-sql")
                .await
                .ok()
                .flatten()
        },
    )
    .await;
    assert_eq!(
        propagated.annotations()[ANNOTATION_RESOURCE_UID],
        uid("wordpress-demo-deployment").await
    );
    assert_eq!(propagated.data.unwrap()["username"].0, b"wordpress");
    Api::<Secret>::namespaced(client.clone(), "complex")
        .patch(
            "sql",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "rotated"}})),
        )
        .await
        .unwrap();
    wait(
        WAIT,
        "the rotated password to reach the remote copy",
        || async {
            let s = remote_secrets
                .get_opt("wordpress-demo-deployment-sql")
                .await
                .ok()
                .flatten()?;
            (s.data?.get("password")?.0 == b"rotated").then_some(())
        },
    )
    .await;

    // Ready reflects remote health: no nodes here, so the Deployment is not
    // available and the application says so.
    let app = get_app(&client, "complex", "wordpress-demo").await.unwrap();
    let ready = condition(&app.status.as_ref().unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.status, "False");
    assert!(
        ready
            .message
            .unwrap()
            .contains("wordpress-demo-deployment: Deployment is not available")
    );

    // Metrics: a placement, a submit latency, remote calls by cluster.
    let metrics = controllers.scheduler.metrics();
    assert!(
        metrics.contains("crossplane_rs_placements_total{result=\"scheduled\"} 1"),
        "{metrics}"
    );
    let metrics = controllers.resource.metrics();
    assert!(
        metrics.contains("crossplane_rs_submit_latency_seconds_count 3"),
        "{metrics}"
    );
    assert!(metrics.contains("crossplane_rs_kube_api_requests_total{cluster=\"complex/wordpress-demo-cluster\",verb=\"patch\"}"), "{metrics}");

    // Deleting the application leaves nothing in the remote cluster.
    Api::<KubernetesApplication>::namespaced(client.clone(), "complex")
        .delete("wordpress-demo", &DeleteParams::default())
        .await
        .unwrap();
    wait(
        WAIT,
        "the application and its resources to be gone",
        || async {
            let apps = get_app(&client, "complex", "wordpress-demo").await;
            let res = Api::<KubernetesApplicationResource>::namespaced(client.clone(), "complex")
                .list(&ListParams::default())
                .await
                .ok()?;
            (apps.is_none() && res.items.is_empty()).then_some(())
        },
    )
    .await;
    // The application went only after everything it delivered was gone:
    // no waiting here.
    let remote_ns = Api::<Namespace>::all(remote.clone())
        .get_opt("wordpress")
        .await
        .unwrap();
    assert!(
        remote_ns.is_none(),
        "namespace wordpress outlived the application"
    );
    let leftovers = plane.remote.kubectl(&[
        "get",
        "deployments,services,secrets",
        "-A",
        "-o",
        "name",
        "--field-selector",
        "metadata.namespace=wordpress",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&leftovers.stdout).trim(),
        "",
        "objects outlived the application"
    );
    drop(controllers);
}

#[tokio::test]
async fn no_matching_cluster_is_pending_until_a_ready_one_appears() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "pending").await;
    let rns = remote_ns(&remote, "pending").await;
    let _c = Controllers::start(&ns).await;
    // A cluster without its Secret and one with a broken kubeconfig: both
    // match, neither is Ready, neither is chosen.
    cluster(
        &client,
        &ns,
        "no-secret",
        json!({"env": "prod", "tier": "gold"}),
        None,
    )
    .await;
    cluster(
        &client,
        &ns,
        "bad-kubeconfig",
        json!({"env": "prod", "tier": "gold"}),
        Some("this is not a kubeconfig"),
    )
    .await;
    cluster(
        &client,
        &ns,
        "other",
        json!({"env": "dev"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let selector = json!({"matchLabels": {"env": "prod"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]});
    apply_app(
        &client,
        &ns,
        app(
            "web",
            &ns,
            selector,
            json!([configmap_template(
                "web-config",
                &rns,
                "web",
                json!({"a": "1"})
            )]),
        ),
    )
    .await;

    // Until the cluster controller has looked at both clusters, the message
    // says their readiness is not yet known: wait for what it found.
    let pending = wait(
        WAIT,
        "the Pending message to name both unready clusters and why",
        || async {
            let a = get_app(&client, &ns, "web").await?;
            let msg = condition(&a.status.as_ref()?.conditions, "Scheduled")?
                .message
                .clone()?;
            (state_of_app(&a) == "Pending"
                && msg.contains("not Ready")
                && !msg.contains("not yet known"))
            .then_some(msg)
        },
    )
    .await;
    assert!(
        pending.contains("matches clusterSelector env=prod,tier in (gold)"),
        "{pending}"
    );
    assert!(pending.contains("other: labels do not match"), "{pending}");
    assert!(
        pending.contains("no-secret: not Ready (connection Secret"),
        "{pending}"
    );
    assert!(pending.contains("bad-kubeconfig: not Ready ("), "{pending}");
    for (name, needle) in [
        ("no-secret", "not found: create it"),
        ("bad-kubeconfig", "does not hold a valid kubeconfig"),
    ] {
        let out = plane.control.kubectl(&[
            "-n",
            &ns,
            "get",
            "kubernetescluster",
            name,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].message}",
        ]);
        let msg = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            msg.contains(needle),
            "{name}'s Ready message should say {needle:?}: {msg}"
        );
    }

    // A matching Ready cluster appears: scheduled at once.
    cluster(
        &client,
        &ns,
        "gold",
        json!({"env": "prod", "tier": "gold"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let a = wait_app_state(&client, &ns, "web", "Submitted").await;
    assert_eq!(a.status.unwrap().cluster_ref.unwrap().name, "gold");
    let cm = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["a"], "1");

    // Spread: a second application goes to the emptier matching cluster,
    // ties broken by name; a scheduled application never moves.
    cluster(
        &client,
        &ns,
        "gold-b",
        json!({"env": "prod", "tier": "gold"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    wait(WAIT, "gold-b to be Ready", || async {
        let out = plane.control.kubectl(&[
            "-n",
            &ns,
            "get",
            "kubernetescluster",
            "gold-b",
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        ]);
        (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
    })
    .await;
    let sel = json!({"matchLabels": {"tier": "gold"}});
    apply_app(&client, &ns, app("second", &ns, sel.clone(), json!([]))).await;
    let second = wait_app_state(&client, &ns, "second", "Submitted").await;
    assert_eq!(second.status.unwrap().cluster_ref.unwrap().name, "gold-b");
    assert_eq!(
        get_app(&client, &ns, "web")
            .await
            .unwrap()
            .status
            .unwrap()
            .cluster_ref
            .unwrap()
            .name,
        "gold"
    );
}

#[tokio::test]
async fn conflicts_are_reported_and_the_first_owner_is_untouched() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "conflict").await;
    let rns = remote_ns(&remote, "conflict").await;
    let _c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let sel = json!({"matchLabels": {"c": "1"}});

    // Two applications templating a resource with the same name.
    apply_app(
        &client,
        &ns,
        app(
            "first",
            &ns,
            sel.clone(),
            json!([configmap_template(
                "shared",
                &rns,
                "shared",
                json!({"owner": "first"})
            )]),
        ),
    )
    .await;
    wait_app_state(&client, &ns, "first", "Submitted").await;
    apply_app(
        &client,
        &ns,
        app(
            "second",
            &ns,
            sel.clone(),
            json!([configmap_template(
                "shared",
                &rns,
                "other",
                json!({"owner": "second"})
            )]),
        ),
    )
    .await;
    let msg = wait(
        WAIT,
        "the second application to report the conflict",
        || async {
            let a = get_app(&client, &ns, "second").await?;
            let c = condition(&a.status.as_ref()?.conditions, "Synced")?;
            (c.status == "False").then(|| c.message.clone().unwrap_or_default())
        },
    )
    .await;
    assert!(msg.contains(&format!("KubernetesApplicationResource {ns}/shared already exists and is controlled by KubernetesApplication first")), "{msg}");
    let shared = get_res(&client, &ns, "shared").await.unwrap();
    assert_eq!(shared.owner_references()[0].name, "first");
    assert_eq!(shared.spec.template["data"]["owner"], "first");
    assert!(
        Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .get_opt("other")
            .await
            .unwrap()
            .is_none()
    );

    // Two resources templating the same remote object.
    apply_app(
        &client,
        &ns,
        app(
            "third",
            &ns,
            sel.clone(),
            json!([configmap_template(
                "third-cm",
                &rns,
                "shared",
                json!({"owner": "third"})
            )]),
        ),
    )
    .await;
    let third = wait_res_state(&client, &ns, "third-cm", "Failed").await;
    let msg = synced_message(&third);
    assert!(msg.contains(&format!("ConfigMap {rns}/shared already exists in cluster {ns}/target and is not controlled by this resource")), "{msg}");
    let cm = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .get("shared")
        .await
        .unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["owner"], "first");
    assert_eq!(
        cm.annotations()[ANNOTATION_RESOURCE_UID],
        shared.uid().unwrap()
    );
    // An event says so too.
    e2e::wait_event(&client, Some(&ns), None, "RemoteObjectConflict").await;

    // A remote object created by someone else is never touched either.
    let foreign: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "foreign", "namespace": rns}, "data": {"owner": "someone"}}),
    )
    .unwrap();
    Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    apply_app(
        &client,
        &ns,
        app(
            "fourth",
            &ns,
            sel,
            json!([configmap_template(
                "fourth-cm",
                &rns,
                "foreign",
                json!({"owner": "fourth"})
            )]),
        ),
    )
    .await;
    let fourth = wait_res_state(&client, &ns, "fourth-cm", "Failed").await;
    assert!(
        synced_message(&fourth).contains(&format!("has no {ANNOTATION_RESOURCE_UID} annotation"))
    );
    let cm = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .get("foreign")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["owner"], "someone");
    // Deleting the resource that lost must not delete what is not its own.
    delete_and_wait_gone::<KubernetesApplication>(
        &client,
        &ns,
        "fourth",
        "application fourth to be gone",
    )
    .await;
    assert!(
        Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .get_opt("foreign")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn removing_a_template_deletes_its_resource_and_remote_object() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "remove").await;
    let rns = remote_ns(&remote, "remove").await;
    let _c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let sel = json!({"matchLabels": {"c": "1"}});
    let a = configmap_template("keep", &rns, "keep", json!({"x": "1"}));
    let b = configmap_template("drop", &rns, "drop", json!({"x": "2"}));
    apply_app(
        &client,
        &ns,
        app("app", &ns, sel.clone(), json!([a.clone(), b])),
    )
    .await;
    wait_app_state(&client, &ns, "app", "Submitted").await;
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &rns);
    assert!(cms.get_opt("drop").await.unwrap().is_some());
    apply_app(&client, &ns, app("app", &ns, sel, json!([a]))).await;
    wait(
        WAIT,
        "the dropped resource and its remote ConfigMap to be gone",
        || async {
            let res = get_res(&client, &ns, "drop").await;
            let cm = cms.get_opt("drop").await.ok()?;
            (res.is_none() && cm.is_none()).then_some(())
        },
    )
    .await;
    let a = wait(WAIT, "DESIRED 1 SUBMITTED 1", || async {
        let a = get_app(&client, &ns, "app").await?;
        let s = a.status.clone()?;
        (s.desired_resources == Some(1) && s.submitted_resources == Some(1)).then_some(a)
    })
    .await;
    assert_eq!(state_of_app(&a), "Submitted");
    assert!(cms.get_opt("keep").await.unwrap().is_some());
}

#[tokio::test]
async fn a_bad_template_fails_alone_and_a_missing_namespace_converges() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "bad").await;
    let rns = remote_ns(&remote, "bad").await;
    let late = testenv::unique_name("late");
    let _c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let templates = json!([
        configmap_template("good", &rns, "good", json!({"x": "1"})),
        {"metadata": {"name": "no-kind"}, "spec": {"template": {"apiVersion": "v1", "metadata": {"name": "x", "namespace": rns}}}},
        {"metadata": {"name": "unknown-kind"}, "spec": {"template": {"apiVersion": "widgets.example.org/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": rns}}}},
        configmap_template("late-ns", &late, "late", json!({"x": "2"})),
    ]);
    apply_app(
        &client,
        &ns,
        app("mixed", &ns, json!({"matchLabels": {"c": "1"}}), templates),
    )
    .await;

    let no_kind = wait_res_state(&client, &ns, "no-kind", "Failed").await;
    assert!(
        synced_message(&no_kind).contains("spec.template has no kind: set the kind"),
        "{}",
        synced_message(&no_kind)
    );
    let unknown = wait_res_state(&client, &ns, "unknown-kind", "Failed").await;
    assert!(
        synced_message(&unknown)
            .contains("does not serve kind Widget in apiVersion widgets.example.org/v1"),
        "{}",
        synced_message(&unknown)
    );
    let late_res = wait_res_state(&client, &ns, "late-ns", "Failed").await;
    assert!(
        synced_message(&late_res).contains("its namespace does not exist there yet"),
        "{}",
        synced_message(&late_res)
    );
    wait_res_state(&client, &ns, "good", "Submitted").await;
    let a = wait_app_state(&client, &ns, "mixed", "PartiallySubmitted").await;
    assert_eq!(a.status.as_ref().unwrap().desired_resources, Some(4));
    assert_eq!(a.status.as_ref().unwrap().submitted_resources, Some(1));

    // Retries back off: after a while the failing resource has been tried a
    // handful of times, not hundreds.
    let failures = |name: &'static str| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            Api::<Event>::namespaced(client, &ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| {
                    e.involved_object.name.as_deref() == Some(name)
                        && e.reason.as_deref() == Some("InvalidTemplate")
                })
                .map(|e| e.count.unwrap_or(1) + e.series.and_then(|s| s.count).unwrap_or(0))
                .sum::<i32>()
        }
    };
    let before = failures("no-kind").await;
    assert!(before >= 1, "a Warning event names the failure");
    tokio::time::sleep(Duration::from_secs(6)).await; // observing a rate needs elapsed time
    let after = failures("no-kind").await;
    assert!(
        after - before <= 4,
        "retries must back off: {before} -> {after} events in 6s"
    );

    // The namespace appears: the resource converges on its own.
    let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": late}})).unwrap();
    Api::<Namespace>::all(remote.clone())
        .create(&PostParams::default(), &nsobj)
        .await
        .unwrap();
    wait_res_state(&client, &ns, "late-ns", "Submitted").await;
    let a = wait(WAIT, "SUBMITTED 2", || async {
        let a = get_app(&client, &ns, "mixed").await?;
        (a.status.as_ref()?.submitted_resources == Some(2)).then_some(a)
    })
    .await;
    assert_eq!(state_of_app(&a), "PartiallySubmitted");
}

#[tokio::test]
async fn deleting_after_the_cluster_secret_is_gone_orphans_with_an_event_instead_of_hanging() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "orphan").await;
    let rns = remote_ns(&remote, "orphan").await;
    let _c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    apply_app(
        &client,
        &ns,
        app(
            "app",
            &ns,
            json!({"matchLabels": {"c": "1"}}),
            json!([configmap_template("cm", &rns, "cm", json!({"x": "1"}))]),
        ),
    )
    .await;
    wait_app_state(&client, &ns, "app", "Submitted").await;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .delete("target-kubeconfig", &DeleteParams::default())
        .await
        .unwrap();
    delete_and_wait_gone::<KubernetesApplication>(
        &client,
        &ns,
        "app",
        "the application to be gone",
    )
    .await;
    let orphaned = orphaned_message(&client, &ns).await;
    assert!(orphaned.contains("connection Secret"), "{orphaned}");
    // Orphaned, as the event says: the remote object is still there.
    assert!(
        Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .get_opt("cm")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn killing_each_controller_midway_converges_without_duplicates_or_orphans() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "chaos").await;
    let rns = remote_ns(&remote, "chaos").await;
    let mut c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let templates: Vec<Value> = (0..6)
        .map(|i| {
            configmap_template(
                &format!("cm-{i}"),
                &rns,
                &format!("cm-{i}"),
                json!({"i": i.to_string()}),
            )
        })
        .collect();
    // The scheduler dies right after placing the application.
    apply_app(
        &client,
        &ns,
        app(
            "app",
            &ns,
            json!({"matchLabels": {"c": "1"}}),
            json!(templates),
        ),
    )
    .await;
    wait(WAIT, "the application to be scheduled", || async {
        get_app(&client, &ns, "app")
            .await?
            .status?
            .cluster_ref
            .map(|_| ())
    })
    .await;
    c.scheduler.kill();
    // The application controller dies as soon as the first resource exists.
    wait(WAIT, "a first resource", || async {
        get_res(&client, &ns, "cm-0").await.map(|_| ())
    })
    .await;
    c.application.kill();
    // The resource controller dies after the first submit.
    wait(WAIT, "a first remote object", || async {
        let cms = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .list(&ListParams::default())
            .await
            .ok()?;
        cms.items
            .iter()
            .any(|cm| cm.annotations().contains_key(ANNOTATION_RESOURCE_UID))
            .then_some(())
    })
    .await;
    c.resource.kill();
    // A second matching cluster appears while the scheduler is down: the
    // restarted scheduler must not move the application.
    cluster(
        &client,
        &ns,
        "another",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    c.scheduler = start("scheduler", &c.ns);
    c.application = start("application-controller", &c.ns);
    c.resource = start("resource-controller", &c.ns);
    let a = wait_app_state(&client, &ns, "app", "Submitted").await;
    assert_eq!(
        a.status.unwrap().cluster_ref.unwrap().name,
        "target",
        "a scheduled application never moves"
    );
    let resources = Api::<KubernetesApplicationResource>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(resources.items.len(), 6);
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let ours: Vec<_> = cms
        .items
        .iter()
        .filter(|cm| cm.annotations().contains_key(ANNOTATION_RESOURCE_UID))
        .collect();
    assert_eq!(
        ours.len(),
        6,
        "one remote object per template, no duplicates"
    );
    for cm in ours {
        let res = resources
            .items
            .iter()
            .find(|r| r.name_any() == cm.name_any())
            .unwrap();
        assert_eq!(
            cm.annotations()[ANNOTATION_RESOURCE_UID],
            res.uid().unwrap()
        );
    }
    // And deleting converges too: nothing left behind.
    Api::<KubernetesApplication>::namespaced(client.clone(), &ns)
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    wait(WAIT, "every remote object to be gone", || async {
        let cms = Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .list(&ListParams::default())
            .await
            .ok()?;
        cms.items
            .iter()
            .all(|cm| !cm.annotations().contains_key(ANNOTATION_RESOURCE_UID))
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_namespaced_template_without_a_namespace_lands_in_default() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "default-ns").await;
    let _c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let name = testenv::unique_name("no-namespace");
    let template = json!({
        "metadata": {"name": "cm"},
        "spec": {"template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}},
    });
    apply_app(
        &client,
        &ns,
        app(
            "app",
            &ns,
            json!({"matchLabels": {"c": "1"}}),
            json!([template]),
        ),
    )
    .await;
    wait_app_state(&client, &ns, "app", "Submitted").await;
    let cm = Api::<ConfigMap>::namespaced(remote.clone(), "default")
        .get(&name)
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["k"], "v");
}

#[tokio::test]
async fn deleting_while_the_cluster_does_not_answer_orphans_after_the_deletion_timeout() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "unreachable").await;
    let rns = remote_ns(&remote, "unreachable").await;
    let _c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    apply_app(
        &client,
        &ns,
        app(
            "app",
            &ns,
            json!({"matchLabels": {"c": "1"}}),
            json!([configmap_template("cm", &rns, "cm", json!({"x": "1"}))]),
        ),
    )
    .await;
    wait_app_state(&client, &ns, "app", "Submitted").await;
    // The cluster stops answering: its kubeconfig now points at a closed port.
    let dead = plane.remote.kubeconfig.replace(
        &plane
            .remote
            .kubeconfig
            .lines()
            .find(|l| l.trim_start().starts_with("server:"))
            .unwrap()
            .to_owned(),
        "    server: https://127.0.0.1:9",
    );
    Api::<Secret>::namespaced(client.clone(), &ns)
        .patch(
            "target-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"kubeconfig": dead}})),
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    Api::<KubernetesApplication>::namespaced(client.clone(), &ns)
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    // The tests run the resource-controller with --remote-deletion-timeout 15s.
    wait(
        Duration::from_secs(90),
        "the application to be gone",
        || async { get_app(&client, &ns, "app").await.is_none().then_some(()) },
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(14),
        "gave up before the deletion timeout: {:?}",
        started.elapsed()
    );
    let orphaned = orphaned_message(&client, &ns).await;
    assert!(
        orphaned.contains("could not be reached for 15s"),
        "{orphaned}"
    );
    assert!(
        Api::<ConfigMap>::namespaced(remote.clone(), &rns)
            .get_opt("cm")
            .await
            .unwrap()
            .is_some()
    );
}

/// `crossplane-rs trace kubernetesapplication/NAME` as a user of
/// crossplane-view: the application, its cluster, its resources and each
/// remote object with the state the control cluster recorded for it (a
/// Namespace Active from its copied status, a ConfigMap without a status,
/// a kind the remote cluster does not serve Failed with the message that
/// says so). Neither the remote cluster nor a Secret is read.
#[tokio::test]
async fn trace_shows_an_application_its_resources_and_their_remote_objects() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "trace").await;
    let rns = remote_ns(&remote, "trace").await;
    let remote_space = testenv::unique_name("trace-space");
    let _c = Controllers::start(&ns).await;
    cluster(
        &client,
        &ns,
        "target",
        json!({"c": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let templates = json!([
        configmap_template("settings", &rns, "settings", json!({"x": "1"})),
        {"metadata": {"name": "space"}, "spec": {"template": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": remote_space}}}},
        {"metadata": {"name": "widget"}, "spec": {"template": {"apiVersion": "widgets.example.org/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": rns}}}},
    ]);
    apply_app(
        &client,
        &ns,
        app("traced", &ns, json!({"matchLabels": {"c": "1"}}), templates),
    )
    .await;
    wait_res_state(&client, &ns, "widget", "Failed").await;
    wait_res_state(&client, &ns, "settings", "Submitted").await;
    let viewer = e2e::trace::viewer(&plane.control, false, &[]);
    let args = ["kubernetesapplication/traced", "-n", ns.as_str()];
    let tree = wait(WAIT, "the trace to show the Namespace Active", || async {
        let tree = e2e::trace::json(&viewer, &args);
        let space = e2e::trace::of_kind(&tree, "Namespace")
            .first()
            .map(|n| n["status"]["ready"] == "True")?;
        space.then_some(tree)
    })
    .await;
    assert_eq!(tree["kind"], "KubernetesApplication");
    assert_eq!(tree["namespace"], ns.as_str());
    assert_eq!(tree["status"]["cluster"], "target", "{tree:#}");
    e2e::trace::node(&tree, "KubernetesCluster", "target");
    let settings = e2e::trace::node(&tree, "KubernetesApplicationResource", "settings");
    assert_eq!(settings["status"]["state"], "Submitted", "{settings:#}");
    let cm = e2e::trace::node(settings, "ConfigMap", "settings");
    assert_eq!(cm["namespace"], rns.as_str());
    assert_eq!(cm["status"]["cluster"], "target");
    assert_eq!(cm["status"]["state"], "Submitted");
    let space = e2e::trace::node(&tree, "Namespace", &remote_space);
    assert_eq!(space["status"]["phase"], "Active", "{space:#}");
    let widget = e2e::trace::node(&tree, "KubernetesApplicationResource", "widget");
    assert_eq!(widget["status"]["state"], "Failed", "{widget:#}");
    assert!(
        widget["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Widget")),
        "{widget:#}"
    );
    let w = e2e::trace::node(widget, "Widget", "w");
    assert_eq!(w["status"]["state"], "Failed", "{w:#}");
    assert!(e2e::trace::forbidden(&tree).is_empty(), "{tree:#}");
    let text = e2e::trace::text(&viewer, &["kapp", "traced", "-n", &ns]);
    eprintln!("workloads: crossplane-rs trace kapp traced:\n{text}");
    for shown in [
        "KubernetesApplication/traced",
        "KubernetesApplicationResource/widget",
        "ConfigMap/settings",
    ] {
        assert!(text.contains(shown), "{shown} missing from:\n{text}");
    }
}

/// Resources made long before the resource-controller can take them only
/// load the control API server: past --max-waiting-resources, a new
/// application's resources wait, and the application says why; they are
/// made once the resource-controller has caught up.
#[tokio::test]
async fn a_new_application_waits_while_the_resource_controller_is_behind() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "backlog").await;
    let rns = remote_ns(&remote, "backlog").await;
    let mut scheduler = start("scheduler", &ns);
    let mut application = start_with(
        "application-controller",
        &ns,
        &["--max-waiting-resources", "3"],
    );
    for r in [&mut scheduler, &mut application] {
        r.wait_healthy(Duration::from_secs(30)).await;
    }
    cluster(
        &client,
        &ns,
        "target",
        json!({"backlog": "1"}),
        Some(&plane.remote.kubeconfig),
    )
    .await;
    let templates = |prefix: &str, n: usize| {
        json!(
            (0..n)
                .map(|i| configmap_template(
                    &format!("{prefix}-{i}"),
                    &rns,
                    &format!("{prefix}-{i}"),
                    json!({"v": "1"})
                ))
                .collect::<Vec<_>>()
        )
    };
    let selector = json!({"matchLabels": {"backlog": "1"}});
    // No resource-controller yet: the first application's 4 resources wait
    // for it, which is more than 3.
    apply_app(
        &client,
        &ns,
        app("first", &ns, selector.clone(), templates("first", 4)),
    )
    .await;
    let resources = Api::<KubernetesApplicationResource>::namespaced(client.clone(), &ns);
    wait(WAIT, "the first application's 4 resources", || async {
        (resources
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .len()
            == 4)
            .then_some(())
    })
    .await;
    // Its progress is written within the window (the first look may wait).
    wait(WAIT, "the first application's counts", || async {
        let a = get_app(&client, &ns, "first").await?;
        (a.status?.desired_resources == Some(4)).then_some(())
    })
    .await;
    apply_app(
        &client,
        &ns,
        app("second", &ns, selector, templates("second", 2)),
    )
    .await;
    let waiting = wait(WAIT, "the second application to say it waits", || async {
        let a = get_app(&client, &ns, "second").await?;
        let ready = condition(&a.status.as_ref()?.conditions, "Ready")?;
        (ready.reason.as_deref() == Some("WaitingForResourceController")).then_some(a)
    })
    .await;
    assert_eq!(state_of_app(&waiting), "Scheduled");
    let ready = condition(&waiting.status.as_ref().unwrap().conditions, "Ready").unwrap();
    assert!(
        ready
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("--max-waiting-resources"),
        "{ready:?}"
    );
    // While it waits it is looked at again, and neither makes a resource nor
    // writes its status again (counted, not timed).
    let patches = || {
        e2e::metric_sum(
            &application.metrics(),
            "crossplane_rs_kube_api_requests_total",
            &[("cluster", "control"), ("verb", "patch")],
        )
    };
    let looks = || {
        e2e::metric_sum(
            &application.metrics(),
            "crossplane_rs_reconcile_total",
            &[("controller", "kubernetesapplication")],
        )
    };
    let (patched, looked) = (patches(), looks());
    wait(WAIT, "three more looks at the applications", || async {
        (looks() >= looked + 3.0).then_some(())
    })
    .await;
    assert_eq!(patches(), patched, "a waiting application writes nothing");
    let items = resources.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(items.len(), 4, "no resource of the second application yet");
    // The resource-controller catches up: the second application's resources
    // are made and submitted.
    let mut resource = start("resource-controller", &ns);
    resource.wait_healthy(Duration::from_secs(30)).await;
    wait_app_state(&client, &ns, "first", "Submitted").await;
    let second = wait_app_state(&client, &ns, "second", "Submitted").await;
    assert_eq!(second.status.unwrap().submitted_resources, Some(2));
}
