//! What a revision records of its package's dependencies, written once
//! when it is made: their repositories ([`labels::DEPENDENCIES`]) and the
//! version each must have ([`labels::DEPENDENCY_VERSIONS`]).

use std::collections::BTreeMap;

use kube::ResourceExt as _;
use oci::xpkg;
use types::pkg::v1::ProviderRevision;

use crate::labels;

/// The record of a package's dependencies a revision carries: their
/// repositories, comma-separated.
pub fn record(depends_on: &[xpkg::Dependency]) -> String {
    depends_on
        .iter()
        .map(|d| xpkg::repository_of(&d.package))
        .collect::<Vec<_>>()
        .join(",")
}

/// The repositories a revision's package depends on, as it records them.
pub fn dependencies_of(r: &ProviderRevision) -> Vec<String> {
    r.annotations()
        .get(labels::DEPENDENCIES)
        .map(|d| types::pkg::contract::annotations::entries(d))
        .unwrap_or_default()
}

/// The versions a package requires of its dependencies, as a revision
/// records them ([`labels::DEPENDENCY_VERSIONS`]): repository → range or
/// digest, as JSON.
pub fn record_versions(depends_on: &[xpkg::Dependency]) -> String {
    let map: BTreeMap<String, &str> = depends_on
        .iter()
        .map(|d| (xpkg::repository_of(&d.package), d.version.as_str()))
        .collect();
    serde_json::to_string(&map).unwrap_or_default()
}

/// The version revision `r` records for its dependency `repository`;
/// `None` when it records none (a revision made before versions were
/// recorded, or an unreadable record).
pub(super) fn recorded_version(r: &ProviderRevision, repository: &str) -> Option<String> {
    let record = r.annotations().get(labels::DEPENDENCY_VERSIONS)?;
    let map: BTreeMap<String, String> = serde_json::from_str(record).ok()?;
    map.get(repository).cloned()
}
