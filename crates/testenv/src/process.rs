//! Starting etcd, the two kube-apiservers and their controller managers.

use std::{
    fs,
    io::Write as _,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::{Options, cluster::Cluster, node};

/// The `kubernetes` Service's address (first of the service range).
const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The admin token both apiservers accept (a static token file, member of
/// system:masters). Test clusters only; never used outside them.
const ADMIN_TOKEN: &str = "crossplane-rs-test-admin";

/// Owns the started processes; a watchdog stops them (and removes their data)
/// when the test process exits, however it exits.
pub(crate) struct Processes {
    children: Vec<(String, Child)>,
    dir: PathBuf,
}

impl Processes {
    /// The directory holding the PKI, logs and data.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn spawn(&mut self, name: &str, bin: &Path, args: &[String]) -> anyhow::Result<()> {
        if !bin.exists() {
            bail!(
                "{} is missing: run `hack/build-binaries.sh` first (the README's test command does), or set CROSSPLANE_RS_BIN",
                bin.display()
            );
        }
        let mut cmd = Command::new(bin);
        cmd.args(args);
        self.spawn_command(name, cmd)?;
        Ok(())
    }

    /// Starts `cmd` as `name` (output to `<name>.log`, stopped with the
    /// rest) and returns its pid.
    pub(crate) fn spawn_command(&mut self, name: &str, mut cmd: Command) -> anyhow::Result<u32> {
        let log = fs::File::create(self.dir.join(format!("{name}.log")))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", cmd.get_program()))?;
        let pid = child.id();
        self.stop_on_exit(pid)?;
        self.children.push((name.to_owned(), child));
        Ok(pid)
    }

    /// Makes the watchdog stop `pid` when the test process exits, however
    /// it exits (a process started beside these, such as a registry).
    pub(crate) fn stop_on_exit(&self, pid: u32) -> anyhow::Result<()> {
        let mut pids = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir.join("pids"))?;
        writeln!(pids, "{pid}")?;
        Ok(())
    }

    /// Fails naming the process and the end of its log when one has exited.
    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                let log =
                    fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                bail!(
                    "{name} exited ({status}); the end of its log:\n{}",
                    tail.join("\n")
                );
            }
        }
        Ok(())
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        // Newest first: the node's components before the API servers.
        for (_, child) in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // What was started beside them (a registry): its pid goes with the
        // directory, so the watchdog could not find it later.
        stop_listed(&self.dir);
        crate::node::teardown(&self.dir);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A port no socket listens on, on any address: API servers bind the
/// wildcard address when there is a node, so a port free on loopback alone
/// may already be taken on another address (a registry of another test
/// binary on the node's host address, say).
fn free_port() -> anyhow::Result<u16> {
    free_port_on(std::net::Ipv4Addr::UNSPECIFIED.into())
}

/// The ports [`free_port_on`] picks from: below the kernel's ephemeral
/// range (32768–60999 by default), which is where bind(0) and every
/// outgoing connection get their port, and below Kubernetes' NodePorts
/// (30000–32767).
const PICKED_PORTS: std::ops::Range<u32> = 20000..30000;

/// A port free on `ip` (on every address for the unspecified one), for a
/// server started later that binds it itself. A port the kernel hands out
/// by itself (bind(0)) could be handed out again, to any outgoing
/// connection of this machine, in the seconds before that server binds
/// it (an API server starting took one in a full run: "bind: address
/// already in use"); one picked outside the ephemeral range cannot be.
/// Processes and threads start at different places of the range.
pub fn free_port_on(ip: std::net::IpAddr) -> anyhow::Result<u16> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let span = PICKED_PORTS.end - PICKED_PORTS.start;
    let start = std::process::id().wrapping_mul(7919)
        + NEXT.fetch_add(97, std::sync::atomic::Ordering::Relaxed);
    for i in 0..span {
        let port = PICKED_PORTS.start + (start + i) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind((ip, port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port in {PICKED_PORTS:?} on {ip}")
}

/// Runs `cmd` to completion; its stdout, or an error with its stderr
/// naming `what`.
pub(crate) fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A CA, a serving certificate for 127.0.0.1 (and, with a node, for the
/// host's address on the node's veth and the `kubernetes` Service, so pods
/// can use in-cluster config) and a service-account key, made with the
/// openssl CLI; with a node also the API servers' client certificate for
/// kubelets (`kubectl logs`, `exec`).
fn make_pki(dir: &Path, users: &[String], node: Option<&node::Plan>) -> anyhow::Result<()> {
    let d = |f: &str| dir.join(f).to_string_lossy().into_owned();
    run(
        Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
            ])
            .args([
                "-keyout",
                &d("ca.key"),
                "-out",
                &d("ca.crt"),
                "-subj",
                "/CN=crossplane-rs-test-ca",
            ]),
        "creating the test CA with openssl (is openssl installed?)",
    )?;
    run(
        Command::new("openssl")
            .args(["req", "-newkey", "rsa:2048", "-nodes"])
            .args([
                "-keyout",
                &d("serving.key"),
                "-out",
                &d("serving.csr"),
                "-subj",
                "/CN=kube-apiserver",
            ]),
        "creating the serving key",
    )?;
    let mut san = "subjectAltName=IP:127.0.0.1,DNS:localhost".to_owned();
    if let Some(plan) = node {
        san.push_str(&format!(
            ",IP:{},IP:{KUBERNETES_SERVICE_IP},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc",
            plan.host_ip
        ));
    }
    fs::write(dir.join("san.ext"), format!("{san}\n"))?;
    run(
        Command::new("openssl")
            .args(["x509", "-req", "-days", "3650", "-in", &d("serving.csr")])
            .args([
                "-CA",
                &d("ca.crt"),
                "-CAkey",
                &d("ca.key"),
                "-CAcreateserial",
            ])
            .args(["-out", &d("serving.crt"), "-extfile", &d("san.ext")]),
        "signing the serving certificate",
    )?;
    run(
        Command::new("openssl").args(["genrsa", "-out", &d("sa.key"), "2048"]),
        "creating the service-account key",
    )?;
    if node.is_some() {
        run(
            Command::new("openssl")
                .args(["req", "-newkey", "rsa:2048", "-nodes"])
                .args([
                    "-keyout",
                    &d("kubelet-client.key"),
                    "-out",
                    &d("kubelet-client.csr"),
                ])
                .args([
                    "-subj",
                    "/O=system:masters/CN=kube-apiserver-kubelet-client",
                ]),
            "creating the kubelet client key",
        )?;
        run(
            Command::new("openssl")
                .args([
                    "x509",
                    "-req",
                    "-days",
                    "3650",
                    "-in",
                    &d("kubelet-client.csr"),
                ])
                .args([
                    "-CA",
                    &d("ca.crt"),
                    "-CAkey",
                    &d("ca.key"),
                    "-CAcreateserial",
                ])
                .args(["-out", &d("kubelet-client.crt")]),
            "signing the kubelet client certificate",
        )?;
    }
    let mut tokens = format!("{ADMIN_TOKEN},admin,admin-uid,system:masters\n");
    if node.is_some() {
        tokens.push_str(&node::token_lines());
    }
    for user in users {
        tokens.push_str(&format!("{},{user},{user}-uid\n", user_token(user)));
    }
    fs::write(dir.join("tokens.csv"), tokens)?;
    Ok(())
}

/// The bearer token of an extra user (`Options::users`): test clusters only.
fn user_token(user: &str) -> String {
    format!("crossplane-rs-test-user-{user}")
}

/// Refuses user names that would not survive the token file (a CSV) or a
/// kubeconfig unquoted.
fn check_user(user: &str) -> anyhow::Result<()> {
    let ok = !user.is_empty()
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'));
    if !ok || user == "admin" {
        bail!(
            "testenv user {user:?}: use letters, digits, '-', '.', '_' or ':' (and not \"admin\")"
        );
    }
    Ok(())
}

/// Every request at level Metadata (who, verb, resource, response code; no
/// bodies), without the RequestReceived stage: a request is then logged at
/// ResponseComplete, a watch also at ResponseStarted when it opens.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

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

fn kubeconfig(name: &str, port: u16, ca_pem: &[u8], user: &str, token: &str) -> String {
    kubeconfig_at(name, "127.0.0.1", port, ca_pem, user, token)
}

/// A kubeconfig for `https://<host>:<port>` with a bearer token.
pub(crate) fn kubeconfig_at(
    name: &str,
    host: &str,
    port: u16,
    ca_pem: &[u8],
    user: &str,
    token: &str,
) -> String {
    use base64_lite::encode;
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: https://{host}:{port}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {user}\ncurrent-context: {name}\nusers:\n- name: {user}\n  user:\n    token: {token}\n",
        ca = encode(ca_pem)
    )
}

/// The names of the remote clusters, in order (`Options::remotes` at most
/// this many).
pub(crate) const REMOTE_NAMES: [&str; 8] = [
    "remote", "remote-2", "remote-3", "remote-4", "remote-5", "remote-6", "remote-7", "remote-8",
];

/// Starts everything and returns the clusters (control first, then the
/// remotes) once each answers /readyz.
pub(crate) fn start(
    bin: &Path,
    options: &Options,
) -> anyhow::Result<(Cluster, Vec<Cluster>, Option<node::Node>, Processes)> {
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
    let mut procs = Processes {
        children: Vec::new(),
        dir: dir.clone(),
    };
    start_watchdog(&dir)?;
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
    let d = |f: &str| dir.join(f).to_string_lossy().into_owned();

    let (client_port, peer_port) = (free_port()?, free_port()?);
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    procs.spawn(
        "etcd",
        &bin.join("etcd"),
        &[
            format!("--data-dir={}", d("etcd")),
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
    let etcd_started = std::time::Instant::now();

    let kubectl = bin.join("kubectl");
    let ca_pem = fs::read(dir.join("ca.crt"))?;
    let mut clusters = Vec::new();
    let mut control_port = 0;
    let names = std::iter::once("control").chain(REMOTE_NAMES.into_iter().take(remotes));
    for name in names {
        let port = free_port()?;
        let audit_log = options.audit.then(|| dir.join(format!("{name}-audit.log")));
        let audit = audit_log
            .as_deref()
            .map(|log| audit_flags(&policy, log))
            .unwrap_or_default();
        // With a node, every API server also listens on the host's address
        // on the node's veth (pods reach them there); the control cluster
        // advertises it, so its `kubernetes` Service leads there.
        let (bind, advertise, node_flags) = match &node_plan {
            Some(plan) if name == "control" => {
                control_port = port;
                (
                    "0.0.0.0",
                    plan.host_ip.to_string(),
                    node::apiserver_flags(plan, &dir),
                )
            }
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
            &bin.join("kube-apiserver"),
            &[
                format!("--etcd-servers={etcd_url}"),
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
                "--profiling=false".to_owned(),
            ]
            .into_iter()
            .chain(audit)
            .chain(node_flags)
            .collect::<Vec<_>>(),
        )?;
        let path = dir.join(format!("{name}.kubeconfig"));
        fs::write(&path, kubeconfig(name, port, &ca_pem, "admin", ADMIN_TOKEN))?;
        let users = options
            .users
            .iter()
            .map(|u| {
                let kc = kubeconfig(name, port, &ca_pem, u, &user_token(u));
                (u.clone(), kc)
            })
            .collect();
        clusters.push((name, path, audit_log, users));
    }
    // containerd needs no API server: start it while they come up.
    if let Some(plan) = node_plan.as_mut() {
        node::start_containerd(&mut procs, plan).context("starting the test node's containerd")?;
    }
    let mut ready = Vec::new();
    for (name, path, audit_log, users) in clusters {
        let mut cluster = Cluster::new(name, path, kubectl.clone())?;
        cluster.audit_log = audit_log;
        cluster.user_kubeconfigs = users;
        // The first start of an apiserver on a cold machine can take a while.
        cluster.wait_ready(Duration::from_secs(90), || procs.check_alive())?;
        ready.push(cluster);
    }
    for cluster in &ready {
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
        )?;
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
                &ca_pem,
                etcd_started,
            )
            .context("starting the test node")?,
        ),
        None => None,
    };
    Ok((control, it.collect(), node, procs))
}

/// Kills every process listed in `dir/pids` that still runs from `dir`
/// (its command line names a file there: a pid reused by something else is
/// left alone).
fn stop_listed(dir: &Path) {
    let listed = fs::read_to_string(dir.join("pids")).unwrap_or_default();
    let here = dir.to_string_lossy().into_owned();
    for pid in listed.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&here) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// A shell loop that waits for this test process to exit, then stops every
/// pid listed in `dir/pids` and anything else still running from `dir` (a
/// command line naming a file in it), tears the node down
/// (`dir/node/teardown.sh`) and removes `dir`.
fn start_watchdog(dir: &Path) -> anyhow::Result<()> {
    let script = r#"
while kill -0 "$1" 2>/dev/null; do sleep 1; done
pids=$(cat "$2/pids" 2>/dev/null)
[ -n "$pids" ] && kill $pids 2>/dev/null
pkill -f -- "$2/" 2>/dev/null
sleep 3
[ -n "$pids" ] && kill -9 $pids 2>/dev/null
pkill -9 -f -- "$2/" 2>/dev/null
[ -f "$2/node/teardown.sh" ] && sh "$2/node/teardown.sh"
rm -rf "$2"
"#;
    Command::new("sh")
        .args([
            "-c",
            script,
            "watchdog",
            &std::process::id().to_string(),
            &dir.to_string_lossy(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the test-environment watchdog")?;
    Ok(())
}

/// Minimal standard base64 (no dependency for one call).
mod base64_lite {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(input: &[u8]) -> String {
        let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
        for chunk in input.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn encodes_like_rfc_4648() {
            assert_eq!(super::encode(b"f"), "Zg==");
            assert_eq!(super::encode(b"fo"), "Zm8=");
            assert_eq!(super::encode(b"foobar"), "Zm9vYmFy");
        }
    }
}
