//! Starting a control plane, in its order: the PKI, etcd, the API servers
//! (and the node's containerd while they come up), their controller
//! managers once they answer, then the node.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    cluster::Cluster,
    kubeconfig::kubeconfig_at,
    node,
    options::Options,
    pki::{ADMIN_TOKEN, check_user, make_pki, user_token},
    ports::free_port,
    process::Processes,
};

/// Every request at level Metadata (who, verb, resource, response code; no
/// bodies), without the RequestReceived stage: a request is then logged at
/// ResponseComplete, a watch also at ResponseStarted when it opens.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

/// The names of the remote clusters, in order (`Options::remotes` at most
/// this many).
const REMOTE_NAMES: [&str; 8] = [
    "remote", "remote-2", "remote-3", "remote-4", "remote-5", "remote-6", "remote-7", "remote-8",
];

/// What [`start`] returns: the control cluster, the remotes, the node.
pub(crate) type Started = (Cluster, Vec<Cluster>, Option<node::Node>, Processes);

/// Starts everything and returns the clusters (control first, then the
/// remotes) once each answers /readyz.
pub(crate) fn start(bin: &Path, options: &Options) -> anyhow::Result<Started> {
    for user in &options.users {
        check_user(user)?;
    }
    let remotes = options.remotes.max(1);
    if remotes > REMOTE_NAMES.len() {
        bail!(
            "testenv starts at most {} remote clusters, not {remotes}",
            REMOTE_NAMES.len()
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("crossplane-rs-testenv-")
        .tempdir()?
        .keep();
    let mut procs = Processes::new(dir.clone())?;
    let mut node_plan = if options.node {
        Some(node::prepare(&dir).context("preparing the test node")?)
    } else {
        None
    };
    make_pki(&dir, &options.users, node_plan.as_ref())?;
    let policy = dir.join("audit-policy.yaml");
    if options.audit {
        fs::write(&policy, AUDIT_POLICY)?;
    }
    let etcd_url = start_etcd(&mut procs, bin, &dir)?;
    let etcd_started = Instant::now();

    let servers = Apiservers {
        bin,
        dir: &dir,
        options,
        etcd_url,
        ca_pem: fs::read(dir.join("ca.crt"))?,
        policy,
    };
    let names = std::iter::once("control").chain(REMOTE_NAMES.into_iter().take(remotes));
    let mut spawned = Vec::new();
    for name in names {
        spawned.push(servers.spawn(&mut procs, name, node_plan.as_ref())?);
    }
    // containerd needs no API server: start it while they come up.
    if let Some(plan) = node_plan.as_mut() {
        node::start_containerd(&mut procs, plan).context("starting the test node's containerd")?;
    }
    let control_port = spawned.first().map_or(0, |s| s.port);
    let mut ready = Vec::new();
    for server in spawned {
        let mut cluster = Cluster::new(server.name, server.kubeconfig, bin.join("kubectl"))?;
        cluster.audit_log = server.audit_log;
        cluster.scratch = dir.clone();
        cluster.user_kubeconfigs = server.users;
        // The first start of an apiserver on a cold machine can take a while.
        cluster.wait_ready(Duration::from_secs(90), || procs.check_alive())?;
        ready.push(cluster);
    }
    for cluster in &ready {
        start_controller_manager(&mut procs, bin, &dir, cluster)?;
    }
    procs.check_alive()?;
    let mut it = ready.into_iter();
    let Some(control) = it.next() else {
        bail!("internal: the control cluster is missing");
    };
    let node = match &node_plan {
        Some(plan) => Some(
            node::start(
                &mut procs,
                bin,
                plan,
                &control,
                control_port,
                &servers.ca_pem,
                etcd_started,
            )
            .context("starting the test node")?,
        ),
        None => None,
    };
    Ok((control, it.collect(), node, procs))
}

/// Starts etcd on free ports and returns its client URL.
fn start_etcd(procs: &mut Processes, bin: &Path, dir: &Path) -> anyhow::Result<String> {
    let (client_port, peer_port) = (free_port()?, free_port()?);
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    procs.spawn(
        "etcd",
        &bin.join("etcd"),
        &[
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
            // Test data is thrown away: skip fsync, it dominates etcd latency.
            "--unsafe-no-fsync=true".to_owned(),
            "--log-level=warn".to_owned(),
        ],
    )?;
    Ok(etcd_url)
}

/// What every API server of one plane shares.
struct Apiservers<'a> {
    bin: &'a Path,
    dir: &'a Path,
    options: &'a Options,
    etcd_url: String,
    ca_pem: Vec<u8>,
    policy: PathBuf,
}

/// An API server started, not yet known to answer.
struct Spawned {
    name: &'static str,
    port: u16,
    kubeconfig: PathBuf,
    audit_log: Option<PathBuf>,
    users: BTreeMap<String, String>,
}

impl Apiservers<'_> {
    fn path(&self, file: &str) -> String {
        self.dir.join(file).to_string_lossy().into_owned()
    }

    /// Starts the kube-apiserver of cluster `name` on its own etcd prefix
    /// and writes its kubeconfigs (the admin's, and one per extra user).
    fn spawn(
        &self,
        procs: &mut Processes,
        name: &'static str,
        node_plan: Option<&node::Plan>,
    ) -> anyhow::Result<Spawned> {
        let d = |f: &str| self.path(f);
        let port = free_port()?;
        let audit_log = (self.options.audit).then(|| self.dir.join(format!("{name}-audit.log")));
        let audit = audit_log
            .as_deref()
            .map(|log| audit_flags(&self.policy, log))
            .unwrap_or_default();
        // With a node, every API server also listens on the host's address
        // on the node's veth (pods reach them there); the control cluster
        // advertises it, so its `kubernetes` Service leads there.
        let (bind, advertise, node_flags) = match node_plan {
            Some(plan) if name == "control" => (
                "0.0.0.0",
                plan.host_ip.to_string(),
                node::apiserver_flags(plan, self.dir),
            ),
            Some(_) => ("0.0.0.0", "127.0.0.1".to_owned(), Vec::new()),
            None => ("127.0.0.1", "127.0.0.1".to_owned(), Vec::new()),
        };
        let authorization = if node_flags.is_empty() {
            "RBAC"
        } else {
            "Node,RBAC"
        };
        procs.spawn(
            &format!("kube-apiserver-{name}"),
            &self.bin.join("kube-apiserver"),
            &[
                format!("--etcd-servers={}", self.etcd_url),
                format!("--etcd-prefix=/registry-{name}"),
                format!("--bind-address={bind}"),
                format!("--advertise-address={advertise}"),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", d(&format!("certs-{name}"))),
                format!("--tls-cert-file={}", d("serving.crt")),
                format!("--tls-private-key-file={}", d("serving.key")),
                format!("--client-ca-file={}", d("ca.crt")),
                format!("--token-auth-file={}", d("tokens.csv")),
                format!("--authorization-mode={authorization}"),
                format!("--service-account-key-file={}", d("sa.key")),
                format!("--service-account-signing-key-file={}", d("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
                "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
                // Webhooks (CRD conversion, admission) and aggregated APIs are
                // called at a ready endpoint of their Service (a pod address,
                // routed through the node), not at its cluster IP: the API
                // server runs on the host, outside kube-proxy's rules.
                "--enable-aggregator-routing=true".to_owned(),
                // Benchmarks (audit on) may take a CPU profile at
                // /debug/pprof; the test suite has no use for it.
                format!("--profiling={}", self.options.audit),
            ]
            .into_iter()
            .chain(audit)
            .chain(node_flags)
            .collect::<Vec<_>>(),
        )?;
        let kubeconfig = self.dir.join(format!("{name}.kubeconfig"));
        fs::write(
            &kubeconfig,
            self.kubeconfig(name, port, "admin", ADMIN_TOKEN),
        )?;
        let users = (self.options.users.iter())
            .map(|u| (u.clone(), self.kubeconfig(name, port, u, &user_token(u))))
            .collect();
        Ok(Spawned {
            name,
            port,
            kubeconfig,
            audit_log,
            users,
        })
    }

    fn kubeconfig(&self, name: &str, port: u16, user: &str, token: &str) -> String {
        kubeconfig_at(name, "127.0.0.1", port, &self.ca_pem, user, token)
    }
}

/// The flags that make an apiserver write an audit log to `log`.
fn audit_flags(policy: &Path, log: &Path) -> Vec<String> {
    vec![
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", log.display()),
        "--audit-log-format=json".to_owned(),
        // Written before the response returns, so a count taken after a
        // request has answered includes it.
        "--audit-log-mode=blocking".to_owned(),
        // Never rotated: counts are taken between byte offsets of one file.
        "--audit-log-maxsize=1000000".to_owned(),
    ]
}

/// Starts the kube-controller-manager of `cluster` (garbage collection,
/// namespaces, Deployments).
fn start_controller_manager(
    procs: &mut Processes,
    bin: &Path,
    dir: &Path,
    cluster: &Cluster,
) -> anyhow::Result<()> {
    let d = |f: &str| dir.join(f).to_string_lossy().into_owned();
    procs.spawn(
        &format!("kube-controller-manager-{}", cluster.name),
        &bin.join("kube-controller-manager"),
        &[
            format!("--kubeconfig={}", cluster.kubeconfig_path.display()),
            "--leader-elect=false".to_owned(),
            "--controllers=*".to_owned(),
            format!("--service-account-private-key-file={}", d("sa.key")),
            format!("--root-ca-file={}", d("ca.crt")),
            // No serving port: nothing reads it, and delegated
            // authentication would log about a missing CA bundle.
            "--secure-port=0".to_owned(),
            // Garbage collection and namespace cleanup should be prompt in tests.
            "--concurrent-gc-syncs=10".to_owned(),
            "--namespace-sync-period=10s".to_owned(),
        ],
    )
}
