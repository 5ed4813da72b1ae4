//! Applications delivered: the seed's wordpress demo end to end, templates removed or without a namespace,
//! and trace.

use super::*;

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
async fn removing_a_template_deletes_its_resource_and_remote_object() {
    let Setup {
        plane: _,
        client,
        remote,
        ns,
        rns,
        controllers: _c,
    } = with_target("remove").await;
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

/// `crossplane-rs trace kubernetesapplication/NAME` as a user of
/// crossplane-view: the application, its cluster, its resources and each
/// remote object with the state the control cluster recorded for it (a
/// Namespace Active from its copied status, a ConfigMap without a status,
/// a kind the remote cluster does not serve Failed with the message that
/// says so). Neither the remote cluster nor a Secret is read.
#[tokio::test]
async fn trace_shows_an_application_its_resources_and_their_remote_objects() {
    let Setup {
        plane,
        client,
        remote: _,
        ns,
        rns,
        controllers: _c,
    } = with_target("trace").await;
    let remote_space = testenv::unique_name("trace-space");
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
