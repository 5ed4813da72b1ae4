//! Image references: the one place they are parsed. A package (or a
//! dependency) is always named fully qualified, registry host first: a
//! reference whose first path segment is not a host (has no '.' or ':' and
//! is not `localhost`) is refused, never taken to mean docker.io.
//!
//! The grammar is distribution's (Docker's), checked here by hand rather
//! than by oci-spec's parser: that one compiles a Unicode regular
//! expression of about 8 MiB on first use and keeps a search cache of up to
//! a MiB for each thread that ever parsed at once, so a controller that
//! parses references while busy kept megabytes that depended on how busy
//! it had been. A reference is a short ASCII string; reading it costs its
//! own bytes.

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
    by_grammar(reference).map_err(|reason| refused(text(&reason)))
}

/// The longest repository path (Docker Hub's `library/` included).
const REPOSITORY_MAX: usize = 255;

/// Parses any reference by distribution's grammar
/// (`[host[:port]/]path[:tag][@digest]`), Docker's short forms as Docker
/// reads them (`redis` is `docker.io/library/redis:latest`): a name
/// without a tag or digest means `latest`. `Err` says what is wrong.
pub(crate) fn by_grammar(reference: &str) -> Result<Reference, String> {
    let (named, digest) = match reference.split_once('@') {
        Some((named, digest)) => (named, Some(checked_digest(digest)?)),
        None => (reference, None),
    };
    let (name, tag) = split_tag(named);
    if let Some(tag) = tag
        && !is_tag(tag)
    {
        return Err(format!(
            "the tag {tag:?} is not a tag: up to 128 of A-Z a-z 0-9 _ . -, not starting with . or -"
        ));
    }
    if name.is_empty() {
        return Err("it names no repository".to_owned());
    }
    let (registry, path) = match name.split_once('/') {
        Some((first, rest)) if is_host(first) => {
            // A host-like first segment is the registry when it reads as
            // one; distribution also takes one that reads only as a path
            // segment (`my_registry.example`).
            if !is_domain(first) && !is_path_component(first) {
                return Err(format!(
                    "the registry {first:?} is not a host[:port] (letters, digits, - and . ; a port of digits)"
                ));
            }
            (first, rest)
        }
        _ => ("docker.io", name),
    };
    if let Some(bad) = path.split('/').find(|c| !is_path_component(c)) {
        return Err(format!(
            "the repository path segment {bad:?} is not one: lower-case letters and digits, separated by ., _, __ or dashes"
        ));
    }
    let registry = if registry == "index.docker.io" {
        "docker.io"
    } else {
        registry
    };
    let repository = if registry == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path.to_owned()
    };
    if repository.len() > REPOSITORY_MAX {
        return Err(format!(
            "the repository path is {} characters long; at most {REPOSITORY_MAX}",
            repository.len()
        ));
    }
    let registry = registry.to_owned();
    Ok(match (tag, digest) {
        (Some(tag), Some(digest)) => {
            Reference::with_tag_and_digest(registry, repository, tag.to_owned(), digest)
        }
        (Some(tag), None) => Reference::with_tag(registry, repository, tag.to_owned()),
        (None, Some(digest)) => Reference::with_digest(registry, repository, digest),
        (None, None) => Reference::with_tag(registry, repository, "latest".to_owned()),
    })
}

/// A reference without its digest (`[host[:port]/]path[:tag]`) split at
/// its tag: a ':' after the last '/' starts it (one before it is a port).
fn split_tag(named: &str) -> (&str, Option<&str>) {
    let last = named.rfind('/').map_or(0, |slash| slash + 1);
    match named.get(last..).and_then(|segment| segment.find(':')) {
        Some(colon) => {
            let (name, tag) = named.split_at(last + colon);
            (name, tag.strip_prefix(':'))
        }
        None => (named, None),
    }
}

/// `digest` (`algorithm:hex`) if it is a sha256, sha384 or sha512 digest
/// of the right length.
fn checked_digest(digest: &str) -> Result<String, String> {
    let (algorithm, hex) = digest
        .split_once(':')
        .ok_or_else(|| format!("the digest {digest:?} is not algorithm:hex"))?;
    let length = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => {
            return Err(format!(
                "the digest's algorithm {algorithm:?} is not sha256, sha384 or sha512"
            ));
        }
    };
    if hex.len() != length || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "a {algorithm} digest is {length} hexadecimal digits, not {hex:?}"
        ));
    }
    Ok(digest.to_owned())
}

/// A tag: a word character, then up to 127 word characters, '.' or '-'.
fn is_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut bytes = tag.bytes();
    tag.len() <= 128
        && bytes.next().is_some_and(word)
        && bytes.all(|b| word(b) || b == b'.' || b == b'-')
}

/// A registry host: dot-separated labels of letters, digits and inner
/// dashes, then an optional `:port` of digits.
fn is_domain(domain: &str) -> bool {
    let (host, port) = match domain.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (domain, None),
    };
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    host.split('.').all(label)
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// A repository path segment: runs of lower-case letters and digits joined
/// by one '.', one '_', two '_' or any number of '-'.
fn is_path_component(segment: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = segment.as_bytes();
    if !bytes.first().is_some_and(|&b| alnum(b)) || !bytes.last().is_some_and(|&b| alnum(b)) {
        return false;
    }
    segment
        .split(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        .all(|separator| {
            matches!(separator, "" | "." | "_" | "__") || separator.bytes().all(|b| b == b'-')
        })
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
            split_tag(without_digest).0.to_owned()
        }
    }
}

/// The tag a reference names explicitly, if it does (a reference without
/// one is not taken to mean `latest` here).
pub fn tag_of(reference: &str) -> Option<String> {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    split_tag(without_digest)
        .1
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
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

    /// `(registry, repository, tag, digest)` of a parsed reference.
    fn parts(reference: &str) -> Result<(String, String, Option<String>, Option<String>), String> {
        by_grammar(reference).map(|r| {
            (
                r.registry().to_owned(),
                r.repository().to_owned(),
                r.tag().map(str::to_owned),
                r.digest().map(str::to_owned),
            )
        })
    }

    #[test]
    fn references_read_by_distributions_grammar() {
        let sha256 = format!("sha256:{}", "0a".repeat(32));
        let sha512 = format!("sha512:{}", "F".repeat(128));
        let some = |s: &str| Some(s.to_owned());
        for (reference, registry, repository, tag, digest) in [
            ("reg.example/a/b:v1", "reg.example", "a/b", some("v1"), None),
            (
                "reg.example:5000/a/b",
                "reg.example:5000",
                "a/b",
                some("latest"),
                None,
            ),
            ("localhost/x", "localhost", "x", some("latest"), None),
            (
                "10.0.0.1:5000/x/y:v1.2-rc_1",
                "10.0.0.1:5000",
                "x/y",
                some("v1.2-rc_1"),
                None,
            ),
            (
                "Reg-1.Example/a.b_c__d---e/f:_t",
                "Reg-1.Example",
                "a.b_c__d---e/f",
                some("_t"),
                None,
            ),
            (
                "my_registry.example/x",
                "my_registry.example",
                "x",
                some("latest"),
                None,
            ),
            ("redis", "docker.io", "library/redis", some("latest"), None),
            ("redis:7", "docker.io", "library/redis", some("7"), None),
            ("team/app", "docker.io", "team/app", some("latest"), None),
            (
                "index.docker.io/redis",
                "docker.io",
                "library/redis",
                some("latest"),
                None,
            ),
            (
                "docker.io/team/app:v1",
                "docker.io",
                "team/app",
                some("v1"),
                None,
            ),
            (
                "test.com:5000",
                "docker.io",
                "library/test.com",
                some("5000"),
                None,
            ),
        ] {
            assert_eq!(
                parts(reference),
                Ok((registry.to_owned(), repository.to_owned(), tag, digest)),
                "{reference}"
            );
        }
        assert_eq!(
            parts(&format!("reg.example/a@{sha256}")),
            Ok(("reg.example".into(), "a".into(), None, Some(sha256.clone())))
        );
        assert_eq!(
            parts(&format!("reg.example:5000/a:v1@{sha512}")),
            Ok((
                "reg.example:5000".into(),
                "a".into(),
                some("v1"),
                Some(sha512)
            ))
        );
        assert_eq!(
            by_grammar(&format!("reg.example/a:v1@{sha256}"))
                .unwrap()
                .to_string(),
            format!("reg.example/a:v1@{sha256}")
        );
        let long_tag = "t".repeat(128);
        assert!(by_grammar(&format!("reg.example/a:{long_tag}")).is_ok());
        let long_path = format!("reg.example/{}", "a".repeat(255));
        assert!(by_grammar(&long_path).is_ok());
    }

    #[test]
    fn what_is_not_a_reference_says_which_part_is_wrong() {
        let sha256 = "a".repeat(64);
        for (reference, says) in [
            ("", "names no repository"),
            ("reg.example/", "path segment \"\""),
            ("reg.example/A/b", "path segment \"A\""),
            ("reg.example/a//b", "path segment \"\""),
            ("reg.example/a..b", "path segment \"a..b\""),
            ("reg.example/a___b", "path segment"),
            ("reg.example/-a", "path segment"),
            ("reg.example/a-", "path segment"),
            ("reg.example/a.-b", "path segment"),
            ("reg.example/ä", "path segment"),
            ("reg.example:port/a", "registry \"reg.example:port\""),
            ("reg.example:/a", "registry"),
            ("-reg.example/a", "registry"),
            ("reg..example/a", "registry"),
            ("reg.example/a:", "tag \"\""),
            ("reg.example/a:.v1", "tag"),
            ("reg.example/a:v1:v2", "tag"),
            ("reg.example/a:vü", "tag"),
            ("reg.example/a@sha256", "not algorithm:hex"),
            (
                "reg.example/a@md5:00000000000000000000000000000000",
                "not sha256, sha384 or sha512",
            ),
            ("reg.example/a@sha256:abc", "64 hexadecimal digits"),
            ("reg.example/a@sha384:abc", "96 hexadecimal digits"),
        ] {
            let err = by_grammar(reference).unwrap_err();
            assert!(err.contains(says), "{reference:?}: {err}");
        }
        let long_tag = "t".repeat(129);
        assert!(by_grammar(&format!("reg.example/a:{long_tag}")).is_err());
        let long_path = format!("reg.example/{}", "a".repeat(256));
        assert!(
            by_grammar(&long_path)
                .unwrap_err()
                .contains("256 characters")
        );
        assert!(by_grammar(&format!("reg.example/a@sha256:{}", "g".repeat(64))).is_err());
        assert!(by_grammar(&format!("reg.example/a@sha256:{sha256}")).is_ok());
    }

    #[test]
    fn reading_a_reference_costs_its_own_bytes_not_a_compiled_grammar() {
        // jemalloc's count of what this thread allocated: other tests'
        // threads do not move it.
        let allocated = tikv_jemalloc_ctl::thread::allocatedp::read().unwrap();
        let before = allocated.get();
        let parsed: Vec<Reference> = (0..1000)
            .map(|i| parse(&format!("reg{i}.example:5000/team/provider-{i}:v1.{i}.0")).unwrap())
            .collect();
        let per_reference = (allocated.get() - before) / 1000;
        assert_eq!(parsed[999].tag(), Some("v1.999.0"));
        // What a reference's parts cost, and their copies: about 200
        // bytes. A regular expression compiled on first use (oci-spec's
        // is about 8 MiB) would be 8 KiB a reference here.
        assert!(
            per_reference < 1024,
            "reading a reference allocated {per_reference} bytes"
        );
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
