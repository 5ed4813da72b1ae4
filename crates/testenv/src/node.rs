//! A real node for the control cluster: containerd + runc + a CNI bridge,
//! kubelet and kube-proxy (iptables mode) in a network namespace of their
//! own, and kube-scheduler, so pods run.
//!
//! How the node keeps off the host:
//! - Network: its own network namespace (pinned on a file in the node's
//!   directory, not under /run/netns), joined to the host by a veth pair on
//!   a /30 of its own in 10.250.0.0/16. The cni0 bridge, the pods' networks
//!   and every iptables chain kubelet, kube-proxy and the bridge plugin write
//!   live in that namespace and vanish with it. The host end of the veth is
//!   the address the API servers advertise to pods.
//! - Files and mounts: containerd, kubelet and kube-proxy share one private
//!   mount namespace in which /run, /var/lib and /var/log are the node's own
//!   directories (containerd's shim sockets and runc state, the CNI cache,
//!   kubelet's device-plugin directory and container-log links all live at
//!   fixed paths there). Their mounts (overlay rootfs, volumes, pod network
//!   namespace pins) never reach the host and go when its last process does.
//! - Kernel settings: kubelet insists on some global sysctls
//!   (vm.overcommit_memory, kernel.panic, ...); in the node's mount namespace
//!   those /proc/sys files are regular files of the node's, so the host's
//!   values never change. Per-namespace ones (ip_forward, route_localnet)
//!   change only in the node's network namespace.
//! - cgroups: pods run under a cgroup root of the node's own in every
//!   hierarchy.
//!
//! Teardown (`node/teardown.sh`, run by the watchdog when the test process
//! exits however it exits, and by `Drop`) kills every process in the node's
//! cgroups and network namespace (the containerd shims included, which
//! outlive containerd), removes the cgroups, the namespace pin and the veth.
//! Every name (veth, cgroup root, CNI network, address block) carries the
//! node's index, claimed atomically by creating the host end of the veth, so
//! test binaries running at once do not collide.

use std::{
    fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    cluster::Cluster,
    process::{Processes, run},
};

/// The name the node registers under.
pub const NODE_NAME: &str = "testenv-node";
/// The pods' addresses: a /26 (62 pods) of 100.64.0.0/12 per node index
/// (16384 of them), routed from the host through the node's veth, so the
/// API servers reach pods (a conversion or admission webhook, as in a real
/// cluster) and nodes of test binaries running at once do not collide.
fn pod_cidr(index: u32) -> String {
    let base = u32::from(Ipv4Addr::new(100, 64, 0, 0)) + (index % 16384) * 64;
    format!("{}/26", Ipv4Addr::from(base))
}
/// Global sysctls kubelet sets at start; the node sees its own copies.
const KUBELET_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];
/// Directories the node's processes write at fixed paths, replaced by the
/// node's own in its mount namespace.
const PRIVATE_DIRS: [(&str, &str); 3] = [
    ("/run", "run"),
    ("/var/lib", "var-lib"),
    ("/var/log", "var-log"),
];
/// Static bearer tokens of the node's components (test clusters only).
pub(crate) const KUBELET_TOKEN: &str = "crossplane-rs-test-kubelet";
pub(crate) const PROXY_TOKEN: &str = "crossplane-rs-test-kube-proxy";
pub(crate) const SCHEDULER_TOKEN: &str = "crossplane-rs-test-kube-scheduler";

/// The lines the node's components add to the API servers' token file.
pub(crate) fn token_lines() -> String {
    format!(
        "{KUBELET_TOKEN},system:node:{NODE_NAME},kubelet-uid,system:nodes\n\
         {PROXY_TOKEN},system:kube-proxy,kube-proxy-uid\n\
         {SCHEDULER_TOKEN},system:kube-scheduler,kube-scheduler-uid\n"
    )
}

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
    containerd_socket: PathBuf,
    certs_dir: PathBuf,
    scheduler_pid: u32,
}

impl Node {
    /// Imports an image archive (OCI layout in a tar, e.g. from
    /// [`crate::image::binary_image_archive`]) into the node's containerd,
    /// where the kubelet finds it: pods then use it by its name with
    /// `imagePullPolicy: Never` or `IfNotPresent`.
    pub fn import_image(&self, archive: &Path) -> anyhow::Result<()> {
        import(&self.containerd_socket, archive)
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

/// The node's names and addresses, chosen before anything starts (the API
/// servers' certificate names the host address).
pub(crate) struct Plan {
    dir: PathBuf,
    pin: PathBuf,
    host_veth: String,
    pub(crate) host_ip: Ipv4Addr,
    node_ip: Ipv4Addr,
    pod_cidr: String,
    cgroup_root: String,
    network: String,
    netns_inode: u64,
    containerd_pid: Option<u32>,
}

impl Plan {
    fn path(&self, rel: &str) -> String {
        self.dir.join(rel).to_string_lossy().into_owned()
    }

    fn footprint(&self) -> Footprint {
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
    fn enter(&self, program: &Path) -> Command {
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

/// Where the node's processes find iptables, runc, ip and the like.
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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

/// The teardown script's path under a test environment's directory.
pub(crate) fn teardown_path(dir: &Path) -> PathBuf {
    dir.join("node").join("teardown.sh")
}

/// Runs the teardown script if there is one (from `Drop`; the watchdog runs
/// it itself).
pub(crate) fn teardown(dir: &Path) {
    let script = teardown_path(dir);
    if script.exists() {
        let _ = Command::new("sh").arg(&script).status();
    }
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

fn import(socket: &Path, archive: &Path) -> anyhow::Result<()> {
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

/// Starts kube-scheduler, kubelet and kube-proxy against the control
/// cluster (listening on `port`) and waits until the node is Ready and
/// schedulable.
pub(crate) fn start(
    procs: &mut Processes,
    bin: &Path,
    plan: &Plan,
    control: &Cluster,
    port: u16,
    ca_pem: &[u8],
    etcd_started: Instant,
) -> anyhow::Result<Node> {
    let ca = procs.dir().join("ca.crt");
    let host = plan.host_ip.to_string();
    let write_kubeconfig = |name: &str, server: &str, token: &str| -> anyhow::Result<PathBuf> {
        let path = plan.dir.join(format!("{name}.kubeconfig"));
        fs::write(
            &path,
            crate::process::kubeconfig_at("control", server, port, ca_pem, name, token),
        )?;
        Ok(path)
    };
    let scheduler_kc = write_kubeconfig("kube-scheduler", "127.0.0.1", SCHEDULER_TOKEN)?;
    let kubelet_kc = write_kubeconfig("kubelet", &host, KUBELET_TOKEN)?;
    let proxy_kc = write_kubeconfig("kube-proxy", &host, PROXY_TOKEN)?;
    let socket = plan.dir.join("containerd.sock");
    fs::write(
        plan.dir.join("kubelet.yaml"),
        format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://{socket}
# cgroup v1 hierarchies managed directly, under a root of this node's own.
cgroupDriver: cgroupfs
cgroupRoot: /{cg}
failCgroupV1: false
failSwapOn: false
address: {node_ip}
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca}}}
authorization:
  mode: AlwaysAllow
resolvConf: /etc/resolv.conf
podCIDR: {pod_cidr}
podLogsDir: {logs}
hairpinMode: hairpin-veth
# A test machine's disk may be nearly full; evict only when it really is.
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
maxPods: 60
"#,
            socket = socket.display(),
            cg = plan.cgroup_root,
            node_ip = plan.node_ip,
            ca = ca.display(),
            pod_cidr = plan.pod_cidr,
            logs = plan.path("pod-logs"),
        ),
    )?;
    let scheduler_pid = {
        let mut cmd = Command::new(bin.join("kube-scheduler"));
        cmd.args([
            format!("--kubeconfig={}", scheduler_kc.display()),
            "--leader-elect=false".to_owned(),
            "--secure-port=0".to_owned(),
        ]);
        procs.spawn_command("kube-scheduler", cmd)?
    };
    let mut kubelet = plan.enter(&bin.join("kubelet"));
    kubelet.args([
        format!("--config={}", plan.path("kubelet.yaml")),
        format!("--kubeconfig={}", kubelet_kc.display()),
        format!("--root-dir={}", plan.path("kubelet")),
        format!("--cert-dir={}", plan.path("kubelet/pki")),
        format!("--hostname-override={NODE_NAME}"),
        format!("--node-ip={}", plan.node_ip),
    ]);
    procs.spawn_command("kubelet", kubelet)?;
    let mut proxy = plan.enter(&bin.join("kube-proxy"));
    proxy.args([
        format!("--kubeconfig={}", proxy_kc.display()),
        "--proxy-mode=iptables".to_owned(),
        format!("--cluster-cidr={}", plan.pod_cidr),
        format!("--hostname-override={NODE_NAME}"),
        // Leave the (global) conntrack table settings alone.
        "--conntrack-max-per-core=0".to_owned(),
        "--conntrack-tcp-timeout-established=0".to_owned(),
        "--conntrack-tcp-timeout-close-wait=0".to_owned(),
        "--nodeport-addresses=primary".to_owned(),
        "--metrics-bind-address=127.0.0.1:10249".to_owned(),
        "--healthz-bind-address=127.0.0.1:10256".to_owned(),
    ]);
    procs.spawn_command("kube-proxy", proxy)?;

    let deadline = Instant::now() + Duration::from_secs(120);
    let node = format!("node/{NODE_NAME}");
    let query = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints}"#;
    loop {
        let out = control.kubectl(&["get", &node, "-o", query, "--ignore-not-found"]);
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && text.trim() == "True" {
            break;
        }
        procs.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "the test node did not become Ready and schedulable within 120s (last: {:?}); logs in {}",
                text.trim(),
                procs.dir().display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let startup = etcd_started.elapsed();
    eprintln!(
        "testenv: node {NODE_NAME} Ready {:.1}s after etcd started",
        startup.as_secs_f64()
    );
    Ok(Node {
        name: NODE_NAME.to_owned(),
        host_ip: plan.host_ip,
        node_ip: plan.node_ip,
        startup,
        footprint: plan.footprint(),
        containerd_socket: socket,
        certs_dir: plan.dir.join("containerd/certs.d"),
        scheduler_pid,
    })
}
