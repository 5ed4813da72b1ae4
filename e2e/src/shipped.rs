//! The six controllers as users run them: the project's image (built by
//! crates/oci, pushed to a registry the node pulls from), `deploy/` applied
//! through the local-node overlay, and only operator configuration added
//! (the registry's CA for the package-manager, and its pull interval for
//! `Always` tags; a test may run it with other flags through
//! [`package_manager_flags`]). Tests of one test binary share one such
//! installation; each works in its own namespace or under its own names.

use std::{path::PathBuf, sync::OnceLock, time::Duration};

use serde_json::Value;

use crate::{
    kubectl::{get_json, kubectl, kubectl_try},
    wait::wait_blocking,
};

/// The image the local-node overlay names (see its kustomization.yaml).
pub const OVERLAY_IMAGE: &str = "registry.crossplane-rs.test/crossplane-rs:dev";
/// The controllers' namespace.
pub const NS: &str = "crossplane-system";
/// The namespace Provider runtimes run in (their Deployments,
/// ServiceAccounts, Services, certificate and pull Secrets).
pub const RUNTIMES: &str = types::package_identity::RUNTIME_NAMESPACE;
/// Where the operator configuration mounts the registry's CA.
const CA_DIR: &str = "/etc/crossplane-rs/registry-ca";

/// One installation of `deploy/` on the test node.
pub struct Shipped {
    /// The registry the node pulls the project's image from, and packages
    /// are pushed to (`address` is `<node host address>:<port>`, which the
    /// package-manager pod reaches).
    pub registry: testenv::registry::Registry,
    /// Its CA, as a file (for `xpkg --ca-file`).
    pub ca_file: PathBuf,
    /// A pause image as the node pulls it.
    pub pause_image: String,
    /// A scratch directory.
    pub work: PathBuf,
    /// The package-manager's args as deploy/ ships them.
    pub(crate) deployed_args: Vec<String>,
}

static SHIPPED: OnceLock<Shipped> = OnceLock::new();

/// The installation, made on first use.
pub fn shipped() -> &'static Shipped {
    SHIPPED.get_or_init(install)
}

/// The project's image (Debian base layer and the six binaries this test
/// run built), written by crates/oci and pushed to `registry` under the
/// overlay's repository and tag. Returns the bytes uploaded and the
/// manifest's digest.
pub fn push_project_image(registry: &testenv::registry::Registry) -> (u64, String) {
    let cache = oci::debian::default_cache().expect("the .deb cache");
    let debs = oci::debian::download(&oci::debian::BASE_PACKAGES, &cache)
        .expect("apt-get download of the base packages");
    let base = oci::debian::base_layer(&debs).expect("the base layer");
    let bins = testenv::workspace_binary("scheduler");
    let bin_dir = bins.parent().expect("the binaries' directory");
    let image = oci::project::image(base, bin_dir).expect("the project image");
    let repository = OVERLAY_IMAGE.split_once('/').map_or("", |(_, r)| r);
    let reference = format!("{}/{repository}", registry.address);
    let pushed = block_on(image.push(
        &reference,
        &oci::Auth::Anonymous,
        &oci::Tls::Ca(registry.ca_pem.clone()),
    ))
    .unwrap_or_else(|e| panic!("push {reference}: {e}"));
    assert!(
        pushed.uploaded >= 3,
        "layers and config uploaded: {pushed:?}"
    );
    (pushed.bytes, pushed.digest.as_str().to_owned())
}

/// Runs a future to completion on a runtime of its own.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

/// Waits until every Deployment of the six is Available, or panics with the
/// pods' state.
pub fn wait_available(timeout: Duration) {
    wait_blocking(
        timeout,
        "every Deployment to become Available",
        || {
            let out = kubectl(&[
                "get",
                "deployments",
                "-n",
                NS,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.metadata.generation}/{.status.observedGeneration}/{.status.conditions[?(@.type==\"Available\")].status}/{.status.updatedReplicas}/{.status.availableReplicas}/{.status.replicas}{\"\\n\"}{end}",
            ]);
            // The Deployment controller has seen the latest template (until
            // it has, the status describes the previous one), every pod is
            // of it and available, and no pod of an older one is left.
            let ready: Vec<&str> = out
                .lines()
                .filter_map(|l| {
                    let (name, rest) = l.split_once('=')?;
                    let [generation, observed, available, updated, ready, total] =
                        <[&str; 6]>::try_from(rest.split('/').collect::<Vec<_>>()).ok()?;
                    (generation == observed
                        && available == "True"
                        && updated == total
                        && ready == total)
                        .then_some(name)
                })
                .collect();
            let all = oci::project::BINARIES.iter().all(|b| ready.contains(b));
            if all { Ok(()) } else { Err(out) }
        },
        || {
            let pods = kubectl(&["get", "pods", "-n", NS, "-o", "wide"]);
            let events = kubectl(&["get", "events", "-n", NS]);
            format!("\n{pods}\n{events}")
        },
    );
}

/// `kubectl apply -k deploy/overlays/local-node` (server-side): deploy/
/// with the image the node pulls.
pub fn apply_overlay() {
    let overlay = testenv::repo_root().join("deploy/overlays/local-node");
    kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        &overlay.to_string_lossy(),
    ]);
}

fn install() -> Shipped {
    let plane = testenv::control_plane_with_node();
    let node = plane
        .node
        .as_ref()
        .expect("these tests need testenv's node (not an existing cluster)");
    let host = OVERLAY_IMAGE.split('/').next().unwrap_or_default();
    let registry = testenv::registry::Registry::start(plane, node, host, None).unwrap();
    let work = plane.scratch_dir("shipped");
    std::fs::create_dir_all(&work).unwrap();
    let ca_file = work.join("registry-ca.pem");
    std::fs::write(&ca_file, &registry.ca_pem).unwrap();
    push_project_image(&registry);
    let pause = testenv::image::binary_image(&testenv::bin_dir().unwrap().join("pause")).unwrap();
    crate::artifacts::push_image(&registry, &format!("{}/pause:v1", registry.address), &pause);
    apply_overlay();
    let deployed_args = container_args("package-manager");
    // Operator configuration, and nothing else: the package-manager trusts
    // the registry's CA, and resolves `Always` tags every 2s (`operator_flags`).
    let (_, _) = kubectl_try(&["delete", "configmap", "registry-ca", "-n", NS]);
    kubectl(&[
        "create",
        "configmap",
        "registry-ca",
        "-n",
        NS,
        &format!("--from-file=ca.pem={}", ca_file.display()),
    ]);
    let args = [deployed_args.clone(), operator_flags()].concat();
    let patch = serde_json::json!([
        {"op": "add", "path": "/spec/template/spec/volumes/-",
         "value": {"name": "registry-ca", "configMap": {"name": "registry-ca"}}},
        {"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-",
         "value": {"name": "registry-ca", "mountPath": CA_DIR, "readOnly": true}},
        {"op": "replace", "path": "/spec/template/spec/containers/0/args",
         "value": args},
    ]);
    patch_deployment("package-manager", &patch);
    wait_available(Duration::from_secs(240));
    // Each controller acts only once its one pod holds the Lease: until the
    // package-manager's new pod does, the old one (without the registry's
    // CA) may still be the one reconciling.
    wait_leading(&oci::project::BINARIES);
    Shipped {
        registry,
        ca_file,
        pause_image: format!("{host}/pause:v1"),
        work,
        deployed_args,
    }
}

/// Waits until each of `binaries` has one pod left, Ready and holding its
/// Lease (2 minutes each), or panics with the pods' state.
pub fn wait_leading(binaries: &[&str]) {
    for binary in binaries {
        wait_blocking(
            Duration::from_secs(120),
            &format!("one {binary} pod, Ready and leading"),
            || sole_leader(binary, None, None),
            || kubectl(&["get", "pods", "-n", NS, "-o", "wide"]),
        );
    }
}

/// The flags the operator adds to the package-manager's deploy/ args: the
/// registry's CA (mounted by the install), and `Always` tags resolved
/// every 2s instead of every minute (the package tests move a tag and
/// wait for the new revision).
pub fn operator_flags() -> Vec<String> {
    vec![
        format!("--ca-bundle-path={CA_DIR}/ca.pem"),
        "--package-pull-interval=2s".to_owned(),
    ]
}

/// `kubectl patch --type=json` of a controller's Deployment.
pub(crate) fn patch_deployment(binary: &str, patch: &Value) {
    kubectl(&[
        "patch",
        "deployment",
        binary,
        "-n",
        NS,
        "--type=json",
        "-p",
        &patch.to_string(),
    ]);
}

/// The args of a controller Deployment's container.
pub fn container_args(binary: &str) -> Vec<String> {
    let d = get_json(&["deployment", binary, "-n", NS]).unwrap_or_default();
    d.pointer("/spec/template/spec/containers/0/args")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Removes crossplane-rs's own Object provider (its Deployment and the
/// kubernetes.crossplane.io CRDs), as a user who installs another provider
/// of that API group does first: the package-manager never takes over
/// CRDs it did not install.
pub fn remove_object_provider() {
    shipped();
    kubectl(&[
        "delete",
        "deployment",
        "object-provider",
        "-n",
        NS,
        "--ignore-not-found",
    ]);
    // Its pods gone too: a running one points its CRD's conversion at itself.
    let _ = kubectl_try(&[
        "wait",
        "--for=delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=object-provider",
        "-n",
        NS,
        "--timeout=120s",
    ]);
    kubectl(&[
        "delete",
        "crd",
        "objects.kubernetes.crossplane.io",
        "providerconfigs.kubernetes.crossplane.io",
        "providerconfigusages.kubernetes.crossplane.io",
        "observedobjectcollections.kubernetes.crossplane.io",
        "objects.kubernetes.m.crossplane.io",
        "observedobjectcollections.kubernetes.m.crossplane.io",
        "providerconfigs.kubernetes.m.crossplane.io",
        "clusterproviderconfigs.kubernetes.m.crossplane.io",
        "providerconfigusages.kubernetes.m.crossplane.io",
        "--ignore-not-found",
        "--wait=true",
    ]);
}

/// The running pod of a controller: (name, restart count).
pub fn pod_of(binary: &str) -> (String, i64) {
    shipped();
    let pod = crate::kubectl::running_pod(NS, &format!("app.kubernetes.io/name={binary}"))
        .unwrap_or_else(|| panic!("no running {binary} pod in {NS}"));
    let restarts = pod
        .pointer("/status/containerStatuses/0/restartCount")
        .and_then(Value::as_i64)
        .unwrap_or(-1);
    (
        pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        restarts,
    )
}

/// The package-manager's leader Lease: (holder, transitions).
pub fn package_manager_lease() -> (String, i64) {
    lease_of("package-manager")
}

/// A controller's leader Lease: (holder, transitions).
pub fn lease_of(binary: &str) -> (String, i64) {
    shipped();
    let lease = lease(binary);
    (
        holder(&lease),
        lease
            .pointer("/spec/leaseTransitions")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    )
}

/// A controller's Lease as JSON (null when there is none).
fn lease(binary: &str) -> Value {
    get_json(&["lease", &format!("crossplane-rs-{binary}"), "-n", NS]).unwrap_or_default()
}

/// Who holds a controller's Lease ("" when nobody does).
fn lease_holder(binary: &str) -> String {
    holder(&lease(binary))
}

/// The holder a Lease (as JSON) names ("" when none).
fn holder(lease: &Value) -> String {
    lease
        .pointer("/spec/holderIdentity")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Whether a pod's Ready condition is True.
fn pod_ready(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The pods of a controller, as JSON.
fn pods_of(binary: &str) -> Vec<Value> {
    let pods = get_json(&[
        "pods",
        "-n",
        NS,
        "-l",
        &format!("app.kubernetes.io/name={binary}"),
    ])
    .unwrap_or_default();
    pods["items"].as_array().cloned().unwrap_or_default()
}

/// The one pod of `binary` left that is not `except`, not being deleted,
/// Ready and holding the binary's Lease (and, given `args`, running with
/// them): its name. `None` while other pods are still about.
pub(crate) fn sole_leader(
    binary: &str,
    args: Option<&[String]>,
    except: Option<&str>,
) -> Option<String> {
    let pods = pods_of(binary);
    let [pod] = pods.as_slice() else {
        return None;
    };
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    (Some(name) != except
        && pod.pointer("/metadata/deletionTimestamp").is_none()
        && args
            .is_none_or(|a| pod.pointer("/spec/containers/0/args") == Some(&serde_json::json!(a)))
        && pod_ready(pod)
        && lease_holder(binary) == name)
        .then(|| name.to_owned())
}

/// The resident memory (bytes) of a controller's process in its pod, read
/// from /proc on the node (this machine): the process whose cgroup names
/// the pod's UID.
pub fn resident_bytes(binary: &str) -> u64 {
    let (pod, _) = pod_of(binary);
    let uid = pod_field(&pod, "{.metadata.uid}");
    let program = format!("/usr/local/bin/{binary}");
    let pid = pod_pid(&uid, &program)
        .unwrap_or_else(|| panic!("no {program} process of pod {pod} (uid {uid}) in /proc"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    kib * 1024
}

/// The process running `program` in the pod of UID `uid` on this machine
/// (the node): the one whose cgroup names the pod.
pub fn pod_pid(uid: &str, program: &str) -> Option<u32> {
    let underscored = uid.replace('-', "_");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let dir = entry.path();
        let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        if !cmdline.starts_with(program.as_bytes()) {
            continue;
        }
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
        if cgroup.contains(uid) || cgroup.contains(&underscored) {
            return Some(pid);
        }
    }
    None
}

/// The last `lines` lines of a controller's log.
pub fn log_tail(binary: &str, lines: usize) -> String {
    let (_, out) = kubectl_try(&[
        "logs",
        "-n",
        NS,
        &format!("deployment/{binary}"),
        &format!("--tail={lines}"),
    ]);
    out
}

/// What the package side looks like, for a failed wait.
pub fn explain() -> String {
    let (_, providers) = kubectl_try(&["get", "providers,providerrevisions", "-o", "yaml"]);
    let (_, pods) = kubectl_try(&["get", "deployments,pods", "-n", RUNTIMES, "-o", "wide"]);
    format!(
        "{providers}\n{pods}\npackage-manager log (tail):\n{}\nrbac-manager log (tail):\n{}",
        log_tail("package-manager", 40),
        log_tail("rbac-manager", 20)
    )
}

/// `xpkg push DIR REF` (trusting the registry's CA), with the runtime
/// image given; returns the pushed digest.
pub fn xpkg_push(dir: &std::path::Path, reference: &str, runtime_image: Option<&str>) -> String {
    xpkg_push_as(dir, reference, runtime_image, None)
}

/// Like [`xpkg_push`], as `user` with `password` (read from stdin).
pub fn xpkg_push_as(
    dir: &std::path::Path,
    reference: &str,
    runtime_image: Option<&str>,
    credentials: Option<(&str, &str)>,
) -> String {
    crate::artifacts::xpkg_push_trusting(
        &shipped().ca_file,
        dir,
        reference,
        runtime_image,
        credentials,
    )
}

/// A Provider package directory (version v1): its meta (with
/// `spec_extra` lines under spec) and CRD files.
pub fn package_dir(name: &str, spec_extra: &str, crds: &[(String, String)]) -> PathBuf {
    let crds = crate::artifacts::crds_of(crds);
    crate::artifacts::package_dir_in(&shipped().work, name, "v1", &crds, spec_extra)
}

/// Pushes an image of one base layer to `reference` in the shared registry;
/// returns the digest.
pub fn push_layer(reference: &str, layer: oci::Layer) -> String {
    crate::artifacts::push_base_layer(&shipped().registry, reference, layer)
}

/// "<status> <body>" of a GET of `url` from inside the node's network
/// namespace (where pod and Service IPs route), with curl.
pub fn through_node(node: &testenv::node::Node, url: &str) -> String {
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net={}", node.footprint.netns_pin.display()))
        .args([
            "curl",
            "-sS",
            "--max-time",
            "5",
            "-w",
            "\n%{http_code}",
            url,
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run nsenter curl: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    format!("{code} {body}{}", String::from_utf8_lossy(&out.stderr))
}

/// A pod's field (a jsonpath, e.g. `{.status.podIP}`) in the controllers'
/// namespace.
fn pod_field(pod: &str, jsonpath: &str) -> String {
    kubectl(&[
        "get",
        "pod",
        pod,
        "-n",
        NS,
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
    .trim()
    .to_owned()
}

/// A controller's /metrics, scraped from its pod's IP inside the node's
/// network namespace (where pod IPs route), as Prometheus would.
pub fn metrics_of(binary: &str) -> String {
    let (pod, _) = pod_of(binary);
    let ip = pod_field(&pod, "{.status.podIP}");
    metrics_at(&ip).unwrap_or_else(|answer| {
        panic!(
            "scrape {binary}: {}",
            answer.chars().take(300).collect::<String>()
        )
    })
}

/// The /metrics of the pod at `ip`, scraped through the node (no API
/// server needed); what answered instead when it is not a 200.
pub fn metrics_at(ip: &str) -> Result<String, String> {
    let node = testenv::control_plane_with_node()
        .node
        .as_ref()
        .expect("testenv's node");
    let answer = through_node(node, &format!("http://{ip}:8080/metrics"));
    match answer.strip_prefix("200 ") {
        Some(body) => Ok(body.to_owned()),
        None => Err(answer),
    }
}

/// What a controller keeps once it is idle: its live heap
/// (`crossplane_rs_heap_allocated_bytes`), the least of the scrapes 2 s
/// apart through 100 s in which none sees a reconcile in flight or done.
/// Read sooner, it counts what a burst leaves for a while: the status
/// writer's notes (swept within 45 s, runtime::expiring) and the burst's
/// connections to the API server with their TLS and read buffers, which
/// the kube client's pool closes after 90 s unused (in package_scale the
/// heap fell by up to a MiB 80 s into the quiet).
pub fn idle_heap_bytes(binary: &str) -> u64 {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(2);
    const QUIET_SCRAPES: usize = 50;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let mut quiet: Vec<u64> = Vec::new();
    let mut last_reconciles = -1.0;
    loop {
        let m = metrics_of(binary);
        let heap = crate::metric_sum(&m, "crossplane_rs_heap_allocated_bytes", &[]);
        assert!(
            heap > 0.0,
            "{binary} exports no crossplane_rs_heap_allocated_bytes"
        );
        let reconciles = crate::metric_sum(&m, "crossplane_rs_reconcile_total", &[]);
        let in_flight = crate::metric_sum(&m, "crossplane_rs_reconcile_in_flight", &[]);
        if in_flight == 0.0 && reconciles == last_reconciles {
            quiet.push(heap as u64);
            if quiet.len() == QUIET_SCRAPES {
                return quiet.into_iter().min().unwrap_or_default();
            }
        } else {
            quiet.clear();
        }
        last_reconciles = reconciles;
        assert!(
            std::time::Instant::now() < deadline,
            "{binary} was not idle for 100 s within five minutes (reconciles {reconciles}, in flight {in_flight})"
        );
        std::thread::sleep(EVERY);
    }
}

/// Reconciles of `controller` in `binary` so far (any result).
pub fn reconciles(binary: &str, controller: &str) -> f64 {
    crate::metric_sum(
        &metrics_of(binary),
        "crossplane_rs_reconcile_total",
        &[("controller", controller)],
    )
}
