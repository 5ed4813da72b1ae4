//! Credentials from Secrets are data: a kubeconfig in
//! a KubernetesCluster's or ProviderConfig's Secret never makes a controller
//! run a command, read a file, use a proxy or skip TLS verification, never
//! has its content repeated in a status, event or log, and two clusters that
//! read different keys of one Secret each get their own client.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener},
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use e2e::{Running, wait, workloads::*};
use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Event, Namespace, Secret},
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PostParams},
};
use serde_json::{Value, json};
use types::{
    compute::v1alpha1::KubernetesCluster, kubernetes::v1alpha1::Object,
    workload::v1alpha1::KubernetesApplicationResource,
};

// ---------------------------------------------------------------------------
// Controllers

/// Workload binaries watching one namespace; their logs are printed when the
/// test fails.
struct Binaries(Vec<Running>);

impl Binaries {
    /// Starts each of `names` (workload binaries, as their deploy/ service
    /// accounts) watching `ns`, with `extra` flags.
    async fn start(names: &[&str], ns: &str, extra: &[&str]) -> Self {
        let mut all = Vec::new();
        for name in names {
            let kubeconfig = impersonating_kubeconfig(name);
            let mut args = vec!["--watch-namespace", ns, "--poll-interval", "1s"];
            args.extend(extra);
            all.push(Running::start(name, &kubeconfig, &args));
        }
        for r in &mut all {
            r.wait_healthy(Duration::from_secs(30)).await;
        }
        Self(all)
    }

    fn get(&self, name: &str) -> &Running {
        self.0.iter().find(|r| r.name == name).unwrap()
    }

    fn logs(&self) -> String {
        self.0
            .iter()
            .map(Running::log)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Binaries {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for r in &self.0 {
                eprintln!("----- {} log -----\n{}", r.name, r.log());
            }
        }
    }
}

/// The sum of a counter's series for one controller, from /metrics.
fn reconciles(binary: &Running, controller: &str) -> u64 {
    e2e::metric_sum(
        &binary.metrics(),
        "crossplane_rs_reconcile_total",
        &[("controller", controller)],
    ) as u64
}

/// Waits until `controller` in `binary` has finished `n` more reconciles
/// than it had when called: proof that it looked again, not a sleep.
async fn more_reconciles(binary: &Running, controller: &str, n: u64) {
    let start = reconciles(binary, controller);
    wait(
        WAIT,
        &format!("{n} more {controller} reconciles in {}", binary.name),
        || async { (reconciles(binary, controller) >= start + n).then_some(()) },
    )
    .await;
}

// ---------------------------------------------------------------------------
// Kubeconfigs, Secrets, clusters

/// server, certificate-authority-data and token of a testenv kubeconfig.
fn parts(kubeconfig: &str) -> (String, String, String) {
    let v: Value = serde_saphyr::from_str(kubeconfig).unwrap();
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap().to_owned();
    (
        s("/clusters/0/cluster/server"),
        s("/clusters/0/cluster/certificate-authority-data"),
        s("/users/0/user/token"),
    )
}

/// A kubeconfig with one cluster, one user and one context, as JSON (which
/// is YAML): `cluster` and `user` are the inner mappings.
fn kubeconfig(cluster: Value, user: Value) -> String {
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    })
    .to_string()
}

fn base64(bytes: &[u8]) -> String {
    serde_json::to_value(ByteString(bytes.to_vec()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

/// Creates a Secret whose keys hold `data`.
async fn secret(client: &Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "stringData": data,
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A KubernetesCluster reading `key` of Secret `secret`.
async fn kubernetes_cluster(
    client: &Client,
    ns: &str,
    name: &str,
    secret: &str,
    key: &str,
    labels: Value,
) {
    let kc = json!({
        "apiVersion": "compute.crossplane.io/v1alpha1",
        "kind": "KubernetesCluster",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"connectionSecretRef": {"name": secret, "key": key}},
    });
    apply_json(client, ns, "kubernetesclusters", &kc).await;
}

/// A cluster `name` whose Secret `<name>-kubeconfig` holds `kubeconfig`.
async fn cluster_with(client: &Client, ns: &str, name: &str, kubeconfig: &str) {
    let secret_name = format!("{name}-kubeconfig");
    secret(client, ns, &secret_name, &[("kubeconfig", kubeconfig)]).await;
    kubernetes_cluster(client, ns, name, &secret_name, "kubeconfig", json!({})).await;
}

/// A KubernetesApplicationResource already scheduled to `cluster`, as the
/// application-controller would make it: the resource-controller connects to
/// the cluster for it.
async fn scheduled_resource(client: &Client, ns: &str, name: &str, cluster: &str) {
    let body = json!({
        "apiVersion": "workload.crossplane.io/v1alpha1",
        "kind": "KubernetesApplicationResource",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "clusterRef": {"name": cluster},
            "template": {"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": name, "namespace": "default"}, "data": {"a": "b"}},
        },
    });
    apply_json(client, ns, "kubernetesapplicationresources", &body).await;
}

async fn cluster_ready(client: &Client, ns: &str, name: &str) -> Option<(String, String)> {
    let kc = Api::<KubernetesCluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    let c = condition(&kc.status?.conditions, "Ready")?.clone();
    Some((c.status, c.message.unwrap_or_default()))
}

/// What must never be seen while waiting, given a condition's status and
/// message: Some(why the test fails at once).
trait Never: Fn(&str, &str) -> Option<String> {}
impl<F: Fn(&str, &str) -> Option<String>> Never for F {}

/// Waits until the cluster is Ready=False saying `needle`, failing at once
/// when `never` sees a breach; returns the message.
async fn wait_cluster_refused(
    client: &Client,
    ns: &str,
    name: &str,
    needle: &str,
    never: impl Never,
) -> String {
    wait(
        WAIT,
        &format!("KubernetesCluster {ns}/{name} Ready=False saying {needle:?}"),
        || async {
            let (status, msg) = cluster_ready(client, ns, name).await.unwrap_or_default();
            if let Some(breach) = never(&status, &msg) {
                panic!("KubernetesCluster {ns}/{name}: {breach}");
            }
            (status == "False" && msg.contains(needle)).then_some(msg)
        },
    )
    .await
}

/// Waits until the resource is Synced=False saying `needle`, failing at once
/// when `never` sees a breach.
async fn wait_resource_refused(
    client: &Client,
    ns: &str,
    name: &str,
    needle: &str,
    never: impl Never,
) -> String {
    wait(
        WAIT,
        &format!("resource {ns}/{name} Synced=False saying {needle:?}"),
        || async {
            let synced = get_res(client, ns, name)
                .await
                .and_then(|r| condition(&r.status?.conditions, "Synced").cloned());
            let (status, msg) = synced
                .map(|c| (c.status, c.message.unwrap_or_default()))
                .unwrap_or_default();
            if let Some(breach) = never(&status, &msg) {
                panic!("resource {ns}/{name}: {breach}");
            }
            (status == "False" && msg.contains(needle)).then_some(msg)
        },
    )
    .await
}

fn temp_path(prefix: &str) -> PathBuf {
    std::env::temp_dir().join(testenv::unique_name(prefix))
}

// ---------------------------------------------------------------------------
// Listeners owned by the test

/// A loopback listener that counts accepted connections and never answers.
struct Silent {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

fn silent_listener() -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    Silent { addr, accepted }
}

/// A loopback HTTPS listener with its own CA-less self-signed certificate
/// (for 127.0.0.1), counting accepted connections and recording the request
/// heads it receives.
struct Https {
    addr: SocketAddr,
    cert_pem: Vec<u8>,
    accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

fn https_listener() -> Https {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let dir = temp_path("trust-tls");
    std::fs::create_dir_all(&dir).unwrap();
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=trust-test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cert_pem = std::fs::read(&cert).unwrap();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&key).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let config = Arc::new(
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (count, seen) = (accepted.clone(), requests.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let (config, seen) = (config.clone(), seen.clone());
            std::thread::spawn(move || {
                stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if !head.is_empty() {
                    seen.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    let _ = tls.write_all(b"HTTP/1.1 503 Unavailable\r\ncontent-length: 0\r\n\r\n");
                }
            });
        }
    });
    Https {
        addr,
        cert_pem,
        accepted,
        requests,
    }
}

// ---------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn an_exec_kubeconfig_never_runs_its_command_in_the_scheduler_or_the_resource_controller() {
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let ns = plane.control.namespace(&client, "trust-exec").await;
    let bins = Binaries::start(&["scheduler", "resource-controller"], &ns, &[]).await;
    let marker = temp_path("trust-exec-marker");
    let script = format!("touch {}; echo LEAK >&2; exit 1", marker.display());
    let silent = silent_listener();
    let kc = kubeconfig(
        json!({"server": format!("https://{}", silent.addr)}),
        json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "sh", "args": ["-c", script]}}),
    );
    cluster_with(&client, &ns, "exec", &kc).await;
    scheduled_resource(&client, &ns, "exec-resource", "exec").await;

    let ran = |_: &str, msg: &str| {
        marker.exists().then(|| {
            format!(
                "the exec command ran (it made {}); message: {msg}",
                marker.display()
            )
        })
    };
    // Both controllers read the kubeconfig and refused it, naming the field.
    let cluster_msg = wait_cluster_refused(&client, &ns, "exec", "users[0].user.exec", ran).await;
    let resource_msg =
        wait_resource_refused(&client, &ns, "exec-resource", "users[0].user.exec", ran).await;
    for msg in [&cluster_msg, &resource_msg] {
        assert!(
            msg.contains("users[].user.token"),
            "says what to put instead: {msg}"
        );
        assert!(!msg.contains("LEAK") && !msg.contains("touch"), "{msg}");
    }
    assert!(
        !marker.exists(),
        "the exec command ran: {}",
        marker.display()
    );
    // Nor on any later look.
    more_reconciles(bins.get("scheduler"), "kubernetescluster", 2).await;
    more_reconciles(
        bins.get("resource-controller"),
        "kubernetesapplicationresource",
        2,
    )
    .await;
    assert!(
        !marker.exists(),
        "the exec command ran: {}",
        marker.display()
    );
    assert_eq!(silent.accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_token_file_kubeconfig_never_reads_the_file_nor_calls_its_server() {
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let ns = plane.control.namespace(&client, "trust-tokenfile").await;
    let bins = Binaries::start(&["scheduler", "resource-controller"], &ns, &[]).await;
    // Stands for the controller's own service-account token.
    let stolen = testenv::unique_name("controller-token");
    let token_file = temp_path("trust-token");
    std::fs::write(&token_file, &stolen).unwrap();
    let https = https_listener();
    let kc = kubeconfig(
        json!({"server": format!("https://{}", https.addr),
               "certificate-authority-data": base64(&https.cert_pem)}),
        json!({"tokenFile": token_file}),
    );
    cluster_with(&client, &ns, "tokenfile", &kc).await;
    scheduled_resource(&client, &ns, "tokenfile-resource", "tokenfile").await;

    let called = |_: &str, _: &str| {
        (https.accepted.load(Ordering::SeqCst) > 0).then(|| {
            format!(
                "the server named by the kubeconfig was called; requests: {:?}",
                https.requests.lock().unwrap()
            )
        })
    };
    let msg =
        wait_cluster_refused(&client, &ns, "tokenfile", "users[0].user.tokenFile", called).await;
    assert!(
        msg.contains("inline the token under users[].user.token"),
        "{msg}"
    );
    assert!(!msg.contains(&token_file.display().to_string()), "{msg}");
    wait_resource_refused(
        &client,
        &ns,
        "tokenfile-resource",
        "users[0].user.tokenFile",
        called,
    )
    .await;
    more_reconciles(bins.get("scheduler"), "kubernetescluster", 2).await;
    more_reconciles(
        bins.get("resource-controller"),
        "kubernetesapplicationresource",
        2,
    )
    .await;
    assert_eq!(
        https.accepted.load(Ordering::SeqCst),
        0,
        "the server named by the kubeconfig was called; requests: {:?}",
        https.requests.lock().unwrap()
    );
    assert!(!bins.logs().contains(&stolen));
    let _ = std::fs::remove_file(&token_file);
}

#[tokio::test]
async fn a_proxy_url_kubeconfig_is_refused_and_the_proxy_never_called() {
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let ns = plane.control.namespace(&client, "trust-proxy").await;
    let bins = Binaries::start(&["scheduler"], &ns, &[]).await;
    let proxy = silent_listener();
    let (server, ca, token) = parts(&plane.remote.kubeconfig);
    let kc = kubeconfig(
        json!({"server": server, "certificate-authority-data": ca,
               "proxy-url": format!("http://{}", proxy.addr)}),
        json!({"token": token}),
    );
    cluster_with(&client, &ns, "proxied", &kc).await;
    let used = |_: &str, _: &str| {
        (proxy.accepted.load(Ordering::SeqCst) > 0).then(|| "the proxy was called".to_owned())
    };
    let msg = wait_cluster_refused(
        &client,
        &ns,
        "proxied",
        "clusters[0].cluster.proxy-url",
        used,
    )
    .await;
    assert!(!msg.contains(&proxy.addr.to_string()), "{msg}");
    more_reconciles(bins.get("scheduler"), "kubernetescluster", 2).await;
    assert_eq!(proxy.accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn skipping_tls_verification_needs_the_operators_flag() {
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let (server, _, token) = parts(&plane.remote.kubeconfig);
    let kc = kubeconfig(
        json!({"server": server, "insecure-skip-tls-verify": true}),
        json!({"token": token}),
    );
    let refused_ns = plane.control.namespace(&client, "trust-insecure").await;
    let _default = Binaries::start(&["scheduler"], &refused_ns, &[]).await;
    cluster_with(&client, &refused_ns, "insecure", &kc).await;
    let msg = wait_cluster_refused(
        &client,
        &refused_ns,
        "insecure",
        "clusters[0].cluster.insecure-skip-tls-verify",
        |status: &str, _: &str| {
            (status == "True").then(|| {
                "Ready without --allow-insecure-remote-tls: TLS was not verified".to_owned()
            })
        },
    )
    .await;
    assert!(msg.contains("certificate-authority-data"), "{msg}");
    assert!(msg.contains("--allow-insecure-remote-tls"), "{msg}");

    let allowed_ns = plane.control.namespace(&client, "trust-insecure-ok").await;
    let _allowing = Binaries::start(
        &["scheduler"],
        &allowed_ns,
        &["--allow-insecure-remote-tls"],
    )
    .await;
    cluster_with(&client, &allowed_ns, "insecure", &kc).await;
    wait(
        WAIT,
        "the insecure cluster to be Ready with the flag",
        || async {
            let (status, _) = cluster_ready(&client, &allowed_ns, "insecure").await?;
            (status == "True").then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_token_pasted_as_the_secret_value_appears_in_no_status_event_or_log() {
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let ns = plane.control.namespace(&client, "trust-pasted").await;
    let bins = Binaries::start(&["scheduler", "resource-controller"], &ns, &[]).await;
    let token = format!("sk-{}", testenv::unique_name("pasted").replace('-', ""));
    // A bare token, and one in YAML that does not parse.
    cluster_with(&client, &ns, "pasted", &token).await;
    cluster_with(&client, &ns, "broken", &format!("token: \"{token}\n  - [")).await;
    scheduled_resource(&client, &ns, "pasted-resource", "pasted").await;
    scheduled_resource(&client, &ns, "broken-resource", "broken").await;

    let quoted = |_: &str, msg: &str| {
        msg.contains(&token)
            .then(|| format!("the condition quotes the Secret: {msg}"))
    };
    wait_cluster_refused(&client, &ns, "pasted", "it is not a kubeconfig", quoted).await;
    let msg = wait_cluster_refused(
        &client,
        &ns,
        "broken",
        "is not one valid YAML document",
        quoted,
    )
    .await;
    assert!(msg.contains("line 1, column"), "names the position: {msg}");
    wait_resource_refused(
        &client,
        &ns,
        "pasted-resource",
        "it is not a kubeconfig",
        quoted,
    )
    .await;
    wait_resource_refused(&client, &ns, "broken-resource", "line 1, column", quoted).await;
    more_reconciles(bins.get("scheduler"), "kubernetescluster", 2).await;
    more_reconciles(
        bins.get("resource-controller"),
        "kubernetesapplicationresource",
        2,
    )
    .await;

    let clusters = Api::<KubernetesCluster>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let resources = Api::<KubernetesApplicationResource>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    // The refusal is reported as an event too (posted after the status).
    let events = Api::<Event>::namespaced(client.clone(), &ns);
    e2e::wait_event(&client, Some(&ns), None, "ClusterNotReady").await;
    let events = events.list(&ListParams::default()).await.unwrap();
    for (what, text) in [
        (
            "KubernetesCluster status",
            serde_json::to_string(&clusters.items).unwrap(),
        ),
        (
            "resource status",
            serde_json::to_string(&resources.items).unwrap(),
        ),
        ("events", serde_json::to_string(&events.items).unwrap()),
        ("logs", bins.logs()),
    ] {
        assert!(
            !text.contains(&token),
            "the token appears in the {what}: {text}"
        );
    }
}

#[tokio::test]
async fn an_exec_kubeconfig_in_a_provider_config_never_runs_in_the_object_provider() {
    let plane = testenv::control_plane();
    let (client, _) = clients().await;
    let ns = plane.control.namespace(&client, "trust-pc").await;
    let mut provider = Running::start(
        "object-provider",
        // As its shipped ServiceAccount: its deploy/ role is what it needs.
        &impersonating_kubeconfig("object-provider"),
        &["--poll-interval", "1s", "--deletion-timeout", "10s"],
    );
    provider.wait_healthy(Duration::from_secs(30)).await;
    let marker = temp_path("trust-pc-marker");
    let kc = kubeconfig(
        json!({"server": "https://127.0.0.1:1"}),
        json!({"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "sh", "args": ["-c", format!("touch {}", marker.display())]}}),
    );
    secret(&client, &ns, "creds", &[("kubeconfig", &kc)]).await;
    let config = testenv::unique_name("trust-exec");
    let object = testenv::unique_name("trust-exec");
    let ssa = kube::api::PatchParams::apply("e2e-test").force();
    let pc = json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "ProviderConfig",
        "metadata": {"name": config},
        "spec": {"credentials": {"source": "Secret",
                 "secretRef": {"namespace": ns, "name": "creds", "key": "kubeconfig"}}},
    });
    Api::<types::kubernetes::v1alpha1::ProviderConfig>::all(client.clone())
        .patch(&config, &ssa, &Patch::Apply(&pc))
        .await
        .unwrap();
    let obj = json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
        "metadata": {"name": object},
        "spec": {"providerConfigRef": {"name": config}, "forProvider": {"manifest": {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": object, "namespace": "default"}}}},
    });
    let objects = Api::<Object>::all(client.clone());
    objects
        .patch(&object, &ssa, &Patch::Apply(&obj))
        .await
        .unwrap();

    let msg = wait(
        WAIT,
        "the Object to be Synced=False naming exec",
        || async {
            assert!(
                !marker.exists(),
                "the exec command ran in the object-provider (it made {})",
                marker.display()
            );
            let o = objects.get_opt(&object).await.unwrap()?;
            let c = o
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Synced")?;
            let msg = c.message.unwrap_or_default();
            (c.status == "False" && msg.contains("users[0].user.exec")).then_some(msg)
        },
    )
    .await;
    assert!(!msg.contains("touch"), "{msg}");
    assert!(
        !marker.exists(),
        "the exec command ran in the object-provider"
    );
    more_reconciles(&provider, "object", 2).await;
    assert!(
        !marker.exists(),
        "the exec command ran in the object-provider; log:\n{}",
        provider.log()
    );
}

#[tokio::test]
async fn two_clusters_reading_two_keys_of_one_secret_each_get_their_own_applications() {
    let plane = testenv::control_plane();
    let (client, remote) = clients().await;
    let ns = plane.control.namespace(&client, "trust-keys").await;
    // The same namespace in the remote cluster, for the remote application.
    let remote_ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(remote.clone())
        .create(&PostParams::default(), &remote_ns)
        .await
        .unwrap();
    let _controllers = Controllers::start(&ns).await;
    secret(
        &client,
        &ns,
        "both",
        &[
            ("control", plane.control.kubeconfig.as_str()),
            ("remote", plane.remote.kubeconfig.as_str()),
        ],
    )
    .await;
    kubernetes_cluster(
        &client,
        &ns,
        "to-control",
        "both",
        "control",
        json!({"target": "control"}),
    )
    .await;
    kubernetes_cluster(
        &client,
        &ns,
        "to-remote",
        "both",
        "remote",
        json!({"target": "remote"}),
    )
    .await;
    for target in ["control", "remote"] {
        let name = format!("for-{target}");
        let template = configmap_template(&name, &ns, &name, json!({"target": target}));
        apply_app(
            &client,
            &ns,
            app(
                &name,
                &ns,
                json!({"matchLabels": {"target": target}}),
                json!([template]),
            ),
        )
        .await;
    }
    wait_app_state(&client, &ns, "for-control", "Submitted").await;
    wait_app_state(&client, &ns, "for-remote", "Submitted").await;

    let in_control = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let in_remote = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    assert!(in_control.get_opt("for-control").await.unwrap().is_some());
    assert!(in_remote.get_opt("for-remote").await.unwrap().is_some());
    assert!(
        in_control.get_opt("for-remote").await.unwrap().is_none(),
        "the remote application landed in the control cluster"
    );
    assert!(
        in_remote.get_opt("for-control").await.unwrap().is_none(),
        "the control application landed in the remote cluster"
    );
}
