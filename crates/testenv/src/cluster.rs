//! One cluster of the test control plane: its kubeconfig, clients and kubectl.

use std::{
    path::PathBuf,
    process::{Command, Output},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Config,
    api::{ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// A cluster tests talk to.
pub struct Cluster {
    /// "control", "remote", or for further remote clusters "remote-2",
    /// "remote-3", ...
    pub name: &'static str,
    /// Path of its kubeconfig file.
    pub kubeconfig_path: PathBuf,
    /// Its kubeconfig, as YAML (what a connection Secret holds).
    pub kubeconfig: String,
    /// Its kube-apiserver's audit log (JSON lines, level Metadata), when
    /// started with `Options::audit`; read it with [`crate::audit`].
    pub audit_log: Option<PathBuf>,
    /// Kubeconfigs of the extra users (`Options::users`), by user name.
    pub(crate) user_kubeconfigs: std::collections::BTreeMap<String, String>,
    kubectl: PathBuf,
    /// Where a test's own files about this cluster go ([`Cluster::scratch_dir`]).
    pub(crate) scratch: PathBuf,
}

impl Cluster {
    pub(crate) fn new(
        name: &'static str,
        kubeconfig_path: PathBuf,
        kubectl: PathBuf,
    ) -> anyhow::Result<Self> {
        let kubeconfig = std::fs::read_to_string(&kubeconfig_path)
            .with_context(|| format!("reading kubeconfig {}", kubeconfig_path.display()))?;
        Ok(Self {
            name,
            kubeconfig_path,
            kubeconfig,
            audit_log: None,
            user_kubeconfigs: Default::default(),
            kubectl,
            // A started cluster's is its plane's directory (set by launch).
            scratch: std::env::temp_dir(),
        })
    }

    /// Where a test's own files about this cluster go (a kubeconfig for
    /// another identity): the plane's directory, which the watchdog removes
    /// when the test process exits; the temporary directory for a cluster
    /// the tests were pointed at.
    pub fn scratch_dir(&self) -> &std::path::Path {
        &self.scratch
    }

    /// A kubeconfig (YAML) that authenticates to this cluster as `user`, one
    /// of `Options::users`, by a bearer token of its own: a distinct
    /// identity, with no permissions until a test grants some (RBAC). Fails
    /// for a user the cluster was not started with.
    pub fn kubeconfig_for(&self, user: &str) -> anyhow::Result<&str> {
        self.user_kubeconfigs
            .get(user)
            .map(String::as_str)
            .with_context(|| {
                format!(
                    "the {} cluster has no user {user:?}: start it with testenv::Options {{ users: vec![{user:?}.into()], .. }}",
                    self.name
                )
            })
    }

    pub(crate) fn existing(
        name: &'static str,
        path: PathBuf,
        kubectl: PathBuf,
    ) -> anyhow::Result<Self> {
        Self::new(name, path, kubectl)
    }

    /// A new client for this cluster (build one per test: clients belong to
    /// the runtime that made them).
    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::from_yaml(&self.kubeconfig).expect("test kubeconfig parses");
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("test kubeconfig is usable");
        Client::try_from(config).expect("client builds")
    }

    /// A kubectl command for this cluster, to run elsewhere (a thread).
    pub fn kubectl_command(&self) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig_path);
        cmd
    }

    /// Runs kubectl against this cluster.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_stdin(args, None)
    }

    /// Runs kubectl against this cluster with `stdin` piped in.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write as _;
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig_path)
            .args(args);
        cmd.stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        });
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.kubectl.display()));
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())
                .expect("write kubectl stdin");
        }
        child.wait_with_output().expect("kubectl runs")
    }

    /// Runs kubectl and returns stdout, failing with stderr when it fails.
    pub fn kubectl_ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.kubectl(args);
        if !out.status.success() {
            bail!(
                "kubectl {} failed on the {} cluster: {}",
                args.join(" "),
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until /readyz answers ok, or fails after `timeout`.
    pub(crate) fn wait_ready(
        &self,
        timeout: Duration,
        mut alive: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.kubectl(&["get", "--raw", "/readyz", "--request-timeout=2s"]);
            if out.status.success() {
                return Ok(());
            }
            alive()?;
            if Instant::now() > deadline {
                bail!(
                    "the {} kube-apiserver did not become ready within {timeout:?}: {}",
                    self.name,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Installs every CRD from crds/ and waits until they are Established.
    pub fn install_crds(&self) -> anyhow::Result<()> {
        let dir = crate::paths::repo_root().join("crds");
        let dir = dir.to_string_lossy();
        self.kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-k", &dir])
            .context("installing crds/")?;
        let names: Vec<String> = types::crds::all()?
            .iter()
            .map(|crd| format!("crd/{}", crd.metadata.name.clone().unwrap_or_default()))
            .collect();
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        args.extend(names.iter().map(String::as_str));
        self.kubectl_ok(&args)
            .context("waiting for the CRDs to become Established")?;
        Ok(())
    }

    /// Creates a namespace for one test, labelled so leftovers are easy to
    /// find, and returns its name.
    pub async fn namespace(&self, client: &Client, prefix: &str) -> String {
        let name = crate::paths::unique_name(prefix);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("crossplane-rs.io/test".to_owned(), prefix.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "creating namespace {name} in the {} cluster: {e}",
                    self.name
                )
            });
        name
    }
}
