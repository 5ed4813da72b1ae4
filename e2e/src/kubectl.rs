//! The one way the e2e tests run kubectl: [`Kubectl`] on a cluster of the
//! test control plane (testenv's kubectl, with that cluster's kubeconfig),
//! and shorthands for the control cluster of the plane with a node, which
//! the package tests share. A failure names the command and its stderr.

use std::time::Duration;

use serde_json::Value;

/// kubectl against one cluster.
#[derive(Clone, Copy)]
pub struct Kubectl<'a>(pub &'a testenv::Cluster);

impl Kubectl<'_> {
    /// Runs kubectl; its stdout, failing the test with stderr when it fails.
    pub fn ok(self, args: &[&str]) -> String {
        self.0
            .kubectl_ok(args)
            .unwrap_or_else(|e| panic!("kubectl {}: {e:#}", args.join(" ")))
    }

    /// Runs kubectl that may fail: (success, stdout + stderr).
    pub fn try_run(self, args: &[&str]) -> (bool, String) {
        let out = self.0.kubectl(args);
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// `kubectl apply --server-side -f -` of `yaml`, failing the test with
    /// stderr and the YAML when it fails.
    pub fn apply(self, yaml: &str) {
        let out = self.0.kubectl_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(yaml),
        );
        assert!(
            out.status.success(),
            "apply: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl create -f - -o yaml` of `yaml` as `subject` (`--as`):
    /// (success, stdout + stderr: the object as created, or why not). A
    /// real write by that identity, through authorization and admission
    /// (not kubectl's own validation, which would need that identity to
    /// read the API's schemas).
    pub fn create_as(self, subject: &str, yaml: &str) -> (bool, String) {
        let out = self.0.kubectl_stdin(
            &[
                "create",
                "--validate=false",
                "-f",
                "-",
                "-o",
                "yaml",
                "--as",
                subject,
            ],
            Some(yaml),
        );
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// `kubectl get <args> -o json`, or None when it fails.
    pub fn get_json(self, args: &[&str]) -> Option<Value> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let (ok, out) = self.try_run(&all);
        ok.then(|| serde_json::from_str(&out).ok()).flatten()
    }

    /// Runs kubectl until it succeeds and `check` accepts its output
    /// (stdout + stderr), which it returns; fails with the last output
    /// after `timeout`.
    pub fn until(self, args: &[&str], timeout: Duration, check: impl Fn(&str) -> bool) -> String {
        crate::wait::wait_blocking(
            timeout,
            &format!("kubectl {} to show what was expected", args.join(" ")),
            || match self.try_run(args) {
                (true, text) if check(&text) => Ok(text),
                (_, text) => Err(format!("last output:\n{text}")),
            },
            String::new,
        )
    }

    /// Starts kubectl that keeps running (`get -w`, say) with its stdout
    /// piped, for the caller to read, kill and wait for.
    pub fn spawn(self, args: &[&str]) -> std::process::Child {
        let kubectl = binary();
        std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&self.0.kubeconfig_path)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", kubectl.display()))
    }
}

/// testenv's kubectl.
fn binary() -> std::path::PathBuf {
    testenv::bin_dir()
        .expect("the upstream binaries' directory")
        .join("kubectl")
}

/// kubectl on the control cluster of the plane with a node.
pub fn control() -> Kubectl<'static> {
    Kubectl(&testenv::control_plane_with_node().control)
}

/// [`Kubectl::ok`] on [`control`].
pub fn kubectl(args: &[&str]) -> String {
    control().ok(args)
}

/// [`Kubectl::try_run`] on [`control`].
pub fn kubectl_try(args: &[&str]) -> (bool, String) {
    control().try_run(args)
}

/// [`Kubectl::apply`] on [`control`].
pub fn apply(yaml: &str) {
    control().apply(yaml)
}

/// [`Kubectl::create_as`] on [`control`].
pub fn create_as(subject: &str, yaml: &str) -> (bool, String) {
    control().create_as(subject, yaml)
}

/// `kubectl auth can-i ARGS --as SUBJECT` on [`control`]: whether the API
/// server says yes (the answer is stdout; kubectl may warn on stderr when
/// its discovery cache does not know a new CRD's kind yet).
pub fn can_i(subject: &str, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--as", subject]);
    let out = control().0.kubectl(&all);
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// [`Kubectl::get_json`] on [`control`].
pub fn get_json(args: &[&str]) -> Option<Value> {
    control().get_json(args)
}

/// A Running pod in `ns` matching the label `selector` that is not being
/// deleted, as JSON.
pub fn running_pod(ns: &str, selector: &str) -> Option<Value> {
    let list = get_json(&[
        "pods",
        "-n",
        ns,
        "-l",
        selector,
        "--field-selector=status.phase=Running",
    ])?;
    list["items"]
        .as_array()?
        .iter()
        .find(|p| p.pointer("/metadata/deletionTimestamp").is_none())
        .cloned()
}

/// kubectl that needs no cluster (`kustomize`, say): its stdout, failing
/// the test with stderr when it fails.
pub fn local(args: &[&str]) -> String {
    let kubectl = binary();
    let out = std::process::Command::new(&kubectl)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
