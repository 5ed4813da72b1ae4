//! The test environment's node: the control cluster runs pods of locally
//! built images, their logs can be read, they reach the API server through
//! the `kubernetes` Service with their ServiceAccount token, and a node
//! leaves nothing on the host once its test binary is gone.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use testenv::node::Footprint;

/// The global sysctls kubelet would change; the node must leave them alone.
const HOST_SYSCTLS: [&str; 4] = [
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "vm/panic_on_oom",
];

fn host_sysctls() -> Vec<(String, String)> {
    HOST_SYSCTLS
        .iter()
        .map(|k| {
            let v = std::fs::read_to_string(format!("/proc/sys/{k}")).unwrap_or_default();
            (k.to_string(), v.trim().to_owned())
        })
        .collect()
}

/// Polls `kubectl` until `check` accepts its output, or fails with the last
/// output after `timeout`.
fn kubectl_until(
    cluster: &testenv::Cluster,
    args: &[&str],
    timeout: Duration,
    check: impl Fn(&str) -> bool,
) -> String {
    e2e::kubectl::Kubectl(cluster).until(args, timeout, check)
}

#[test]
fn a_deployment_of_a_local_image_runs_logs_and_reaches_the_api_server() {
    let plane = testenv::control_plane_with_node();
    let node = plane
        .node
        .as_ref()
        .expect("this test needs testenv's own node (not an existing cluster)");
    let control = &plane.control;
    eprintln!(
        "node Ready {:.1}s after etcd started; node memory {} MiB",
        node.startup.as_secs_f64(),
        node.memory_kib() / 1024
    );

    // The Node object: Ready, with the veth address as its InternalIP.
    let status = control
        .kubectl_ok(&[
            "get",
            &format!("node/{}", node.name),
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.addresses[?(@.type=="InternalIP")].address}"#,
        ])
        .unwrap();
    assert_eq!(status.trim(), format!("True {}", node.node_ip));

    // A locally built image: the apicheck program, imported, never pulled.
    let work = std::env::temp_dir().join(testenv::unique_name("node-image"));
    std::fs::create_dir_all(&work).unwrap();
    let apicheck = testenv::bin_dir().unwrap().join("apicheck");
    let image = "localhost/crossplane-rs-test/apicheck:1";
    let archive = testenv::image::binary_image_archive(&work, image, &apicheck).unwrap();
    node.import_image(&archive).unwrap();
    std::fs::remove_dir_all(&work).unwrap();

    let ns = testenv::unique_name("node");
    control.kubectl_ok(&["create", "namespace", &ns]).unwrap();
    let deployment = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: apicheck, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: apicheck}}}}
  template:
    metadata: {{labels: {{app: apicheck}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: apicheck
        image: {image}
        imagePullPolicy: Never
"#
    );
    // The namespace's default ServiceAccount comes a moment after the
    // namespace; until then the ReplicaSet's pod creation is refused and
    // retried by the controller.
    let created = Instant::now();
    let out = control.kubectl_stdin(&["apply", "-f", "-"], Some(&deployment));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    control
        .kubectl_ok(&[
            "wait",
            "-n",
            &ns,
            "--for=condition=Available",
            "deployment/apicheck",
            "--timeout=120s",
        ])
        .unwrap();
    eprintln!(
        "deployment Available {:.1}s after it was created",
        created.elapsed().as_secs_f64()
    );

    // kubectl logs works (API server → kubelet), and the pod's own log says
    // it reached the API server via the Service with its token.
    let logs = kubectl_until(
        control,
        &["logs", "-n", &ns, "deployment/apicheck"],
        Duration::from_secs(60),
        |l| l.contains("apicheck: authenticated as"),
    );
    assert!(
        logs.contains(&format!(
            "apicheck: authenticated as system:serviceaccount:{ns}:default"
        )),
        "{logs}"
    );
    let version = control.kubectl_ok(&["version", "-o", "json"]).unwrap();
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    let server = version["serverVersion"]["gitVersion"].as_str().unwrap();
    assert!(
        logs.contains(&format!("apicheck: version {server} ")),
        "{logs}"
    );
    // The pod went through the `kubernetes` Service's address.
    assert!(logs.contains("(https://10.96.0.1:443)"), "{logs}");

    // The kubernetes Service leads to the host end of the node's veth.
    let endpoints = control
        .kubectl_ok(&[
            "get",
            "endpointslices",
            "-n",
            "default",
            "-l",
            "kubernetes.io/service-name=kubernetes",
            "-o",
            "jsonpath={.items[*].endpoints[*].addresses[*]}",
        ])
        .unwrap();
    assert_eq!(endpoints.trim(), node.host_ip.to_string());
    eprintln!(
        "node memory with the pod running: {} MiB",
        node.memory_kib() / 1024
    );
    control
        .kubectl_ok(&["delete", "namespace", &ns, "--wait=false"])
        .unwrap();
}

/// Run by [`a_node_leaves_nothing_on_the_host`] as a separate process: starts
/// a control plane with a node, prints what the node occupies, and exits
/// without running any destructor, as a killed or crashed test binary would.
#[test]
#[ignore = "a helper process of a_node_leaves_nothing_on_the_host"]
fn node_child_process() {
    if std::env::var("CROSSPLANE_RS_NODE_CHILD").is_err() {
        return;
    }
    let (plane, _) = testenv::start_local_with(testenv::Options {
        node: true,
        ..testenv::Options::default()
    })
    .unwrap();
    let node = plane.node.as_ref().unwrap();
    // A pod runs, so there are shims, mounts and a pod network to clean up.
    let out = plane.control.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: sleeper, namespace: default}}\nspec:\n  containers:\n  - {{name: pause, image: {}, imagePullPolicy: Never}}\n",
            testenv::image::PAUSE_IMAGE
        )),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    plane
        .control
        .kubectl_ok(&[
            "wait",
            "-n",
            "default",
            "--for=condition=Ready",
            "pod/sleeper",
            "--timeout=120s",
        ])
        .unwrap();
    // A test registry, as the package tests start one.
    let registry =
        testenv::registry::Registry::start(&plane, node, "leftover.crossplane-rs.test", None)
            .unwrap();
    println!("REGISTRY {}", registry.pid());
    println!(
        "FOOTPRINT {}",
        serde_json::to_string(&node.footprint).unwrap()
    );
    std::process::exit(0);
}

#[test]
fn a_node_leaves_nothing_on_the_host() {
    let sysctls = host_sysctls();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "node_child_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CROSSPLANE_RS_NODE_CHILD", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let footprint: Footprint = stdout
        .lines()
        // The harness prints "test node_child_process ... " first, on the
        // same line.
        .find_map(|l| l.split_once("FOOTPRINT ").map(|(_, json)| json))
        .map(|j| serde_json::from_str(j).unwrap())
        .unwrap_or_else(|| {
            panic!(
                "the child process printed no footprint:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let registry: u32 = stdout
        .lines()
        .find_map(|l| l.split_once("REGISTRY ").map(|(_, pid)| pid.trim()))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("the child process printed no registry pid:\n{stdout}"));
    // Running (not gone, not a zombie nobody reaped yet).
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().chars().next())
            })
            .flatten()
            .is_some_and(|state| state != 'Z' && state != 'X')
    };
    // The child is gone; its watchdog now stops what it started (the
    // registry among them) and removes the node.
    e2e::wait_blocking(
        Duration::from_secs(60),
        "the node to leave nothing after its test process exited",
        || {
            let mut left = footprint.leftovers();
            if running(registry) {
                left.push(format!("the test registry, process {registry}"));
            }
            left.is_empty()
                .then_some(())
                .ok_or_else(|| format!("the node left:\n{}", left.join("\n")))
        },
        String::new,
    );
    assert_eq!(
        host_sysctls(),
        sysctls,
        "the node changed the host's sysctls"
    );
    assert!(
        !std::path::Path::new("/sys/class/net/cni0").exists(),
        "a cni0 bridge is on the host"
    );
    for table in ["filter", "nat"] {
        let rules = Command::new("iptables")
            .args(["-t", table, "-S"])
            .output()
            .unwrap();
        let rules = String::from_utf8_lossy(&rules.stdout);
        assert!(
            !rules.contains("KUBE-") && !rules.contains("CNI-"),
            "the host's iptables {table} table has node rules:\n{rules}"
        );
    }
}
