//! Starts the local control plane the tests use (etcd, a control and a
//! remote kube-apiserver, a kube-controller-manager each), writes
//! `control.kubeconfig` and `remote.kubeconfig` into `--dir`, and runs until
//! SIGTERM or Ctrl-C, when everything stops.
//!
//! With `--node` the control cluster also gets a real node (containerd,
//! kubelet, kube-proxy, kube-scheduler: pods run; needs root), and
//! `remote.pod.kubeconfig` names the remote API server at the address pods
//! reach it by. `--load-image DIR` (with `--node`) then builds the project's
//! image from the six binaries in DIR (crates/oci: a Debian base layer and
//! the binaries) and loads it into the node's containerd as
//! `registry.crossplane-rs.test/crossplane-rs:dev`, the name
//! deploy/overlays/local-node runs. `--registry` (with `--node`) also starts
//! an OCI registry (testenv's: HTTPS with testenv's CA, on the node's host
//! address) that the node's containerd trusts by its address (and as
//! `registry.demo.crossplane-rs.test`), and writes its address
//! (`registry.address`, `host:port`) and CA (`registry-ca.pem`) into
//! `--dir` before `ready`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// The image name deploy/overlays/local-node gives the controllers.
const LOCAL_IMAGE: &str = "registry.crossplane-rs.test/crossplane-rs:dev";

/// The host name the node's containerd also maps to `--registry`'s registry.
const REGISTRY_HOST: &str = "registry.demo.crossplane-rs.test";

const USAGE: &str = "usage: controlplane --dir DIR [--node [--load-image BIN_DIR] [--registry]]";

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut dir, mut node, mut image): (Option<PathBuf>, bool, Option<PathBuf>) =
        (None, false, None);
    let mut registry = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dir" => dir = Some(args.next().context("--dir needs a directory")?.into()),
            "--node" => node = true,
            "--registry" => registry = true,
            "--load-image" => {
                image = Some(
                    args.next()
                        .context("--load-image needs a directory")?
                        .into(),
                )
            }
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    let dir = dir.context(USAGE)?;
    if image.is_some() && !node {
        bail!("--load-image needs --node; {USAGE}");
    }
    if registry && !node {
        bail!(
            "--registry needs --node (the registry is trusted by the node's containerd); {USAGE}"
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (plane, data) = testenv::start_local_with(testenv::Options {
        node,
        ..testenv::Options::default()
    })?;
    for cluster in [&plane.control, &plane.remote] {
        let path = dir.join(format!("{}.kubeconfig", cluster.name));
        std::fs::write(&path, &cluster.kubeconfig)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    // Dropped (stopped, its data removed) before the plane.
    let mut started_registry = None;
    if let Some(n) = &plane.node {
        let pod = plane
            .remote
            .kubeconfig
            .replace("https://127.0.0.1:", &format!("https://{}:", n.host_ip));
        std::fs::write(dir.join("remote.pod.kubeconfig"), pod)?;
        println!("node {} Ready after {:?}", n.name, n.startup);
        if let Some(bins) = &image {
            load_image(n, bins, &data)?;
        }
        if registry {
            let r = testenv::registry::Registry::start(&plane, n, REGISTRY_HOST, None)?;
            std::fs::write(dir.join("registry-ca.pem"), &r.ca_pem)?;
            std::fs::write(dir.join("registry.address"), format!("{}\n", r.address))?;
            println!(
                "registry {} (pid {}, also {REGISTRY_HOST} on the node), trusted by the node's containerd",
                r.address,
                r.pid()
            );
            started_registry = Some(r);
        }
    }
    std::fs::write(dir.join("ready"), format!("{}\n", data.display()))?;
    println!(
        "control plane ready: kubeconfigs in {} (logs in {})",
        dir.display(),
        data.display()
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
        anyhow::Ok(())
    })?;
    let _ = std::fs::remove_file(dir.join("ready"));
    for f in ["registry.address", "registry-ca.pem"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    drop(started_registry);
    println!("control plane stopped");
    drop(plane);
    Ok(())
}

/// Builds the project's image from the binaries in `bins` and imports it
/// into the node's containerd under [`LOCAL_IMAGE`].
fn load_image(node: &testenv::node::Node, bins: &Path, work: &Path) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let cache = oci::debian::default_cache()?;
    let debs = oci::debian::download(&oci::debian::BASE_PACKAGES, &cache)?;
    let image = oci::project::image(oci::debian::base_layer(&debs)?, bins)?;
    let archive = work.join("crossplane-rs.tar");
    image.write_archive(&archive, LOCAL_IMAGE)?;
    node.import_image(&archive)?;
    let _ = std::fs::remove_file(&archive);
    println!(
        "image {LOCAL_IMAGE} built from {} and loaded into the node in {:?}",
        bins.display(),
        started.elapsed()
    );
    Ok(())
}
