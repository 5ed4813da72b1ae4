//! Versions: what a dependency's `version` requires, which version a
//! package reference's tag names, and whether a package's Crossplane
//! constraint admits the release whose package API this project serves.

use oci::Digest;

/// A dependency's version requirement.
#[derive(Debug)]
pub(super) enum Requirement {
    Digest(Digest),
    Range(semver::VersionReq),
}

/// The Crossplane version whose package API crossplane-rs implements, for
/// packages' `spec.crossplane.version` constraints: v2.2 (managed resource
/// definitions and activation policies, ImageConfig `runtime.configRef`,
/// DeploymentRuntimeConfig, the ControllerConfig fields of v1).
pub const CROSSPLANE_VERSION: semver::Version = semver::Version::new(2, 2, 0);

/// Whether a package's `spec.crossplane.version` constraint admits
/// [`CROSSPLANE_VERSION`]; the message says what to do when not.
pub fn crossplane_admits(constraint: &str) -> Result<(), String> {
    let range = semver::VersionReq::parse(&without_v(constraint)).map_err(|e| {
        format!("spec.crossplane.version {constraint:?} is not a semver range: {e}")
    })?;
    if range.matches(&CROSSPLANE_VERSION) {
        Ok(())
    } else {
        Err(format!(
            "the package needs Crossplane {constraint}; crossplane-rs implements the package API of Crossplane v{CROSSPLANE_VERSION}{}: use a version of the package made for it, or set spec.ignoreCrossplaneConstraints: true",
            missing_after(&range)
        ))
    }
}

/// What a constraint that only newer Crossplane releases meet needs and
/// this project does not have, named; empty otherwise.
fn missing_after(range: &semver::VersionReq) -> &'static str {
    let newer = semver::Version::new(CROSSPLANE_VERSION.major, CROSSPLANE_VERSION.minor + 1, 0);
    if range.matches(&newer)
        || range.matches(&semver::Version::new(CROSSPLANE_VERSION.major + 1, 0, 0))
    {
        " (what later Crossplane releases added to the package API is not implemented here)"
    } else {
        ""
    }
}

/// Drops the `v` of `v1.2.3` wherever a version starts (`>=v1.0.0,
/// <v2.0.0` → `>=1.0.0, <2.0.0`).
fn without_v(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    for (i, c) in chars.iter().enumerate() {
        let starts_version = (*c == 'v' || *c == 'V')
            && chars.get(i + 1).is_some_and(char::is_ascii_digit)
            && (i == 0 || !chars[i - 1].is_ascii_alphanumeric());
        if !starts_version {
            out.push(*c);
        }
    }
    out
}

pub(super) fn requirement(version: &str) -> Result<Requirement, String> {
    if let Some(d) = Digest::parse(version.trim()) {
        return Ok(Requirement::Digest(d));
    }
    let range = if version.trim().is_empty() {
        "*".to_owned()
    } else {
        without_v(version)
    };
    semver::VersionReq::parse(&range)
        .map(Requirement::Range)
        .map_err(|e| format!("version {version:?} is neither a semver range nor a digest: {e}"))
}

/// The semver version a package reference's tag names, if it does.
pub(super) fn version_of(reference: &str) -> Option<semver::Version> {
    let last = reference.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    semver::Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}
