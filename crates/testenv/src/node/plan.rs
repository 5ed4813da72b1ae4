//! The node's plan: the names and addresses it claims before anything
//! starts, the network namespace, veth and cgroups made for them, and the
//! teardown script that removes them.

use std::{
    fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::{
    footprint::Footprint,
    names::{SYSTEM_PATH, pod_cidr},
};
use crate::process::{run, teardown_path};

/// The node's names and addresses, chosen before anything starts (the API
/// servers' certificate names the host address).
pub(crate) struct Plan {
    pub(super) dir: PathBuf,
    pub(super) pin: PathBuf,
    pub(super) host_veth: String,
    pub(crate) host_ip: Ipv4Addr,
    pub(super) node_ip: Ipv4Addr,
    pub(super) pod_cidr: String,
    pub(super) cgroup_root: String,
    pub(super) network: String,
    pub(super) netns_inode: u64,
    pub(super) containerd_pid: Option<u32>,
}

impl Plan {
    pub(super) fn path(&self, rel: &str) -> String {
        self.dir.join(rel).to_string_lossy().into_owned()
    }

    pub(super) fn footprint(&self) -> Footprint {
        Footprint {
            dir: self.dir.clone(),
            netns_pin: self.pin.clone(),
            netns_inode: self.netns_inode,
            host_veth: self.host_veth.clone(),
            cgroup_root: self.cgroup_root.clone(),
        }
    }

    /// `nsenter` into the node's namespaces (network, and mount once
    /// containerd made it), then `program`.
    pub(super) fn enter(&self, program: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        match self.containerd_pid {
            Some(pid) => cmd
                .arg(format!("--target={pid}"))
                .args(["--mount", "--net"]),
            None => cmd.arg(format!("--net={}", self.pin.display())),
        };
        cmd.arg("--").arg(program).env("PATH", SYSTEM_PATH);
        cmd
    }
}

/// The teardown script; `$1` is unused, everything is baked in.
fn teardown_script(plan: &Plan) -> String {
    format!(
        r#"#!/bin/sh
# Removes test node {cg} from the host. Safe to run more than once.
pin='{pin}'; veth='{veth}'; cg='{cg}'
ino=$(stat -L -c %i "$pin" 2>/dev/null)
node_pids() {{
  for d in /sys/fs/cgroup/*/"$cg"; do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {{}} + 2>/dev/null
  done
  if [ -n "$ino" ] && mountpoint -q "$pin" 2>/dev/null; then
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/ns/net" 2>/dev/null)" = "net:[$ino]" ] && echo "${{p#/proc/}}"
    done
  fi
}}
i=0
while [ $i -lt 100 ]; do
  pids=$(node_pids | sort -u)
  [ -z "$pids" ] && break
  kill -9 $pids 2>/dev/null
  sleep 0.1
  i=$((i + 1))
done
for d in /sys/fs/cgroup/*/"$cg"; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {{}} \; 2>/dev/null
done
umount "$pin" 2>/dev/null
rm -f "$pin"
ip link delete "$veth" 2>/dev/null
exit 0
"#,
        pin = plan.pin.display(),
        veth = plan.host_veth,
        cg = plan.cgroup_root,
    )
}

/// Claims an index, creates the network namespace, the veth pair and the
/// cgroup roots. Everything it creates is in `teardown.sh` before it exists.
pub(crate) fn prepare(dir: &Path) -> anyhow::Result<Plan> {
    let dir = dir.join("node");
    fs::create_dir_all(&dir)?;
    let pin = dir.join("netns");
    fs::write(&pin, "")?;
    let mut plan = Plan {
        dir: dir.clone(),
        pin: pin.clone(),
        host_veth: String::new(),
        host_ip: Ipv4Addr::UNSPECIFIED,
        node_ip: Ipv4Addr::UNSPECIFIED,
        pod_cidr: String::new(),
        cgroup_root: String::new(),
        network: String::new(),
        netns_inode: 0,
        containerd_pid: None,
    };
    // Written before anything exists, rewritten once the names are known.
    fs::write(
        teardown_path(dir.parent().unwrap_or(&dir)),
        teardown_script(&plan),
    )?;
    let mut sh = Command::new("unshare");
    run(
        sh.arg(format!("--net={}", pin.display())).arg("true"),
        "creating the node's network namespace (unshare --net)",
    )?;
    plan.netns_inode = fs::metadata(&pin).map(|m| std::os::unix::fs::MetadataExt::ino(&m))?;
    let me = std::process::id();
    let mut claimed = None;
    for attempt in 0..64u32 {
        let idx = (me.wrapping_add(attempt.wrapping_mul(7919))) % 16384;
        plan.host_veth = format!("cprs{idx}h");
        plan.cgroup_root = format!("crossplane-rs-node-{idx}");
        plan.network = format!("crossplane-rs-node-{idx}");
        fs::write(
            teardown_path(dir.parent().unwrap_or(&dir)),
            teardown_script(&plan),
        )?;
        let out = plan
            .enter(Path::new("ip"))
            .args([
                "link",
                "add",
                "node0",
                "type",
                "veth",
                "peer",
                "name",
                &plan.host_veth,
                "netns",
                &me.to_string(),
            ])
            .output()
            .context("running ip (iproute2)")?;
        if out.status.success() {
            claimed = Some(idx);
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        if !err.contains("exists") {
            bail!("creating the node's veth pair: {}", err.trim());
        }
    }
    let idx = claimed.context("no free node index after 64 tries (leftover cprs*h interfaces?)")?;
    let base = u32::from(Ipv4Addr::new(10, 250, 0, 0)) + idx * 4;
    plan.host_ip = Ipv4Addr::from(base + 1);
    plan.node_ip = Ipv4Addr::from(base + 2);
    plan.pod_cidr = pod_cidr(idx);
    run(
        Command::new("ip").args([
            "addr",
            "add",
            &format!("{}/30", plan.host_ip),
            "dev",
            &plan.host_veth,
        ]),
        "addressing the host end of the node's veth",
    )?;
    run(
        Command::new("ip").args(["link", "set", &plan.host_veth, "up"]),
        "bringing up the host end of the veth",
    )?;
    let script = format!(
        "ip link set lo up && ip addr add {node}/30 dev node0 && ip link set node0 up && ip route add default via {host}",
        node = plan.node_ip,
        host = plan.host_ip
    );
    run(
        plan.enter(Path::new("sh")).args(["-c", &script]),
        "setting up the node's network",
    )?;
    // The host reaches the pods through the node (the route goes with the
    // veth).
    run(
        Command::new("ip").args([
            "route",
            "replace",
            &plan.pod_cidr,
            "via",
            &plan.node_ip.to_string(),
            "dev",
            &plan.host_veth,
        ]),
        "routing the pods' addresses through the node",
    )?;
    for hierarchy in fs::read_dir("/sys/fs/cgroup")
        .context("reading /sys/fs/cgroup")?
        .flatten()
    {
        let cg = hierarchy.path().join(&plan.cgroup_root);
        if !hierarchy.path().join("cgroup.procs").exists() {
            continue;
        }
        fs::create_dir_all(&cg).with_context(|| format!("creating cgroup {}", cg.display()))?;
        // A cpuset cgroup takes no tasks until it has CPUs and memory nodes.
        for f in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(v) = fs::read_to_string(hierarchy.path().join(f)) {
                fs::write(cg.join(f), v.trim())?;
            }
        }
    }
    Ok(plan)
}

/// The flags the control cluster's kube-apiserver gets for the node.
pub(crate) fn apiserver_flags(plan: &Plan, dir: &Path) -> Vec<String> {
    let d = |f: &str| dir.join(f).to_string_lossy().into_owned();
    vec![
        format!("--advertise-address={}", plan.host_ip),
        format!("--kubelet-client-certificate={}", d("kubelet-client.crt")),
        format!("--kubelet-client-key={}", d("kubelet-client.key")),
        "--kubelet-preferred-address-types=InternalIP,Hostname".to_owned(),
    ]
}
