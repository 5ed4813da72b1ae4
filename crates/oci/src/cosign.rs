//! Cosign signatures and attestations of an image, as cosign (v2's
//! default layout) stores them beside it: a signature is a layer of the
//! artifact tagged `sha256-<hex>.sig` whose body is a "simple signing"
//! payload naming the image's digest and whose annotation
//! [`SIGNATURE_ANNOTATION`] holds the signature over that body; an
//! attestation is a DSSE envelope layer of `sha256-<hex>.att` whose
//! signature covers the envelope's pre-authentication encoding ([`pae`])
//! and whose payload is an in-toto statement about the image.
//!
//! Pure decisions over what a registry served ([`crate::pull::ArtifactLayer`]),
//! the signature check itself given as `verify(signature, message)`: every
//! byte is data, and nothing here trusts a payload before its signature
//! verified.

use base64::Engine as _;
use serde_json::Value;

use crate::{Digest, pull::ArtifactLayer};

mod keyless;
mod transparency;
mod trusted_root;

pub use keyless::{CERTIFICATE_ANNOTATION, Identity, Keyless};
pub use transparency::BUNDLE_ANNOTATION;
pub use trusted_root::TrustedRoot;

/// The media type of a simple-signing signature layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The media type of an attestation layer (a DSSE envelope).
pub const DSSE_ENVELOPE: &str = "application/vnd.dsse.envelope.v1+json";
/// The layer annotation holding a signature (base64).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The tag suffix of signatures.
pub const SIGNATURES: &str = "sig";
/// The tag suffix of attestations.
pub const ATTESTATIONS: &str = "att";
/// The `critical.type` of a cosign signature payload.
const SIGNATURE_TYPE: &str = "cosign container image signature";
/// The payload type of an in-toto statement in a DSSE envelope.
const IN_TOTO: &str = "application/vnd.in-toto+json";

/// The predicate type cosign writes for `cosign attest --type <short>`
/// (policy-controller's names); anything else is taken as written.
pub fn predicate_type(short: &str) -> &str {
    match short {
        "custom" => "https://cosign.sigstore.dev/attestation/v1",
        "slsaprovenance" | "slsaprovenance02" => "https://slsa.dev/provenance/v0.2",
        "slsaprovenance1" => "https://slsa.dev/provenance/v1",
        "spdx" => "https://spdx.dev/Document",
        "spdxjson" => "https://spdx.dev/Document",
        "cyclonedx" => "https://cyclonedx.org/bom",
        "link" => "https://in-toto.io/Link/v1",
        "vuln" => "https://cosign.sigstore.dev/attestation/vuln/v1",
        "openvex" => "https://openvex.dev/ns",
        other => other,
    }
}

/// Checks a signature over a message, given the layer it came in (a
/// keyless signature's certificate is in its annotations): `Err` says why
/// it does not verify, as a clause ("not made with this key").
pub trait Verifier {
    /// Whether `signature`, in `layer`, is the signer's over `message`.
    fn verify(&self, layer: &ArtifactLayer, signature: &[u8], message: &[u8])
    -> Result<(), String>;
}

impl Verifier for PublicKey {
    fn verify(&self, _: &ArtifactLayer, signature: &[u8], message: &[u8]) -> Result<(), String> {
        if self.verifies(signature, message) {
            Ok(())
        } else {
            Err("not made with this key".to_owned())
        }
    }
}

/// Whether one of the signature `layers` (of `sha256-<hex>.sig`) is a
/// signature of the image at `digest` that `verifier` accepts; otherwise
/// why not, in a few words.
pub fn signed(
    layers: &[ArtifactLayer],
    digest: &Digest,
    verifier: &dyn Verifier,
) -> Result<(), String> {
    let mut signatures = 0;
    let mut other_image = false;
    let mut why = String::new();
    for layer in layers.iter().filter(|l| l.media_type == SIMPLE_SIGNING) {
        let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION).and_then(|s| {
            base64::engine::general_purpose::STANDARD
                .decode(s.trim())
                .ok()
        }) else {
            continue;
        };
        signatures += 1;
        if let Err(e) = verifier.verify(layer, &signature, &layer.body) {
            why = e;
            continue;
        }
        // Signed by the key: now its claims may be read.
        let Ok(payload) = serde_json::from_slice::<Value>(&layer.body) else {
            continue;
        };
        let names = payload
            .pointer("/critical/image/docker-manifest-digest")
            .and_then(Value::as_str)
            == Some(digest.as_str());
        let typed =
            payload.pointer("/critical/type").and_then(Value::as_str) == Some(SIGNATURE_TYPE);
        if names && typed {
            return Ok(());
        }
        other_image = true;
    }
    Err(match (signatures, other_image) {
        (0, _) => "no signature".to_owned(),
        (_, true) => "its signature by this signer names another image".to_owned(),
        (n, false) => format!(
            "none of its {n} signature{} verifies ({why})",
            if n == 1 { "" } else { "s" }
        ),
    })
}

/// DSSE's pre-authentication encoding of a payload: what an envelope's
/// signatures sign.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Whether one of the attestation `layers` (of `sha256-<hex>.att`) is an
/// in-toto statement about the image at `digest` with predicate type
/// `predicate` whose envelope `verifier` accepts; otherwise why not.
pub fn attested(
    layers: &[ArtifactLayer],
    digest: &Digest,
    predicate: &str,
    verifier: &dyn Verifier,
) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut signed_by_key = 0;
    let mut why = String::new();
    for layer in layers.iter().filter(|l| l.media_type == DSSE_ENVELOPE) {
        let Ok(envelope) = serde_json::from_slice::<Value>(&layer.body) else {
            continue;
        };
        let payload_type = envelope
            .get("payloadType")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(payload) = envelope
            .get("payload")
            .and_then(Value::as_str)
            .and_then(|p| b64.decode(p).ok())
        else {
            continue;
        };
        let message = pae(payload_type, &payload);
        let verified = envelope
            .get("signatures")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| s.get("sig").and_then(Value::as_str))
            .filter_map(|s| b64.decode(s).ok())
            .any(|sig| match verifier.verify(layer, &sig, &message) {
                Ok(()) => true,
                Err(e) => {
                    why = e;
                    false
                }
            });
        if !verified || payload_type != IN_TOTO {
            continue;
        }
        signed_by_key += 1;
        let Ok(statement) = serde_json::from_slice::<Value>(&payload) else {
            continue;
        };
        let about = statement
            .get("subject")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|s| s.pointer("/digest/sha256").and_then(Value::as_str) == Some(digest.hex()));
        let typed = statement.get("predicateType").and_then(Value::as_str) == Some(predicate);
        if about && typed {
            return Ok(());
        }
    }
    Err(if signed_by_key == 0 {
        if why.is_empty() {
            "no attestation".to_owned()
        } else {
            format!("no attestation verifies ({why})")
        }
    } else {
        format!("no attestation of type {predicate} about this image")
    })
}

/// A public key signatures are checked with, as `cosign generate-key-pair`
/// writes it (PEM `PUBLIC KEY`): ECDSA P-256 (cosign's default) or P-384,
/// RSA (PKCS#1 v1.5, SHA-256) or Ed25519. The signature check is ring's.
pub struct PublicKey {
    algorithm: &'static dyn ring::signature::VerificationAlgorithm,
    key: Vec<u8>,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicKey").finish_non_exhaustive()
    }
}

impl PublicKey {
    /// The key in `pem`, or what is wrong with it.
    pub fn from_pem(pem: &str) -> Result<Self, String> {
        use spki::{SubjectPublicKeyInfoOwned, der::DecodePem as _};
        let spki = SubjectPublicKeyInfoOwned::from_pem(pem.trim())
            .map_err(|e| format!("not a PEM public key: {e}"))?;
        Self::from_spki(&spki)
    }

    /// The key of a subject public key info (a certificate's, a log's).
    pub fn from_spki(spki: &spki::SubjectPublicKeyInfoOwned) -> Result<Self, String> {
        let algorithm: &'static dyn ring::signature::VerificationAlgorithm = match KeyKind::of(spki)
        {
            Some(KeyKind::P256) => &ring::signature::ECDSA_P256_SHA256_ASN1,
            Some(KeyKind::P384) => &ring::signature::ECDSA_P384_SHA384_ASN1,
            Some(KeyKind::Rsa) => &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            Some(KeyKind::Ed25519) => &ring::signature::ED25519,
            None => {
                return Err(format!(
                    "a public key of algorithm {}, which is not supported (ECDSA P-256 or P-384, RSA, Ed25519 are)",
                    spki.algorithm.oid
                ));
            }
        };
        let key = spki
            .subject_public_key
            .as_bytes()
            .ok_or("the public key's bits are not whole bytes")?
            .to_vec();
        Ok(Self { algorithm, key })
    }

    /// Whether `signature` (ECDSA: ASN.1 DER) is this key's over `message`.
    pub fn verifies(&self, signature: &[u8], message: &[u8]) -> bool {
        ring::signature::UnparsedPublicKey::new(self.algorithm, &self.key)
            .verify(message, signature)
            .is_ok()
    }
}

/// The kinds of public key signatures are checked with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyKind {
    P256,
    P384,
    Rsa,
    Ed25519,
}

impl KeyKind {
    pub(crate) fn of(spki: &spki::SubjectPublicKeyInfoOwned) -> Option<Self> {
        use spki::ObjectIdentifier as Oid;
        const EC: Oid = Oid::new_unwrap("1.2.840.10045.2.1");
        const P256: Oid = Oid::new_unwrap("1.2.840.10045.3.1.7");
        const P384: Oid = Oid::new_unwrap("1.3.132.0.34");
        const RSA: Oid = Oid::new_unwrap("1.2.840.113549.1.1.1");
        const ED25519: Oid = Oid::new_unwrap("1.3.101.112");
        let curve = || {
            spki.algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.decode_as::<Oid>().ok())
        };
        match spki.algorithm.oid {
            EC if curve() == Some(P256) => Some(Self::P256),
            EC if curve() == Some(P384) => Some(Self::P384),
            RSA => Some(Self::Rsa),
            ED25519 => Some(Self::Ed25519),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
