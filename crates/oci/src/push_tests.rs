//! Pushes against a registry kept in memory by [`crate::test_server`]: a
//! push then a pull of what it pushed, blobs the registry has skipped, and
//! where an upload's `Location` may send the blob (and the credentials).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use super::*;
use crate::{
    Config, LayerBuilder,
    pull::Fetcher,
    test_server::{Reply, Seen, Server},
    xpkg::Contents,
    xpkg::{BASE_ANNOTATION, PACKAGE_FILE},
};

fn http() -> Server {
    Server::http(std::net::Ipv4Addr::LOCALHOST.into()).unwrap()
}

fn package() -> Image {
    let meta = "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: \
                provider-pushed\n";
    let layer = LayerBuilder::new()
        .file(PACKAGE_FILE, 0o644, meta.as_bytes().to_vec())
        .build()
        .unwrap()
        .annotate(BASE_ANNOTATION.0, BASE_ANNOTATION.1);
    Image::new(Config::default()).layer(layer)
}

fn basic() -> Auth {
    Auth::Basic {
        username: "robot".into(),
        password: "push-secret".into(),
    }
}

/// What the registry holds: blobs and manifests (with their media type)
/// by digest or tag.
#[derive(Default)]
struct Held {
    blobs: HashMap<String, Vec<u8>>,
    manifests: HashMap<String, (String, Vec<u8>)>,
}

/// Serves `pkg/x` from memory for `image`'s blobs and manifest: uploads
/// start at `blobs/uploads/` and continue where `location` says (the
/// server routes `/uploads/1` to finishing them). Requests without
/// credentials are challenged for Basic ones when `basic` is set.
fn registry(server: &Server, image: &Image, location: String, basic: bool) -> Arc<Mutex<Held>> {
    let challenge = basic.then(|| ("Basic realm=\"reg\"".to_owned(), None));
    guarded(server, image, location, challenge)
}

/// [`registry`], challenging requests that lack `wanted` (any credentials
/// when None) with `challenge`.
fn guarded(
    server: &Server,
    image: &Image,
    location: String,
    challenge: Option<(String, Option<&'static str>)>,
) -> Arc<Mutex<Held>> {
    let held = Arc::new(Mutex::new(Held::default()));
    let s = image.serialize().unwrap();
    // Leaked (a test's few bytes) so the route closures can copy them.
    let (header, wanted): (Option<&'static str>, _) = match challenge {
        Some((h, w)) => (Some(Box::leak(h.into_boxed_str())), w),
        None => (None, None),
    };
    let guard = move |r: &Seen| {
        header.is_some()
            && match wanted {
                Some(w) => r.header("authorization") != Some(w),
                None => r.header("authorization").is_none(),
            }
    };
    let challenge = move || Reply::new(401).header("WWW-Authenticate", header.unwrap_or_default());
    server.route("/v2/", move |r| {
        if guard(r) {
            challenge()
        } else {
            Reply::new(200)
        }
    });
    let mut digests: Vec<String> = image
        .layers()
        .iter()
        .map(|l| l.digest().to_string())
        .collect();
    digests.push(s.config_digest.to_string());
    for digest in digests {
        let held = held.clone();
        server.route(&format!("/v2/pkg/x/blobs/{digest}"), move |r| {
            if guard(r) {
                return challenge();
            }
            match held.lock().unwrap().blobs.get(&digest) {
                Some(b) => Reply::new(200).body(b.clone()),
                None => Reply::new(404),
            }
        });
    }
    server.route("/v2/pkg/x/blobs/uploads/", move |r| {
        if guard(r) {
            challenge()
        } else {
            Reply::new(202).header("Location", &location)
        }
    });
    let h = held.clone();
    server.route("/uploads/1", move |r| {
        if guard(r) {
            return challenge();
        }
        let digest = r
            .path
            .split_once("digest=")
            .map(|(_, d)| d.split('&').next().unwrap().replace("%3A", ":"))
            .unwrap_or_default();
        if r.method != "PUT" || Digest::of(&r.body).as_str() != digest {
            return Reply::new(400);
        }
        h.lock().unwrap().blobs.insert(digest, r.body.clone());
        Reply::new(201)
    });
    for tag in ["v1".to_owned(), s.digest.to_string()] {
        let held = held.clone();
        server.route(&format!("/v2/pkg/x/manifests/{tag}"), move |r| {
            if guard(r) {
                return challenge();
            }
            let mut held = held.lock().unwrap();
            if r.method == "PUT" {
                let media_type = r.header("content-type").unwrap_or_default().to_owned();
                let m = (media_type, r.body.clone());
                held.manifests
                    .insert(Digest::of(&r.body).to_string(), m.clone());
                held.manifests.insert(tag.clone(), m);
                return Reply::new(201);
            }
            match held.manifests.get(&tag) {
                Some((t, b)) => Reply::new(200).header("Content-Type", t).body(b.clone()),
                None => Reply::new(404),
            }
        });
    }
    held
}

#[tokio::test]
async fn a_pushed_package_is_pulled_back_and_a_second_push_skips_its_blobs() {
    let server = http();
    let image = package();
    let s = image.serialize().unwrap();
    let held = registry(&server, &image, "/uploads/1".to_owned(), false);
    let reference = format!("{}/pkg/x:v1", server.host());
    let tls = Tls::PlainHttp;
    let pushed = image
        .push(&reference, &Auth::Anonymous, &tls)
        .await
        .unwrap();
    let blob_bytes = image.layers()[0].blob().len() + s.config.len();
    assert_eq!(
        pushed,
        Pushed {
            digest: s.digest.clone(),
            uploaded: 2,
            skipped: 0,
            bytes: blob_bytes as u64,
        }
    );
    assert_eq!(Digest::of(&s.manifest), s.digest);
    assert_eq!(
        held.lock().unwrap().manifests.get("v1"),
        Some(&(MANIFEST_MEDIA_TYPE.to_owned(), s.manifest.clone()))
    );
    assert!(!server.saw_authorization());

    let dir = tempfile::tempdir().unwrap();
    let fetcher = Fetcher::new(dir.path().join("cache"), 1 << 20).with_tls(&tls);
    let digest = fetcher.resolve(&reference, &Auth::Anonymous).await.unwrap();
    assert_eq!(digest, s.digest);
    let p = fetcher
        .fetch::<Contents>(&reference, &digest, &Auth::Anonymous)
        .await
        .unwrap();
    assert_eq!(p.contents.meta.name, "provider-pushed");
    assert!(p.took.pull.is_some(), "not cached yet: pulled");

    let uploads = server.requests_to("/v2/pkg/x/blobs/uploads/").len();
    let again = image
        .push(&reference, &Auth::Anonymous, &tls)
        .await
        .unwrap();
    assert_eq!(
        again,
        Pushed {
            digest: s.digest.clone(),
            uploaded: 0,
            skipped: 2,
            bytes: 0,
        }
    );
    assert_eq!(
        server.requests_to("/v2/pkg/x/blobs/uploads/").len(),
        uploads,
        "no upload was started for blobs the registry has"
    );
}

#[tokio::test]
async fn an_upload_continues_at_a_relative_or_same_host_location_with_credentials() {
    for absolute in [false, true] {
        let server = http();
        let image = package();
        let location = if absolute {
            server.url("/uploads/1?_state=abc")
        } else {
            "/uploads/1?_state=abc".to_owned()
        };
        let held = registry(&server, &image, location, true);
        let reference = format!("{}/pkg/x:v1", server.host());
        let pushed = image
            .push(&reference, &basic(), &Tls::PlainHttp)
            .await
            .unwrap();
        assert_eq!((pushed.uploaded, pushed.skipped), (2, 0));
        let puts = server.requests_to("/uploads/1");
        assert_eq!(puts.len(), 2, "one request per blob");
        for put in &puts {
            assert_eq!(put.method, "PUT");
            assert!(
                put.path.starts_with("/uploads/1?_state=abc&digest=sha256"),
                "{}",
                put.path
            );
            assert_eq!(
                put.header("authorization"),
                Some("Basic cm9ib3Q6cHVzaC1zZWNyZXQ=")
            );
            assert_eq!(put.header("content-type"), Some("application/octet-stream"));
        }
        assert_eq!(held.lock().unwrap().blobs.len(), 2);
        let manifest = server.requests_to("/v2/pkg/x/manifests/v1");
        assert_eq!(manifest.last().unwrap().method, "PUT");
    }
}

#[tokio::test]
async fn an_upload_location_on_another_host_is_refused_and_gets_nothing() {
    let (server, elsewhere) = (http(), http());
    let image = package();
    registry(&server, &image, elsewhere.url("/uploads/1"), true);
    elsewhere.route("/uploads/1", |_| Reply::new(201));
    let reference = format!("{}/pkg/x:v1", server.host());
    let e = image
        .push(&reference, &basic(), &Tls::PlainHttp)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Push {
                step: "uploading a blob",
                ..
            }
        ),
        "{e:?}"
    );
    let source = std::error::Error::source(&e).unwrap().to_string();
    assert!(
        source.contains("named an upload location on another host, port or scheme")
            && source.contains(&elsewhere.url("/uploads/1"))
            && !source.contains("push-secret"),
        "{source}"
    );
    assert_eq!(elsewhere.connections(), 0);
    assert!(server.requests_to("/v2/pkg/x/manifests/v1").is_empty());
}

#[tokio::test]
async fn a_registry_that_wants_credentials_is_unauthorized() {
    let server = http();
    let image = package();
    registry(&server, &image, "/uploads/1".to_owned(), true);
    let reference = format!("{}/pkg/x:v1", server.host());
    let e = image
        .push(&reference, &Auth::Anonymous, &Tls::PlainHttp)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unauthorized {
                with_credentials: false,
                ..
            }
        ),
        "{e:?}"
    );
    let e = push_index(&reference, &[], &Auth::Anonymous, &Tls::PlainHttp)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e:?}");
}

#[tokio::test]
async fn an_index_is_put_byte_for_byte() {
    let server = http();
    let image = package();
    let held = registry(&server, &image, "/uploads/1".to_owned(), false);
    let reference = format!("{}/pkg/x:v1", server.host());
    let platform = Platform {
        digest: Digest::of(b"m"),
        size: 1,
        os: "linux".into(),
        architecture: "amd64".into(),
    };
    let digest = push_index(&reference, &[platform], &Auth::Anonymous, &Tls::PlainHttp)
        .await
        .unwrap();
    let held = held.lock().unwrap();
    let (media_type, body) = held.manifests.get("v1").unwrap();
    assert_eq!(media_type, INDEX_MEDIA_TYPE);
    assert_eq!(Digest::of(body), digest);
}

#[tokio::test]
async fn a_push_sends_credentials_to_a_token_service_on_another_host_only_when_allowed() {
    let (server, tokens) = (http(), http());
    // "localhost" is another host than "127.0.0.1", as far as names go.
    let realm = format!("http://localhost:{}/token", tokens.addr.port());
    tokens.route("/token", |_| Reply::new(200).body(r#"{"token":"t0ken"}"#));
    let image = package();
    let held = guarded(
        &server,
        &image,
        "/uploads/1".to_owned(),
        Some((
            format!("Bearer realm=\"{realm}\",service=\"reg\""),
            Some("Bearer t0ken"),
        )),
    );
    let reference = format!("{}/pkg/x:v1", server.host());
    let e = image
        .push(&reference, &basic(), &Tls::PlainHttp)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Untrusted { .. }), "{e:?}");
    assert_eq!(tokens.connections(), 0, "nothing was sent there");
    assert!(held.lock().unwrap().manifests.is_empty());
    let host = format!("localhost:{}", tokens.addr.port());
    let policy = RegistryPolicy {
        realm_hosts: vec![host],
        ..RegistryPolicy::default()
    };
    let pushed = image
        .push_within(&reference, &basic(), &Tls::PlainHttp, &policy)
        .await
        .unwrap();
    assert_eq!(pushed.uploaded, 2);
    assert!(held.lock().unwrap().manifests.contains_key("v1"));
    let asked = tokens.requests();
    assert!(!asked.is_empty());
    assert!(
        asked.iter().all(|t| t
            .header("authorization")
            .is_some_and(|a| a.starts_with("Basic "))),
        "the token service is asked with the registry's credentials"
    );
    assert!(
        asked[0]
            .path
            .contains("scope=repository%3Apkg%2Fx%3Apull%2Cpush"),
        "{}",
        asked[0].path
    );
}
