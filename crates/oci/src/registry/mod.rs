//! The registry client that pushes and pulls share: who the registry sees
//! ([`Auth`]), how the connection is secured ([`Tls`]), how long a request
//! may wait ([`TIMEOUT`]), and the conversation itself.
//!
//! Pulls read from a registry (the OCI distribution API's GETs: manifests,
//! blobs, tag lists, the catalog) and pushes write to it (`crate::push`:
//! HEAD, POST and PUT of blobs, PUT of manifests), with everything it
//! answers treated as data (an upload's `Location` included), written on
//! reqwest rather than oci-client because oci-client cannot be told where
//! credentials may go: it sends a pull secret's Basic credentials to
//! whatever token service (`WWW-Authenticate: Bearer realm=`) the registry
//! names, on any host and in the clear, follows redirects from https to
//! http, reads answers of any size, and panics on a token that is not a
//! header value. Here:
//!
//! - credentials go only to the registry's own host: requests carry them
//!   only when addressed to it, reqwest drops them on a redirect to another
//!   host, scheme or port, and a redirect from https to http is not
//!   followed at all ([`http`]);
//! - a token service on another host, or over plain HTTP, gets no
//!   credentials unless the operator allowed it ([`RegistryPolicy`]); it is
//!   refused with [`crate::Error::Untrusted`] naming the registry and the
//!   realm ([`token`]);
//! - a token is checked before it becomes a header; answers are read up to
//!   a bound; registry text reaches an error only sanitized and capped
//!   ([`crate::text`]).
//!
//! [`session`] is one conversation (a manifest, a blob, an upload), [`pages`] reads
//! paginated lists (tags, the catalog), and [`docker_config`] finds a pull
//! secret's credentials for a registry.

use std::fmt;

mod docker_config;
pub(crate) mod http;
pub(crate) mod pages;
mod policy;
pub(crate) mod session;
pub(crate) mod token;

pub use docker_config::auth_from_docker_config;
pub use policy::RegistryPolicy;
pub(crate) use session::Session;

/// How long a request waits to connect, and for each read (and a pull's
/// manifest or tag list request as a whole).
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Who the registry sees pushing or pulling.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Auth {
    /// No credentials.
    #[default]
    Anonymous,
    /// HTTP basic authentication (an htpasswd user, a robot account, a token
    /// as password).
    Basic {
        /// The user name.
        username: String,
        /// The password or token. Never printed (`Debug` redacts it).
        password: String,
    },
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anonymous => f.write_str("Anonymous"),
            Self::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// How the connection to the registry is secured.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Tls {
    /// HTTPS, trusting the system's roots.
    #[default]
    System,
    /// HTTPS, trusting these PEM certificates (e.g. a private CA) as well as
    /// the system's roots.
    Ca(Vec<u8>),
    /// HTTPS without verifying the server's certificate. For throwaway
    /// registries only: anyone on the path can read and change the push.
    InsecureSkipVerify,
    /// Plain HTTP, as a registry on `localhost` without TLS serves.
    PlainHttp,
}

/// reqwest (without a provider of its own) panics unless the process has
/// a default crypto provider: installs ring, the one the workspace enables,
/// unless one is installed already.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An Err means another thread installed one meanwhile: as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
