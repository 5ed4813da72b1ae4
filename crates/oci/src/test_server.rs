//! A scripted HTTP(S) server for tests of what a client sends to hostile
//! registries: it listens on an address of the test's choosing (plain HTTP,
//! or HTTPS with a given certificate and key), answers each path with what
//! the test scripted (a fixed [`Reply`] or a closure of the request), and
//! records every request (method, path, headers, body) and every
//! connection, so a test can assert what was sent where: "the token service
//! on the other host saw no Authorization header", "the plain-HTTP listener
//! was never connected to".
//!
//! One request per connection (`Connection: close`), a thread per
//! connection; the server stops when dropped. Unscripted paths answer 404
//! with a distribution error envelope.
//!
//! Test support only: compiled for this crate's unit tests and, for other
//! crates' tests, behind the `test-server` feature (off by default, so the
//! shipped binaries do not carry it).

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Read, Write},
    net::{IpAddr, SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `GET`, `HEAD`, ...
    pub method: String,
    /// The path and query, as sent.
    pub path: String,
    /// The headers, names lower-cased (a repeated header keeps its last
    /// value).
    pub headers: HashMap<String, String>,
    /// How many body bytes came with it.
    pub body_bytes: usize,
    /// The body (up to 64 MiB), for a handler that keeps what was
    /// uploaded.
    pub body: Vec<u8>,
}

impl Seen {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The path without its query.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }
}

/// A scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers, in order (`Content-Length` and `Connection` are added).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// An answer with `status` and no body.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header (sent as given: a test may send anything).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// `status` with a JSON body.
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Self::new(status)
            .header("Content-Type", "application/json")
            .body(value.to_string())
    }

    /// A 307 to `location`.
    pub fn redirect(location: &str) -> Self {
        Self::new(307).header("Location", location)
    }

    /// A 401 asking for a token from `realm` (`WWW-Authenticate: Bearer`).
    pub fn bearer_challenge(realm: &str, service: &str) -> Self {
        Self::new(401).header(
            "WWW-Authenticate",
            &format!("Bearer realm=\"{realm}\",service=\"{service}\""),
        )
    }

    /// A 401 asking for Basic credentials.
    pub fn basic_challenge() -> Self {
        Self::new(401).header("WWW-Authenticate", "Basic realm=\"hostile\"")
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

struct State {
    routes: Mutex<HashMap<String, Handler>>,
    seen: Mutex<Vec<Seen>>,
    connections: AtomicUsize,
    stop: AtomicBool,
}

/// A lock that a panicking handler elsewhere does not make unusable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running server; stopped when dropped.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    tls: bool,
    state: Arc<State>,
}

/// The largest request body read.
const MAX_BODY: usize = 64 * 1024 * 1024;

impl Server {
    /// Plain HTTP on `ip` (a free port).
    pub fn http(ip: IpAddr) -> anyhow::Result<Self> {
        Self::start(ip, None)
    }

    /// HTTPS on `ip` (a free port) with the PEM certificate chain and key.
    pub fn https(ip: IpAddr, cert_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<Self> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<_, _>>()
            .context("the certificate PEM")?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).context("the key PEM")?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
        Self::start(ip, Some(Arc::new(config)))
    }

    fn start(ip: IpAddr, tls: Option<Arc<rustls::ServerConfig>>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((ip, 0)).with_context(|| format!("binding {ip}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            routes: Mutex::default(),
            seen: Mutex::default(),
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let shared = state.clone();
        let is_tls = tls.is_some();
        std::thread::spawn(move || {
            while !shared.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        shared.connections.fetch_add(1, Ordering::SeqCst);
                        let (state, tls) = (shared.clone(), tls.clone());
                        std::thread::spawn(move || serve(stream, tls, &state));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Self {
            addr,
            tls: is_tls,
            state,
        })
    }

    /// `ip:port`, as a registry host in a package reference.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// `http(s)://ip:port{path}`.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// Answers `path` (without query) with `reply`, every time.
    pub fn script(&self, path: &str, reply: Reply) {
        self.route(path, move |_| reply.clone());
    }

    /// Answers `path` (without query) with what `handler` makes of each
    /// request.
    pub fn route(&self, path: &str, handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) {
        lock(&self.state.routes).insert(path.to_owned(), Arc::new(handler));
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        lock(&self.state.seen).clone()
    }

    /// The requests to `path` (without query).
    pub fn requests_to(&self, path: &str) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|s| s.route() == path)
            .collect()
    }

    /// Whether any request carried an Authorization header.
    pub fn saw_authorization(&self) -> bool {
        self.requests()
            .iter()
            .any(|s| s.header("authorization").is_some())
    }

    /// Connections accepted so far (TLS handshakes that failed included).
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(stream: TcpStream, tls: Option<Arc<rustls::ServerConfig>>, state: &State) {
    if stream.set_nonblocking(false).is_err()
        || stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .is_err()
    {
        return;
    }
    match tls {
        Some(config) => {
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            exchange(&mut tls, state);
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
        None => {
            let mut plain = stream;
            exchange(&mut plain, state);
        }
    }
}

fn exchange(stream: &mut (impl Read + Write), state: &State) {
    let mut reader = BufReader::new(&mut *stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0)
        .min(MAX_BODY);
    let mut body = Vec::new();
    let body_bytes = (&mut reader)
        .take(length as u64)
        .read_to_end(&mut body)
        .unwrap_or(0);
    let seen = Seen {
        method,
        path,
        headers,
        body_bytes,
        body,
    };
    lock(&state.seen).push(seen.clone());
    let handler = lock(&state.routes).get(seen.route()).cloned();
    let reply = match handler {
        Some(h) => h(&seen),
        None => Reply::json(
            404,
            &serde_json::json!({"errors": [{"code": "NAME_UNKNOWN", "message": "not scripted"}]}),
        ),
    };
    let mut head = format!("HTTP/1.1 {} Hostile\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    ));
    drop(reader);
    let _ = stream.write_all(head.as_bytes());
    if seen.method != "HEAD" {
        let _ = stream.write_all(&reply.body);
    }
    let _ = stream.flush();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A raw HTTP/1.1 GET; the status line and whole answer.
    fn get(addr: SocketAddr, path: &str, extra: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_scripted_path_answers_and_every_request_is_recorded() {
        let h = Server::http(IpAddr::from([127, 0, 0, 1])).unwrap();
        h.script(
            "/v2/",
            Reply::bearer_challenge("https://elsewhere.example/token", "reg"),
        );
        let answer = get(h.addr, "/v2/?x=1", "Authorization: Basic abc\r\n");
        assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
        assert!(
            answer.contains("WWW-Authenticate: Bearer realm=\"https://elsewhere.example/token\""),
            "{answer}"
        );
        let answer = get(h.addr, "/nowhere", "");
        assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
        assert_eq!(h.connections(), 2);
        let seen = h.requests_to("/v2/");
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].path, "/v2/?x=1");
        assert_eq!(seen[0].header("Authorization"), Some("Basic abc"));
        assert!(h.saw_authorization());
        assert_eq!(h.url("/t"), format!("http://{}/t", h.addr));
    }
}
