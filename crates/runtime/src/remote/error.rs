//! Why a remote cluster could not be reached from its kubeconfig Secret.

use super::super::kubeconfig::Refusal;

/// Why a remote cluster could not be reached. No message quotes what the
/// Secret holds.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The Secret lacks the kubeconfig key.
    #[error("Secret {secret} has no key {key:?}; put a kubeconfig under that key")]
    MissingKey {
        /// namespace/name of the Secret.
        secret: String,
        /// The expected key.
        key: String,
    },
    /// The kubeconfig was refused: it does not parse, or it asks for more
    /// than inline material.
    #[error("Secret {secret} key {key:?} does not hold a valid kubeconfig")]
    Refused {
        /// namespace/name of the Secret.
        secret: String,
        /// The key.
        key: String,
        /// What is wrong, by field path or YAML position.
        #[source]
        refusal: Refusal,
    },
    /// The kubeconfig passed the checks but no client could be built from
    /// it. The cause is not kept: TLS errors may describe the material.
    #[error(
        "cannot build a client from the kubeconfig in Secret {secret} key {key:?}: check that certificate-authority-data holds the server's CA certificate and that client-key-data is the key of client-certificate-data"
    )]
    Client {
        /// namespace/name of the Secret.
        secret: String,
        /// The key.
        key: String,
    },
}
