//! What the logs of a trusted root vouch for, checked offline with their
//! public keys:
//!
//! - [`logged_at`]: a Rekor entry's signed entry timestamp (SET), in the
//!   bundle cosign writes beside a signature, says when the signature was
//!   logged, and the entry must be of this signature, certificate and
//!   message;
//! - [`embedded_sct`]: an SCT a CT log signed over the precertificate
//!   (RFC 6962 §3.2) says the certificate was published.

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use x509_cert::{
    Certificate,
    der::{
        Decode as _, Encode as _, Tag, TagNumber, Tagged as _,
        asn1::{Any, OctetString},
        oid::ObjectIdentifier as Oid,
    },
    ext::Extension,
};

use super::trusted_root::LogKey;
use crate::pull::ArtifactLayer;

/// The layer annotation holding cosign's Rekor bundle.
pub const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
/// The certificate extension holding embedded SCTs.
const SCT_LIST: Oid = Oid::new_unwrap("1.3.6.1.4.1.11129.2.4.2");

/// When a transparency log of `tlogs` logged `signature` (over `message`,
/// with the certificate `leaf`), from the layer's bundle.
pub(super) fn logged_at(
    layer: &ArtifactLayer,
    signature: &[u8],
    message: &[u8],
    leaf: &Certificate,
    tlogs: &[LogKey],
) -> Result<i64, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let bundle: Value = layer
        .annotations
        .get(BUNDLE_ANNOTATION)
        .and_then(|b| serde_json::from_str(b).ok())
        .ok_or("it has no transparency-log entry, which the trusted root's logs require")?;
    let set = bundle
        .get("SignedEntryTimestamp")
        .and_then(Value::as_str)
        .and_then(|s| b64.decode(s).ok());
    let payload = bundle.get("Payload");
    let field = |name: &str| payload.and_then(|p| p.get(name));
    let (Some(set), Some(body), Some(time), Some(index), Some(log_id)) = (
        set,
        field("body").and_then(Value::as_str),
        field("integratedTime").and_then(Value::as_i64),
        field("logIndex").and_then(Value::as_i64),
        field("logID").and_then(Value::as_str),
    ) else {
        return Err("its transparency-log bundle is incomplete".to_owned());
    };
    let log = tlogs
        .iter()
        .find(|l| hex::encode(&l.id) == log_id)
        .ok_or_else(|| format!("its transparency-log entry is in log {log_id}, which the trusted root does not list"))?;
    // What the log signed: the payload as canonical JSON (keys sorted, no
    // space).
    let canonical = format!(
        r#"{{"body":{},"integratedTime":{time},"logID":{},"logIndex":{index}}}"#,
        Value::from(body),
        Value::from(log_id)
    );
    if !log.key.verifies(&set, canonical.as_bytes()) {
        return Err(
            "its transparency-log entry's signed timestamp does not verify with the log's key"
                .to_owned(),
        );
    }
    if !log.valid.covers(time) {
        return Err(
            "its transparency-log entry was made outside the time the trusted root trusts its log"
                .to_owned(),
        );
    }
    let entry: Value = b64
        .decode(body)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("its transparency-log entry's body is not JSON")?;
    of_this_signature(&entry, signature, message, leaf)?;
    Ok(time)
}

/// Whether a `hashedrekord` entry is of this signature over this message
/// with this certificate.
fn of_this_signature(
    entry: &Value,
    signature: &[u8],
    message: &[u8],
    leaf: &Certificate,
) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let kind = entry
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind != "hashedrekord" {
        return Err(format!(
            "its transparency-log entry is of kind {kind:?}, which is not supported (hashedrekord is)"
        ));
    }
    let text = |p: &str| entry.pointer(p).and_then(Value::as_str);
    let hashed = text("/spec/data/hash/algorithm") == Some("sha256")
        && text("/spec/data/hash/value") == Some(hex::encode(Sha256::digest(message)).as_str());
    let same_signature = text("/spec/signature/content")
        .and_then(|s| b64.decode(s).ok())
        .is_some_and(|s| s == signature);
    let same_certificate = text("/spec/signature/publicKey/content")
        .and_then(|s| b64.decode(s).ok())
        .and_then(|pem| {
            use x509_cert::der::DecodePem as _;
            Certificate::from_pem(pem.as_slice()).ok()
        })
        .is_some_and(|c| &c == leaf);
    if hashed && same_signature && same_certificate {
        Ok(())
    } else {
        Err("its transparency-log entry is of another signature".to_owned())
    }
}

/// Whether `leaf` (issued by `issuer`) embeds an SCT one of `ctlogs`
/// signed.
pub(super) fn embedded_sct(
    leaf: &Certificate,
    issuer: &Certificate,
    ctlogs: &[LogKey],
) -> Result<(), String> {
    let list = leaf
        .tbs_certificate()
        .extensions()
        .and_then(|e| e.iter().find(|e| e.extn_id == SCT_LIST))
        .and_then(|e| OctetString::from_der(e.extn_value.as_bytes()).ok())
        .ok_or("its certificate embeds no SCT (an authority without a CT log needs insecureIgnoreSCT: true)")?;
    let scts = sct_list(list.as_bytes()).ok_or("its certificate's SCT list is malformed")?;
    let tbs = precertificate(leaf).ok_or("its certificate cannot be read as a precertificate")?;
    let issuer_key_hash = issuer
        .tbs_certificate()
        .subject_public_key_info()
        .to_der()
        .map(Sha256::digest)
        .map_err(|e| format!("its issuer's key: {e}"))?;
    let tbs_len = u32::try_from(tbs.len()).unwrap_or(u32::MAX).to_be_bytes();
    let mut unknown = Vec::new();
    for sct in &scts {
        let Some(log) = ctlogs.iter().find(|l| l.id == sct.log_id) else {
            unknown.push(hex::encode(sct.log_id));
            continue;
        };
        let mut signed = vec![0u8, 0u8];
        signed.extend_from_slice(&sct.timestamp.to_be_bytes());
        signed.extend_from_slice(&[0, 1]);
        signed.extend_from_slice(&issuer_key_hash);
        signed.extend_from_slice(tbs_len.get(1..).unwrap_or_default());
        signed.extend_from_slice(&tbs);
        let ext_len = u16::try_from(sct.extensions.len()).unwrap_or(u16::MAX);
        signed.extend_from_slice(&ext_len.to_be_bytes());
        signed.extend_from_slice(sct.extensions);
        let at = i64::try_from(sct.timestamp / 1000).unwrap_or(i64::MAX);
        if log.valid.covers(at) && log.key.verifies(sct.signature, &signed) {
            return Ok(());
        }
    }
    Err(if unknown.len() == scts.len() {
        format!(
            "its certificate's SCTs are from CT logs the trusted root does not list ({})",
            unknown.join(", ")
        )
    } else {
        "its certificate's SCT does not verify with the CT log's key".to_owned()
    })
}

/// One SCT of a list (RFC 6962 §3.2, version 1).
struct Sct<'a> {
    log_id: [u8; 32],
    timestamp: u64,
    extensions: &'a [u8],
    signature: &'a [u8],
}

/// Reads TLS-encoded bytes front to back.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u16(&mut self) -> Option<usize> {
        let b = self.take(2)?;
        Some(usize::from(u16::from_be_bytes([*b.first()?, *b.get(1)?])))
    }

    fn vector(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// The v1 SCTs of a SignedCertificateTimestampList.
fn sct_list(bytes: &[u8]) -> Option<Vec<Sct<'_>>> {
    let mut list = Cursor(Cursor(bytes).vector()?);
    let mut out = Vec::new();
    while !list.0.is_empty() {
        let mut sct = Cursor(list.vector()?);
        if sct.take(1)? != [0] {
            continue;
        }
        let log_id: [u8; 32] = sct.take(32)?.try_into().ok()?;
        let timestamp = u64::from_be_bytes(sct.take(8)?.try_into().ok()?);
        let extensions = sct.vector()?;
        // hash and signature algorithm: ECDSA or RSA over SHA-256, as the
        // log's key says.
        sct.take(2)?;
        let signature = sct.vector()?;
        out.push(Sct {
            log_id,
            timestamp,
            extensions,
            signature,
        });
    }
    Some(out)
}

/// The certificate's TBS without its SCT list: what the CT log signed.
fn precertificate(leaf: &Certificate) -> Option<Vec<u8>> {
    let tbs = leaf.tbs_certificate().to_der().ok()?;
    let mut items = Vec::<Any>::from_der(&tbs).ok()?;
    let extensions_tag = Tag::ContextSpecific {
        constructed: true,
        number: TagNumber(3),
    };
    for item in &mut items {
        if item.tag() != extensions_tag {
            continue;
        }
        // [3] EXPLICIT: its value is the SEQUENCE OF Extension.
        let mut extensions = Vec::<Extension>::from_der(item.value()).ok()?;
        extensions.retain(|e| e.extn_id != SCT_LIST);
        *item = Any::new(extensions_tag, extensions.to_der().ok()?).ok()?;
    }
    items.to_der().ok()
}
