//! The node's Kubernetes components: kube-scheduler, kubelet and
//! kube-proxy, started against the control cluster, and the wait until
//! the node is Ready.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::bail;

use super::{
    names::{KUBELET_TOKEN, NODE_NAME, PROXY_TOKEN, SCHEDULER_TOKEN},
    plan::Plan,
    running::Node,
};
use crate::{cluster::Cluster, kubeconfig::kubeconfig_at, process::Processes};

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
            kubeconfig_at("control", server, port, ca_pem, name, token),
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
