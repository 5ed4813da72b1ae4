//! A hostile registry for end-to-end tests: [`oci::test_server`] (an HTTP
//! or HTTPS server answering each path with what the test scripted, and
//! recording every request and connection) on an address of the test's
//! choosing — the node's host IP, so the package-manager pod reaches it.
//!
//! HTTPS uses a certificate of testenv's CA ([`Hostile::https_testenv`]
//! takes `ControlPlane::serving_tls()`, valid for 127.0.0.1 and the node's
//! host IP), which the package manager trusts through its CA bundle.
//!
//! Everything else (`host`, `url`, `script`, `route`, `requests`,
//! `requests_to`, `saw_authorization`, `connections`, `addr`) is
//! [`Server`]'s, through `Deref`.

use std::{net::IpAddr, ops::Deref};

use anyhow::Context as _;
pub use oci::test_server::{Reply, Seen, Server};

/// A running hostile server; stopped when dropped.
pub struct Hostile(Server);

impl Hostile {
    /// Plain HTTP on `ip` (a free port).
    pub fn http(ip: IpAddr) -> anyhow::Result<Self> {
        Server::http(ip).map(Self)
    }

    /// HTTPS on `ip` (a free port) with the PEM certificate chain and key.
    pub fn https(ip: IpAddr, cert_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<Self> {
        Server::https(ip, cert_pem, key_pem).map(Self)
    }

    /// HTTPS on `ip` with testenv's serving certificate (valid for
    /// 127.0.0.1 and the node's host IP; its CA is `tls.ca`).
    pub fn https_testenv(ip: IpAddr, tls: &testenv::ServingTls) -> anyhow::Result<Self> {
        let cert = std::fs::read(&tls.cert).with_context(|| tls.cert.display().to_string())?;
        let key = std::fs::read(&tls.key).with_context(|| tls.key.display().to_string())?;
        Self::https(ip, &cert, &key)
    }
}

impl Deref for Hostile {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_server_is_the_oci_test_server_on_the_given_address() {
        let h = Hostile::http(IpAddr::from([127, 0, 0, 1])).unwrap();
        h.script("/v2/", Reply::basic_challenge());
        assert_eq!(h.host(), h.addr.to_string());
        assert_eq!(h.url("/v2/"), format!("http://{}/v2/", h.addr));
        assert!(h.requests().is_empty() && !h.saw_authorization());
        assert_eq!(h.connections(), 0);
    }
}
