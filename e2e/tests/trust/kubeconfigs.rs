//! A KubernetesCluster's kubeconfig carries inline material only: no command, file, proxy or skipped
//! verification reaches the scheduler or the resource-controller.

use super::*;

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

fn base64(bytes: &[u8]) -> String {
    serde_json::to_value(ByteString(bytes.to_vec()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

// ---------------------------------------------------------------------------
// Listeners owned by the test

/// A loopback listener that counts accepted connections and never answers.
fn silent_listener() -> e2e::stall::Stalled {
    e2e::stall::Stalled::start(e2e::stall::Mode::Tcp)
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
    assert_eq!(silent.accepted(), 0);
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
    let used = |_: &str, _: &str| (proxy.accepted() > 0).then(|| "the proxy was called".to_owned());
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
    assert_eq!(proxy.accepted(), 0);
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
