//! Deletion that cannot reach its cluster orphans with an event instead of hanging; controllers
//! killed midway converge without duplicates or orphans.

use super::*;

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

#[tokio::test]
async fn deleting_after_the_cluster_secret_is_gone_orphans_with_an_event_instead_of_hanging() {
    let Setup {
        plane: _,
        client,
        remote,
        ns,
        rns,
        controllers: _c,
    } = with_target("orphan").await;
    deliver_one_configmap(&client, &ns, &rns).await;
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
    let Setup {
        plane,
        client,
        remote,
        ns,
        rns,
        controllers: mut c,
    } = with_target("chaos").await;
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
async fn deleting_while_the_cluster_does_not_answer_orphans_after_the_deletion_timeout() {
    let Setup {
        plane,
        client,
        remote,
        ns,
        rns,
        controllers: _c,
    } = with_target("unreachable").await;
    deliver_one_configmap(&client, &ns, &rns).await;
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
