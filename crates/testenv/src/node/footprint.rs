//! What a node occupies on the host, and what of it is left after it stopped.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// What a node occupies on the host: enough to prove, after it stopped,
/// that nothing of it is left (see [`Footprint::leftovers`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Footprint {
    /// The node's directory (containerd's root and state, kubelet's root).
    pub dir: PathBuf,
    /// The file the network namespace is pinned on.
    pub netns_pin: PathBuf,
    /// The network namespace's inode (`/proc/<pid>/ns/net` reads
    /// `net:[<inode>]` for its processes).
    pub netns_inode: u64,
    /// The host end of the veth pair.
    pub host_veth: String,
    /// The pods' cgroup root (a directory in every cgroup hierarchy).
    pub cgroup_root: String,
}

impl Footprint {
    /// What of the node is still on the host, one line each: its
    /// directory, its namespace pin, any process in its network namespace,
    /// any containerd shim serving its containerd, its cgroups, its veth.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        if self.dir.exists() {
            left.push(format!("directory {}", self.dir.display()));
        }
        let pin = self.netns_pin.to_string_lossy().into_owned();
        if fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(pin.as_str()))
        {
            left.push(format!("network namespace pin {pin}"));
        }
        let ns = format!("net:[{}]", self.netns_inode);
        let dir = self.dir.to_string_lossy().into_owned();
        for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let path = entry.path();
            let Some(pid) = path
                .file_name()
                .and_then(|n| n.to_str())
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let cmdline = fs::read(path.join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let in_ns = fs::read_link(path.join("ns/net")).is_ok_and(|l| l.to_string_lossy() == ns);
            if in_ns || (cmdline.contains("containerd-shim") && cmdline.contains(&dir)) {
                left.push(format!("process {pid}: {}", cmdline.trim()));
            }
        }
        for hierarchy in fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let cg = hierarchy.path().join(&self.cgroup_root);
            if cg.exists() {
                left.push(format!("cgroup {}", cg.display()));
            }
        }
        if Path::new("/sys/class/net").join(&self.host_veth).exists() {
            left.push(format!("network interface {}", self.host_veth));
        }
        left
    }
}
