//! The two sides: ours (deploy/ on the control cluster) and upstream's
//! provider (a process, the second remote cluster its control plane).

use super::*;

/// How long one file's Objects may take to settle on both sides.
pub const SETTLE: Duration = Duration::from_secs(120);

pub fn plane() -> &'static testenv::ControlPlane {
    testenv::control_plane_with(testenv::Options {
        node: true,
        remotes: 2,
        ..testenv::Options::default()
    })
}

/// The newest pinned provider-kubernetes release.
pub fn release() -> String {
    e2e::upstream::provider_kubernetes_versions()
        .pop()
        .expect("a provider-kubernetes release in hack/versions.env")
}

pub fn bin(name: &str) -> PathBuf {
    testenv::bin_dir()
        .expect("CROSSPLANE_RS_BIN (hack/build-binaries.sh)")
        .join(name)
}

/// The examples directory of the pinned release.
pub fn examples() -> PathBuf {
    bin(&format!("provider-kubernetes-{}-examples", release()))
}

/// One side of the comparison: a cluster whose own provider reconciles
/// the Objects applied to it.
#[derive(Clone, Copy)]
pub struct Side {
    pub name: &'static str,
    pub cluster: &'static testenv::Cluster,
}

impl Side {
    pub fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let out = self.cluster.kubectl(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, text) = self.kubectl(args);
        assert!(ok, "{}: kubectl {}: {text}", self.name, args.join(" "));
        text
    }

    pub fn apply_text(&self, docs: &str) {
        let out = self
            .cluster
            .kubectl_stdin(&["apply", "-f", "-"], Some(docs));
        assert!(
            out.status.success(),
            "{}: kubectl apply: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn get_json(&self, args: &[&str]) -> Option<Value> {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["-o", "json"]);
        let (ok, text) = self.kubectl(&all);
        if !ok {
            return None;
        }
        serde_json::from_str(&text).ok()
    }

    /// Where its kubeconfig Secret `crossplane-system/cluster-config` is
    /// and what it says: the side's own cluster as its provider reaches it.
    pub fn cluster_config(&self, kubeconfig: &str) {
        let _ = self.kubectl(&["create", "namespace", "crossplane-system"]);
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cluster-config", "namespace": "crossplane-system"},
            "stringData": {"kubeconfig": kubeconfig},
        });
        self.apply_text(&secret.to_string());
    }
}

/// Upstream's provider, a process on this host; killed with the test
/// process.
struct UpstreamProvider {
    child: Child,
    log: PathBuf,
}

impl UpstreamProvider {
    /// Its log, and how it ended if it did.
    fn log(&mut self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        match self.child.try_wait() {
            Ok(Some(status)) => format!("{log}\n(upstream's provider exited: {status})"),
            _ => log,
        }
    }
}

static OURS: OnceLock<Side> = OnceLock::new();
static UPSTREAM: OnceLock<(Side, std::sync::Mutex<UpstreamProvider>)> = OnceLock::new();

/// Ours: deploy/ on the control cluster, the Secret naming the control
/// cluster as pods reach it, and the examples' configs.
pub fn ours() -> Side {
    *OURS.get_or_init(|| {
        let plane = plane();
        e2e::shipped::shipped();
        e2e::shipped::wait_available(Duration::from_secs(300));
        let node = plane.node.as_ref().expect("the test node");
        let kubeconfig = plane
            .control
            .kubeconfig
            .replace("https://127.0.0.1:", &format!("https://{}:", node.host_ip));
        let side = Side {
            name: "ours",
            cluster: &plane.control,
        };
        side.cluster_config(&kubeconfig);
        apply_configs(side);
        side
    })
}

/// Upstream's: its CRDs on the second remote cluster, its conversion
/// webhook's certificate made here (as Crossplane's package manager would
/// make it) and the CRD pointed at it, the Secret naming that cluster, the
/// examples' configs, and the provider started and ready.
pub fn upstream() -> Side {
    UPSTREAM
        .get_or_init(|| {
            let plane = plane();
            let cluster = plane
                .more_remotes
                .first()
                .expect("a second remote cluster (Options::remotes = 2)");
            let side = Side {
                name: "upstream",
                cluster,
            };
            let release = release();
            let work = plane.scratch_dir("upstream-provider");
            std::fs::create_dir_all(&work).unwrap();
            let now = time::OffsetDateTime::now_utc();
            let ca = runtime::certificates::Authority::new("upstream-webhook", "e2e", now).unwrap();
            let leaf = ca
                .issue(
                    &["127.0.0.1".to_owned()],
                    runtime::certificates::Usage::Server,
                )
                .unwrap();
            std::fs::write(work.join("tls.crt"), &leaf.cert_pem).unwrap();
            std::fs::write(work.join("tls.key"), &leaf.key_pem).unwrap();
            use base64::Engine as _;
            let bundle = base64::engine::general_purpose::STANDARD.encode(ca.cert_pem());
            // Its CRDs as its package ships them, the Object CRD's
            // conversion pointed at the webhook on this host (at
            // controller-runtime's port: not a flag of the provider).
            let crds = bin(&format!("provider-kubernetes-{release}-package")).join("crds");
            for entry in std::fs::read_dir(&crds).unwrap() {
                let path = entry.unwrap().path();
                for mut crd in documents(&path) {
                    if let Some(webhook) = crd.pointer_mut("/spec/conversion/webhook") {
                        webhook["clientConfig"] = serde_json::json!({
                            "url": "https://127.0.0.1:9443/convert", "caBundle": bundle});
                    }
                    let out = side.cluster.kubectl_stdin(
                        &["apply", "--server-side", "-f", "-"],
                        Some(&crd.to_string()),
                    );
                    assert!(
                        out.status.success(),
                        "upstream's CRD {}: {}",
                        path.display(),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            side.kubectl_ok(&[
                "wait",
                "--for=condition=Established",
                "crd",
                "--all",
                "--timeout=60s",
            ]);
            side.cluster_config(&cluster.kubeconfig);
            let kubeconfig = work.join("kubeconfig");
            std::fs::write(&kubeconfig, &cluster.kubeconfig).unwrap();
            let health = e2e::free_addr();
            let log = work.join("provider.log");
            let out = std::fs::File::create(&log).unwrap();
            let child = Command::new(bin(&format!("provider-kubernetes-{release}")))
                .env("KUBECONFIG", &kubeconfig)
                .env("TLS_SERVER_CERTS_DIR", &work)
                .args([
                    "--poll=2s",
                    "--enable-management-policies",
                    &format!("--health-probe-bind-addr={health}"),
                ])
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .expect("upstream's provider starts");
            e2e::stopped_with_this_process(&child);
            let mut provider = UpstreamProvider { child, log };
            wait_blocking(
                Duration::from_secs(60),
                "upstream's provider to be ready (its webhook serving)",
                || match e2e::http_get(health, "/readyz") {
                    Some((200, _)) => Ok(()),
                    other => Err(format!("/readyz answered {other:?}")),
                },
                || provider.log(),
            );
            apply_configs(side);
            (side, std::sync::Mutex::new(provider))
        })
        .0
}

/// The examples' own configs, unchanged: `kubernetes-provider` for cluster
/// and for namespaced Objects.
pub fn apply_configs(side: Side) {
    for file in [
        "cluster/provider/config.yaml",
        "namespaced/provider/config.yaml",
    ] {
        side.kubectl_ok(&["apply", "-f", &examples().join(file).to_string_lossy()]);
    }
}

/// The last lines upstream's provider logged.
pub fn upstream_log_tail() -> String {
    let Some((_, provider)) = UPSTREAM.get() else {
        return String::new();
    };
    let log = provider.lock().map(|mut p| p.log()).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// What `look` finds on both sides once both give a value and the values
/// agree, within [`SETTLE`]; `Err((ours, upstream's))` with the last values
/// when both gave one but they never agreed. A side may pass through a
/// state the other skips (a reference the same file makes, missing at its
/// first reconcile and there at the other's), so the first values seen are
/// not yet an answer. Fails the test when a side never gives a value.
pub fn on_both<T: PartialEq + std::fmt::Debug>(
    what: &str,
    look: impl Fn(Side) -> Option<T>,
) -> Result<T, (T, T)> {
    let (ours, upstream) = (ours(), upstream());
    let mut last = None;
    let agreed = e2e::wait::poll_blocking(SETTLE, e2e::wait::EVERY, what, || {
        match (look(ours), look(upstream)) {
            (Some(a), Some(b)) if a == b => Ok(a),
            (Some(a), Some(b)) => {
                let seen = format!("ours {a:?}, upstream's {b:?}");
                last = Some((a, b));
                Err(seen)
            }
            other => {
                let seen = format!("(ours, upstream's) = {other:?}");
                last = None;
                Err(seen)
            }
        }
    });
    match (agreed, last) {
        (Ok((value, _)), _) => Ok(value),
        (Err(_), Some(differing)) => Err(differing),
        (Err(out), None) => panic!(
            "{}",
            out.message(Some(format!(
                "upstream's log tail: {}",
                super::upstream_log_tail()
            )))
        ),
    }
}
