//! The running node, as tests see it: its addresses, its images, its memory.

use std::{
    fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    time::Duration,
};

use super::footprint::Footprint;

/// The node of the control cluster: pods scheduled to the control cluster
/// run here.
#[derive(Debug)]
pub struct Node {
    /// The Node object's name.
    pub name: String,
    /// The host's address on the veth to the node: the API servers listen
    /// on it, and pods reach them there (the `kubernetes` Service of the
    /// control cluster points at it).
    pub host_ip: Ipv4Addr,
    /// The node's InternalIP (its end of the veth).
    pub node_ip: Ipv4Addr,
    /// From etcd's start to the node Ready and schedulable.
    pub startup: Duration,
    /// What it occupies on the host.
    pub footprint: Footprint,
    pub(super) containerd_socket: PathBuf,
    pub(super) certs_dir: PathBuf,
    pub(super) scheduler_pid: u32,
}

impl Node {
    /// Imports an image archive (OCI layout in a tar, e.g. from
    /// [`crate::image::binary_image_archive`]) into the node's containerd,
    /// where the kubelet finds it: pods then use it by its name with
    /// `imagePullPolicy: Never` or `IfNotPresent`.
    pub fn import_image(&self, archive: &Path) -> anyhow::Result<()> {
        super::containerd::import(&self.containerd_socket, archive)
    }

    /// containerd's registry configuration directory: `<host>/hosts.toml`
    /// files here tell it how to reach a registry (certs.d layout).
    pub fn registry_config_dir(&self) -> &Path {
        &self.certs_dir
    }

    /// Resident memory (KiB) of the node's processes now: containerd, its
    /// shims, kubelet, kube-proxy, kube-scheduler and every pod's processes.
    pub fn memory_kib(&self) -> u64 {
        let ns = format!("net:[{}]", self.footprint.netns_inode);
        let mut pids: std::collections::BTreeSet<u32> = [self.scheduler_pid].into();
        for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let path = entry.path();
            if fs::read_link(path.join("ns/net")).is_ok_and(|l| l.to_string_lossy() == ns) {
                pids.extend(
                    path.file_name()
                        .and_then(|n| n.to_str()?.parse::<u32>().ok()),
                );
            }
        }
        for hierarchy in ["memory", "pids", "cpu"] {
            let root = Path::new("/sys/fs/cgroup")
                .join(hierarchy)
                .join(&self.footprint.cgroup_root);
            if root.exists() {
                collect_cgroup_pids(&root, &mut pids);
                break;
            }
        }
        pids.iter()
            .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .filter_map(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            })
            .sum()
    }
}

fn collect_cgroup_pids(dir: &Path, pids: &mut std::collections::BTreeSet<u32>) {
    if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_cgroup_pids(&entry.path(), pids);
        }
    }
}
