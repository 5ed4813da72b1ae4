//! Upstream Crossplane core, run as its Helm chart runs it, from the binary
//! hack/build-binaries.sh builds with `CROSSPLANE_RS_CORE=1` (the module
//! the tests already take the `crossplane` CLI from, at the same version):
//!
//! - an image of the static binary, its CRDs in `/crds` and webhook
//!   configurations in `/webhookconfigurations`, as upstream's
//!   own image lays them out, pushed to the registry the node pulls from;
//! - `crossplane core init` (CRDs, TLS Secrets, the webhook configuration,
//!   the default DeploymentRuntimeConfig and an activation policy of `*`,
//!   as the chart's defaults) runs once as a Job: the chart runs it as an
//!   init container, but the core's pod mounts the TLS Secrets init fills,
//!   which a Job fills before that pod exists;
//! - `crossplane core start` and `crossplane rbac init`/`rbac start` as
//!   Deployments with the chart's environment, in a namespace of their own,
//!   webhooks on (the API server routes to endpoints, so it reaches them).
//!
//! Differences from the chart, said in the JSON: both ServiceAccounts are
//! bound to cluster-admin instead of the chart's aggregated ClusterRoles
//! (what the binaries may do, not what they do), and no
//! `--provider-clusterrole` limits the rbac-manager.

use std::{path::Path, time::Duration};

use serde_json::{Value, json};

/// The namespace upstream runs in (its `POD_NAMESPACE`): its Deployments,
/// TLS Secrets and the Provider runtimes it makes.
pub const NS: &str = "upstream-system";
/// The users the audit log names.
pub const CORE_USER: &str = "system:serviceaccount:upstream-system:crossplane";
pub const RBAC_USER: &str = "system:serviceaccount:upstream-system:rbac-manager";
/// Where the registry's CA is mounted (`CA_BUNDLE_PATH`).
const CA_DIR: &str = "/certs";

/// What the JSON says of how upstream ran.
pub fn described(version: &str, image: &str) -> Value {
    json!({
        "version": version,
        "image": image,
        "namespace": NS,
        "webhooks": true,
        "composition": "on, idle (no XRDs)",
        "init": "crossplane core init as a Job before the Deployment (the chart: an init container)",
        "rbac": "both ServiceAccounts bound to cluster-admin; rbac-manager without --provider-clusterrole",
        "leader_election": true,
    })
}

/// The pinned version (hack/versions.env, `CROSSPLANE_CLI_VERSION`).
pub fn version() -> String {
    let env = std::fs::read_to_string(testenv::repo_root().join("hack/versions.env"))
        .expect("hack/versions.env");
    env.lines()
        .find_map(|l| l.strip_prefix("CROSSPLANE_CLI_VERSION="))
        .expect("CROSSPLANE_CLI_VERSION in hack/versions.env")
        .trim()
        .to_owned()
}

/// Builds upstream's image from the binary and CRDs in `bin_dir` and
/// pushes it to `registry`; answers the reference the node pulls.
pub fn push_image(registry: &testenv::registry::Registry, bin_dir: &Path) -> String {
    let program = std::fs::read(bin_dir.join("crossplane")).unwrap_or_else(|e| {
        panic!(
            "upstream's crossplane binary is not built ({e}): run CROSSPLANE_RS_CORE=1 hack/build-binaries.sh"
        )
    });
    let mut layer = oci::LayerBuilder::new().file("usr/local/bin/crossplane", 0o755, program);
    // /crds and /webhookconfigurations, as upstream's Dockerfile copies them.
    for dir in ["crds", "webhookconfigurations"] {
        let from = bin_dir.join(format!("crossplane-{dir}"));
        let mut files: Vec<_> = std::fs::read_dir(&from)
            .unwrap_or_else(|e| panic!("{}: {e}", from.display()))
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no manifests in {}", from.display());
        layer = layer.dir(dir, 0o755);
        for f in &files {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
            let bytes = std::fs::read(f).unwrap();
            layer = layer.file(format!("{dir}/{}", name.unwrap_or_default()), 0o644, bytes);
        }
    }
    let cache = oci::debian::default_cache().expect("the .deb cache");
    let debs =
        oci::debian::download(&oci::debian::BASE_PACKAGES, &cache).expect("the base packages");
    let base = oci::debian::base_layer(&debs).expect("the base layer");
    let image = oci::Image::new(oci::Config {
        entrypoint: vec!["/usr/local/bin/crossplane".to_owned()],
        user: Some("65532".to_owned()),
        os: "linux".to_owned(),
        architecture: oci::host_architecture().to_owned(),
        ..oci::Config::default()
    })
    .layer(base)
    .layer(layer.build().expect("the crossplane layer"));
    let reference = format!("{}/upstream/crossplane:{}", registry.address, version());
    e2e::artifacts::push_image(registry, &reference, &image);
    reference
}

/// The environment both of upstream's core commands get from the chart.
fn core_env(webhooks: bool) -> Vec<Value> {
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let value = |name: &str, v: &str| json!({"name": name, "value": v});
    let mut env = vec![
        field("POD_NAMESPACE", "metadata.namespace"),
        field("POD_SERVICE_ACCOUNT", "spec.serviceAccountName"),
        value("TLS_CA_SECRET_NAME", "crossplane-root-ca"),
        value("TLS_SERVER_SECRET_NAME", "crossplane-tls-server"),
        value("TLS_CLIENT_SECRET_NAME", "crossplane-tls-client"),
    ];
    if webhooks {
        env.extend([
            value("WEBHOOK_SERVICE_NAME", "crossplane-webhooks"),
            value("WEBHOOK_SERVICE_NAMESPACE", NS),
            value("WEBHOOK_SERVICE_PORT", "9443"),
        ]);
    } else {
        env.push(value("ENABLE_WEBHOOKS", "false"));
    }
    env
}

/// The objects of upstream's installation, but for the init Job.
fn manifests(image: &str, ca_pem: &str) -> Vec<Value> {
    let labels = |app: &str| json!({"app": app});
    let mut start_env = core_env(true);
    start_env.extend([
        json!({"name": "LEADER_ELECTION", "value": "true"}),
        json!({"name": "CA_BUNDLE_PATH", "value": format!("{CA_DIR}/ca.pem")}),
        json!({"name": "TLS_SERVER_CERTS_DIR", "value": "/tls/server"}),
        json!({"name": "TLS_CLIENT_CERTS_DIR", "value": "/tls/client"}),
    ]);
    let secret_volume =
        |name: &str, secret: &str| json!({"name": name, "secret": {"secretName": secret}});
    let core = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "crossplane", "namespace": NS, "labels": labels("crossplane")},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels("crossplane")},
            "strategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels("crossplane")},
                "spec": {
                    "serviceAccountName": "crossplane",
                    "containers": [{
                        "name": "universal-crossplane",
                        "image": image,
                        "args": ["core", "start"],
                        "env": start_env,
                        "ports": [
                            {"name": "readyz", "containerPort": 8081},
                            {"name": "metrics", "containerPort": 8080},
                            {"name": "webhooks", "containerPort": 9443},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "readyz"}},
                        "volumeMounts": [
                            {"name": "package-cache", "mountPath": "/cache/xpkg"},
                            {"name": "function-cache", "mountPath": "/cache/xfn"},
                            {"name": "ca-certs", "mountPath": CA_DIR, "readOnly": true},
                            {"name": "tls-server-certs", "mountPath": "/tls/server"},
                            {"name": "tls-client-certs", "mountPath": "/tls/client"},
                        ],
                    }],
                    "volumes": [
                        {"name": "package-cache", "emptyDir": {"sizeLimit": "20Mi"}},
                        {"name": "function-cache", "emptyDir": {"sizeLimit": "512Mi"}},
                        {"name": "ca-certs", "configMap": {"name": "registry-ca"}},
                        secret_volume("tls-server-certs", "crossplane-tls-server"),
                        secret_volume("tls-client-certs", "crossplane-tls-client"),
                    ],
                },
            },
        },
    });
    let rbac = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "crossplane-rbac-manager", "namespace": NS, "labels": labels("crossplane-rbac-manager")},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels("crossplane-rbac-manager")},
            "template": {
                "metadata": {"labels": labels("crossplane-rbac-manager")},
                "spec": {
                    "serviceAccountName": "rbac-manager",
                    "initContainers": [{
                        "name": "crossplane-init", "image": image, "args": ["rbac", "init"],
                    }],
                    "containers": [{
                        "name": "crossplane", "image": image, "args": ["rbac", "start"],
                        "env": [{"name": "LEADER_ELECTION", "value": "true"}],
                        "ports": [{"name": "metrics", "containerPort": 8080}],
                    }],
                },
            },
        },
    });
    let account = |name: &str| json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NS}});
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        account("crossplane"),
        account("rbac-manager"),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "bench:upstream-crossplane"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "crossplane", "namespace": NS},
                {"kind": "ServiceAccount", "name": "rbac-manager", "namespace": NS},
            ],
        }),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "registry-ca", "namespace": NS},
            "data": {"ca.pem": ca_pem},
        }),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "crossplane-webhooks", "namespace": NS},
            "spec": {"selector": labels("crossplane"), "ports": [{"name": "webhooks", "port": 9443, "targetPort": 9443}]},
        }),
        core,
        rbac,
    ]
}

/// The init Job: `crossplane core init` with the chart's init container's
/// arguments and environment.
fn init_job(image: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "crossplane-init", "namespace": NS},
        "spec": {
            "backoffLimit": 3,
            "template": {"spec": {
                "serviceAccountName": "crossplane",
                "restartPolicy": "Never",
                "containers": [{
                    "name": "crossplane-init", "image": image,
                    "args": ["core", "init", "--activation=*"],
                    "env": core_env(true),
                }],
            }},
        },
    })
}

fn apply(control: &testenv::Cluster, objects: &[Value]) {
    crate::phases::apply_list(control, objects, true);
}

/// Installs upstream (after crossplane-rs's package side is removed) and
/// waits until its core and rbac-manager are Available.
pub fn install(control: &testenv::Cluster, image: &str, ca_pem: &[u8]) {
    let ca = String::from_utf8_lossy(ca_pem).into_owned();
    let all = manifests(image, &ca);
    // Namespace, accounts, binding and CA first; then init; then the rest.
    apply(control, &all[..6]);
    apply(control, &[init_job(image)]);
    let done = control.kubectl(&[
        "wait",
        "-n",
        NS,
        "job/crossplane-init",
        "--for=condition=Complete",
        "--timeout=300s",
    ]);
    assert!(
        done.status.success(),
        "crossplane core init did not complete: {}\n{}",
        String::from_utf8_lossy(&done.stderr),
        String::from_utf8_lossy(
            &control
                .kubectl(&["logs", "-n", NS, "job/crossplane-init"])
                .stdout
        )
    );
    apply(control, &all[6..]);
    for d in ["crossplane", "crossplane-rbac-manager"] {
        let out = control.kubectl(&[
            "wait",
            "-n",
            NS,
            &format!("deployment/{d}"),
            "--for=condition=Available",
            "--timeout=300s",
        ]);
        assert!(
            out.status.success(),
            "upstream's {d} did not become Available: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Each acts once its one pod holds its Lease.
    for app in ["crossplane", "crossplane-rbac-manager"] {
        let pod = e2e::kubectl::running_pod(NS, &format!("app={app}"))
            .and_then(|p| p.pointer("/metadata/name")?.as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("no running pod of {app} in {NS}"));
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let out = control.kubectl(&[
                "get",
                "leases",
                "-n",
                NS,
                "-o",
                "jsonpath={range .items[*]}{.spec.holderIdentity}{\"\\n\"}{end}",
            ]);
            let holders = String::from_utf8_lossy(&out.stdout).into_owned();
            if holders.lines().any(|h| h.starts_with(&pod)) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "upstream's {app} pod {pod} holds no Lease in {NS}: {holders}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}
