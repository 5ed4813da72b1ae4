//! Starts the local control plane the tests use (etcd, a control and a
//! remote kube-apiserver, a kube-controller-manager each), writes
//! `control.kubeconfig` and `remote.kubeconfig` into `--dir`, and runs until
//! SIGTERM or Ctrl-C, when everything stops.

use std::path::PathBuf;

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut dir: Option<PathBuf> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dir" => dir = Some(args.next().context("--dir needs a directory")?.into()),
            other => bail!("unknown argument {other}; usage: controlplane --dir DIR"),
        }
    }
    let dir = dir.context("usage: controlplane --dir DIR")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (plane, data) = testenv::start_local()?;
    for cluster in [&plane.control, &plane.remote] {
        let path = dir.join(format!("{}.kubeconfig", cluster.name));
        std::fs::write(&path, &cluster.kubeconfig)
            .with_context(|| format!("writing {}", path.display()))?;
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
    println!("control plane stopped");
    drop(plane);
    Ok(())
}
