//! Crossplane packages (xpkg): an OCI image whose layer annotated
//! `io.crossplane.xpkg: base` (else the image's flattened filesystem)
//! holds `package.yaml`: one `meta.pkg.crossplane.io` Provider and the
//! package's CustomResourceDefinitions.
//!
//! This room is the package format: what a package holds ([`Contents`],
//! [`Meta`]), [`parse`] checks one, [`build`] writes one from a directory,
//! and [`yaml`] reads a YAML stream with its line numbers.
//! [`Fetcher`] (in [`crate::pull`]) pulls packages from registries.

mod build;
mod parse;
pub(crate) mod yaml;

use serde_json::Value;

pub(crate) use self::parse::{from_kept, kept};
pub use self::{
    build::build,
    parse::{parse, parse_within},
};
pub use crate::describe::package as describe;
pub use crate::limits::MAX_LAYER_BYTES as MAX_BYTES;
pub use crate::pull::{Fetcher, Package, auth_from_docker_config, registry_of, repository_of};

/// The annotation (and value) that marks the layer holding package.yaml.
pub const BASE_ANNOTATION: (&str, &str) = ("io.crossplane.xpkg", "base");
/// The file a package's layer holds.
pub const PACKAGE_FILE: &str = "package.yaml";
/// What the package cache keeps of a checked package instead of its
/// [`PACKAGE_FILE`]: its objects as JSON ([`kept`]). Never read from a
/// layer.
pub(crate) const KEPT_FILE: &str = "package.kept.json";
/// The API group of package metadata.
pub const META_GROUP: &str = "meta.pkg.crossplane.io";
/// The versions of [`META_GROUP`] a package's Provider may have.
pub const META_VERSIONS: [&str; 2] = ["v1", "v1alpha1"];

/// What a package may hold, for messages.
pub(crate) const WHAT_A_PACKAGE_HOLDS: &str = "a package holds one meta.pkg.crossplane.io Provider, CustomResourceDefinitions and admissionregistration.k8s.io/v1 Validating- or MutatingWebhookConfigurations";

/// A package's metadata (its `meta.pkg.crossplane.io` Provider).
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    /// metadata.name.
    pub name: String,
    /// spec.controller.image: the runtime image.
    pub controller_image: Option<String>,
    /// spec.crossplane.version: the Crossplane versions it supports.
    pub crossplane_version: Option<String>,
    /// spec.dependsOn.
    pub depends_on: Vec<Dependency>,
    /// The whole object.
    pub raw: Value,
}

/// One entry of a package's spec.dependsOn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// What kind of package it is: `provider`, `configuration`,
    /// `function`, or `package` (any kind, as `type` says; empty when it
    /// says nothing).
    pub kind: String,
    /// The package (repository) depended on: the value of `provider:`,
    /// `configuration:`, `function:` or `package:`.
    pub package: String,
    /// A semver range (`>=v1.0.0, <v2.0.0`) or a digest (`sha256:...`);
    /// empty when not given.
    pub version: String,
}

/// What a package holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Contents {
    /// Its metadata.
    pub meta: Meta,
    /// Its CustomResourceDefinitions, in order.
    pub objects: Vec<Value>,
    /// Its Validating- and MutatingWebhookConfigurations
    /// (`admissionregistration.k8s.io/v1`), in order: pointed at the
    /// provider's own runtime when installed.
    pub webhooks: Vec<Value>,
}

/// The webhook configuration kinds a package may hold.
pub const WEBHOOK_KINDS: [&str; 2] = [
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// Returns the tags that are full semver versions (`v1.2.3` or `1.2.3`,
/// pre-releases included), with their parsed versions.
pub fn semver_tags(tags: &[String]) -> Vec<(semver::Version, String)> {
    tags.iter()
        .filter_map(|t| {
            let v = t.strip_prefix('v').unwrap_or(t);
            semver::Version::parse(v).ok().map(|v| (v, t.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
