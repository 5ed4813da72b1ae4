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

mod containerd;
mod footprint;
mod kubelet;
mod names;
mod plan;
mod running;

pub use footprint::Footprint;
pub use names::NODE_NAME;
pub use running::Node;

pub(crate) use containerd::start_containerd;
pub(crate) use kubelet::start;
pub(crate) use names::token_lines;
pub(crate) use plan::{Plan, apiserver_flags, prepare};
