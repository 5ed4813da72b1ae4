//! Pushing an image to a registry (OCI distribution API, through
//! `oci-client`), with the credentials and TLS settings of
//! [`crate::registry`].

use oci_client::{
    Client, RegistryOperation,
    client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol},
    errors::{OciDistributionError, OciErrorCode},
    secrets::RegistryAuth,
};

use crate::{
    Digest, Error, Image,
    guard::unwinding,
    image::{INDEX_MEDIA_TYPE, MANIFEST_MEDIA_TYPE},
    registry::{Auth, Tls},
    text::RegistryText,
};

impl Auth {
    /// The credentials as oci-client takes them.
    pub(crate) fn to_registry(&self) -> RegistryAuth {
        match self {
            Self::Anonymous => RegistryAuth::Anonymous,
            Self::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }
}

/// What a push did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The manifest digest: `<repository>@<digest>` pulls exactly this image.
    pub digest: Digest,
    /// Blobs (layers and config) uploaded.
    pub uploaded: usize,
    /// Blobs the registry already had, so were not sent again.
    pub skipped: usize,
    /// Bytes uploaded.
    pub bytes: u64,
}

impl Image {
    /// Pushes the image to `reference` (`host[:port]/repository:tag`): every
    /// layer and the config the registry does not already have, then the
    /// manifest, byte for byte as [`Image::serialize`] makes it (so the digest
    /// the registry reports is [`Pushed::digest`]). A registry that wants
    /// credentials it was not given, or refuses the ones it was given, fails
    /// with [`Error::Unauthorized`].
    ///
    /// oci-client does the pushing; a panic in it (it unwraps a token that
    /// is not a header value) becomes [`Error::Crashed`] naming the
    /// registry.
    pub async fn push(&self, reference: &str, auth: &Auth, tls: &Tls) -> Result<Pushed, Error> {
        unwinding(
            reference,
            "pushing",
            self.push_unguarded(reference, auth, tls),
        )
        .await
    }

    async fn push_unguarded(
        &self,
        reference: &str,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Pushed, Error> {
        let image = crate::reference::parse(reference)?;
        let registry = image.resolve_registry().to_owned();
        let fail = |step: &'static str| {
            let reference = reference.to_owned();
            let registry = registry.clone();
            let with_credentials = *auth != Auth::Anonymous;
            move |source: OciDistributionError| {
                let text = Box::new(RegistryText::new(&source.to_string()));
                if is_unauthorized(&source) {
                    Error::Unauthorized {
                        registry,
                        with_credentials,
                        source: text,
                    }
                } else {
                    Error::Push {
                        reference,
                        step,
                        source: text,
                    }
                }
            }
        };
        let client = client(tls).map_err(fail("setting up the HTTP client"))?;
        client
            .auth(&image, &auth.to_registry(), RegistryOperation::Push)
            .await
            .map_err(fail("authenticating"))?;

        let s = self.serialize()?;
        let mut blobs: Vec<(&Digest, &[u8])> = self
            .layers()
            .iter()
            .map(|l| (l.digest(), l.blob()))
            .collect();
        blobs.push((&s.config_digest, &s.config));
        let mut pushed = Pushed {
            digest: s.digest.clone(),
            uploaded: 0,
            skipped: 0,
            bytes: 0,
        };
        for (digest, bytes) in blobs {
            let present = client
                .blob_exists(&image, digest.as_str())
                .await
                .map_err(fail("checking which blobs the registry has"))?;
            if present {
                pushed.skipped += 1;
                continue;
            }
            client
                .push_blob(&image, bytes.to_vec(), digest.as_str())
                .await
                .map_err(fail("uploading a blob"))?;
            pushed.uploaded += 1;
            pushed.bytes += bytes.len() as u64;
        }
        client
            .push_manifest_raw(
                &image,
                s.manifest,
                http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
            )
            .await
            .map_err(fail("uploading the manifest"))?;
        Ok(pushed)
    }
}

/// An oci-client registry client for `tls`, for pushes (a push has no
/// timeout: a binaries layer takes as long as it takes).
fn client(tls: &Tls) -> Result<Client, OciDistributionError> {
    let mut config = ClientConfig {
        // One request per blob instead of oci-client's small chunks (a
        // binaries layer is tens of megabytes).
        use_monolithic_push: true,
        ..ClientConfig::default()
    };
    match tls {
        Tls::System => {}
        Tls::Ca(pem) => config.extra_root_certificates.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data: pem.clone(),
        }),
        Tls::InsecureSkipVerify => config.accept_invalid_certificates = true,
        Tls::PlainHttp => config.protocol = ClientProtocol::Http,
    }
    crate::registry::install_crypto_provider();
    // NB: not Client::new, which falls back to a default client (ignoring
    // the CA) when the configured one cannot be built.
    Client::try_from(config)
}

/// Whether the registry turned the request away for want of (valid)
/// credentials.
fn is_unauthorized(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => true,
        OciDistributionError::ServerError { code, .. } => matches!(code, 401 | 403),
        OciDistributionError::RequestError(e) => {
            e.status().is_some_and(|s| matches!(s.as_u16(), 401 | 403))
        }
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
        _ => false,
    }
}

/// One image of an image index: a manifest already in the repository and
/// the platform it is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// The image's manifest digest.
    pub digest: Digest,
    /// The manifest's size in bytes.
    pub size: u64,
    /// Operating system, as Go spells it (`linux`).
    pub os: String,
    /// CPU architecture, as Go spells it (`amd64`, `arm64`).
    pub architecture: String,
}

/// Pushes an image index (a multi-platform image) naming `platforms`,
/// whose manifests must already be in `reference`'s repository. Returns the
/// index's digest.
pub async fn push_index(
    reference: &str,
    platforms: &[Platform],
    auth: &Auth,
    tls: &Tls,
) -> Result<Digest, Error> {
    unwinding(
        reference,
        "pushing an index",
        push_index_unguarded(reference, platforms, auth, tls),
    )
    .await
}

async fn push_index_unguarded(
    reference: &str,
    platforms: &[Platform],
    auth: &Auth,
    tls: &Tls,
) -> Result<Digest, Error> {
    let image = crate::reference::parse(reference)?;
    let fail = |step: &'static str| {
        let reference = reference.to_owned();
        move |source: OciDistributionError| Error::Push {
            reference,
            step,
            source: Box::new(RegistryText::new(&source.to_string())),
        }
    };
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": platforms.iter().map(|p| serde_json::json!({
            "mediaType": MANIFEST_MEDIA_TYPE,
            "digest": p.digest.as_str(),
            "size": p.size,
            "platform": {"os": p.os, "architecture": p.architecture},
        })).collect::<Vec<_>>(),
    });
    let bytes = serde_json::to_vec(&index).map_err(Error::Json)?;
    let client = client(tls).map_err(fail("setting up the HTTP client"))?;
    client
        .auth(&image, &auth.to_registry(), RegistryOperation::Push)
        .await
        .map_err(fail("authenticating"))?;
    let digest = Digest::of(&bytes);
    client
        .push_manifest_raw(
            &image,
            bytes,
            http::HeaderValue::from_static(INDEX_MEDIA_TYPE),
        )
        .await
        .map_err(fail("uploading the index"))?;
    Ok(digest)
}
