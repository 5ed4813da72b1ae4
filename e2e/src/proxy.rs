//! A loopback TCP proxy owned by a test, between a binary and an API server.
//! It forwards bytes both ways untouched (TLS passes through: the test API
//! servers' certificates cover 127.0.0.1), counts what it forwards, and can
//! be told to cut the binary off: every open connection is closed, and new
//! ones are accepted and never answered, as an API server that hangs.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

/// A running proxy; stops (closing every connection) when dropped.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
    to_client: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to `upstream` on a free loopback port.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (cut, _) = watch::channel(false);
        let to_client = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream,
            cut.clone(),
            to_client.clone(),
        ));
        Self {
            addr,
            cut,
            to_client,
            accept,
        }
    }

    /// Starts a proxy to the API server of the kubeconfig file `kubeconfig`
    /// and writes a copy of that kubeconfig whose server is the proxy
    /// (credentials, CA and impersonation unchanged). Returns both.
    pub async fn in_front_of(kubeconfig: &Path) -> (Self, PathBuf) {
        let text = std::fs::read_to_string(kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
        let mut config: Value = serde_saphyr::from_str(&text).expect("kubeconfig parses");
        let clusters = config["clusters"]
            .as_array_mut()
            .expect("kubeconfig clusters");
        assert_eq!(clusters.len(), 1, "one cluster in {}", kubeconfig.display());
        let server = clusters[0]["cluster"]["server"]
            .as_str()
            .expect("cluster server")
            .to_owned();
        let upstream: SocketAddr = server
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| panic!("server {server} is not https://<ip>:<port>: {e}"));
        let proxy = Self::start(upstream).await;
        clusters[0]["cluster"]["server"] = json!(format!("https://{}", proxy.addr));
        let path =
            std::env::temp_dir().join(format!("{}.kubeconfig", testenv::unique_name("via-proxy")));
        std::fs::write(&path, serde_json::to_string(&config).expect("kubeconfig"))
            .expect("write kubeconfig");
        (proxy, path)
    }

    /// Cuts the clients off: closes every forwarded connection; connections
    /// made from now on are accepted and never answered.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Forwards new connections again (those accepted while cut stay
    /// unanswered, as a hung API server's would).
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    /// Bytes forwarded from the API server to clients so far.
    pub fn bytes_to_clients(&self) -> u64 {
        self.to_client.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut.send_replace(true);
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    cut: watch::Sender<bool>,
    to_client: Arc<AtomicU64>,
) {
    // Connections accepted after the cut: held open, never read or answered
    // (dropped with this task).
    let mut stalled = Vec::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        if *cut.borrow() {
            stalled.push(client);
            continue;
        }
        let cut = cut.subscribe();
        let to_client = to_client.clone();
        tokio::spawn(forward(client, upstream, cut, to_client));
    }
}

/// Forwards one connection until either side closes it or the proxy cuts it.
async fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    mut cut: watch::Receiver<bool>,
    to_client: Arc<AtomicU64>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let none = Arc::new(AtomicU64::new(0));
    let both = async {
        tokio::join!(
            pipe(client_read, server_write, none),
            pipe(server_read, client_write, to_client),
        )
    };
    tokio::select! {
        _ = both => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
    // Both sockets are dropped here: closed.
}

/// Copies `from` to `to`, counting bytes, until `from` ends or either fails.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                count.fetch_add(n as u64, Ordering::SeqCst);
            }
        }
    }
    let _ = to.shutdown().await;
}
