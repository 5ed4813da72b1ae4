//! Naming a CRD: a selector for the CRD a stack asks for (by name or by
//! kind), and the names a stack's CRDs are owned by
//! (`<plural>.<group>/<version>`).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A CRD a stack asks for: by name (`<plural>.<group>`) or by kind and
/// group, optionally at one version.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CrdSelector {
    /// The API group.
    pub group: String,
    /// The plural, when named by CRD name.
    pub plural: Option<String>,
    /// The kind, when named by kind.
    pub kind: Option<String>,
    /// The version the CRD must serve.
    pub version: Option<String>,
}

impl CrdSelector {
    /// `<plural>.<group>[/<version>]`, as ExtensionRequest.spec.crd and an
    /// app.yaml `dependsOn: [{crd: ...}]` write it.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (name, version) = match s.split_once('/') {
            Some((n, v)) => (n, Some(v)),
            None => (s, None),
        };
        let Some((plural, group)) = name.split_once('.') else {
            return Err(format!(
                "{s:?} is not a CRD name: write <plural>.<group>/<version>, e.g. redisclusters.cache.crossplane.io/v1alpha1"
            ));
        };
        let dns = |x: &str| {
            !x.is_empty()
                && x.len() <= 253
                && x.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        };
        if !dns(plural) || !dns(group) || !group.contains('.') {
            return Err(format!(
                "{s:?} is not a CRD name: <plural>.<group> must be lower-case DNS names and the group must have a dot, e.g. redisclusters.cache.crossplane.io/v1alpha1"
            ));
        }
        if version.is_some_and(|v| v.is_empty() || v.contains('/')) {
            return Err(format!(
                "{s:?} has no valid version after '/': write e.g. redisclusters.cache.crossplane.io/v1alpha1"
            ));
        }
        Ok(Self {
            group: group.to_owned(),
            plural: Some(plural.to_owned()),
            kind: None,
            version: version.map(str::to_owned),
        })
    }

    /// A CRD by `kind` and `apiVersion` (`group/version`), as an Extension's
    /// customresourcedefinitions name them.
    pub fn of_kind(kind: &str, api_version: &str) -> Self {
        let (group, version) = api_version.split_once('/').unwrap_or((api_version, ""));
        Self {
            group: group.to_owned(),
            plural: None,
            kind: Some(kind.to_owned()),
            version: (!version.is_empty()).then(|| version.to_owned()),
        }
    }

    /// Whether the CRD object `crd` is the one asked for (and serves the
    /// version, when one is asked for).
    pub fn matches(&self, crd: &Value) -> bool {
        let text = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let versions = versions_of(crd);
        self.matches_parts(
            text("/spec/group"),
            text("/spec/names/plural"),
            text("/spec/names/kind"),
            versions.iter().map(String::as_str),
        )
    }

    /// [`CrdSelector::matches`] on a CRD's parts: its group, plural, kind
    /// and the versions it defines.
    pub fn matches_parts<'a>(
        &self,
        group: &str,
        plural: &str,
        kind: &str,
        mut versions: impl Iterator<Item = &'a str>,
    ) -> bool {
        group == self.group
            && self.plural.as_deref().is_none_or(|p| p == plural)
            && self.kind.as_deref().is_none_or(|k| k == kind)
            && self
                .version
                .as_deref()
                .is_none_or(|v| versions.any(|have| have == v))
    }

    /// Whether an owned CRD listed as `<plural>.<group>/<version>` (the
    /// [`super::OWNS_ANNOTATION`] form) is this one. A selector by kind cannot be
    /// told from a name alone: `None`.
    pub fn matches_name(&self, owned: &str) -> Option<bool> {
        let plural = self.plural.as_deref()?;
        let (name, version) = owned.split_once('/').unwrap_or((owned, ""));
        Some(
            name == format!("{plural}.{}", self.group)
                && self.version.as_deref().is_none_or(|v| v == version),
        )
    }
}

impl fmt::Display for CrdSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.plural, &self.kind) {
            (Some(p), _) => write!(f, "{p}.{}", self.group)?,
            (None, Some(k)) => write!(f, "{k}.{}", self.group)?,
            (None, None) => write!(f, "{}", self.group)?,
        }
        if let Some(v) = &self.version {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// The versions a CRD object defines.
pub fn versions_of(crd: &Value) -> Vec<String> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `<plural>.<group>/<version>` for each version of each CRD.
pub fn owned_names(crds: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for crd in crds {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        for v in versions_of(crd) {
            out.push(format!("{name}/{v}"));
        }
    }
    out
}
