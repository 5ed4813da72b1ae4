//! What a kubeconfig that passed the checks says, and the client
//! configuration built from it field by field.

use std::fmt;

use kube::config::AuthInfo;

/// What a kubeconfig that passed [`super::sanitise`] says, for its current context:
/// inline material only. Its `Debug` shows no credential.
#[derive(Clone)]
pub struct Inline {
    pub(super) server: http::Uri,
    pub(super) ca: Option<Vec<Vec<u8>>>,
    pub(super) tls_server_name: Option<String>,
    pub(super) insecure_skip_tls_verify: bool,
    pub(super) disable_compression: bool,
    pub(super) namespace: Option<String>,
    pub(super) user: User,
}

#[derive(Clone, Default)]
pub(super) struct User {
    pub(super) token: Option<String>,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) client_certificate_data: Option<String>,
    pub(super) client_key_data: Option<String>,
}

impl fmt::Debug for Inline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = &self.user;
        f.debug_struct("Inline")
            .field("server", &self.server)
            .field("ca_certificates", &self.ca.as_ref().map(Vec::len))
            .field("tls_server_name", &self.tls_server_name)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("token", &u.token.as_ref().map(|_| "<redacted>"))
            .field("basic_auth", &u.username.as_ref().map(|_| "<redacted>"))
            .field(
                "client_certificate",
                &u.client_certificate_data.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Inline {
    /// The client configuration: exactly the checked fields, no proxy, no
    /// files, nothing from the environment. Timeouts are kube's defaults;
    /// callers bound them.
    pub fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.server.clone());
        if let Some(ns) = &self.namespace {
            config.default_namespace = ns.clone();
        }
        config.root_cert = self.ca.clone();
        config.root_cert_file = None;
        config.proxy_url = None;
        config.tls_server_name = self.tls_server_name.clone();
        config.accept_invalid_certs = self.insecure_skip_tls_verify;
        config.disable_compression = self.disable_compression;
        let u = &self.user;
        config.auth_info = AuthInfo {
            token: u.token.clone().map(Into::into),
            username: u.username.clone(),
            password: u.password.clone().map(Into::into),
            client_certificate_data: u.client_certificate_data.clone(),
            client_key_data: u.client_key_data.clone().map(Into::into),
            ..AuthInfo::default()
        };
        config
    }

    /// Whether the kubeconfig turned off verification of the server's
    /// certificate (only possible with [`super::ALLOW_INSECURE_FLAG`]).
    pub fn insecure_skip_tls_verify(&self) -> bool {
        self.insecure_skip_tls_verify
    }
}
