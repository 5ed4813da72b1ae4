//! Signature verification as ImageConfigs require it
//! (`spec.verification`, provider Cosign): an image passes when one of the
//! authorities verifies it, a key authority by a signature of its digest
//! made with the key (a PEM public key in a Secret of the runtimes'
//! namespace) and by every attestation it lists. The signatures and
//! attestations are read beside the image where the ImageConfigs say it is
//! read from, with its credentials, offline: no transparency log, no
//! network beyond the registry.
//!
//! A keyless authority verifies by certificates issued to its identities
//! by a certificate authority of the operator's Sigstore trusted root: the
//! `trusted_root.json` of a ConfigMap in the runtimes' namespace
//! (--trusted-root), read when a keyless authority is checked
//! ([`oci::cosign::Keyless`] says what is checked). Passes are remembered
//! per digest and ImageConfig version for [`REMEMBERED`]; failures are
//! looked at again at each reconcile.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use oci::{
    Digest,
    cosign::{self, Identity, Keyless, PublicKey, TrustedRoot, Verifier},
    pull::cosign_tag,
};
use runtime::expiring::Expiring;
use types::{
    common::LocalObjectReference,
    pkg::v1beta1::{CosignAuthority, ImageVerification, VerificationProvider},
};

use crate::packages::Packages;

/// How long a verified image is not verified again (an edit of its
/// ImageConfig verifies it again at once).
pub const REMEMBERED: Duration = Duration::from_secs(3600);

/// What the ImageConfigs make of one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No ImageConfig requires it to be signed.
    NotRequired,
    /// Verified: the ImageConfig that required it and the authority that
    /// verified it.
    Verified {
        /// The ImageConfig.
        config: String,
        /// The authority.
        authority: String,
    },
    /// Not verified; the message names the ImageConfig and what each
    /// authority found.
    Refused(String),
}

/// The key of a trusted root ConfigMap holding it.
pub const TRUSTED_ROOT_KEY: &str = "trusted_root.json";

/// Verifies images against the ImageConfigs.
pub struct Signatures {
    packages: Packages,
    passed: Expiring<String, (String, String)>,
    config_maps: Api<ConfigMap>,
    trusted_root: String,
}

impl Signatures {
    /// Verification of the images `packages` reads, keyless signatures
    /// with the trusted root in `config_maps`' ConfigMap `trusted_root`.
    pub fn new(packages: Packages, config_maps: Api<ConfigMap>, trusted_root: String) -> Self {
        Self {
            packages,
            passed: Expiring::new(REMEMBERED),
            config_maps,
            trusted_root,
        }
    }

    /// Whether an ImageConfig requires the image `reference` (as written)
    /// to be verified.
    pub async fn required(&self, reference: &str) -> bool {
        let resolved = self.packages.resolved(reference).await.image;
        self.packages.verifying(&resolved).await.is_some()
    }

    /// The verdict on the image `reference` (as written: the ImageConfigs
    /// say where it is read) at `digest`.
    pub async fn verify(
        &self,
        reference: &str,
        digest: &Digest,
        pull_secrets: &[LocalObjectReference],
    ) -> Verdict {
        let resolved = self.packages.resolved(reference).await.image;
        let Some((config, version, verification)) = self.packages.verifying(&resolved).await else {
            return Verdict::NotRequired;
        };
        let key = format!("{}|{config}|{version}", digest.as_str());
        if let Some((config, authority)) = self.passed.get(&key) {
            return Verdict::Verified { config, authority };
        }
        match self
            .check(reference, digest, pull_secrets, &verification)
            .await
        {
            Ok(authority) => {
                self.passed.insert(key, (config.clone(), authority.clone()));
                Verdict::Verified { config, authority }
            }
            Err(why) => Verdict::Refused(format!(
                "{}@{} is not verified as ImageConfig {config} requires: {why}",
                oci::xpkg::repository_of(&resolved),
                digest.as_str()
            )),
        }
    }

    /// The authority that verifies the image, or what each one found.
    async fn check(
        &self,
        reference: &str,
        digest: &Digest,
        pull_secrets: &[LocalObjectReference],
        verification: &ImageVerification,
    ) -> Result<String, String> {
        let VerificationProvider::Cosign = verification.provider;
        let authorities = verification
            .cosign
            .as_ref()
            .map(|c| c.authorities.as_slice())
            .unwrap_or_default();
        if authorities.is_empty() {
            return Err("spec.verification.cosign names no authority".to_owned());
        }
        let read = |suffix: &'static str| {
            let tag = cosign_tag(digest, suffix);
            async move {
                match self.packages.artifact(reference, &tag, pull_secrets).await {
                    Ok(layers) => Ok(layers.unwrap_or_default()),
                    Err(e) => Err(format!(
                        "cannot read its {} ({tag}): {}",
                        if suffix == cosign::SIGNATURES {
                            "signatures"
                        } else {
                            "attestations"
                        },
                        runtime::events::error_chain(&e)
                    )),
                }
            }
        };
        let signatures = read(cosign::SIGNATURES).await?;
        let wants_attestations = authorities.iter().any(|a| !a.attestations.is_empty());
        let attestations = if wants_attestations {
            read(cosign::ATTESTATIONS).await?
        } else {
            Vec::new()
        };
        let mut found = Vec::new();
        for authority in authorities {
            match self
                .authority(authority, digest, &signatures, &attestations)
                .await
            {
                Ok(()) => return Ok(authority.name.clone()),
                Err(why) => found.push(format!("authority {}: {why}", authority.name)),
            }
        }
        Err(found.join("; "))
    }

    /// Whether `authority` verifies the image at `digest`.
    async fn authority(
        &self,
        authority: &CosignAuthority,
        digest: &Digest,
        signatures: &[oci::pull::ArtifactLayer],
        attestations: &[oci::pull::ArtifactLayer],
    ) -> Result<(), String> {
        let (identities, root);
        let signer: Box<dyn Verifier + '_>;
        if let Some(key) = &authority.key {
            signer = Box::new(self.key(key).await?);
        } else if let Some(keyless) = &authority.keyless {
            identities = keyless
                .identities
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    Identity::new(
                        &id.issuer,
                        &id.subject,
                        &id.issuer_reg_exp,
                        &id.subject_reg_exp,
                    )
                    .map_err(|e| format!("keyless.identities[{i}] {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if identities.is_empty() {
                return Err("keyless names no identities".to_owned());
            }
            root = self.trusted_root().await?;
            signer = Box::new(Keyless {
                root: &root,
                identities: &identities,
                ignore_sct: keyless.insecure_ignore_sct.unwrap_or(false),
                now: time::OffsetDateTime::now_utc().unix_timestamp(),
            });
        } else {
            return Err("names neither a key nor keyless identities".to_owned());
        }
        cosign::signed(signatures, digest, signer.as_ref())?;
        for a in &authority.attestations {
            cosign::attested(
                attestations,
                digest,
                cosign::predicate_type(&a.predicate_type),
                signer.as_ref(),
            )
            .map_err(|why| format!("attestation {}: {why}", a.name))?;
        }
        Ok(())
    }

    /// The public key of a key authority.
    async fn key(&self, key: &types::pkg::v1beta1::KeyRef) -> Result<PublicKey, String> {
        if !key.hash_algorithm.eq_ignore_ascii_case("sha256") {
            return Err(format!(
                "hashAlgorithm {} is not supported (sha256 is)",
                key.hash_algorithm
            ));
        }
        let pem = self
            .packages
            .secret_text(&key.secret_ref.name, &key.secret_ref.key)
            .await?;
        PublicKey::from_pem(&pem).map_err(|e| {
            format!(
                "Secret {} key {}: {e}",
                key.secret_ref.name, key.secret_ref.key
            )
        })
    }

    /// The operator's trusted root, read now.
    async fn trusted_root(&self) -> Result<TrustedRoot, String> {
        let name = &self.trusted_root;
        let namespace = self.config_maps.namespace().unwrap_or_default();
        let map = self
            .config_maps
            .get_opt(name)
            .await
            .map_err(|e| format!("cannot read ConfigMap {namespace}/{name}: {}", runtime::events::error_chain(&e)))?
            .ok_or_else(|| format!(
                "keyless signatures are checked with a Sigstore trusted root, and ConfigMap {namespace}/{name} does not exist: create it with the trusted root at key {TRUSTED_ROOT_KEY} (cosign trusted-root create writes one)"
            ))?;
        let json = map
            .data
            .as_ref()
            .and_then(|d| d.get(TRUSTED_ROOT_KEY))
            .ok_or_else(|| format!("ConfigMap {namespace}/{name} has no key {TRUSTED_ROOT_KEY}"))?;
        TrustedRoot::from_json(json.as_bytes())
            .map_err(|e| format!("ConfigMap {namespace}/{name} key {TRUSTED_ROOT_KEY} is not a Sigstore trusted root: {e}"))
    }
}
