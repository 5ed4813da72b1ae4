//! deploy/ for real: the project's image built by crates/oci and pushed to
//! a CNCF registry the node pulls from, deploy/ rendered with the local-node overlay and
//! applied to the control cluster, whose node then runs the six controllers
//! as pods under their shipped ServiceAccounts and RBAC.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use serde_json::Value;

use oci::project::BINARIES;

use e2e::kubectl::kubectl;
use e2e::shipped::{
    OVERLAY_IMAGE, apply_overlay, push_project_image, through_node, wait_available,
};

/// `kubectl kustomize <dir>` (dir relative to the repository root), as JSON
/// documents keyed by apiVersion, kind, namespace and name.
fn render(dir: &str) -> BTreeMap<String, Value> {
    let path = testenv::repo_root().join(dir);
    let text = e2e::kubectl::local(&["kustomize", &path.to_string_lossy()]);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("kubectl kustomize {dir} rendered invalid YAML: {e}"));
    let mut by_key = BTreeMap::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let key = format!(
            "{} {} {}/{}",
            doc["apiVersion"].as_str().unwrap_or_default(),
            doc["kind"].as_str().unwrap_or_default(),
            doc["metadata"]["namespace"].as_str().unwrap_or_default(),
            doc["metadata"]["name"].as_str().unwrap_or_default(),
        );
        assert!(
            by_key.insert(key.clone(), doc).is_none(),
            "{dir} renders {key} twice"
        );
    }
    by_key
}

/// The images of every container of a workload's pod template.
fn images(doc: &Value) -> Vec<&str> {
    let spec = &doc["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec[k].as_array())
        .flatten()
        .map(|c| c["image"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn overlay_changes_only_the_image() {
    let shipped = render("deploy");
    let local = render("deploy/overlays/local-node");
    assert_eq!(
        shipped.keys().collect::<Vec<_>>(),
        local.keys().collect::<Vec<_>>(),
        "the local-node overlay renders other objects than deploy/"
    );
    let mut deployments = 0;
    for (key, want) in &shipped {
        let got = &local[key];
        if want["kind"] == "Deployment" {
            deployments += 1;
            assert_eq!(images(want), ["crossplane-rs:latest"], "{key} in deploy/");
            assert_eq!(images(got), [OVERLAY_IMAGE], "{key} in the overlay");
            let mut got = got.clone();
            for c in got["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap()
            {
                c["image"] = Value::from("crossplane-rs:latest");
            }
            assert_eq!(&got, want, "{key} differs beyond its image");
        } else {
            assert_eq!(got, want, "the overlay changes {key}");
        }
    }
    assert_eq!(deployments, BINARIES.len());
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ] {
        let n = local.values().filter(|d| d["kind"] == kind).count();
        assert!(n >= BINARIES.len(), "only {n} {kind}s rendered");
    }
}

#[test]
fn deploy_runs_for_real_on_the_node() {
    let plane = testenv::control_plane_with_node();
    let node = plane
        .node
        .as_ref()
        .expect("this test needs testenv's node (not an existing cluster)");
    let registry = testenv::registry::Registry::start(
        plane,
        node,
        OVERLAY_IMAGE.split('/').next().unwrap(),
        None,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let (size, digest) = push_project_image(&registry);
    let built = started.elapsed();
    apply_overlay();
    let applied = std::time::Instant::now();
    wait_available(std::time::Duration::from_secs(180));
    eprintln!(
        "deploy: image {} MiB built and pushed in {built:?}; all six Deployments Available {:?} after apply",
        size / (1024 * 1024),
        applied.elapsed()
    );
    // Each controller, as a pod under its shipped ServiceAccount, logged its
    // start-up line (the HTTP server it serves /healthz and /metrics on).
    for binary in BINARIES {
        let logs = kubectl(&[
            "logs",
            "-n",
            "crossplane-system",
            &format!("deployment/{binary}"),
        ]);
        assert!(
            logs.contains("serving /metrics, /healthz and /readyz"),
            "{binary}'s log has no start-up line: {logs}"
        );
        let sa = kubectl(&[
            "get",
            "pods",
            "-n",
            "crossplane-system",
            "-l",
            &format!("app.kubernetes.io/name={binary}"),
            "-o",
            "jsonpath={.items[*].spec.serviceAccountName}",
        ]);
        assert_eq!(sa.trim(), binary, "{binary} runs as another ServiceAccount");
        let image_id = kubectl(&[
            "get",
            "pods",
            "-n",
            "crossplane-system",
            "-l",
            &format!("app.kubernetes.io/name={binary}"),
            "-o",
            "jsonpath={.items[*].status.containerStatuses[*].imageID}",
        ]);
        assert!(
            image_id.contains(&digest),
            "{binary} does not run the pushed image {digest}: {image_id}"
        );
        // /healthz and /metrics through the binary's Service: its ClusterIP,
        // from inside the node's network (kube-proxy's rules send it on to
        // the pod), as Prometheus in the cluster would scrape it.
        let ip = kubectl(&[
            "get",
            "service",
            binary,
            "-n",
            "crossplane-system",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ]);
        // kube-proxy programs a new Service's rules on its own schedule
        // (after the Deployment is Available, possibly): wait for it.
        let healthz_url = format!("http://{}:8080/healthz", ip.trim());
        e2e::wait_blocking(
            std::time::Duration::from_secs(60),
            &format!("{binary} /healthz to answer 200 through its Service"),
            || {
                let answer = through_node(node, &healthz_url);
                answer.starts_with("200 ").then_some(()).ok_or(answer)
            },
            String::new,
        );
        let metrics = through_node(node, &format!("http://{}:8080/metrics", ip.trim()));
        assert!(
            metrics.starts_with("200 ") && metrics.contains("crossplane_rs_reconcile_total"),
            "{binary} /metrics through its Service: {}",
            metrics.chars().take(300).collect::<String>()
        );
    }

    // The seed's wordpress-demo, delivered by the controllers running as
    // pods: its cluster's kubeconfig names the remote API server at the
    // node-facing address (127.0.0.1 in a pod is the pod itself).
    let pod_kubeconfig = e2e::pods::remote_kubeconfig_for_pods();
    let kubeconfig_file = std::env::temp_dir().join(testenv::unique_name("remote-pod.kubeconfig"));
    std::fs::write(&kubeconfig_file, &pod_kubeconfig).unwrap();
    let secret = kubectl(&[
        "create",
        "secret",
        "generic",
        "wordpress-demo-cluster",
        "-n",
        "complex",
        &format!("--from-file=kubeconfig={}", kubeconfig_file.display()),
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    let _ = std::fs::remove_file(&kubeconfig_file);
    let control = &plane.control;
    let ns = control.kubectl_stdin(&["create", "namespace", "complex"], None);
    assert!(ns.status.success(), "create namespace complex");
    let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(&secret));
    assert!(out.status.success(), "apply the cluster Secret: {out:?}");
    for path in [
        "examples/wordpress-demo/",
        "examples/seeds/000-wordpress-demo.yaml",
    ] {
        let full = testenv::repo_root().join(path);
        kubectl(&["apply", "-f", full.to_str().unwrap()]);
    }
    let delivered = std::time::Instant::now();
    e2e::wait_blocking(
        std::time::Duration::from_secs(120),
        "wordpress-demo to be Submitted 3/3",
        || {
            let state = kubectl(&[
                "get",
                "kubernetesapplication",
                "wordpress-demo",
                "-n",
                "complex",
                "-o",
                "jsonpath={.status.state} {.status.submittedResources}/{.status.desiredResources}",
            ]);
            (state.trim() == "Submitted 3/3")
                .then_some(())
                .ok_or(format!("{state:?}"))
        },
        || {
            let logs: Vec<String> = ["scheduler", "application-controller", "resource-controller"]
                .iter()
                .map(|b| {
                    kubectl(&[
                        "logs",
                        "-n",
                        "crossplane-system",
                        &format!("deployment/{b}"),
                        "--tail=20",
                    ])
                })
                .collect();
            format!("the controllers' logs:\n{}", logs.join("\n"))
        },
    );
    eprintln!(
        "deploy: wordpress-demo Submitted 3/3 {:?} after apply, by the controllers as pods",
        delivered.elapsed()
    );
    leader_failover(control);
}

/// Waits until `check` gives Some, or panics naming `what`.
fn wait_until<T>(what: &str, timeout: std::time::Duration, check: impl FnMut() -> Option<T>) -> T {
    e2e::wait_blocking(timeout, what, check, String::new)
}

/// Who holds the scheduler's leader-election Lease.
fn scheduler_leader() -> String {
    kubectl(&[
        "get",
        "lease",
        "crossplane-rs-scheduler",
        "-n",
        "crossplane-system",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
    .trim()
    .to_owned()
}

/// Two scheduler replicas: the Lease names one; its pod is killed; the
/// Lease moves to the other replica, which then schedules a new application
/// (delivered to the remote cluster by the other controllers).
fn leader_failover(control: &testenv::Cluster) {
    kubectl(&[
        "scale",
        "deployment/scheduler",
        "-n",
        "crossplane-system",
        "--replicas=2",
    ]);
    let pods_of = || {
        kubectl(&[
            "get",
            "pods",
            "-n",
            "crossplane-system",
            "-l",
            "app.kubernetes.io/name=scheduler",
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ])
        .lines()
        .filter(|l| l.split_whitespace().count() == 1)
        .map(|l| l.trim().to_owned())
        .collect::<Vec<_>>()
    };
    let pods = wait_until(
        "two running scheduler pods",
        std::time::Duration::from_secs(60),
        || {
            let pods = pods_of();
            (pods.len() == 2).then_some(pods)
        },
    );
    let leader = wait_until(
        "a scheduler to hold the Lease",
        std::time::Duration::from_secs(60),
        || {
            let holder = scheduler_leader();
            pods.contains(&holder).then_some(holder)
        },
    );
    let killed = std::time::Instant::now();
    kubectl(&[
        "delete",
        "pod",
        &leader,
        "-n",
        "crossplane-system",
        "--wait=false",
    ]);
    // The killed leader lets its Lease go on SIGTERM; the standby and the
    // replacement pod the Deployment starts both ask for it, and either
    // may win: failover is the Lease held by a live replica other than the
    // killed one.
    let standby = wait_until(
        "the Lease to move to another replica",
        std::time::Duration::from_secs(60),
        || {
            let holder = scheduler_leader();
            (!holder.is_empty() && holder != leader && pods_of().contains(&holder))
                .then_some(holder)
        },
    );
    eprintln!(
        "deploy: the scheduler's Lease moved from {leader} to {standby} {:?} after the kill{}",
        killed.elapsed(),
        if pods.contains(&standby) {
            " (the standby)"
        } else {
            " (the replacement pod)"
        }
    );
    // Work goes on under the new leader.
    let app = serde_json::json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplication",
        "metadata": {"name": "after-failover", "namespace": "complex"},
        "spec": {
            "clusterSelector": {"matchLabels": {"app": "wordpress-demo"}},
            "resourceTemplates": [{
                "metadata": {"name": "after-failover-cm"},
                "spec": {"template": {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "after-failover", "namespace": "default"},
                    "data": {"scheduled": "by the new leader"},
                }},
            }],
        },
    });
    let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(&app.to_string()));
    assert!(out.status.success(), "apply after-failover: {out:?}");
    wait_until(
        "after-failover to be Submitted",
        std::time::Duration::from_secs(60),
        || {
            let state = kubectl(&[
                "get",
                "kubernetesapplication",
                "after-failover",
                "-n",
                "complex",
                "-o",
                "jsonpath={.status.state}",
            ]);
            (state.trim() == "Submitted").then_some(())
        },
    );
    let logs = kubectl(&["logs", "-n", "crossplane-system", &standby]);
    assert!(
        logs.contains("after-failover"),
        "the new leader {standby} did not schedule after-failover: {logs}"
    );
}

/// A pod of `image` in `ns` that pulls (always) with `pull_secret`, if any.
fn pause_pod(
    control: &testenv::Cluster,
    ns: &str,
    name: &str,
    image: &str,
    pull_secret: Option<&str>,
) {
    let secrets: Vec<Value> = pull_secret
        .iter()
        .map(|s| serde_json::json!({"name": s}))
        .collect();
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "imagePullSecrets": secrets,
            "containers": [{"name": "pause", "image": image, "imagePullPolicy": "Always"}],
        },
    });
    let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(&pod.to_string()));
    assert!(out.status.success(), "create pod {name}: {out:?}");
}

/// The pod's phase and its container's waiting reason.
fn pod_state(ns: &str, name: &str) -> String {
    kubectl(&[
        "get",
        "pod",
        name,
        "-n",
        ns,
        "-o",
        "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}",
    ])
}

#[test]
fn a_private_registry_needs_its_credentials_to_push_and_to_pull() {
    let plane = testenv::control_plane_with_node();
    let node = plane.node.as_ref().expect("testenv's node");
    let host = "private.crossplane-rs.test";
    let registry =
        testenv::registry::Registry::start(plane, node, host, Some(("robot", "s3cret-pull")))
            .unwrap();
    let image = testenv::image::binary_image(&testenv::bin_dir().unwrap().join("pause")).unwrap();
    let reference = format!("{}/team/pause:v1", registry.address);
    let tls = oci::Tls::Ca(registry.ca_pem.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for auth in [
        oci::Auth::Anonymous,
        oci::Auth::Basic {
            username: "robot".to_owned(),
            password: "wrong".to_owned(),
        },
    ] {
        let refused = rt.block_on(image.push(&reference, &auth, &tls));
        assert!(
            matches!(refused, Err(oci::Error::Unauthorized { .. })),
            "a push as {auth:?} was not refused as unauthorized: {refused:?}"
        );
    }
    let good = oci::Auth::Basic {
        username: "robot".to_owned(),
        password: "s3cret-pull".to_owned(),
    };
    rt.block_on(image.push(&reference, &good, &tls))
        .expect("a push with the credentials");

    // A pod pulls it by the name containerd maps to the registry, only with
    // an imagePullSecret holding the credentials.
    let ns = testenv::unique_name("private");
    kubectl(&["create", "namespace", &ns]);
    let name = format!("{host}/team/pause:v1");
    pause_pod(&plane.control, &ns, "without", &name, None);
    let auth =
        serde_json::json!({"auths": {host: {"username": "robot", "password": "s3cret-pull"}}});
    kubectl(&[
        "create",
        "secret",
        "generic",
        "pull",
        "-n",
        &ns,
        "--type=kubernetes.io/dockerconfigjson",
        &format!("--from-literal=.dockerconfigjson={auth}"),
    ]);
    pause_pod(&plane.control, &ns, "with", &name, Some("pull"));
    wait_until(
        "the pod with the pull Secret to run",
        std::time::Duration::from_secs(60),
        || pod_state(&ns, "with").starts_with("Running").then_some(()),
    );
    wait_until(
        "the pod without credentials to fail its pull",
        std::time::Duration::from_secs(60),
        || {
            let state = pod_state(&ns, "without");
            (state.contains("ErrImagePull") || state.contains("ImagePullBackOff")).then_some(())
        },
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}
