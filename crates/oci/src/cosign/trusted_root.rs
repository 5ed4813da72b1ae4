//! A Sigstore trusted root (`trusted_root.json`, the protobuf-specs JSON
//! that `cosign trusted-root create` writes and Sigstore's TUF repository
//! serves): the certificate authorities that issue keyless certificates,
//! the certificate-transparency logs whose SCTs they embed, and the
//! transparency logs (Rekor) whose signed entry timestamps say when a
//! signature was made. The operator provides it; nothing here reaches for
//! the network.

use base64::Engine as _;
use serde_json::Value;
use sha2::Digest as _;
use spki::SubjectPublicKeyInfoOwned;
use x509_cert::Certificate;
use x509_cert::der::{Decode as _, Encode as _};

use super::PublicKey;

/// What a trusted root trusts, each for a time window.
pub struct TrustedRoot {
    pub(super) authorities: Vec<Authority>,
    pub(super) tlogs: Vec<LogKey>,
    pub(super) ctlogs: Vec<LogKey>,
}

impl std::fmt::Debug for TrustedRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedRoot")
            .field("authorities", &self.authorities.len())
            .field("tlogs", &self.tlogs.len())
            .field("ctlogs", &self.ctlogs.len())
            .finish()
    }
}

/// A certificate authority: its certificates (a root, maybe
/// intermediates), trusted for a window.
pub(super) struct Authority {
    pub(super) certificates: Vec<Certificate>,
    pub(super) valid: Window,
}

/// A log's public key, named by its log ID (the SHA-256 of the key's DER).
pub(super) struct LogKey {
    pub(super) id: Vec<u8>,
    pub(super) key: PublicKey,
    pub(super) valid: Window,
}

/// A window of time in Unix seconds; an open end is unbounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) start: Option<i64>,
    pub(super) end: Option<i64>,
}

impl Window {
    pub(super) fn covers(self, at: i64) -> bool {
        self.start.is_none_or(|s| s <= at) && self.end.is_none_or(|e| at <= e)
    }
}

/// The most certificate authorities, logs or certificates per authority a
/// trusted root is read with (public-good's has a handful).
const MAX_ENTRIES: usize = 64;

impl TrustedRoot {
    /// The trusted root in `json`, or what is wrong with it.
    pub fn from_json(json: &[u8]) -> Result<Self, String> {
        let root: Value = serde_json::from_slice(json).map_err(|e| format!("not JSON: {e}"))?;
        let list = |field: &str| -> Result<&[Value], String> {
            let items = root
                .get(field)
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if items.len() > MAX_ENTRIES {
                return Err(format!("{field} lists more than {MAX_ENTRIES} entries"));
            }
            Ok(items)
        };
        let mut authorities = Vec::new();
        for (i, ca) in list("certificateAuthorities")?.iter().enumerate() {
            let at = || format!("certificateAuthorities[{i}]");
            let raw = ca
                .pointer("/certChain/certificates")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if raw.is_empty() || raw.len() > MAX_ENTRIES {
                return Err(format!("{} has no certChain.certificates", at()));
            }
            let certificates = raw
                .iter()
                .map(|c| {
                    let der = raw_bytes(c)?;
                    Certificate::from_der(&der).map_err(|e| format!("not X.509: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{}: {e}", at()))?;
            authorities.push(Authority {
                certificates,
                valid: window(ca.get("validFor")).map_err(|e| format!("{}: {e}", at()))?,
            });
        }
        let logs = |field: &str| -> Result<Vec<LogKey>, String> {
            list(field)?
                .iter()
                .enumerate()
                .map(|(i, log)| log_key(log).map_err(|e| format!("{field}[{i}]: {e}")))
                .collect()
        };
        let root = Self {
            authorities,
            tlogs: logs("tlogs")?,
            ctlogs: logs("ctlogs")?,
        };
        if root.authorities.is_empty() {
            return Err("it lists no certificateAuthorities".to_owned());
        }
        Ok(root)
    }
}

/// A transparency or CT log's key.
fn log_key(log: &Value) -> Result<LogKey, String> {
    let key = log.get("publicKey").ok_or("no publicKey")?;
    let der = raw_bytes(key)?;
    let spki = SubjectPublicKeyInfoOwned::from_der(&der)
        .map_err(|e| format!("publicKey is not a DER public key: {e}"))?;
    let id = log
        .pointer("/logId/keyId")
        .and_then(Value::as_str)
        .map(|id| {
            base64::engine::general_purpose::STANDARD
                .decode(id)
                .map_err(|_| "logId.keyId is not base64".to_owned())
        })
        .transpose()?
        .unwrap_or_else(|| key_id(&spki));
    Ok(LogKey {
        id,
        key: PublicKey::from_spki(&spki)?,
        valid: window(key.get("validFor"))?,
    })
}

/// A log ID as RFC 6962 has it: the SHA-256 of the key's DER.
pub(super) fn key_id(spki: &SubjectPublicKeyInfoOwned) -> Vec<u8> {
    spki.to_der()
        .map(|der| sha2::Sha256::digest(der).to_vec())
        .unwrap_or_default()
}

/// The bytes of `{"rawBytes": "<base64>"}`.
fn raw_bytes(v: &Value) -> Result<Vec<u8>, String> {
    let b64 = v
        .get("rawBytes")
        .and_then(Value::as_str)
        .ok_or("no rawBytes")?;
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| "rawBytes is not base64".to_owned())
}

/// `{"start": RFC 3339, "end": RFC 3339}`, either may be missing.
fn window(v: Option<&Value>) -> Result<Window, String> {
    let at = |field: &str| -> Result<Option<i64>, String> {
        v.and_then(|v| v.get(field))
            .and_then(Value::as_str)
            .map(|t| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .map(|t| t.timestamp())
                    .map_err(|e| format!("validFor.{field} {t:?}: {e}"))
            })
            .transpose()
    };
    Ok(Window {
        start: at("start")?,
        end: at("end")?,
    })
}
