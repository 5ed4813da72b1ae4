//! A scripted HTTP(S) server on loopback for the unit tests of hostile
//! registries: each path answers what a closure says, every request is
//! recorded (method, path, headers) and connections are counted. One
//! request per connection (`Connection: close`), a thread per connection.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

/// The CA that signed [`SERVER_CERT`] (for 127.0.0.1 and localhost).
pub const CA: &[u8] = include_bytes!("testdata/ca.crt");
const SERVER_CERT: &[u8] = include_bytes!("testdata/server.crt");
const SERVER_KEY: &[u8] = include_bytes!("testdata/server.key");

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// The path and query.
    pub path: String,
    /// Header names lower-cased.
    pub headers: HashMap<String, String>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// An answer.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }
}

type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

struct State {
    routes: Mutex<HashMap<String, Handler>>,
    requests: Mutex<Vec<Request>>,
    connections: AtomicUsize,
    stop: AtomicBool,
}

/// A running server; stops when dropped.
pub struct Server {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl Server {
    /// Plain HTTP on 127.0.0.1.
    pub fn http() -> Self {
        Self::start(None)
    }

    /// HTTPS on 127.0.0.1, with a certificate [`CA`] signed.
    pub fn https() -> Self {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(SERVER_CERT)
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(SERVER_KEY).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        Self::start(Some(Arc::new(config)))
    }

    fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            routes: Mutex::default(),
            requests: Mutex::default(),
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let shared = state.clone();
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
        Self { addr, state }
    }

    /// `scheme://127.0.0.1:port` is not needed by callers; the address as
    /// references write it.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Answers `path` (without the query) with what `handler` says.
    pub fn route(
        &self,
        path: &str,
        handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) {
        self.state
            .routes
            .lock()
            .unwrap()
            .insert(path.to_owned(), Arc::new(handler));
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The requests to `path` (without the query).
    pub fn requests_to_route(&self, path: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.split('?').next() == Some(path))
            .collect()
    }

    /// Connections accepted so far.
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
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
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
    let request = Request {
        method,
        path,
        headers,
    };
    state.requests.lock().unwrap().push(request.clone());
    let route = request.path.split('?').next().unwrap_or_default();
    let handler = state.routes.lock().unwrap().get(route).cloned();
    let response = match handler {
        Some(h) => h(&request),
        None => {
            Response::new(404).body(r#"{"errors":[{"code":"NAME_UNKNOWN","message":"no route"}]}"#)
        }
    };
    let mut head = format!("HTTP/1.1 {} X\r\n", response.status);
    for (k, v) in &response.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        response.body.len()
    ));
    drop(reader);
    let _ = stream.write_all(head.as_bytes());
    if request.method != "HEAD" {
        let _ = stream.write_all(&response.body);
    }
    let _ = stream.flush();
}
