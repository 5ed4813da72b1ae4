#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::Engine as _;

use super::*;

/// An image signed by upstream's cosign v2.6.5 with two keys (k1, k2) and
/// attested (`--type custom`) with k1, read back from the registry: the
/// layers of `sha256-<hex>.sig` and `.att` as the registry served them.
/// k3 signed nothing.
struct Fixture {
    digest: Digest,
    signatures: Vec<ArtifactLayer>,
    attestations: Vec<ArtifactLayer>,
    keys: [PublicKey; 3],
}

fn layers(v: &Value) -> Vec<ArtifactLayer> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| ArtifactLayer {
            media_type: l["mediaType"].as_str().unwrap().to_owned(),
            annotations: serde_json::from_value(l["annotations"].clone()).unwrap(),
            body: base64::engine::general_purpose::STANDARD
                .decode(l["body"].as_str().unwrap())
                .unwrap(),
        })
        .collect()
}

fn fixture() -> Fixture {
    let v: Value = serde_json::from_str(include_str!(
        "../testdata/cosign/signed-by-cosign-v2.6.5.json"
    ))
    .unwrap();
    let key = |k: &str| PublicKey::from_pem(v[k].as_str().unwrap()).unwrap();
    Fixture {
        digest: Digest::parse(v["digest"].as_str().unwrap()).unwrap(),
        signatures: layers(&v["signatures"]),
        attestations: layers(&v["attestations"]),
        keys: [key("k1"), key("k2"), key("k3")],
    }
}

#[test]
fn a_signature_by_either_key_verifies_and_another_key_does_not() {
    let f = fixture();
    let [k1, k2, k3] = &f.keys;
    assert_eq!(signed(&f.signatures, &f.digest, k1), Ok(()));
    assert_eq!(signed(&f.signatures, &f.digest, k2), Ok(()));
    let no = signed(&f.signatures, &f.digest, k3).unwrap_err();
    assert_eq!(
        no,
        "none of its 2 signatures verifies (not made with this key)"
    );
    assert_eq!(signed(&[], &f.digest, k1).unwrap_err(), "no signature");
}

#[test]
fn a_signature_of_another_image_or_of_changed_bytes_does_not_count() {
    let f = fixture();
    let k1 = &f.keys[0];
    let other = Digest::of(b"another image");
    assert_eq!(
        signed(&f.signatures, &other, k1).unwrap_err(),
        "its signature by this signer names another image"
    );
    let mut tampered = f.signatures.clone();
    for l in &mut tampered {
        let text = String::from_utf8(l.body.clone()).unwrap();
        l.body = text.replace(f.digest.hex(), other.hex()).into_bytes();
    }
    assert!(signed(&tampered, &other, k1).is_err());
    // A signature annotation that is not base64 is no signature.
    let mut garbled = f.signatures.clone();
    for l in &mut garbled {
        l.annotations
            .insert(SIGNATURE_ANNOTATION.into(), "not base64 !".into());
    }
    assert_eq!(signed(&garbled, &f.digest, k1).unwrap_err(), "no signature");
}

#[test]
fn an_attestation_verifies_by_its_key_and_predicate_type() {
    let f = fixture();
    let [k1, k2, _] = &f.keys;
    let custom = predicate_type("custom");
    assert_eq!(attested(&f.attestations, &f.digest, custom, k1), Ok(()));
    assert_eq!(
        attested(&f.attestations, &f.digest, custom, k2).unwrap_err(),
        "no attestation verifies (not made with this key)"
    );
    assert_eq!(
        attested(&f.attestations, &f.digest, predicate_type("spdxjson"), k1).unwrap_err(),
        "no attestation of type https://spdx.dev/Document about this image"
    );
    let other = Digest::of(b"another image");
    assert!(attested(&f.attestations, &other, custom, k1).is_err());
}

#[test]
fn pae_is_dsse_v1() {
    assert_eq!(pae("t", b"hello"), b"DSSEv1 1 t 5 hello");
}

#[test]
fn keys_that_are_not_keys_are_named() {
    assert!(
        PublicKey::from_pem("")
            .unwrap_err()
            .contains("not a PEM public key")
    );
    assert!(
        PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
            .is_err()
    );
}
