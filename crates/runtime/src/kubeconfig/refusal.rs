//! Why a kubeconfig was refused, and the sentences that say what to put
//! instead. Every message names a field by its path, never its value.

/// Why a kubeconfig was refused. Messages name fields by their path and
/// positions by line and column; they never quote what the Secret holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The bytes are not UTF-8.
    #[error("it is not UTF-8 text (byte {offset} is not): put a kubeconfig there, as YAML")]
    NotUtf8 {
        /// Offset of the first byte that is not UTF-8.
        offset: usize,
    },
    /// Nothing is there.
    #[error("it is empty: put a kubeconfig there")]
    Empty,
    /// The YAML does not parse.
    #[error(
        "it is not one valid YAML document ({position}): put a kubeconfig there (the text is not repeated here, in case it is secret)"
    )]
    Syntax {
        /// "line L, column C", or "position unknown".
        position: String,
    },
    /// The YAML is not a mapping (e.g. a token pasted on its own).
    #[error(
        "it is not a kubeconfig: a kubeconfig is a YAML mapping with clusters, users, contexts and current-context (a token or a certificate on its own is not one)"
    )]
    NotAMapping,
    /// A field that can run a command, read a file, choose a proxy, turn off
    /// TLS verification or impersonate.
    #[error("{field} {reason}")]
    Refused {
        /// Where, e.g. `users[0].user.exec`.
        field: String,
        /// What it would do, and what to put instead.
        reason: &'static str,
    },
    /// A field that is not part of a kubeconfig, or not allowed where it is.
    /// Its name is not repeated: an unknown key may be a pasted secret.
    #[error(
        "{at} has a field that a kubeconfig from a Secret may not have there (its name is not repeated here, in case it is secret); the fields allowed there are: {allowed}"
    )]
    UnknownField {
        /// The mapping that holds it, e.g. `clusters[0].cluster`.
        at: String,
        /// The fields allowed in that mapping.
        allowed: &'static str,
    },
    /// A field has the wrong YAML type.
    #[error("{field} must be {expected}")]
    WrongType {
        /// Where.
        field: String,
        /// What it must be, e.g. "a string (quote it)".
        expected: &'static str,
    },
    /// A field's value is unusable.
    #[error("{field} {problem}")]
    Invalid {
        /// Where.
        field: String,
        /// What is wrong and how to fix it.
        problem: &'static str,
    },
    /// A required field is missing.
    #[error("{field} is missing: {hint}")]
    Missing {
        /// Where.
        field: String,
        /// What to put there.
        hint: &'static str,
    },
    /// A name refers to no entry.
    #[error("{field} names no entry of {list}: add it, or name one that exists")]
    Dangling {
        /// The referring field.
        field: String,
        /// The list searched, e.g. `contexts[]`.
        list: &'static str,
    },
}

pub(super) const EXEC: &str = "runs a command in the controller, which a kubeconfig from a Secret may not do: inline the credential instead (users[].user.token, or client-certificate-data and client-key-data)";
pub(super) const AUTH_PROVIDER: &str = "asks the controller to run an authentication plugin, which a kubeconfig from a Secret may not do: inline the credential instead (users[].user.token, or client-certificate-data and client-key-data)";
pub(super) const TOKEN_FILE: &str = "names a file on the controller's disk, which a kubeconfig from a Secret may not do: inline the token under users[].user.token";
pub(super) const CLIENT_CERTIFICATE: &str = "names a file on the controller's disk, which a kubeconfig from a Secret may not do: inline the certificate, base64-encoded PEM, under users[].user.client-certificate-data";
pub(super) const CLIENT_KEY: &str = "names a file on the controller's disk, which a kubeconfig from a Secret may not do: inline the key, base64-encoded PEM, under users[].user.client-key-data";
pub(super) const CERTIFICATE_AUTHORITY: &str = "names a file on the controller's disk, which a kubeconfig from a Secret may not do: inline the CA certificate, base64-encoded PEM, under clusters[].cluster.certificate-authority-data";
pub(super) const PROXY_URL: &str = "sends the controller's traffic through a proxy, which a kubeconfig from a Secret may not choose: remove it, so the controller connects to server directly";
pub(super) const INSECURE: &str = "turns off verification of the server's certificate: put the server's CA certificate, base64-encoded PEM, under clusters[].cluster.certificate-authority-data instead (an operator may allow this with --allow-insecure-remote-tls)";
pub(super) const IMPERSONATE: &str = "asks to impersonate another identity, which a kubeconfig from a Secret may not do: put the credentials of the identity to act as under users[].user";
pub(super) const PLAIN_HTTP: &str = "is an http:// URL, which would send the credentials unencrypted: use https:// (an operator may allow http:// with --allow-insecure-remote-tls)";

pub(super) const TOP_FIELDS: &str =
    "apiVersion, kind, clusters, users, contexts, current-context, preferences, extensions";
pub(super) const NAMED_CLUSTER_FIELDS: &str = "name, cluster";
pub(super) const CLUSTER_FIELDS: &str = "server, certificate-authority-data, tls-server-name, insecure-skip-tls-verify (false), disable-compression, extensions";
pub(super) const NAMED_USER_FIELDS: &str = "name, user";
pub(super) const USER_FIELDS: &str =
    "token, username, password, client-certificate-data, client-key-data, extensions";
pub(super) const NAMED_CONTEXT_FIELDS: &str = "name, context";
pub(super) const CONTEXT_FIELDS: &str = "cluster, user, namespace, extensions";

/// A field refused by name, with what it would do and what to put instead.
pub(super) fn refused(field: String, reason: &'static str) -> Refusal {
    Refusal::Refused { field, reason }
}
