#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;

use super::*;
use crate::{
    Digest,
    cosign::{BUNDLE_ANNOTATION, signed},
};

/// A keyless signature of an image by cosign in GitHub Actions, logged in
/// Sigstore's public-good Rekor, with public-good's trusted root (the
/// fixture's `provenance` says where each comes from).
struct Fixture {
    v: Value,
    digest: Digest,
    layer: ArtifactLayer,
}

fn fixture() -> Fixture {
    let v: Value = serde_json::from_str(include_str!(
        "../../testdata/cosign/keyless-public-good.json"
    ))
    .unwrap();
    let layer = ArtifactLayer {
        media_type: v["layer"]["mediaType"].as_str().unwrap().to_owned(),
        annotations: serde_json::from_value(v["layer"]["annotations"].clone()).unwrap(),
        body: v["layer"]["payload"].as_str().unwrap().as_bytes().to_vec(),
    };
    Fixture {
        digest: Digest::parse(v["digest"].as_str().unwrap()).unwrap(),
        layer,
        v,
    }
}

impl Fixture {
    fn root(&self, edit: impl FnOnce(&mut Value)) -> TrustedRoot {
        let mut root = self.v["trustedRoot"].clone();
        edit(&mut root);
        TrustedRoot::from_json(root.to_string().as_bytes()).unwrap()
    }

    fn identity(&self) -> Identity {
        Identity::new(
            self.v["issuer"].as_str().unwrap(),
            self.v["identity"].as_str().unwrap(),
            "",
            "",
        )
        .unwrap()
    }

    fn check(
        &self,
        root: &TrustedRoot,
        identities: &[Identity],
        layer: &ArtifactLayer,
    ) -> Result<(), String> {
        let keyless = Keyless {
            root,
            identities,
            ignore_sct: false,
            // Years after the 10-minute certificate expired: the log's
            // signed time is what counts.
            now: 1_900_000_000,
        };
        signed(std::slice::from_ref(layer), &self.digest, &keyless)
    }
}

#[test]
fn a_public_good_signature_verifies_by_its_certificate_sct_and_rekor_entry() {
    let f = fixture();
    let root = f.root(|_| ());
    assert_eq!(f.check(&root, &[f.identity()], &f.layer), Ok(()));
    // By regular expression too (unanchored, as upstream's).
    let pattern = Identity::new(
        "",
        "",
        "^https://token\\.actions\\.githubusercontent\\.com$",
        "^https://github\\.com/salrashid123/",
    )
    .unwrap();
    assert_eq!(f.check(&root, &[pattern], &f.layer), Ok(()));
}

#[test]
fn another_identity_or_issuer_is_refused_naming_the_certificates() {
    let f = fixture();
    let root = f.root(|_| ());
    let other = Identity::new(
        f.v["issuer"].as_str().unwrap(),
        "https://github.com/someone-else/repo/.github/workflows/release.yaml@refs/heads/main",
        "",
        "",
    )
    .unwrap();
    let why = f.check(&root, &[other], &f.layer).unwrap_err();
    assert!(
        why.contains("issued to https://github.com/salrashid123/go-bazel-github-workflow/")
            && why.contains("by https://token.actions.githubusercontent.com"),
        "{why}"
    );
    let issuer = Identity::new("https://accounts.google.com", "", "", ".*").unwrap();
    assert!(f.check(&root, &[issuer], &f.layer).is_err());
}

#[test]
fn a_changed_payload_signature_or_log_entry_does_not_verify() {
    let f = fixture();
    let root = f.root(|_| ());
    let id = [f.identity()];
    // The payload of another image: the log entry is not of it.
    let mut other = f.layer.clone();
    other.body = String::from_utf8(f.layer.body.clone())
        .unwrap()
        .replace("c05263d2", "c05263d3")
        .into_bytes();
    let why = f.check(&root, &id, &other).unwrap_err();
    assert!(
        why.contains("transparency-log entry is of another signature"),
        "{why}"
    );
    // A log entry whose time was moved: its signed timestamp fails.
    let mut moved = f.layer.clone();
    let bundle = moved.annotations.get_mut(BUNDLE_ANNOTATION).unwrap();
    *bundle = bundle.replace(
        "\"integratedTime\":1772216446",
        "\"integratedTime\":1772216447",
    );
    let why = f.check(&root, &id, &moved).unwrap_err();
    assert!(why.contains("signed timestamp does not verify"), "{why}");
    // No certificate, no bundle.
    let mut bare = f.layer.clone();
    bare.annotations.remove(CERTIFICATE_ANNOTATION);
    assert!(
        f.check(&root, &id, &bare)
            .unwrap_err()
            .contains("carries no certificate")
    );
    let mut unlogged = f.layer.clone();
    unlogged.annotations.remove(BUNDLE_ANNOTATION);
    let why = f.check(&root, &id, &unlogged).unwrap_err();
    assert!(why.contains("has no transparency-log entry"), "{why}");
}

#[test]
fn what_the_trusted_root_does_not_list_is_not_trusted() {
    let f = fixture();
    let id = [f.identity()];
    // Without its CT logs the SCT is from an unknown log; without its
    // transparency log the signature is checked as of now, long after the
    // certificate expired.
    let no_ct = f.root(|r| r["ctlogs"] = Value::Array(vec![]));
    let why = f.check(&no_ct, &id, &f.layer).unwrap_err();
    assert!(
        why.contains("SCTs are from CT logs the trusted root does not list"),
        "{why}"
    );
    let no_tlog = f.root(|r| r["tlogs"] = Value::Array(vec![]));
    let why = f.check(&no_tlog, &id, &f.layer).unwrap_err();
    assert!(
        why.contains("was not valid when it was signed (2030-03-17"),
        "{why}"
    );
    // Without the certificate authority that issued it.
    let no_ca = f.root(|r| {
        let cas = r["certificateAuthorities"].as_array_mut().unwrap();
        cas.pop();
    });
    let why = f.check(&no_ca, &id, &f.layer).unwrap_err();
    assert!(
        why.contains("does not chain to a certificate authority"),
        "{why}"
    );
    // An SCT that does not verify: another log key under the log's ID.
    let wrong_key = f.root(|r| {
        let rekor = r["tlogs"][0]["publicKey"]["rawBytes"].clone();
        let ct = r["ctlogs"].as_array_mut().unwrap();
        for log in ct {
            log["publicKey"]["rawBytes"] = rekor.clone();
        }
    });
    let why = f.check(&wrong_key, &id, &f.layer).unwrap_err();
    assert!(why.contains("SCT does not verify"), "{why}");
}

#[test]
fn identities_must_name_issuer_and_subject_and_compile() {
    assert!(
        Identity::new("", "me@example.com", "", "")
            .unwrap_err()
            .contains("names no issuer")
    );
    assert!(
        Identity::new("https://issuer", "", "", "")
            .unwrap_err()
            .contains("names no subject")
    );
    let why = Identity::new("", "", "(", "x").unwrap_err();
    assert!(
        why.contains("issuerRegExp \"(\" is not a regular expression"),
        "{why}"
    );
    // A regular expression too large to compile is refused, not run.
    assert!(Identity::new("", "", "a{1000}{1000}", "x").is_err());
}

#[test]
fn a_trusted_root_that_is_not_one_says_why() {
    assert!(
        TrustedRoot::from_json(b"[")
            .unwrap_err()
            .contains("not JSON")
    );
    assert!(
        TrustedRoot::from_json(b"{}")
            .unwrap_err()
            .contains("no certificateAuthorities")
    );
    let bad =
        r#"{"certificateAuthorities":[{"certChain":{"certificates":[{"rawBytes":"AAAA"}]}}]}"#;
    assert!(
        TrustedRoot::from_json(bad.as_bytes())
            .unwrap_err()
            .contains("certificateAuthorities[0]: not X.509")
    );
}
