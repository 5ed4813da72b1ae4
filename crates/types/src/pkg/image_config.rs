//! ImageConfig (`pkg.crossplane.io/v1beta1`, as upstream): registry
//! settings for the images a package manager reads and runs, chosen by
//! image prefix. A platform engineer maps a public name onto a mirror
//! (`rewriteImage`) and names the credentials for it
//! (`registry.authentication.pullSecretRef`) without restarting anything.
//!
//! How they apply (decided in one place, [`resolve`]):
//! - every ImageConfig with `rewriteImage` whose prefix starts the image is a
//!   candidate; the longest matching prefix wins and replaces that prefix;
//! - the pull secret is then chosen the same way against the rewritten
//!   image (the credentials belong to the registry that is really read);
//! - a tie between equally long prefixes goes to the ImageConfig whose name
//!   sorts first, so the outcome never depends on list order.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::LocalObjectReference;

/// Desired state of an ImageConfig.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "An ImageConfig sets how images whose name starts with one of its prefixes are read: from another place (rewriteImage) and with which credentials (registry.authentication.pullSecretRef, a kubernetes.io/dockerconfigjson Secret in the runtimes' namespace, crossplane-rs-runtimes by default, where no runtime may read it). It applies to Provider packages, their dependencies, the runtime image their Deployment runs, stack packages (an ExtensionRequest's source) and a stack's controller image. Where several match, the longest prefix wins; the pull secret is matched against the rewritten name.",
    group = "pkg.crossplane.io",
    version = "v1beta1",
    kind = "ImageConfig",
    category = "crossplane",
    category = "pkg",
    printcolumn = r#"{"name":"PREFIX","type":"string","jsonPath":".spec.matchImages[0].prefix"}"#,
    printcolumn = r#"{"name":"REWRITE","type":"string","jsonPath":".spec.rewriteImage.prefix"}"#,
    printcolumn = r#"{"name":"PULL-SECRET","type":"string","jsonPath":".spec.registry.authentication.pullSecretRef.name"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ImageConfigSpec {
    /// MatchImages are the images this ImageConfig applies to: an image
    /// matches when its name starts with one of the prefixes (e.g.
    /// `xpkg.upbound.io/crossplane-contrib/`). Among all ImageConfigs the
    /// longest matching prefix wins.
    #[schemars(length(min = 1))]
    pub match_images: Vec<ImageMatch>,
    /// Registry sets how the registry of a matching image is reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryConfig>,
    /// RewriteImage reads a matching image from another place: the matched
    /// prefix is replaced by this one. The objects keep the name the user
    /// wrote; Provider and revision status show the rewritten one
    /// (`status.resolvedPackage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite_image: Option<ImageRewrite>,
    /// Verification requires matching packages, their dependencies and
    /// the runtime images they run to be signed (`provider: Cosign`): a
    /// package that is not, or not by one of the authorities, installs
    /// nothing and its revision says which authority failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<ImageVerification>,
    /// Runtime picks the runtime config of a matching Provider's runtime
    /// (`configRef`), unless the Provider names one itself
    /// (`spec.runtimeConfigRef` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<ImageRuntime>,
}

impl AsRef<ImageConfig> for ImageConfig {
    fn as_ref(&self) -> &ImageConfig {
        self
    }
}

/// One image prefix.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageMatch {
    /// Type of match: `Prefix` (the only one, and the default).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<MatchType>,
    /// Prefix an image name starts with, e.g. `registry.example.org/team`.
    #[schemars(length(min = 1))]
    pub prefix: String,
}

/// How an image is matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MatchType {
    /// The image name starts with the prefix.
    Prefix,
}

/// How a registry is reached.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryConfig {
    /// Authentication for the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<RegistryAuthentication>,
}

/// Credentials for a registry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryAuthentication {
    /// PullSecretRef names a kubernetes.io/dockerconfigjson Secret in the
    /// namespace Provider runtimes run in (crossplane-rs-runtimes by
    /// default; the node pulls runtime images with it there, and no
    /// runtime may read it). Its credentials are used to read
    /// matching packages, and it is added to the imagePullSecrets of a
    /// runtime Deployment whose image matches.
    pub pull_secret_ref: LocalObjectReference,
}

/// Where a matching image is read from instead.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageRewrite {
    /// Prefix replacing the matched prefix, e.g. `mirror.internal:5000/contrib`.
    #[schemars(length(min = 1))]
    pub prefix: String,
}

/// How matching images are verified.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageVerification {
    /// Provider of the verification: `Cosign`.
    pub provider: VerificationProvider,
    /// Cosign sets the authorities a signature must come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosign: Option<CosignVerificationConfig>,
}

/// Who verifies images.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum VerificationProvider {
    /// Sigstore's cosign signatures and attestations.
    Cosign,
}

/// The authorities of a Cosign verification: an image is verified when
/// one of them verifies it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CosignVerificationConfig {
    /// Authorities, each a key or a set of keyless identities; one must
    /// verify the image.
    pub authorities: Vec<CosignAuthority>,
}

/// One authority: who must have signed, and which attestations it must
/// have made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CosignAuthority {
    /// Name of the authority, used in conditions that say which failed.
    pub name: String,
    /// Key verifies signatures made with one key pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<KeyRef>,
    /// Keyless verifies signatures made with short-lived certificates for
    /// the identities listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyless: Option<KeylessRef>,
    /// Attestations this authority must also have signed, by predicate type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attestations: Vec<Attestation>,
}

/// A public key in a Secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    /// SecretRef names the Secret (in the package manager's namespace) and
    /// the key of it that holds the PEM public key.
    pub secret_ref: LocalSecretKeySelector,
    /// HashAlgorithm of the signatures: `sha256` by default.
    #[serde(default = "sha256")]
    #[schemars(default = "sha256")]
    pub hash_algorithm: String,
}

fn sha256() -> String {
    "sha256".to_owned()
}

/// A key of a Secret in the package manager's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalSecretKeySelector {
    /// Name of the Secret.
    pub name: String,
    /// Key of the Secret's data.
    pub key: String,
}

/// Keyless signatures: certificates issued for these identities.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeylessRef {
    /// Identities a certificate may be issued to; one must match.
    pub identities: Vec<Identity>,
    /// InsecureIgnoreSCT skips checking the certificate's embedded SCT.
    #[serde(
        default,
        rename = "insecureIgnoreSCT",
        skip_serializing_if = "Option::is_none"
    )]
    pub insecure_ignore_sct: Option<bool>,
}

/// An issuer and subject a keyless certificate must carry; the regular
/// expressions, when set, take precedence over the exact fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// Issuer, matched exactly.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub issuer: String,
    /// Subject, matched exactly.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    /// IssuerRegExp, a regular expression the issuer must match.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub issuer_reg_exp: String,
    /// SubjectRegExp, a regular expression the subject must match.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject_reg_exp: String,
}

/// An attestation an authority must have signed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attestation {
    /// Name of the attestation, used in conditions.
    pub name: String,
    /// PredicateType of the attestation (as `cosign attest --type`).
    pub predicate_type: String,
}

/// What a matching Provider's runtime is configured with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageRuntime {
    /// ConfigRef names the DeploymentRuntimeConfig of matching Providers'
    /// runtimes, unless a Provider names its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<super::v1::RuntimeConfigReference>,
}

/// An ImageConfig that was applied to an image, and what it did; recorded
/// in `status.appliedImageConfigRefs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageConfigRef {
    /// Name of the ImageConfig.
    pub name: String,
    /// What it did: `RewriteImage` or `SetImagePullSecret`.
    pub reason: String,
}

/// `reason` of an ImageConfig that rewrote an image.
pub const REASON_REWRITE: &str = "RewriteImage";
/// `reason` of an ImageConfig that gave an image its pull secret.
pub const REASON_PULL_SECRET: &str = "SetImagePullSecret";
/// `reason` of an ImageConfig that picked a runtime's runtime config.
pub const REASON_RUNTIME: &str = "ConfigureRuntime";
/// `reason` of an ImageConfig that verified an image's signatures.
pub const REASON_VERIFY: &str = "VerifyImage";

/// What the ImageConfigs make of one image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The image as it is read (rewritten, or as written).
    pub image: String,
    /// The pull secret an ImageConfig gives it, with that ImageConfig's name.
    pub pull_secret: Option<(String, String)>,
    /// The ImageConfigs applied, in the order they applied.
    pub applied: Vec<ImageConfigRef>,
}

/// The longest prefix of `config` that `image` starts with.
fn matched<'a>(config: &'a ImageConfig, image: &str) -> Option<&'a str> {
    config
        .spec
        .match_images
        .iter()
        .map(|m| m.prefix.as_str())
        .filter(|p| !p.is_empty() && image.starts_with(p))
        .max_by_key(|p| p.len())
}

/// The ImageConfig (among those `has` accepts) with the longest prefix
/// `image` starts with; ties go to the name that sorts first.
fn best<'a>(
    configs: &'a [impl AsRef<ImageConfig>],
    image: &str,
    has: impl Fn(&ImageConfig) -> bool,
) -> Option<(&'a ImageConfig, &'a str)> {
    let mut best: Option<(&ImageConfig, &str)> = None;
    for c in configs.iter().map(AsRef::as_ref).filter(|c| has(c)) {
        let Some(prefix) = matched(c, image) else {
            continue;
        };
        let better = match best {
            None => true,
            Some((b, bp)) => {
                prefix.len() > bp.len()
                    || (prefix.len() == bp.len() && c.metadata.name < b.metadata.name)
            }
        };
        if better {
            best = Some((c, prefix));
        }
    }
    best
}

/// What `configs` make of `image`: rewritten by the best rewriting
/// ImageConfig, then given the pull secret of the best one with
/// credentials for the rewritten name.
pub fn resolve(configs: &[impl AsRef<ImageConfig>], image: &str) -> Resolved {
    let mut out = Resolved {
        image: image.to_owned(),
        ..Resolved::default()
    };
    if let Some((c, prefix)) = best(configs, image, |c| c.spec.rewrite_image.is_some())
        && let Some(rewrite) = &c.spec.rewrite_image
    {
        out.image = format!("{}{}", rewrite.prefix, &image[prefix.len()..]);
        out.applied.push(ImageConfigRef {
            name: c.metadata.name.clone().unwrap_or_default(),
            reason: REASON_REWRITE.to_owned(),
        });
    }
    let secret_of = |c: &ImageConfig| {
        c.spec
            .registry
            .as_ref()
            .and_then(|r| r.authentication.as_ref())
            .map(|a| a.pull_secret_ref.name.clone())
    };
    if let Some((c, _)) = best(configs, &out.image, |c| secret_of(c).is_some())
        && let Some(secret) = secret_of(c)
    {
        let name = c.metadata.name.clone().unwrap_or_default();
        out.applied.push(ImageConfigRef {
            name: name.clone(),
            reason: REASON_PULL_SECRET.to_owned(),
        });
        out.pull_secret = Some((name, secret));
    }
    out
}

/// The runtime config the ImageConfigs pick for a runtime whose package
/// is read as `image` (after rewrites), with the picking ImageConfig's
/// name: the longest prefix among those with `runtime.configRef`.
pub fn runtime_config_for(
    configs: &[impl AsRef<ImageConfig>],
    image: &str,
) -> Option<(String, super::v1::RuntimeConfigReference)> {
    let reference = |c: &ImageConfig| c.spec.runtime.as_ref().and_then(|r| r.config_ref.clone());
    let (c, _) = best(configs, image, |c| reference(c).is_some())?;
    Some((c.metadata.name.clone().unwrap_or_default(), reference(c)?))
}

/// The ImageConfig that requires `image` (as it is read, after rewrites)
/// to be verified: the longest prefix among those with `verification`.
pub fn verification_for<'a>(
    configs: &'a [impl AsRef<ImageConfig>],
    image: &str,
) -> Option<&'a ImageConfig> {
    best(configs, image, |c| c.spec.verification.is_some()).map(|(c, _)| c)
}

/// Whether `config` could apply to `image` (any of its prefixes matches,
/// before or after a rewrite is not considered): used to find the objects
/// an edited ImageConfig may change.
pub fn may_apply(config: &ImageConfig, image: &str) -> bool {
    matched(config, image).is_some()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config(
        name: &str,
        prefixes: &[&str],
        rewrite: Option<&str>,
        secret: Option<&str>,
    ) -> ImageConfig {
        let mut c = ImageConfig::new(
            name,
            ImageConfigSpec {
                match_images: prefixes
                    .iter()
                    .map(|p| ImageMatch {
                        type_: Some(MatchType::Prefix),
                        prefix: (*p).to_owned(),
                    })
                    .collect(),
                registry: secret.map(|s| RegistryConfig {
                    authentication: Some(RegistryAuthentication {
                        pull_secret_ref: LocalObjectReference { name: s.to_owned() },
                    }),
                }),
                rewrite_image: rewrite.map(|p| ImageRewrite {
                    prefix: p.to_owned(),
                }),
                ..ImageConfigSpec::default()
            },
        );
        c.metadata.name = Some(name.to_owned());
        c
    }

    #[test]
    fn the_longest_prefix_rewrites_and_the_secret_follows_the_rewritten_name() {
        let configs = vec![
            config(
                "broad",
                &["xpkg.example.io/"],
                Some("mirror.local/all/"),
                None,
            ),
            config(
                "narrow",
                &["xpkg.example.io/acme/"],
                Some("10.0.0.1:5000/acme/"),
                None,
            ),
            config("creds", &["10.0.0.1:5000/"], None, Some("mirror-pull")),
            config(
                "public-creds",
                &["xpkg.example.io/"],
                None,
                Some("public-pull"),
            ),
        ];
        let r = resolve(&configs, "xpkg.example.io/acme/provider-a:v1");
        assert_eq!(r.image, "10.0.0.1:5000/acme/provider-a:v1");
        assert_eq!(
            r.pull_secret,
            Some(("creds".to_owned(), "mirror-pull".to_owned()))
        );
        assert_eq!(
            r.applied,
            vec![
                ImageConfigRef {
                    name: "narrow".into(),
                    reason: REASON_REWRITE.into()
                },
                ImageConfigRef {
                    name: "creds".into(),
                    reason: REASON_PULL_SECRET.into()
                },
            ]
        );
        let r = resolve(&configs, "xpkg.example.io/other/p:v1");
        assert_eq!(r.image, "mirror.local/all/other/p:v1");
        assert_eq!(r.pull_secret, None);
        let r = resolve(&configs, "elsewhere.io/p:v1");
        assert_eq!(
            r,
            Resolved {
                image: "elsewhere.io/p:v1".into(),
                ..Resolved::default()
            }
        );
    }

    #[test]
    fn ties_go_to_the_first_name_whatever_the_order() {
        let a = config("a", &["reg.io/x"], Some("one/x"), None);
        let b = config("b", &["reg.io/x"], Some("two/x"), None);
        assert_eq!(
            resolve(&[a.clone(), b.clone()], "reg.io/x/p:1").image,
            "one/x/p:1"
        );
        assert_eq!(resolve(&[b, a], "reg.io/x/p:1").image, "one/x/p:1");
    }

    #[test]
    fn runtime_configs_and_verification_go_to_the_longest_prefix() {
        let mut broad = config("broad", &["reg.io/"], None, None);
        broad.spec.runtime = Some(ImageRuntime {
            config_ref: Some(crate::pkg::v1::RuntimeConfigReference {
                name: "everyone".into(),
                ..Default::default()
            }),
        });
        let mut narrow = config("narrow", &["reg.io/team/"], None, None);
        narrow.spec.runtime = Some(ImageRuntime {
            config_ref: Some(crate::pkg::v1::RuntimeConfigReference {
                name: "team".into(),
                ..Default::default()
            }),
        });
        narrow.spec.verification = Some(ImageVerification {
            provider: VerificationProvider::Cosign,
            cosign: None,
        });
        let plain = config("plain", &["reg.io/team/p"], Some("m/"), None);
        let configs = [broad, narrow, plain];
        let picked = |image| runtime_config_for(&configs, image).map(|(n, r)| (n, r.name));
        assert_eq!(
            picked("reg.io/team/p:v1"),
            Some(("narrow".into(), "team".into()))
        );
        assert_eq!(
            picked("reg.io/other:v1"),
            Some(("broad".into(), "everyone".into()))
        );
        assert_eq!(picked("elsewhere.io/p:v1"), None);
        assert_eq!(
            verification_for(&configs, "reg.io/team/p:v1").and_then(|c| c.metadata.name.as_deref()),
            Some("narrow")
        );
        assert!(verification_for(&configs, "reg.io/other:v1").is_none());
    }

    #[test]
    fn an_upstream_image_config_with_verification_reads_back_unchanged() {
        let yaml = r#"
apiVersion: pkg.crossplane.io/v1beta1
kind: ImageConfig
metadata:
  name: verify
spec:
  matchImages:
    - prefix: xpkg.crossplane.io/crossplane-contrib
  verification:
    provider: Cosign
    cosign:
      authorities:
        - name: verify-signed-with-key
          key:
            secretRef:
              name: cosign-pub
              key: cosign.pub
            hashAlgorithm: sha256
          attestations:
            - name: sbom
              predicateType: spdxjson
        - name: keyless
          keyless:
            identities:
              - issuer: https://token.actions.githubusercontent.com
                subjectRegExp: https://github.com/crossplane-contrib/.*
            insecureIgnoreSCT: true
  runtime:
    configRef:
      name: big
"#;
        let c: ImageConfig = serde_saphyr::from_str(yaml).unwrap();
        let back = serde_json::to_value(&c).unwrap();
        let want: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(back, want);
    }

    #[test]
    fn an_empty_prefix_matches_nothing() {
        let c = config("empty", &[""], Some("evil.io/"), Some("s"));
        assert_eq!(
            resolve(std::slice::from_ref(&c), "reg.io/p:1").image,
            "reg.io/p:1"
        );
        assert!(!may_apply(&c, "reg.io/p:1"));
    }
}
