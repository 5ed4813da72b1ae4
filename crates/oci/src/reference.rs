//! Image references: the one place they are parsed. A package (or a
//! dependency) is always named fully qualified, registry host first: a
//! reference whose first path segment is not a host (has no '.' or ':' and
//! is not `localhost`) is refused, never taken to mean docker.io.

use oci_spec::distribution::Reference;

use crate::{Error, text::text};

/// How a package is written, for messages.
pub const EXAMPLE: &str = "xpkg.crossplane.io/crossplane-contrib/provider-nop:v0.4.0";

/// Whether `first` (a reference's first path segment) is a registry host.
fn is_host(first: &str) -> bool {
    first.contains('.') || first.contains(':') || first == "localhost"
}

/// Whether `name` (`host[:port]/repository[:tag|@digest]`) starts with a
/// registry host.
pub fn is_qualified(name: &str) -> bool {
    match name.split_once('/') {
        Some((first, rest)) => is_host(first) && !rest.is_empty(),
        None => false,
    }
}

/// Why `name` is not fully qualified, and how to write it.
pub fn unqualified(name: &str) -> String {
    format!(
        "{:?} is not fully qualified: it must start with its registry host (a package is never \
         looked for on docker.io by default), e.g. {EXAMPLE}",
        text(name)
    )
}

/// Parses a fully qualified reference (`host[:port]/repository[:tag]
/// [@digest]`); anything else is [`Error::Reference`] saying how to write
/// it.
pub fn parse(reference: &str) -> Result<Reference, Error> {
    let refused = |reason: String| Error::Reference {
        reference: text(reference),
        reason,
    };
    if !is_qualified(reference) {
        return Err(refused(format!(
            "it does not start with a registry host (a package is never looked for on docker.io \
             by default); write it fully qualified, e.g. {EXAMPLE}"
        )));
    }
    reference
        .parse::<Reference>()
        .map_err(|e| refused(text(&e.to_string())))
}

/// The registry host of a reference (`host[:port]`): its first path
/// segment.
pub fn registry_of(reference: &str) -> String {
    match parse(reference) {
        Ok(r) => r.resolve_registry().to_owned(),
        Err(_) => reference.split('/').next().unwrap_or_default().to_owned(),
    }
}

/// A reference without its tag or digest (`host[:port]/repository`).
pub fn repository_of(reference: &str) -> String {
    match parse(reference) {
        Ok(r) => format!("{}/{}", r.registry(), r.repository()),
        Err(_) => {
            let without_digest = reference.split('@').next().unwrap_or(reference);
            // A ':' after the last '/' starts the tag (one before it is a port).
            match without_digest.rsplit_once('/') {
                Some((head, tail)) => {
                    format!("{head}/{}", tail.split(':').next().unwrap_or(tail))
                }
                None => without_digest
                    .split(':')
                    .next()
                    .unwrap_or(without_digest)
                    .to_owned(),
            }
        }
    }
}

/// The tag a reference names explicitly, if it does (a reference without
/// one is not taken to mean `latest` here).
pub fn tag_of(reference: &str) -> Option<String> {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':')
        .map(|(_, tag)| tag.to_owned())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_a_written_tag_is_a_tag() {
        assert_eq!(
            tag_of("reg.example:5000/a/redis:v0.1.0").as_deref(),
            Some("v0.1.0")
        );
        assert_eq!(tag_of("reg.example:5000/a/redis"), None);
        assert_eq!(tag_of("reg.example:5000/a/redis@sha256:00"), None);
        assert_eq!(tag_of("redis:v1@sha256:00").as_deref(), Some("v1"));
    }

    #[test]
    fn registry_and_repository_of_a_reference() {
        assert_eq!(registry_of("10.0.0.1:5000/x/y:v1"), "10.0.0.1:5000");
        assert_eq!(
            registry_of("registry.example/a/b@sha256:{}"),
            "registry.example"
        );
        assert_eq!(repository_of("10.0.0.1:5000/x/y:v1"), "10.0.0.1:5000/x/y");
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            repository_of(&format!("reg.example/a/b@{digest}")),
            "reg.example/a/b"
        );
        assert_eq!(repository_of("reg.example/a/b"), "reg.example/a/b");
        assert_eq!(
            repository_of("reg.example:5000/a/b"),
            "reg.example:5000/a/b"
        );
        assert_eq!(repository_of("localhost/a"), "localhost/a");
    }

    #[test]
    fn an_unqualified_reference_is_refused_not_resolved_to_docker_io() {
        for name in [
            "crossplane/provider-nop:v0.4.0",
            "provider-nop:v0.4.0",
            "provider-nop",
            "library/x",
            "xpkg.crossplane.io",
        ] {
            let e = parse(name).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("{name:?} is not an image reference"))
                    && e.ends_with(
                        "write it fully qualified, e.g. \
                         xpkg.crossplane.io/crossplane-contrib/provider-nop:v0.4.0"
                    ),
                "{e}"
            );
            assert_ne!(registry_of(name), "index.docker.io");
        }
        for name in [
            "xpkg.crossplane.io/crossplane-contrib/provider-nop:v0.4.0",
            "localhost/x:v1",
            "localhost:5000/x",
            "10.0.0.1:5000/x/y:v1",
            "docker.io/crossplane/provider-nop:v1",
        ] {
            assert!(parse(name).is_ok(), "{name}");
        }
    }
}
