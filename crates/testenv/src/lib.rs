//! A real control plane for tests: one etcd, two kube-apiservers on different
//! etcd prefixes (the control cluster and a remote cluster, RBAC on), and a
//! kube-controller-manager for each (garbage collection, namespaces,
//! Deployments), all from the upstream binaries `hack/build-binaries.sh`
//! builds. One control plane per test binary, started on first use and
//! stopped when the test process exits, even when a test panics. Tests
//! isolate themselves by namespace.
//!
//! With `CROSSPLANE_RS_CONTROL_KUBECONFIG` (and optionally
//! `CROSSPLANE_RS_REMOTE_KUBECONFIG`) set, the tests use those clusters
//! instead of starting their own.

// Test support: failing a test loudly, with what went wrong, is this crate's
// job, so it panics where production code would return errors.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod cluster;
mod process;

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

pub use cluster::Cluster;

/// The two clusters tests run against.
pub struct ControlPlane {
    /// The control cluster: where CRDs, applications and controllers live.
    pub control: Cluster,
    /// The remote cluster applications are delivered to.
    pub remote: Cluster,
    _guard: Option<process::Processes>,
}

/// Starts a fresh control plane (not shared): for the `controlplane` binary
/// that the README's run command uses. Everything stops when the returned
/// guard is dropped or the process exits.
pub fn start_local() -> anyhow::Result<(ControlPlane, PathBuf)> {
    let (control, remote, guard) = process::start(&bin_dir()?)?;
    control.install_crds()?;
    let dir = guard.dir().to_path_buf();
    Ok((
        ControlPlane {
            control,
            remote,
            _guard: Some(guard),
        },
        dir,
    ))
}

static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// The control plane of this test binary, started on first call. Panics with
/// the step that failed and why when it cannot start.
pub fn control_plane() -> &'static ControlPlane {
    match PLANE.get_or_init(|| start().map_err(|e| format!("{e:#}"))) {
        Ok(plane) => plane,
        Err(e) => panic!("the test control plane could not start: {e}"),
    }
}

fn start() -> anyhow::Result<ControlPlane> {
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
        return Ok(ControlPlane {
            control,
            remote,
            _guard: None,
        });
    }
    let (control, remote, guard) = process::start(&bin_dir()?)?;
    control.install_crds()?;
    Ok(ControlPlane {
        control,
        remote,
        _guard: Some(guard),
    })
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
