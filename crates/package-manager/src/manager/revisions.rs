//! The revisions a Provider makes: their names, the settings they follow
//! from the Provider, and the revision object itself. Pure.

use kube::{Resource as _, ResourceExt as _, api::ObjectMeta};
use oci::Digest;
use types::pkg::v1::{
    Provider, ProviderRevision, ProviderRevisionSpec, RevisionActivationPolicy, RevisionState,
};

use crate::labels;

/// Whether `package` names a digest (`repo@sha256:…`).
pub fn pinned_digest(package: &str) -> Option<Digest> {
    package.rsplit_once('@').and_then(|(_, d)| Digest::parse(d))
}

/// The revision name for a Provider and a package digest.
pub fn revision_name(provider: &str, digest: &Digest) -> String {
    let hex = digest.hex();
    let short = hex.get(..12).unwrap_or(hex);
    format!("{provider}-{short}")
}

pub fn pull_policy(p: &Provider) -> &str {
    p.spec
        .package_pull_policy
        .as_deref()
        .unwrap_or("IfNotPresent")
}

pub fn manual(p: &Provider) -> bool {
    p.spec.revision_activation_policy == Some(RevisionActivationPolicy::Manual)
}

/// The revision settings a Provider decides.
pub fn spec_from(p: &Provider) -> ProviderRevisionSpec {
    ProviderRevisionSpec {
        package_pull_policy: p.spec.package_pull_policy.clone(),
        package_pull_secrets: p.spec.package_pull_secrets.clone(),
        skip_dependency_resolution: p.spec.skip_dependency_resolution,
        ignore_crossplane_constraints: p.spec.ignore_crossplane_constraints,
        runtime_config_ref: p.spec.runtime_config_ref.clone(),
        controller_config_ref: p.spec.controller_config_ref.clone(),
        common_labels: Some(p.common_labels()).filter(|m| !m.is_empty()),
        common_annotations: Some(p.common_annotations()).filter(|m| !m.is_empty()),
        ..ProviderRevisionSpec::default()
    }
}

/// The revision `name` (number `number`) of Provider `p` for the package
/// at `digest` whose meta is `meta`, running `image` (None: nothing to run).
/// It records where it came from, the repositories its package depends on
/// (the one record of its dependencies, [`crate::deps::record`]) and the
/// package's capabilities.
pub fn revision_for(
    p: &Provider,
    (name, number): (&str, i64),
    digest: &Digest,
    image: Option<String>,
    meta: &oci::xpkg::Meta,
) -> ProviderRevision {
    let package = p.spec.package.clone();
    let mut common_labels = p.common_labels();
    common_labels.insert(labels::PACKAGE.to_owned(), p.name_any());
    let mut annotations = p.common_annotations();
    let capabilities = meta
        .raw
        .pointer("/spec/capabilities")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_str())
                .filter(|c| !c.contains(','))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    annotations.extend([
        (labels::SOURCE.to_owned(), package.clone()),
        (labels::DIGEST.to_owned(), digest.as_str().to_owned()),
        (
            labels::DEPENDENCIES.to_owned(),
            crate::deps::record(&meta.depends_on),
        ),
        (
            labels::DEPENDENCY_VERSIONS.to_owned(),
            crate::deps::record_versions(&meta.depends_on),
        ),
        (labels::CAPABILITIES.to_owned(), capabilities),
    ]);
    let state = if manual(p) {
        RevisionState::Inactive
    } else {
        RevisionState::Active
    };
    ProviderRevision {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(common_labels),
            annotations: Some(annotations),
            owner_references: p.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: ProviderRevisionSpec {
            desired_state: state,
            package,
            image,
            revision: number,
            ..spec_from(p)
        },
        status: None,
    }
}
