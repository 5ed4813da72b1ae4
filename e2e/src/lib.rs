//! Helpers for the end-to-end tests in tests/: running this workspace's
//! binaries against the test control plane, waiting for conditions, reading
//! their HTTP endpoints.

// Test support: failing a test loudly, with what went wrong, is this crate's
// job, so it panics where production code would return errors.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

pub mod artifacts;
pub mod cosign;
pub mod extensions;
pub mod hostile;
pub mod kubectl;
pub mod objects;
pub mod packages;
pub mod pods;
pub mod proxy;
pub mod shipped;
pub mod stall;
pub mod trace;
pub mod upstream;
pub mod wait;
pub mod workloads;

pub use wait::{wait, wait_blocking, wait_explained};

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use wait::poll;

/// A running binary of this workspace; killed when dropped (also when a test
/// panics).
pub struct Running {
    /// The process.
    pub child: Child,
    /// Its /metrics, /healthz, /readyz address.
    pub addr: SocketAddr,
    /// Which binary.
    pub name: String,
    log: std::path::PathBuf,
    /// Whether it serves the Objects' conversion webhook at a URL of its
    /// own (see [`webhook_args`]).
    own_webhook: bool,
}

/// Stops `child` when the test process exits, however it exits.
pub fn stopped_with_this_process(child: &Child) {
    let _ = Command::new("sh")
        .args([
            "-c",
            "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; kill \"$2\" 2>/dev/null",
            "watchdog",
            &std::process::id().to_string(),
            &child.id().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// The object-provider serves its CRD's conversion webhook: run here, on a
/// free port of this host, named by URL (unless `args` say otherwise).
fn webhook_args(name: &str, args: &[&str]) -> Vec<String> {
    let said = args
        .iter()
        .any(|a| a.starts_with("--webhook") || a.starts_with("--serve-webhook"));
    if name != "object-provider" || said {
        return Vec::new();
    }
    let addr = free_addr();
    vec![
        format!("--webhook-addr={addr}"),
        format!("--webhook-url=https://{addr}/convert"),
    ]
}

impl Running {
    /// Starts `name` against the cluster whose kubeconfig is `kubeconfig`, with
    /// `--metrics-addr` on a free port and the extra `args`.
    pub fn start(name: &str, kubeconfig: &Path, args: &[&str]) -> Self {
        let bin = testenv::workspace_binary(name);
        assert!(
            bin.exists(),
            "{} is missing: build the binaries first (`cargo build --bins`; the README's test command does)",
            bin.display()
        );
        let addr = free_addr();
        let webhook = webhook_args(name, args);
        let log = std::env::temp_dir().join(format!("{}.log", testenv::unique_name(name)));
        let out = std::fs::File::create(&log).expect("create log file");
        let child = Command::new(&bin)
            .env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("E2E_CONTROLLER_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .arg(format!("--metrics-addr={addr}"))
            .args(&webhook)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone log handle"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        // A binary shared by a test file lives in a static, never dropped.
        stopped_with_this_process(&child);
        Self {
            child,
            addr,
            name: name.to_owned(),
            log,
            own_webhook: !webhook.is_empty(),
        }
    }

    /// What the binary has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the binary is up: /healthz and /readyz answer 200 (it
    /// reached the API server and found its CRDs; leading or standing by),
    /// failing with the binary's log. An object-provider serving the
    /// conversion webhook at its own URL is up once the API server converts
    /// through it (see [`Running::wait_converting`]).
    pub async fn wait_healthy(&mut self, timeout: Duration) {
        self.wait_healthy_on(&testenv::control_plane().control, timeout)
            .await;
    }

    /// [`Running::wait_healthy`] for a binary of a control plane of its own
    /// (`control`), such as a benchmark's.
    pub async fn wait_healthy_on(&mut self, control: &testenv::Cluster, timeout: Duration) {
        self.wait_for(timeout, "/readyz").await;
        self.wait_converting_on(control, timeout);
    }

    /// For an object-provider serving the conversion webhook at its own URL:
    /// waits until the API server converts Objects through it. The provider
    /// is ready once it has pointed the CRD at itself, but the API server
    /// takes the new URL from its own watch of the CRD a moment later, and
    /// meanwhile calls the URL it pointed at before (in a test binary, a
    /// provider of an earlier test that is gone). A server-side dry run of
    /// a `v1alpha1` Object is converted to the stored version and back, and
    /// stores nothing. Does nothing for other binaries.
    pub fn wait_converting(&self, timeout: Duration) {
        self.wait_converting_on(&testenv::control_plane().control, timeout);
    }

    /// [`Running::wait_converting`] on the control cluster `control`.
    pub fn wait_converting_on(&self, control: &testenv::Cluster, timeout: Duration) {
        if !self.own_webhook {
            return;
        }
        let probe = "apiVersion: kubernetes.crossplane.io/v1alpha1\nkind: Object\nmetadata:\n  generateName: conversion-probe-\nspec:\n  forProvider:\n    manifest: {apiVersion: v1, kind: ConfigMap, metadata: {name: probe, namespace: default}}\n";
        wait_blocking(
            timeout,
            "the API server to convert Objects through this object-provider's webhook",
            || {
                let out = control.kubectl_stdin(
                    &["create", "--dry-run=server", "-o", "name", "-f", "-"],
                    Some(probe),
                );
                if out.status.success() {
                    Ok(())
                } else {
                    Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
                }
            },
            || format!("{} log:\n{}", self.name, self.log()),
        );
    }

    /// Waits until /healthz answers 200 (the process serves; it may still
    /// be waiting for the API server or its CRDs).
    pub async fn wait_live(&mut self, timeout: Duration) {
        self.wait_for(timeout, "/healthz").await;
    }

    async fn wait_for(&mut self, timeout: Duration, path: &str) {
        let what = format!("{} to answer {path}", self.name);
        let healthy = poll(timeout, Duration::from_millis(100), &what, || {
            std::future::ready(self.answers(path))
        })
        .await;
        if let Err(out) = healthy {
            panic!(
                "{} not healthy within {timeout:?} ({}); log:\n{}",
                self.name,
                out.message(None),
                self.log()
            );
        }
    }

    /// Whether `path` answers 200 (what it answered instead); fails the
    /// test when the binary exited.
    fn answers(&mut self, path: &str) -> Result<(), String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited ({status}) before becoming healthy; log:\n{}",
                self.name,
                self.log()
            );
        }
        match http_get(self.addr, path) {
            Some((200, _)) => Ok(()),
            other => Err(format!("{path} answered {other:?}")),
        }
    }

    /// The body of GET /metrics.
    pub fn metrics(&self) -> String {
        match http_get(self.addr, "/metrics") {
            Some((200, body)) => body,
            other => panic!(
                "{}: GET /metrics answered {other:?}; log:\n{}",
                self.name,
                self.log()
            ),
        }
    }

    /// Reconciles of `controller` it has finished so far (any result).
    pub fn reconciles(&self, controller: &str) -> f64 {
        metric_sum(
            &self.metrics(),
            "crossplane_rs_reconcile_total",
            &[("controller", controller)],
        )
    }

    /// How many reconciles of `controller` are running now.
    pub fn in_flight(&self, controller: &str) -> f64 {
        metric_sum(
            &self.metrics(),
            "crossplane_rs_reconcile_in_flight",
            &[("controller", controller)],
        )
    }

    /// Kills the process at once (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
        // A failing test leaves the binary's whole log behind.
        if std::thread::panicking() {
            eprintln!("{}'s log: {}", self.name, self.log.display());
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// A free loopback address, for a process started later that binds it
/// (picked outside the kernel's ephemeral range: see
/// [`testenv::free_port_on`]).
pub fn free_addr() -> SocketAddr {
    let ip = std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST);
    SocketAddr::new(ip, testenv::free_port_on(ip).expect("a free port"))
}

/// A minimal HTTP/1.0 GET: (status, body), or None when nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// One sample of Prometheus text: its metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric's name.
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key` ("" when it has none).
    pub fn label(&self, key: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The samples of Prometheus text `metrics` (what `/metrics` serves):
/// the one parser the tests and the benchmarks read metrics with.
pub fn samples(metrics: &str) -> Vec<Sample> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(series, value)| {
            let (name, rest) = series.split_once('{').unwrap_or((series, ""));
            let mut labels = Vec::new();
            let mut rest = rest.trim_end_matches('}');
            while let Some((key, after)) = rest.split_once("=\"") {
                let end = after.find('"')?;
                labels.push((
                    key.trim_start_matches(',').to_owned(),
                    after[..end].to_owned(),
                ));
                rest = &after[end + 1..];
            }
            Some(Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().ok()?,
            })
        })
        .collect()
}

/// The sum of the samples of metric `name` whose labels include every pair
/// in `labels`, in Prometheus text `metrics` (0 when there is none).
pub fn metric_sum(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(metrics)
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == *v))
        .map(|s| s.value)
        .sum()
}

/// Waits for an Event with `reason` about the object called `involved`
/// (any kind) in `ns`: events are posted after the change they report, so a
/// test that saw the change waits for its event rather than listing once.
pub async fn wait_event(
    client: &kube::Client,
    ns: Option<&str>,
    involved: Option<&str>,
    reason: &str,
) -> k8s_openapi::api::core::v1::Event {
    use k8s_openapi::api::core::v1::Event;
    let api = match ns {
        Some(ns) => kube::Api::<Event>::namespaced(client.clone(), ns),
        None => kube::Api::<Event>::all(client.clone()),
    };
    let mut lp = kube::api::ListParams::default();
    if let Some(name) = involved {
        lp = lp.fields(&format!("involvedObject.name={name}"));
    }
    let about = involved.unwrap_or("anything");
    wait(
        Duration::from_secs(60),
        &format!("a {reason} event about {about}"),
        || async {
            api.list(&lp)
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
        },
    )
    .await
}

/// Reads a YAML file of the repository (relative to its root) as JSON
/// documents.
pub fn yaml_documents(relative: &str) -> Vec<serde_json::Value> {
    let path = testenv::repo_root().join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    yaml_documents_of(&text, &path.display().to_string())
}

/// The YAML documents of `text` (named `what` in a failure) as JSON; empty
/// and comment-only documents are left out.
pub fn yaml_documents_of(text: &str, what: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple::<serde_json::Value>(text)
        .unwrap_or_else(|e| panic!("parsing {what}: {e}"))
        .into_iter()
        .filter(serde_json::Value::is_object)
        .collect()
}

/// Applies deploy/ (the shipped ServiceAccounts and their RBAC, among the
/// rest) to `control`, as an operator would.
pub fn apply_deploy(control: &testenv::Cluster) {
    let rendered = control
        .kubectl_ok(&[
            "kustomize",
            &testenv::repo_root().join("deploy").to_string_lossy(),
        ])
        .unwrap();
    let out = control.kubectl_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&rendered),
    );
    assert!(
        out.status.success(),
        "applying deploy/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A kubeconfig for `control` that acts as `binary`'s own ServiceAccount
/// from deploy/ (apply it first with [`apply_deploy`]), by impersonation:
/// the binary runs with exactly the permissions it ships with, and the
/// API server's audit log names that ServiceAccount as the user.
pub fn impersonating_kubeconfig_for(
    control: &testenv::Cluster,
    binary: &str,
) -> std::path::PathBuf {
    let mut config: serde_json::Value = serde_saphyr::from_str(&control.kubeconfig).unwrap();
    for user in config["users"].as_array_mut().unwrap() {
        user["user"]["as"] =
            serde_json::json!(format!("system:serviceaccount:crossplane-system:{binary}"));
    }
    let path = control
        .scratch_dir()
        .join(format!("{}.kubeconfig", testenv::unique_name(binary)));
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_read_names_labels_and_values_and_sums_match_by_label() {
        let text = "# HELP x A counter.\n# TYPE x counter\n\
                    crossplane_rs_reconcile_total{controller=\"object\",result=\"success\"} 3\n\
                    crossplane_rs_reconcile_total{controller=\"object\",result=\"error\"} 2\n\
                    crossplane_rs_reconcile_total{controller=\"other\",result=\"success\"} 7\n\
                    crossplane_rs_leader 1\n";
        let s = samples(text);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].label("result"), "success");
        assert_eq!(s[3].name, "crossplane_rs_leader");
        assert!(s[3].labels.is_empty());
        assert_eq!(
            metric_sum(
                text,
                "crossplane_rs_reconcile_total",
                &[("controller", "object")]
            ),
            5.0
        );
        assert_eq!(metric_sum(text, "crossplane_rs_reconcile_total", &[]), 12.0);
        // A label whose value only contains the one asked for does not match.
        assert_eq!(
            metric_sum(
                text,
                "crossplane_rs_reconcile_total",
                &[("controller", "obj")]
            ),
            0.0
        );
    }
}
