//! containerd in the node's namespaces: its configuration, the CNI bridge,
//! the private mount namespace, and importing images.

use std::{
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{
    names::{KUBELET_SYSCTLS, PRIVATE_DIRS},
    plan::Plan,
};
use crate::process::{Processes, run};

/// Starts containerd in the node's namespaces (before the API servers are
/// ready: it needs none) and imports the pause image.
pub(crate) fn start_containerd(procs: &mut Processes, plan: &mut Plan) -> anyhow::Result<()> {
    let p = |rel: &str| plan.path(rel);
    for rel in [
        "containerd/root",
        "containerd/state",
        "containerd/opt",
        "containerd/certs.d",
        "cni/net.d",
        "cni/ipam",
        "pod-logs",
        "sysctl",
    ] {
        fs::create_dir_all(plan.dir.join(rel))?;
    }
    let socket = plan.dir.join("containerd.sock");
    fs::write(
        plan.dir.join("containerd.toml"),
        format!(
            r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{pause}"
    enable_selinux = false
    # runc may not lower oom_score_adj without CAP_SYS_RESOURCE, which some
    # VMs (this project's CI among them) do not grant.
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{cni}"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "{certs}"
  [plugins."io.containerd.internal.v1.opt"]
    path = "{opt}"
"#,
            root = p("containerd/root"),
            state = p("containerd/state"),
            socket = socket.display(),
            pause = crate::image::PAUSE_IMAGE,
            cni = p("cni/net.d"),
            certs = p("containerd/certs.d"),
            opt = p("containerd/opt"),
        ),
    )?;
    fs::write(
        plan.dir.join("cni/net.d/10-bridge.conflist"),
        serde_json::to_string_pretty(&serde_json::json!({
            "cniVersion": "1.0.0",
            "name": plan.network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": true,
                    "ipMasq": true,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": p("cni/ipam"),
                        "ranges": [[{"subnet": plan.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": true}},
            ],
        }))?,
    )?;
    // The mount namespace: private propagation, the node's own /run,
    // /var/lib and /var/log, and its own copies of kubelet's sysctls.
    let mut setup = String::from("set -e\n");
    for (target, rel) in PRIVATE_DIRS {
        let own = plan.dir.join("fs").join(rel);
        fs::create_dir_all(&own)?;
        setup.push_str(&format!("mount --bind '{}' {target}\n", own.display()));
    }
    for key in KUBELET_SYSCTLS {
        let host = Path::new("/proc/sys").join(key);
        let value =
            fs::read_to_string(&host).with_context(|| format!("reading {}", host.display()))?;
        let own = plan.dir.join("sysctl").join(key.replace('/', "."));
        fs::write(&own, value)?;
        setup.push_str(&format!(
            "mount --bind '{}' {}\n",
            own.display(),
            host.display()
        ));
    }
    setup.push_str(&format!(
        "exec containerd --config '{}'\n",
        p("containerd.toml")
    ));
    let mut cmd = plan.enter(Path::new("unshare"));
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &setup]);
    plan.containerd_pid = Some(procs.spawn_command("containerd", cmd)?);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ok = Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            break;
        }
        procs.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "containerd did not answer on {} within 30s",
                socket.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pause = crate::image::pause_archive(&plan.dir)?;
    import(&socket, &pause)
}

pub(super) fn import(socket: &Path, archive: &Path) -> anyhow::Result<()> {
    run(
        Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .args(["--namespace", "k8s.io", "images", "import"])
            .arg(archive),
        &format!("importing {} into the node's containerd", archive.display()),
    )?;
    Ok(())
}
