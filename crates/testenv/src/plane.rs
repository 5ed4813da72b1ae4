//! The control plane tests share: started once per test binary (or pointed
//! at clusters by kubeconfig), the clusters and node it is made of, and
//! what servers started beside it need from it.

use std::{path::PathBuf, sync::OnceLock};

use crate::{
    cluster::Cluster,
    launch, node,
    options::{Options, node_by_default},
    paths::{bin_dir, unique_name},
    process,
};

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
    /// A new directory name for a server started beside the clusters (a
    /// registry) or a test's files: inside the plane's own, which the
    /// watchdog removes when the test process exits (a static holding it is
    /// never dropped); under the temporary directory for clusters the tests
    /// were pointed at.
    pub fn scratch_dir(&self, prefix: &str) -> std::path::PathBuf {
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

    /// The servers this plane started, by name ("etcd",
    /// "kube-apiserver-control", "kube-apiserver-remote",
    /// "kube-controller-manager-control", the node's ...) with their pids,
    /// e.g. for a benchmark to read their CPU time; empty for clusters the
    /// tests were pointed at.
    pub fn processes(&self) -> Vec<(String, u32)> {
        self._guard.as_ref().map(|g| g.pids()).unwrap_or_default()
    }

    /// The processes this plane started; None for clusters the tests were
    /// pointed at.
    pub(crate) fn started(&self) -> Option<&process::Processes> {
        self._guard.as_ref()
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
    let (control, remotes, node, guard) = launch::start(&bin_dir()?, &options)?;
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

/// Like [`control_plane`], started with `options` when this is the
/// binary's first call: a binary whose tests read the API server's audit
/// log calls this (first) with `audit: true`. Panics when this binary's
/// plane already started without the audit log or node `options` ask for.
pub fn control_plane_with(options: Options) -> &'static ControlPlane {
    let (audit, node) = (options.audit, options.node);
    let plane = shared_with(options);
    if plane._guard.is_some()
        && ((audit && plane.control.audit_log.is_none()) || (node && plane.node.is_none()))
    {
        panic!(
            "this test binary's control plane started without the audit log or node asked for: call testenv::control_plane_with with the same options in every test of the binary, before anything else"
        );
    }
    plane
}

fn shared(node: bool) -> &'static ControlPlane {
    shared_with(Options {
        node,
        ..Options::default()
    })
}

fn shared_with(options: Options) -> &'static ControlPlane {
    match PLANE.get_or_init(|| start(options).map_err(|e| format!("{e:#}"))) {
        Ok(plane) => plane,
        Err(e) => panic!("the test control plane could not start: {e}"),
    }
}

fn start(options: Options) -> anyhow::Result<ControlPlane> {
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
    let (control, remotes, node, guard) = launch::start(&bin_dir()?, &options)?;
    control.install_crds()?;
    plane(control, remotes, node, Some(guard))
}
