//! Signature verification as ImageConfigs require it
//! (`spec.verification`, provider Cosign): an image passes when one of the
//! authorities verifies it, a key authority by a signature of its digest
//! made with the key (a PEM public key in a Secret of the runtimes'
//! namespace) and by every attestation it lists. The signatures and
//! attestations are read beside the image where the ImageConfigs say it is
//! read from, with its credentials, offline: no transparency log, no
//! network beyond the registry.
//!
//! Keyless authorities (certificates for an identity) are not implemented:
//! such an authority fails, naming why, so an image it alone would admit is
//! not installed. Passes are remembered per digest and ImageConfig version
//! for [`REMEMBERED`]; failures are looked at again at each reconcile.

use std::time::Duration;

use oci::{
    Digest,
    cosign::{self, PublicKey},
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

/// Verifies images against the ImageConfigs.
pub struct Signatures {
    packages: Packages,
    passed: Expiring<String, (String, String)>,
}

impl Signatures {
    /// Verification of the images `packages` reads.
    pub fn new(packages: Packages) -> Self {
        Self {
            packages,
            passed: Expiring::new(REMEMBERED),
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
        let Some(key) = &authority.key else {
            return Err(if authority.keyless.is_some() {
                "keyless verification is not supported by this package-manager; sign with a key and name it in key.secretRef".to_owned()
            } else {
                "names neither a key nor keyless identities".to_owned()
            });
        };
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
        let public = PublicKey::from_pem(&pem).map_err(|e| {
            format!(
                "Secret {} key {}: {e}",
                key.secret_ref.name, key.secret_ref.key
            )
        })?;
        let verify = |signature: &[u8], message: &[u8]| public.verifies(signature, message);
        cosign::signed(signatures, digest, verify)?;
        for a in &authority.attestations {
            cosign::attested(
                attestations,
                digest,
                cosign::predicate_type(&a.predicate_type),
                verify,
            )
            .map_err(|why| format!("attestation {}: {why}", a.name))?;
        }
        Ok(())
    }
}
