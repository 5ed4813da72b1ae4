//! A real control plane for tests: one etcd, two kube-apiservers on different
//! etcd prefixes (the control cluster and a remote cluster, RBAC on), and a
//! kube-controller-manager for each (garbage collection, namespaces,
//! Deployments), all from the upstream binaries `hack/build-binaries.sh`
//! builds. One control plane per test binary, started on first use and
//! stopped when the test process exits, even when a test panics. Tests
//! isolate themselves by namespace.
//!
//! With a node ([`control_plane_with_node`], `Options::node`, or
//! `CROSSPLANE_RS_TEST_NODE=1` for every test binary) the control cluster
//! also runs pods: see [`node`].
//!
//! With `CROSSPLANE_RS_CONTROL_KUBECONFIG` (and optionally
//! `CROSSPLANE_RS_REMOTE_KUBECONFIG`) set, the tests use those clusters
//! instead of starting their own.

// Test support: failing a test loudly, with what went wrong, is this crate's
// job, so it panics where production code would return errors.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

pub mod audit;
mod cluster;
pub mod image;
pub mod node;
mod process;
pub mod registry;

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

pub use cluster::Cluster;
pub use process::free_port_on;

/// The clusters tests run against.
pub struct ControlPlane {
    /// The control cluster: where CRDs, applications and controllers live.
    pub control: Cluster,
    /// The remote cluster applications are delivered to.
    pub remote: Cluster,
    /// Remote clusters beyond the first ("remote-2", "remote-3", ...), when
    /// started with `Options::remotes` above 1; empty otherwise.
    pub more_remotes: Vec<Cluster>,
    /// The control cluster's node, when started with one (`Options::node`,
    /// [`control_plane_with_node`]); `None` for clusters the tests were
    /// pointed at.
    pub node: Option<node::Node>,
    _guard: Option<process::Processes>,
}

impl ControlPlane {
    /// A new directory for a server started beside the clusters (a
    /// registry): inside the plane's own, which the watchdog removes when
    /// the test process exits; under the temporary directory for clusters
    /// the tests were pointed at.
    pub(crate) fn scratch_dir(&self, prefix: &str) -> std::path::PathBuf {
        let base = self
            ._guard
            .as_ref()
            .map_or_else(std::env::temp_dir, |g| g.dir().to_owned());
        base.join(unique_name(prefix))
    }

    /// Makes the watchdog stop `pid` (a server started beside the
    /// clusters) when the test process exits, however it exits: a static,
    /// such as a test binary's shared registry, is never dropped.
    pub(crate) fn stop_on_exit(&self, pid: u32) -> anyhow::Result<()> {
        match &self._guard {
            Some(guard) => guard.stop_on_exit(pid),
            None => Ok(()),
        }
    }

    /// Every remote cluster: `remote`, then `more_remotes`.
    pub fn remotes(&self) -> impl Iterator<Item = &Cluster> {
        std::iter::once(&self.remote).chain(&self.more_remotes)
    }

    /// testenv's CA and the serving certificate and key it signed (valid
    /// for 127.0.0.1 and, with a node, the node-facing host address), for
    /// test servers beside the API servers, such as a registry the node
    /// pulls from. None for clusters the tests were pointed at.
    pub fn serving_tls(&self) -> Option<ServingTls> {
        let dir = self._guard.as_ref()?.dir();
        Some(ServingTls {
            ca: dir.join("ca.crt"),
            cert: dir.join("serving.crt"),
            key: dir.join("serving.key"),
        })
    }
}

/// Files of [`ControlPlane::serving_tls`] (PEM).
#[derive(Clone, Debug)]
pub struct ServingTls {
    /// The CA certificate that signed `cert`.
    pub ca: PathBuf,
    /// The serving certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// How [`start_local_with`] starts a control plane. The default is what the
/// test suite uses: no audit log, one remote cluster, no extra users.
#[derive(Clone, Debug)]
pub struct Options {
    /// Each kube-apiserver writes an audit log (`Cluster::audit_log`, JSON
    /// lines at level Metadata for every request) so a benchmark can count
    /// requests as the server saw them. It costs the servers time and disk,
    /// so the test suite leaves it off.
    pub audit: bool,
    /// How many remote clusters (1 to 8). Each is a kube-apiserver of its
    /// own on its own etcd prefix, with its own kube-controller-manager.
    pub remotes: usize,
    /// Extra users every kube-apiserver accepts, each by a bearer token of
    /// its own (`Cluster::kubeconfig_for`): identities distinct from the
    /// admin, e.g. for a binary whose requests the audit log must tell
    /// apart. They start with no permissions.
    pub users: Vec<String>,
    /// The control cluster gets a real node (containerd, kubelet,
    /// kube-proxy, kube-scheduler; see [`node`]) so pods run. Needs root,
    /// and costs a few seconds and ~300 MiB. Default: whether
    /// `CROSSPLANE_RS_TEST_NODE` is `1`.
    pub node: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            audit: false,
            remotes: 1,
            users: Vec::new(),
            node: node_by_default(),
        }
    }
}

/// `CROSSPLANE_RS_TEST_NODE=1` starts the node with every control plane.
fn node_by_default() -> bool {
    std::env::var("CROSSPLANE_RS_TEST_NODE").is_ok_and(|v| v == "1")
}

/// Starts a fresh control plane (not shared): for the `controlplane` binary
/// that the README's run command uses. Everything stops when the returned
/// guard is dropped or the process exits.
pub fn start_local() -> anyhow::Result<(ControlPlane, PathBuf)> {
    start_local_with(Options::default())
}

/// Like [`start_local`], with `options`: for benchmarks that need audit
/// logs, more remote clusters or distinct identities. The data directory
/// (second value; logs, audit logs, PKI) is removed when the plane stops.
pub fn start_local_with(options: Options) -> anyhow::Result<(ControlPlane, PathBuf)> {
    let (control, remotes, node, guard) = process::start(&bin_dir()?, &options)?;
    control.install_crds()?;
    let dir = guard.dir().to_path_buf();
    Ok((plane(control, remotes, node, Some(guard))?, dir))
}

fn plane(
    control: Cluster,
    remotes: Vec<Cluster>,
    node: Option<node::Node>,
    guard: Option<process::Processes>,
) -> anyhow::Result<ControlPlane> {
    let mut remotes = remotes.into_iter();
    let remote = remotes
        .next()
        .ok_or_else(|| anyhow::anyhow!("internal: no remote cluster started"))?;
    Ok(ControlPlane {
        control,
        remote,
        more_remotes: remotes.collect(),
        node,
        _guard: guard,
    })
}

static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// The control plane of this test binary, started on first call. Panics with
/// the step that failed and why when it cannot start.
pub fn control_plane() -> &'static ControlPlane {
    shared(node_by_default())
}

/// Like [`control_plane`], with a node for the control cluster, so pods
/// run: a test binary that needs one calls this (first). Panics when this
/// binary's control plane already started without one.
pub fn control_plane_with_node() -> &'static ControlPlane {
    let plane = shared(true);
    if plane.node.is_none() && plane._guard.is_some() {
        panic!(
            "this test binary's control plane started without a node: call testenv::control_plane_with_node() in every test of the binary"
        );
    }
    plane
}

fn shared(node: bool) -> &'static ControlPlane {
    match PLANE.get_or_init(|| start(node).map_err(|e| format!("{e:#}"))) {
        Ok(plane) => plane,
        Err(e) => panic!("the test control plane could not start: {e}"),
    }
}

fn start(node: bool) -> anyhow::Result<ControlPlane> {
    if let Ok(control) = std::env::var("CROSSPLANE_RS_CONTROL_KUBECONFIG") {
        let remote = std::env::var("CROSSPLANE_RS_REMOTE_KUBECONFIG").unwrap_or(control.clone());
        let kubectl = bin_dir()?.join("kubectl");
        let kubectl = if kubectl.exists() {
            kubectl
        } else {
            PathBuf::from("kubectl")
        };
        let control = Cluster::existing("control", control.into(), kubectl.clone())?;
        let remote = Cluster::existing("remote", remote.into(), kubectl)?;
        control.install_crds()?;
        return plane(control, vec![remote], None, None);
    }
    let options = Options {
        node,
        ..Options::default()
    };
    let (control, remotes, node, guard) = process::start(&bin_dir()?, &options)?;
    control.install_crds()?;
    plane(control, remotes, node, Some(guard))
}

/// The root of the repository.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// Where the upstream binaries are: `$CROSSPLANE_RS_BIN`, else
/// `${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}/bin`.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("CROSSPLANE_RS_BIN") {
        return Ok(dir.into());
    }
    let cache = match std::env::var("CROSSPLANE_RS_CACHE") {
        Ok(c) => PathBuf::from(c),
        Err(_) => {
            let home = std::env::var("HOME")
                .map_err(|_| anyhow::anyhow!("neither CROSSPLANE_RS_BIN nor HOME is set"))?;
            PathBuf::from(home).join(".cache/crossplane-rs")
        }
    };
    Ok(cache.join("bin"))
}

/// The path of one of this workspace's binaries (built by `cargo build
/// --bins`, which the README's test command runs first).
pub fn workspace_binary(name: &str) -> PathBuf {
    // Next to the running test: a test binary lives in
    // target/<profile>/deps/, the workspace binaries in target/<profile>/.
    // This holds wherever the target directory was built or copied to; a
    // path fixed at compile time would run another checkout's binaries.
    if let Some(beside) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join(name)))
        .filter(|p| p.exists())
    {
        return beside;
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target"));
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    target.join(profile).join(name)
}

/// A fresh namespace name for a test: `<prefix>-<random>`.
pub fn unique_name(prefix: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{prefix}-{:x}{n:x}",
        (nanos ^ std::process::id()) & 0xffffff
    )
}
