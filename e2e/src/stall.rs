//! Clusters that stall: loopback listeners owned by the test that accept TCP
//! connections and never answer. Unlike a closed port, which fails at once,
//! they hold whoever calls them until the caller gives up, which is what a
//! hung or overloaded API server does.

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::Command,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

/// How a [`Stalled`] listener treats a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Accept, then never read or write: the TLS handshake never completes.
    Tcp,
    /// Complete the TLS handshake (with a certificate for 127.0.0.1 that
    /// [`Stalled::kubeconfig`]'s CA vouches for), then never read the
    /// request or write a byte: an API server that hangs.
    Tls,
}

/// A stalled cluster at `https://<addr>`; it lives as long as the test
/// process.
pub struct Stalled {
    /// Where it listens.
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

/// The test CA and the listener's certificate and key, made once per test
/// process with openssl (as testenv makes the API servers' certificates).
struct Pki {
    ca_pem: Vec<u8>,
    server: Arc<rustls::ServerConfig>,
}

fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir: PathBuf = std::env::temp_dir().join(testenv::unique_name("stalled-pki"));
        std::fs::create_dir_all(&dir).unwrap();
        let d = |f: &str| dir.join(f).to_string_lossy().into_owned();
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        let steps: [&[&str]; 3] = [
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=e2e-stalled-ca",
                "-keyout",
                &d("ca.key"),
                "-out",
                &d("ca.crt"),
            ],
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=stalled",
                "-keyout",
                &d("server.key"),
                "-out",
                &d("server.csr"),
            ],
            &[
                "x509",
                "-req",
                "-in",
                &d("server.csr"),
                "-CA",
                &d("ca.crt"),
                "-CAkey",
                &d("ca.key"),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &d("san.ext"),
                "-out",
                &d("server.crt"),
            ],
        ];
        for args in steps {
            let out = Command::new("openssl").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let ca_pem = std::fs::read(dir.join("ca.crt")).unwrap();
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(dir.join("server.crt"))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
        let server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        Pki {
            ca_pem,
            server: Arc::new(server),
        }
    })
}

impl Stalled {
    /// Starts a stalled listener on a free loopback port.
    pub fn start(mode: Mode) -> Self {
        Self::start_on([127, 0, 0, 1].into(), mode)
    }

    /// Starts a stalled listener on a free port of `ip` (the node's host
    /// address, for pods to reach; [`Mode::Tls`]'s certificate is for
    /// 127.0.0.1 only).
    pub fn start_on(ip: std::net::IpAddr, mode: Mode) -> Self {
        let tls = (mode == Mode::Tls).then(|| pki().server.clone());
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        // Connections are kept open (never answered, never closed) here.
        let held: Arc<Mutex<Vec<Box<dyn Send>>>> = Arc::default();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                match mode {
                    Mode::Tcp => held.lock().unwrap().push(Box::new(stream)),
                    Mode::Tls => {
                        let Some(tls) = tls.clone() else { continue };
                        let held = held.clone();
                        std::thread::spawn(move || handshake_then_hang(stream, tls, &held));
                    }
                }
            }
        });
        Self { addr, accepted }
    }

    /// How many TCP connections it accepted: proof that something tried.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// A kubeconfig for it with inline material only (server,
    /// certificate-authority-data, token).
    pub fn kubeconfig(&self) -> String {
        let ca = serde_json::to_value(k8s_openapi::ByteString(pki().ca_pem.clone())).unwrap();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stalled\n  cluster:\n    server: https://{}\n    certificate-authority-data: {}\ncontexts:\n- name: stalled\n  context:\n    cluster: stalled\n    user: stalled\ncurrent-context: stalled\nusers:\n- name: stalled\n  user:\n    token: e2e-stalled-token\n",
            self.addr,
            ca.as_str().unwrap()
        )
    }
}

fn handshake_then_hang(
    mut stream: TcpStream,
    tls: Arc<rustls::ServerConfig>,
    held: &Mutex<Vec<Box<dyn Send>>>,
) {
    let Ok(mut conn) = rustls::ServerConnection::new(tls) else {
        return;
    };
    while conn.is_handshaking() {
        if conn.complete_io(&mut stream).is_err() {
            return;
        }
    }
    // Flush what the handshake left to send (e.g. session tickets).
    while conn.wants_write() {
        if conn.write_tls(&mut stream).is_err() {
            return;
        }
    }
    held.lock().unwrap().push(Box::new((conn, stream)));
}
