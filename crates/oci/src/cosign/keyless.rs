//! Keyless signatures: each made with a short-lived key whose certificate
//! (in the layer's [`CERTIFICATE_ANNOTATION`]) a certificate authority of
//! the operator's [`TrustedRoot`] issued to an identity: an OIDC issuer (a
//! Fulcio extension) and a subject (a subject alternative name). A
//! signature counts when, at the time it was made:
//!
//! - its certificate chains to an authority of the trusted root, every
//!   certificate of the chain and the authority valid then;
//! - the certificate is for code signing and names an identity the
//!   authority accepts;
//! - it carries an SCT of a CT log of the trusted root, unless the
//!   authority says `insecureIgnoreSCT`;
//! - the signature verifies with the certificate's key.
//!
//! When it was made is what a transparency log of the trusted root signed
//! ([`super::transparency`]); a trusted root that lists no transparency
//! log (a private authority without Rekor) has signatures checked as of
//! now.

use regex::Regex;
use x509_cert::{
    Certificate,
    der::{DecodePem as _, Encode as _, asn1::Utf8StringRef, oid::ObjectIdentifier as Oid},
    ext::pkix::{ExtendedKeyUsage, SubjectAltName, name::GeneralName},
};

use super::{
    KeyKind, PublicKey, Verifier, transparency,
    trusted_root::{Authority, TrustedRoot},
};
use crate::pull::ArtifactLayer;

/// The layer annotation holding a keyless signature's certificate (PEM).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";

/// Fulcio's OIDC issuer extension: v1 holds the bare string, v2 a DER
/// UTF8String.
const ISSUER_V1: Oid = Oid::new_unwrap("1.3.6.1.4.1.57264.1.1");
const ISSUER_V2: Oid = Oid::new_unwrap("1.3.6.1.4.1.57264.1.8");
/// Fulcio's subject for a username identity (an otherName SAN).
const USERNAME: Oid = Oid::new_unwrap("1.3.6.1.4.1.57264.1.7");
const CODE_SIGNING: Oid = Oid::new_unwrap("1.3.6.1.5.5.7.3.3");
/// The largest regular expression an identity may compile to.
const REGEX_SIZE: usize = 1 << 20;

/// An issuer and subject a certificate must carry.
#[derive(Debug)]
pub struct Identity {
    issuer: Matcher,
    subject: Matcher,
}

#[derive(Debug)]
enum Matcher {
    Exact(String),
    Pattern(Regex),
}

impl Matcher {
    fn new(field: &str, exact: &str, pattern: &str) -> Result<Self, String> {
        if !pattern.is_empty() {
            return regex::RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE)
                .build()
                .map(Self::Pattern)
                .map_err(|e| {
                    format!("{field}RegExp {pattern:?} is not a regular expression: {e}")
                });
        }
        if exact.is_empty() {
            return Err(format!("names no {field} ({field} or {field}RegExp)"));
        }
        Ok(Self::Exact(exact.to_owned()))
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            Self::Exact(exact) => exact == value,
            // Unanchored, as upstream's: anchor with ^…$ to match whole.
            Self::Pattern(pattern) => pattern.is_match(value),
        }
    }
}

impl Identity {
    /// An identity from an ImageConfig's fields: a regular expression,
    /// when set, takes the place of the exact value; an identity must
    /// constrain both issuer and subject.
    pub fn new(
        issuer: &str,
        subject: &str,
        issuer_reg_exp: &str,
        subject_reg_exp: &str,
    ) -> Result<Self, String> {
        Ok(Self {
            issuer: Matcher::new("issuer", issuer, issuer_reg_exp)?,
            subject: Matcher::new("subject", subject, subject_reg_exp)?,
        })
    }
}

/// A keyless authority: the trusted root, the identities it accepts,
/// whether SCTs are skipped, and now (Unix seconds).
#[derive(Debug)]
pub struct Keyless<'a> {
    /// The operator's trusted root.
    pub root: &'a TrustedRoot,
    /// The identities accepted; one must match.
    pub identities: &'a [Identity],
    /// Skip the SCT check (`insecureIgnoreSCT`).
    pub ignore_sct: bool,
    /// The time signatures are checked at when the trusted root lists no
    /// transparency log.
    pub now: i64,
}

impl Verifier for Keyless<'_> {
    fn verify(
        &self,
        layer: &ArtifactLayer,
        signature: &[u8],
        message: &[u8],
    ) -> Result<(), String> {
        let pem = layer
            .annotations
            .get(CERTIFICATE_ANNOTATION)
            .ok_or("it carries no certificate")?;
        let leaf = Certificate::from_pem(pem.trim().as_bytes())
            .map_err(|e| format!("its certificate is not PEM X.509: {e}"))?;
        let at = if self.root.tlogs.is_empty() {
            self.now
        } else {
            transparency::logged_at(layer, signature, message, &leaf, &self.root.tlogs)?
        };
        let issuer = chain(&leaf, &self.root.authorities, at)?;
        let tbs = leaf.tbs_certificate();
        let code_signing = matches!(
            tbs.get_extension::<ExtendedKeyUsage>(),
            Ok(Some((_, eku))) if eku.0.contains(&CODE_SIGNING)
        );
        if !code_signing {
            return Err("its certificate is not for code signing".to_owned());
        }
        let oidc = oidc_issuer(&leaf).ok_or("its certificate names no OIDC issuer")?;
        let subjects = subjects(&leaf);
        let named = self
            .identities
            .iter()
            .any(|i| i.issuer.matches(&oidc) && subjects.iter().any(|s| i.subject.matches(s)));
        if !named {
            return Err(format!(
                "its certificate is issued to {} by {oidc}, which no identity of the authority names",
                if subjects.is_empty() {
                    "no subject".to_owned()
                } else {
                    subjects.join(", ")
                }
            ));
        }
        if !self.ignore_sct {
            transparency::embedded_sct(&leaf, issuer, &self.root.ctlogs)?;
        }
        let key = PublicKey::from_spki(tbs.subject_public_key_info())
            .map_err(|e| format!("its certificate's key: {e}"))?;
        if key.verifies(signature, message) {
            Ok(())
        } else {
            Err("not made with its certificate's key".to_owned())
        }
    }
}

/// The certificate that issued `leaf`, when `leaf` chains to one of
/// `authorities` with every certificate (and the authority) valid `at`.
fn chain<'a>(
    leaf: &Certificate,
    authorities: &'a [Authority],
    at: i64,
) -> Result<&'a Certificate, String> {
    if !valid_at(leaf, at) {
        return Err(format!(
            "its certificate was not valid when it was signed ({})",
            when(at)
        ));
    }
    for authority in authorities.iter().filter(|a| a.valid.covers(at)) {
        let Some(issuer) = issuer_in(leaf, &authority.certificates) else {
            continue;
        };
        // Up to a self-signed certificate of the same authority.
        let mut current = issuer;
        let mut trusted = false;
        for _ in 0..authority.certificates.len() {
            if !valid_at(current, at) {
                break;
            }
            match issuer_in(current, &authority.certificates) {
                Some(parent) if std::ptr::eq(parent, current) => {
                    trusted = true;
                    break;
                }
                Some(parent) => current = parent,
                None => break,
            }
        }
        if trusted {
            return Ok(issuer);
        }
    }
    Err(format!(
        "its certificate (issued by {}) does not chain to a certificate authority of the trusted root valid at {}",
        leaf.tbs_certificate().issuer(),
        when(at)
    ))
}

/// The certificate of `certificates` that signed `child`.
fn issuer_in<'a>(child: &Certificate, certificates: &'a [Certificate]) -> Option<&'a Certificate> {
    let tbs = child.tbs_certificate().to_der().ok()?;
    let signature = child.signature().as_bytes()?;
    certificates.iter().find(|c| {
        c.tbs_certificate().subject() == child.tbs_certificate().issuer()
            && signed_by(c, &child.signature_algorithm().oid, signature, &tbs)
    })
}

/// Whether `issuer`'s key made `signature` over `message` with the
/// signature algorithm `algorithm`.
fn signed_by(issuer: &Certificate, algorithm: &Oid, signature: &[u8], message: &[u8]) -> bool {
    use ring::signature as rs;
    const ECDSA_SHA256: Oid = Oid::new_unwrap("1.2.840.10045.4.3.2");
    const ECDSA_SHA384: Oid = Oid::new_unwrap("1.2.840.10045.4.3.3");
    const RSA_SHA256: Oid = Oid::new_unwrap("1.2.840.113549.1.1.11");
    const RSA_SHA384: Oid = Oid::new_unwrap("1.2.840.113549.1.1.12");
    const RSA_SHA512: Oid = Oid::new_unwrap("1.2.840.113549.1.1.13");
    const ED25519: Oid = Oid::new_unwrap("1.3.101.112");
    let spki = issuer.tbs_certificate().subject_public_key_info();
    let alg: &dyn rs::VerificationAlgorithm = match (KeyKind::of(spki), *algorithm) {
        (Some(KeyKind::P256), ECDSA_SHA256) => &rs::ECDSA_P256_SHA256_ASN1,
        (Some(KeyKind::P256), ECDSA_SHA384) => &rs::ECDSA_P256_SHA384_ASN1,
        (Some(KeyKind::P384), ECDSA_SHA256) => &rs::ECDSA_P384_SHA256_ASN1,
        (Some(KeyKind::P384), ECDSA_SHA384) => &rs::ECDSA_P384_SHA384_ASN1,
        (Some(KeyKind::Rsa), RSA_SHA256) => &rs::RSA_PKCS1_2048_8192_SHA256,
        (Some(KeyKind::Rsa), RSA_SHA384) => &rs::RSA_PKCS1_2048_8192_SHA384,
        (Some(KeyKind::Rsa), RSA_SHA512) => &rs::RSA_PKCS1_2048_8192_SHA512,
        (Some(KeyKind::Ed25519), ED25519) => &rs::ED25519,
        _ => return false,
    };
    let Some(key) = spki.subject_public_key.as_bytes() else {
        return false;
    };
    rs::UnparsedPublicKey::new(alg, key)
        .verify(message, signature)
        .is_ok()
}

fn valid_at(certificate: &Certificate, at: i64) -> bool {
    let validity = certificate.tbs_certificate().validity();
    let secs = |t: x509_cert::time::Time| {
        i64::try_from(t.to_unix_duration().as_secs()).unwrap_or(i64::MAX)
    };
    secs(validity.not_before) <= at && at <= secs(validity.not_after)
}

/// `at` in RFC 3339, for messages.
fn when(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| at.to_string())
}

/// The OIDC issuer Fulcio wrote into `certificate`.
fn oidc_issuer(certificate: &Certificate) -> Option<String> {
    use x509_cert::der::Decode as _;
    let extensions = certificate.tbs_certificate().extensions()?;
    if let Some(v2) = extensions.iter().find(|e| e.extn_id == ISSUER_V2) {
        return Utf8StringRef::from_der(v2.extn_value.as_bytes())
            .ok()
            .map(|s| s.as_str().to_owned());
    }
    extensions
        .iter()
        .find(|e| e.extn_id == ISSUER_V1)
        .and_then(|v1| String::from_utf8(v1.extn_value.as_bytes().to_vec()).ok())
}

/// The subjects a certificate is issued to: its e-mail, URI and username
/// subject alternative names.
fn subjects(certificate: &Certificate) -> Vec<String> {
    let Ok(Some((_, san))) = certificate
        .tbs_certificate()
        .get_extension::<SubjectAltName>()
    else {
        return Vec::new();
    };
    san.0
        .iter()
        .filter_map(|name| match name {
            GeneralName::Rfc822Name(s) | GeneralName::UniformResourceIdentifier(s) => {
                Some(s.as_str().to_owned())
            }
            GeneralName::OtherName(other) if other.type_id == USERNAME => other
                .value
                .decode_as::<Utf8StringRef<'_>>()
                .ok()
                .map(|s| s.as_str().to_owned()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
