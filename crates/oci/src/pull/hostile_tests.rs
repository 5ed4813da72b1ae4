//! The fetcher against hostile registries: real listeners on loopback
//! ([`crate::test_server`]) that challenge, redirect, and answer what no
//! registry should.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use super::*;
use crate::{
    Config, Image, LayerBuilder,
    test_server::{Reply, Seen, Server},
    xpkg::{BASE_ANNOTATION, PACKAGE_FILE},
};

/// The CA that signed the certificate [`https`] serves (for 127.0.0.1 and
/// localhost).
const CA: &[u8] = include_bytes!("../testdata/ca.crt");

/// A scripted server, plain HTTP on 127.0.0.1.
fn http() -> Server {
    Server::http(std::net::Ipv4Addr::LOCALHOST.into()).unwrap()
}

/// A scripted server, HTTPS on 127.0.0.1 with a certificate [`CA`] signed.
fn https() -> Server {
    Server::https(
        std::net::Ipv4Addr::LOCALHOST.into(),
        include_bytes!("../testdata/server.crt"),
        include_bytes!("../testdata/server.key"),
    )
    .unwrap()
}

const META: &str =
    "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: provider-test\n";

fn basic() -> Auth {
    Auth::Basic {
        username: "robot".into(),
        password: "pull-secret".into(),
    }
}

/// `Basic base64(robot:pull-secret)`.
const BASIC: &str = "Basic cm9ib3Q6cHVsbC1zZWNyZXQ=";

fn package(meta: &str) -> Image {
    let layer = LayerBuilder::new()
        .file(PACKAGE_FILE, 0o644, meta.as_bytes().to_vec())
        .build()
        .unwrap()
        .annotate(BASE_ANNOTATION.0, BASE_ANNOTATION.1);
    Image::new(Config::default()).layer(layer)
}

/// Serves `image` as `pkg/x` (tag v1 and its digest), each answer only
/// when `allowed` says the request may have it (else a 401 with
/// `challenge`). Returns the manifest digest.
fn serve(
    server: &Server,
    image: &Image,
    challenge: Option<String>,
    allowed: fn(&Seen) -> bool,
) -> Digest {
    let s = image.serialize().unwrap();
    if let Some(c) = challenge.clone() {
        // Where clients that authenticate first (pushes) ask.
        server.route("/v2/", move |_| {
            Reply::new(401).header("WWW-Authenticate", &c)
        });
    }
    let guarded = move |body: Vec<u8>| {
        let challenge = challenge.clone();
        move |r: &Seen| match (&challenge, allowed(r)) {
            (Some(c), false) => Reply::new(401).header("WWW-Authenticate", c),
            _ => Reply::new(200).body(body.clone()),
        }
    };
    server.route("/v2/pkg/x/manifests/v1", guarded(s.manifest.clone()));
    server.route(
        &format!("/v2/pkg/x/manifests/{}", s.digest),
        guarded(s.manifest.clone()),
    );
    for layer in image.layers() {
        server.route(
            &format!("/v2/pkg/x/blobs/{}", layer.digest()),
            guarded(layer.blob().to_vec()),
        );
    }
    s.digest
}

#[test]
fn a_layer_is_downloaded_into_the_cache_directory_not_tmp() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache/xpkg");
    let fetcher = Fetcher::new(cache.clone(), 1 << 20);
    let file = fetcher.temp_file().unwrap();
    use std::os::fd::AsRawFd as _;
    let at = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
    assert!(at.starts_with(&cache), "{}", at.display());
}

#[tokio::test]
async fn a_package_is_pulled_into_a_cache_directory_made_for_it() {
    let server = http();
    let digest = serve(&server, &package(META), None, |_| true);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache/xpkg");
    let fetcher = Fetcher::new(cache.clone(), 1 << 20).with_tls(&Tls::PlainHttp);
    let reference = format!("{}/pkg/x:v1", server.host());
    assert_eq!(
        fetcher.resolve(&reference, &Auth::Anonymous).await.unwrap(),
        digest
    );
    let p = fetcher
        .fetch::<Contents>(&reference, &digest, &Auth::Anonymous)
        .await
        .unwrap();
    assert_eq!(p.contents.meta.name, "provider-test");
    assert!(
        cache
            .join(format!("{}.package.cache", digest.hex()))
            .exists()
    );
}

#[tokio::test]
async fn a_pulled_package_is_kept_as_what_was_parsed_and_read_back_alike() {
    let server = http();
    let yaml = format!(
        "{META}spec:\n  dependsOn:\n  - provider: xpkg.example.org/dep\n    version: \">=v1.0.0\"\n---\n\
         apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.org\n\
         spec:\n  group: example.org\n  names: {{kind: Thing, plural: things}}\n---\n\
         apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: things\nwebhooks: []\n"
    );
    let image = package(&yaml);
    let digest = serve(&server, &image, None, |_| true);
    let dir = tempfile::tempdir().unwrap();
    let fetcher = Fetcher::new(dir.path().to_path_buf(), 1 << 20).with_tls(&Tls::PlainHttp);
    let reference = format!("{}/pkg/x:v1", server.host());
    let pulled = fetcher
        .fetch::<Contents>(&reference, &digest, &Auth::Anonymous)
        .await
        .unwrap();
    assert!(pulled.took.pull.is_some());
    // The cache keeps what was parsed, not the YAML.
    let (_, files) = fetcher.cache.get("package", &digest).unwrap();
    assert_eq!(
        files.keys().map(String::as_str).collect::<Vec<_>>(),
        [crate::xpkg::KEPT_FILE]
    );
    // Read back without the registry (which now fails everything), alike.
    server.route(&format!("/v2/pkg/x/manifests/{digest}"), |_| {
        Reply::new(500)
    });
    for layer in image.layers() {
        server.route(&format!("/v2/pkg/x/blobs/{}", layer.digest()), |_| {
            Reply::new(500)
        });
    }
    let hit = fetcher
        .fetch::<Contents>(&reference, &digest, &Auth::Anonymous)
        .await
        .unwrap();
    assert_eq!(hit.took.pull, None);
    assert_eq!(hit.contents, pulled.contents);
    assert_eq!(hit.contents.meta.depends_on.len(), 1);
    assert_eq!(
        (hit.contents.objects.len(), hit.contents.webhooks.len()),
        (1, 1)
    );
}

#[tokio::test]
async fn an_unqualified_reference_is_refused_without_asking_any_registry() {
    let fetcher = Fetcher::new(std::env::temp_dir(), 0).with_tls(&Tls::System);
    let e = fetcher
        .resolve("crossplane-contrib/provider-nop:v0.4.0", &Auth::Anonymous)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Reference { .. }), "{e:?}");
    assert!(
        e.to_string()
            .ends_with("e.g. xpkg.crossplane.io/crossplane-contrib/provider-nop:v0.4.0"),
        "{e}"
    );
    assert!(!e.is_transient());
}

#[tokio::test]
async fn a_token_service_on_another_host_gets_no_credentials_unless_allowed() {
    let (registry, tokens) = (http(), http());
    // "localhost" is another host than "127.0.0.1", as far as names go.
    let realm = format!("http://localhost:{}/token", tokens.addr.port());
    let digest = serve(
        &registry,
        &package(META),
        Some(format!("Bearer realm=\"{realm}\",service=\"reg\"")),
        |r| r.header("authorization") == Some("Bearer t0ken"),
    );
    tokens.route("/token", |_| Reply::new(200).body(r#"{"token":"t0ken"}"#));
    let reference = format!("{}/pkg/x:v1", registry.host());
    let fetcher = Fetcher::new(std::env::temp_dir(), 0).with_tls(&Tls::PlainHttp);
    let e = fetcher.resolve(&reference, &basic()).await.unwrap_err();
    assert!(
        matches!(e, Error::Untrusted { .. }) && !e.is_transient(),
        "{e:?}"
    );
    let host = format!("localhost:{}", tokens.addr.port());
    assert_eq!(
        e.to_string(),
        format!(
            "registry {}: its token service (WWW-Authenticate realm {realm}) is on another \
             host, {host}: the registry's credentials go only to the registry's own host, so \
             none were sent; if {host} is this registry's token service, the operator must \
             allow that realm host",
            registry.host()
        )
    );
    assert_eq!(tokens.connections(), 0, "nothing was sent there");
    // Allowed by the operator: the credentials go there, once.
    let fetcher = fetcher.with_policy(RegistryPolicy {
        realm_hosts: vec![host],
        ..RegistryPolicy::default()
    });
    let got = fetcher.resolve(&reference, &basic()).await.unwrap();
    assert_eq!(got, digest);
    let asked = tokens.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].header("authorization"), Some(BASIC));
    assert!(
        asked[0].path.contains("scope=repository%3Apkg%2Fx%3Apull"),
        "{}",
        asked[0].path
    );
    // Anonymous reads may use any token service: nothing to leak.
    let anonymous = Fetcher::new(std::env::temp_dir(), 0).with_tls(&Tls::PlainHttp);
    assert_eq!(
        anonymous
            .resolve(&reference, &Auth::Anonymous)
            .await
            .unwrap(),
        digest
    );
    assert_eq!(tokens.requests()[1].header("authorization"), None);
}

#[tokio::test]
async fn an_https_registry_sends_no_credentials_to_a_plain_http_token_service() {
    let (registry, tokens) = (https(), http());
    let realm = format!("http://127.0.0.1:{}/token", tokens.addr.port());
    serve(
        &registry,
        &package(META),
        Some(format!("Bearer realm=\"{realm}\"")),
        |_| false,
    );
    let fetcher = Fetcher::new(std::env::temp_dir(), 0)
        .with_tls(&Tls::Ca(CA.to_vec()))
        .with_policy(RegistryPolicy {
            realm_hosts: vec!["127.0.0.1".to_owned()],
            ..RegistryPolicy::default()
        });
    let reference = format!("{}/pkg/x:v1", registry.host());
    let e = fetcher
        .resolve(&reference, &basic())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("realm {realm}) is plain HTTP"))
            && e.ends_with("or the operator must allow this registry over plain HTTP"),
        "{e}"
    );
    assert_eq!(tokens.connections(), 0);
}

#[tokio::test]
async fn a_hostile_token_cannot_panic_the_process() {
    let registry = http();
    let realm = format!("http://{}/token", registry.host());
    serve(
        &registry,
        &package(META),
        Some(format!("Bearer realm=\"{realm}\"")),
        |_| false,
    );
    registry.route("/token", |_| {
        Reply::new(200).body("{\"token\":\"a\\u0001b\"}")
    });
    let reference = format!("{}/pkg/x:v1", registry.host());
    let fetcher = Fetcher::new(std::env::temp_dir(), 0).with_tls(&Tls::PlainHttp);
    let e = fetcher
        .resolve(&reference, &Auth::Anonymous)
        .await
        .unwrap_err();
    assert!(!e.is_transient(), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains(&format!(
            "the token service {realm} of registry {}",
            registry.host()
        )) && e.ends_with(
            "answered a token that is not a valid HTTP header value (control \
                            characters, spaces, or over 16384 bytes)"
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_hostile_token_is_refused_by_a_push() {
    // A token that is not a header value is refused before it is sent
    // (oci-client 0.18, which pushes used to go through, panicked on it).
    let registry = http();
    let realm = format!("http://{}/token", registry.host());
    let challenge = format!("Bearer realm=\"{realm}\"");
    registry.route("/v2/", move |_| {
        Reply::new(401).header("WWW-Authenticate", &challenge)
    });
    registry.route("/token", |_| {
        Reply::new(200).body("{\"token\":\"a\\u0001b\"}")
    });
    let reference = format!("{}/pkg/x:v1", registry.host());
    let e = package(META)
        .push(&reference, &Auth::Anonymous, &Tls::PlainHttp)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Push {
                step: "authenticating",
                ..
            }
        ),
        "{e:?}"
    );
    let source = std::error::Error::source(&e).unwrap().to_string();
    assert!(
        source.contains(&format!(
            "the token service {realm} of registry {}",
            registry.host()
        )) && source.contains("a token that is not a valid HTTP header value"),
        "{source}"
    );
    assert!(registry.requests_to("/v2/pkg/x/blobs/uploads/").is_empty());
}

#[tokio::test]
async fn a_redirect_from_https_to_http_is_not_followed() {
    let (registry, plain) = (https(), http());
    // The registry asks for Basic credentials first, as registries do at
    // /v2/, so the redirected request carries them.
    registry.route("/v2/", |r| match r.header("authorization") {
        Some(_) => Reply::new(200),
        None => Reply::new(401).header("WWW-Authenticate", "Basic realm=\"reg\""),
    });
    let to = format!("http://{}/v2/pkg/x/manifests/v1", plain.host());
    registry.route("/v2/pkg/x/manifests/v1", move |_| {
        Reply::new(302).header("Location", &to)
    });
    let reference = format!("{}/pkg/x:v1", registry.host());
    let e = Fetcher::new(std::env::temp_dir(), 0)
        .with_tls(&Tls::Ca(CA.to_vec()))
        .resolve(&reference, &basic())
        .await
        .unwrap_err();
    let manifest = registry.requests_to("/v2/pkg/x/manifests/v1");
    assert_eq!(manifest.len(), 1);
    assert_eq!(manifest[0].header("authorization"), Some(BASIC));
    assert!(!e.is_transient(), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "failed to read {reference} from its registry: reading the manifest: it \
             redirected from https to plain http (to 127.0.0.1); a redirect to plain HTTP is \
             not followed"
        )
    );
    assert_eq!(plain.connections(), 0);
}

#[tokio::test]
async fn credentials_do_not_follow_a_redirect_to_another_host() {
    let (registry, cdn) = (http(), http());
    let image = package(META);
    let s = image.serialize().unwrap();
    let manifest = s.manifest.clone();
    cdn.route("/m", move |_| Reply::new(200).body(manifest.clone()));
    let to = format!("http://localhost:{}/m", cdn.addr.port());
    registry.route("/v2/pkg/x/manifests/v1", move |r| {
        if r.header("authorization") == Some(BASIC) {
            Reply::new(307).header("Location", &to)
        } else {
            Reply::new(401).header("WWW-Authenticate", "Basic realm=\"reg\"")
        }
    });
    let reference = format!("{}/pkg/x:v1", registry.host());
    let got = Fetcher::new(std::env::temp_dir(), 0)
        .with_tls(&Tls::PlainHttp)
        .resolve(&reference, &basic())
        .await
        .unwrap();
    assert_eq!(got, s.digest);
    let seen = cdn.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), None, "{seen:?}");
}

#[tokio::test]
async fn registry_text_in_errors_is_sanitized_and_capped() {
    let registry = http();
    let body: Arc<Vec<u8>> = Arc::new("\u{1b}[2J<h1>down</h1>\r\n".repeat(1 << 16).into_bytes());
    assert!(body.len() > 1 << 20);
    registry.route("/v2/pkg/x/manifests/v1", move |_| {
        Reply::new(503).body(body.as_slice())
    });
    let reference = format!("{}/pkg/x:v1", registry.host());
    let e = Fetcher::new(std::env::temp_dir(), 0)
        .with_tls(&Tls::PlainHttp)
        .resolve(&reference, &Auth::Anonymous)
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    let all = runtime_error_chain(&e);
    assert!(all.len() < 700, "{} chars: {all}", all.len());
    assert!(!all.chars().any(char::is_control), "{all:?}");
    assert!(
        all.contains("HTTP 503 Service Unavailable: [2J<h1>down</h1> [2J"),
        "{all}"
    );
}

/// The error and its causes on one line, as the controllers report
/// them.
fn runtime_error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

#[tokio::test]
async fn a_manifest_over_the_bound_is_refused() {
    let registry = http();
    registry.route("/v2/pkg/x/manifests/v1", |_| {
        Reply::new(200).body(vec![b' '; 5 << 20])
    });
    let reference = format!("{}/pkg/x:v1", registry.host());
    let e = Fetcher::new(std::env::temp_dir(), 0)
        .with_tls(&Tls::PlainHttp)
        .resolve(&reference, &Auth::Anonymous)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "package {reference}, layer manifest: the manifest is over 4194304 bytes; at \
             most 4194304 are read"
        )
    );
}

#[tokio::test]
async fn a_layer_of_zeros_from_a_registry_is_refused_naming_the_bound() {
    let registry = http();
    let layer = LayerBuilder::new()
        .compression(1)
        .file("zeros.bin", 0o644, vec![0u8; 40 << 20])
        .file(PACKAGE_FILE, 0o644, META.as_bytes().to_vec())
        .build()
        .unwrap()
        .annotate(BASE_ANNOTATION.0, BASE_ANNOTATION.1);
    let digest = serve(
        &registry,
        &Image::new(Config::default()).layer(layer),
        None,
        |_| true,
    );
    let dir = tempfile::tempdir().unwrap();
    let reference = format!("{}/pkg/x:v1", registry.host());
    let e = Fetcher::new(dir.path().to_path_buf(), 1 << 20)
        .with_tls(&Tls::PlainHttp)
        .fetch::<Contents>(&reference, &digest, &Auth::Anonymous)
        .await
        .unwrap_err();
    assert!(!e.is_transient(), "{e:?}");
    assert!(
        e.to_string()
            .contains("the layer is over the bound on the compression ratio (100 times its"),
        "{e}"
    );
}
