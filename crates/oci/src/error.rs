//! Why building, writing, pushing or pulling an image failed: the one
//! error of the crate, and the few ways of making one that every room
//! shares. Imports nothing of the crate, so every room may use it.

use std::path::Path;

/// The cause an error carries: text that a registry, or the way to it,
/// produced, already sanitized and capped ([`crate::RegistryText`]), or a
/// local error.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why building, writing or pushing an image failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A path cannot go into a layer.
    #[error("{path}: {reason}")]
    Path {
        /// The path as given.
        path: String,
        /// Why not.
        reason: &'static str,
    },
    /// Reading a file or directory for a layer failed.
    #[error("failed to read {path}")]
    Read {
        /// What was being read.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Writing the tar of a layer failed.
    #[error("failed to add {path} to a layer")]
    Tar {
        /// The entry being written.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// gzip failed.
    #[error("failed to compress a layer")]
    Compress(#[source] std::io::Error),
    /// Serializing the config or manifest failed.
    #[error("failed to serialize the image config or manifest")]
    Json(#[source] serde_json::Error),
    /// Writing an archive failed.
    #[error("failed to write {path}")]
    Write {
        /// The archive being written.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The image reference does not parse.
    #[error("{reference:?} is not an image reference (host[:port]/repository[:tag]): {reason}")]
    Reference {
        /// The reference as given.
        reference: String,
        /// What the parser said.
        reason: String,
    },
    /// The registry wants credentials, or refused the ones given.
    #[error(
        "the registry {registry} refused the request: {}",
        if *with_credentials {
            "it does not accept these credentials (check the user name and password)"
        } else {
            "it requires credentials (give a user name and password)"
        }
    )]
    Unauthorized {
        /// The registry host.
        registry: String,
        /// Whether credentials were sent.
        with_credentials: bool,
        /// What the registry answered (sanitized and capped).
        #[source]
        source: Cause,
    },
    /// A step of a push failed for another reason (network, TLS, the
    /// registry's answer).
    #[error("failed to push {reference}: {step}")]
    Push {
        /// The reference being pushed.
        reference: String,
        /// The step that failed.
        step: &'static str,
        /// What the client reported (sanitized and capped).
        #[source]
        source: Cause,
    },
    /// A package (or its manifest or a layer) is not what a package must
    /// be.
    #[error("package {reference}, layer {layer}: {fault}")]
    Invalid {
        /// The package reference.
        reference: String,
        /// The layer (digest), or "manifest"/"index".
        layer: String,
        /// What is wrong, and what to fix.
        fault: String,
    },
    /// The registry has no such repository, tag or digest.
    #[error("{reference} does not exist in its registry (check the repository and the tag)")]
    NotFound {
        /// The reference asked for.
        reference: String,
    },
    /// The registry could not be reached: the connection was refused or
    /// timed out, the host is unknown, or TLS failed (e.g. its certificate
    /// is not trusted).
    #[error("failed to read {reference} from its registry {registry}: {reason}")]
    Unreachable {
        /// The reference being read.
        reference: String,
        /// The registry host (`host[:port]`).
        registry: String,
        /// What went wrong, in a few words ("connection refused", "its
        /// certificate is not trusted ...", "no answer within 10s").
        reason: String,
        /// What the client reported (sanitized and capped).
        #[source]
        source: Cause,
    },
    /// The registry answered, but not with what was asked for (an error
    /// status other than 401/403/404, a malformed answer).
    #[error("failed to read {reference} from its registry: {step}: {detail}")]
    Registry {
        /// The reference being read.
        reference: String,
        /// The step that failed.
        step: &'static str,
        /// The registry's answer, in short (sanitized and capped).
        detail: String,
        /// Whether trying again may succeed (5xx answers).
        transient: bool,
        /// What the client reported (sanitized and capped).
        #[source]
        source: Cause,
    },
    /// The registry asked for something the operator has not allowed:
    /// its credentials sent to a token service on another host, or in the
    /// clear. Nothing was sent; trying again changes nothing until the
    /// operator allows it ([`crate::RegistryPolicy`]).
    #[error("registry {registry}: {fault}")]
    Untrusted {
        /// The registry host (`host[:port]`).
        registry: String,
        /// What it asked for, and what the operator can do.
        fault: String,
    },
    /// Code reading a package panicked (a bug, here or in a library, that a
    /// registry's answer or a package's content set off). The process goes
    /// on; the package is not read.
    #[error(
        "failed to read {reference} from its registry {registry}: {step} panicked ({message}); \
         this is a bug, and trying again will not help"
    )]
    Crashed {
        /// The reference being read.
        reference: String,
        /// The registry host (`host[:port]`).
        registry: String,
        /// What was being done.
        step: &'static str,
        /// The panic's message (sanitized and capped).
        message: String,
    },
    /// Fetching or unpacking Debian packages for a base layer failed.
    #[error("{what}: {detail}")]
    Debian {
        /// The step.
        what: String,
        /// The command's error output, or why it could not run.
        detail: String,
    },
}

impl Error {
    /// Whether trying again later may succeed without anyone changing
    /// anything: the registry was unreachable, slow or failing.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. }
                | Self::Registry {
                    transient: true,
                    ..
                }
        )
    }

    pub(crate) fn read(path: &Path, source: std::io::Error) -> Self {
        Self::Read {
            path: path.display().to_string(),
            source,
        }
    }

    /// A package that is not what it must be: `fault` says what, found in
    /// `layer` of `reference`.
    pub(crate) fn invalid(reference: &str, layer: &str, fault: impl Into<String>) -> Self {
        Self::Invalid {
            reference: reference.to_owned(),
            layer: layer.to_owned(),
            fault: fault.into(),
        }
    }

    pub(crate) fn write(path: &Path, source: std::io::Error) -> Self {
        Self::Write {
            path: path.display().to_string(),
            source,
        }
    }
}
