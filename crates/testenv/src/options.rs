//! How a control plane is started: audit logs, remote clusters, extra
//! users, a node.

/// How [`crate::start_local_with`] starts a control plane. The default is what the
/// test suite uses: no audit log, one remote cluster, no extra users.
#[derive(Clone, Debug)]
pub struct Options {
    /// Each kube-apiserver writes an audit log (`Cluster::audit_log`, JSON
    /// lines at level Metadata for every request) so a benchmark can count
    /// requests as the server saw them. It costs the servers time and disk,
    /// so the test suite leaves it off.
    pub audit: bool,
    /// How many remote clusters (1 to 8). Each is a kube-apiserver of its
    /// own on its own etcd prefix, with its own kube-controller-manager.
    pub remotes: usize,
    /// Extra users every kube-apiserver accepts, each by a bearer token of
    /// its own (`Cluster::kubeconfig_for`): identities distinct from the
    /// admin, e.g. for a binary whose requests the audit log must tell
    /// apart. They start with no permissions.
    pub users: Vec<String>,
    /// The control cluster gets a real node (containerd, kubelet,
    /// kube-proxy, kube-scheduler; see [`crate::node`]) so pods run. Needs root,
    /// and costs a few seconds and ~300 MiB. Default: whether
    /// `CROSSPLANE_RS_TEST_NODE` is `1`.
    pub node: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            audit: false,
            remotes: 1,
            users: Vec::new(),
            node: node_by_default(),
        }
    }
}

/// `CROSSPLANE_RS_TEST_NODE=1` starts the node with every control plane.
pub(crate) fn node_by_default() -> bool {
    std::env::var("CROSSPLANE_RS_TEST_NODE").is_ok_and(|v| v == "1")
}
