//! The node's fixed names: what it registers as, its components' tokens,
//! the pods' addresses, and what of the host it keeps its own copies of.

use std::net::Ipv4Addr;

/// The name the node registers under.
pub const NODE_NAME: &str = "testenv-node";
/// The pods' addresses: a /26 (62 pods) of 100.64.0.0/12 per node index
/// (16384 of them), routed from the host through the node's veth, so the
/// API servers reach pods (a conversion or admission webhook, as in a real
/// cluster) and nodes of test binaries running at once do not collide.
pub(super) fn pod_cidr(index: u32) -> String {
    let base = u32::from(Ipv4Addr::new(100, 64, 0, 0)) + (index % 16384) * 64;
    format!("{}/26", Ipv4Addr::from(base))
}
/// Global sysctls kubelet sets at start; the node sees its own copies.
pub(super) const KUBELET_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];
/// Directories the node's processes write at fixed paths, replaced by the
/// node's own in its mount namespace.
pub(super) const PRIVATE_DIRS: [(&str, &str); 3] = [
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

/// Where the node's processes find iptables, runc, ip and the like.
pub(super) const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
