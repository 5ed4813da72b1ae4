//! Converting Objects between `kubernetes.crossplane.io/v1alpha1` (the
//! design's shape: one `managementPolicy`, `references[].fromObject` with a
//! `toFieldPath` from the Object's root) and `v1alpha2` (upstream
//! provider-kubernetes' shape: a `managementPolicies` list,
//! `references[].patchesFrom` with a `toFieldPath` inside the manifest,
//! `readiness.celQuery`, `watch`), both ways and without loss.
//!
//! Each version can say something the other cannot (a CEL readiness query,
//! a list of management policies no single policy names). What a
//! conversion cannot say is kept in the converted object's
//! [`STASH_ANNOTATION`]: the spec as it was (without the manifest, which
//! both versions hold alike) and the spec it was converted to. Converting
//! back while that converted spec is unchanged gives the original spec
//! again, exactly; once someone changed it through the other version, the
//! change wins and the plain mapping applies. Metadata, the manifest and
//! the status pass through unchanged.

use serde_json::{Map, Value, json};

/// The API group both versions are in.
pub const GROUP: &str = "kubernetes.crossplane.io";

/// The annotation holding what the version an Object was converted to
/// cannot say (see the module documentation).
pub const STASH_ANNOTATION: &str = "kubernetes.crossplane.io/conversion-stash";

/// The prefix of a v1alpha1 `toFieldPath` that lands in the manifest; a
/// v1alpha2 `toFieldPath` is relative to the manifest.
const MANIFEST_PATH: &str = "spec.forProvider.manifest.";

/// The versions served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The design's shape.
    V1alpha1,
    /// Upstream provider-kubernetes' shape.
    V1alpha2,
}

impl Version {
    /// The version an `apiVersion` names, when it is one of this group's.
    pub fn of(api_version: &str) -> Option<Self> {
        match api_version.strip_prefix(GROUP)?.strip_prefix('/')? {
            "v1alpha1" => Some(Self::V1alpha1),
            "v1alpha2" => Some(Self::V1alpha2),
            _ => None,
        }
    }

    /// Its `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::V1alpha1 => "kubernetes.crossplane.io/v1alpha1",
            Self::V1alpha2 => "kubernetes.crossplane.io/v1alpha2",
        }
    }
}

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The object or the version asked for is not an Object version served
    /// here.
    #[error("cannot convert {0}: not a kubernetes.crossplane.io v1alpha1 or v1alpha2 object")]
    NotServed(String),
    /// A v1alpha1 reference writes outside the manifest, which v1alpha2
    /// (and so the object-provider) cannot say.
    #[error(
        "spec.references[{0}].toFieldPath {1:?} is outside the manifest: a reference writes into the managed object, so the path starts with spec.forProvider.manifest. (e.g. spec.forProvider.manifest.data.key)"
    )]
    OutsideManifest(usize, String),
}

/// `object` as an Object of version `to`.
pub fn convert(object: &Value, to: &str) -> Result<Value, ConversionError> {
    let from = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (Some(from_version), Some(to_version)) = (Version::of(from), Version::of(to)) else {
        return Err(ConversionError::NotServed(format!("{from} to {to}")));
    };
    let mut out = object.clone();
    if let Some(o) = out.as_object_mut() {
        o.insert("apiVersion".into(), Value::String(to.to_owned()));
    }
    if from_version == to_version {
        return Ok(out);
    }
    let stash = take_stash(&mut out);
    let spec = object
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let (rest, manifest) = split_manifest(&spec);
    // What the API server filled in by default since is no change.
    let restored = stash.filter(|s| {
        s.to == to_version
            && without_defaults(s.converted.clone()) == without_defaults(rest.clone())
    });
    let converted_rest = match restored {
        Some(s) => s.original,
        None => {
            if from_version == Version::V1alpha1 {
                within_manifest(&rest)?;
            }
            map(&rest, from_version)
        }
    };
    // What converting back would lose is kept for the way back.
    if without_defaults(map(&converted_rest, to_version)) != without_defaults(rest.clone()) {
        put_stash(
            &mut out,
            &Stash {
                to: from_version,
                original: rest,
                converted: converted_rest.clone(),
            },
        );
    }
    if let Some(o) = out.as_object_mut() {
        o.insert(
            "spec".into(),
            Value::Object(join_manifest(converted_rest, manifest)),
        );
    }
    Ok(out)
}

/// What [`STASH_ANNOTATION`] holds: the spec an object had at version
/// `to` (without its manifest), and the spec (without its manifest) it was
/// converted to.
#[derive(Debug, PartialEq)]
struct Stash {
    to: Version,
    original: Map<String, Value>,
    converted: Map<String, Value>,
}

/// The stash of `object`, removed from it (a malformed one is dropped).
fn take_stash(object: &mut Value) -> Option<Stash> {
    let annotations = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)?;
    let text = annotations.remove(STASH_ANNOTATION)?;
    if annotations.is_empty()
        && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("annotations");
    }
    let json: Value = serde_json::from_str(text.as_str()?).ok()?;
    Some(Stash {
        to: Version::of(json.get("apiVersion")?.as_str()?)?,
        original: json.get("spec")?.as_object()?.clone(),
        converted: json.get("as")?.as_object()?.clone(),
    })
}

fn put_stash(object: &mut Value, stash: &Stash) {
    let text = json!({
        "apiVersion": stash.to.api_version(),
        "spec": stash.original,
        "as": stash.converted,
    })
    .to_string();
    let Some(o) = object.as_object_mut() else {
        return;
    };
    let meta = o.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(a) = annotations.as_object_mut() {
        // The API server refuses an object whose annotations exceed 256
        // KiB, and with it a whole list at this version: a stash that
        // would not fit is not kept (the conversion is then the plain
        // mapping, as after a change), never a list that fails.
        let used: usize = a
            .iter()
            .filter(|(k, _)| k.as_str() != STASH_ANNOTATION)
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if used + STASH_ANNOTATION.len() + text.len() <= MAX_ANNOTATIONS {
            a.insert(STASH_ANNOTATION.into(), Value::String(text));
        }
    }
}

/// How many bytes of annotations an object may have (the API server's
/// limit), less a margin for what others add.
const MAX_ANNOTATIONS: usize = 256 * 1024 - 4096;

/// The spec without `forProvider.manifest`, and the manifest.
fn split_manifest(spec: &Map<String, Value>) -> (Map<String, Value>, Option<Value>) {
    let mut rest = spec.clone();
    let mut manifest = None;
    if let Some(fp) = rest.get_mut("forProvider").and_then(Value::as_object_mut) {
        manifest = fp.remove("manifest");
        if fp.is_empty() {
            rest.remove("forProvider");
        }
    }
    (rest, manifest)
}

fn join_manifest(mut rest: Map<String, Value>, manifest: Option<Value>) -> Map<String, Value> {
    if let Some(m) = manifest {
        let fp = rest.entry("forProvider").or_insert_with(|| json!({}));
        if let Some(fp) = fp.as_object_mut() {
            fp.insert("manifest".into(), m);
        }
    }
    rest
}

/// `spec` (without its manifest) of version `from`, in the other version:
/// the plain mapping, which loses what the other version cannot say.
fn map(spec: &Map<String, Value>, from: Version) -> Map<String, Value> {
    match from {
        Version::V1alpha1 => up(spec),
        Version::V1alpha2 => down(spec),
    }
}

/// The v1alpha2 management policies a v1alpha1 management policy means.
fn policies_of(policy: Option<&str>) -> Vec<&'static str> {
    match policy {
        Some("ObserveCreateUpdate") => vec!["Observe", "Create", "Update"],
        Some("ObserveDelete") => vec!["Observe", "Delete"],
        Some("Observe") => vec!["Observe"],
        _ => vec!["*"],
    }
}

/// The v1alpha1 management policy closest to a v1alpha2 list: the one that
/// allows the most of what the list allows and nothing it does not (every
/// policy observes).
fn policy_of(policies: &[Value]) -> &'static str {
    let has = |p: &str| policies.iter().any(|v| v == "*" || v == p);
    if has("Create") && has("Update") && has("Delete") {
        "Default"
    } else if has("Create") && has("Update") {
        "ObserveCreateUpdate"
    } else if has("Delete") {
        "ObserveDelete"
    } else {
        "Observe"
    }
}

/// `spec` without what v1alpha2's schema fills in by default where
/// v1alpha1 says nothing (`watch: false`, the default readiness, the
/// default deletion propagation): the same
/// meaning, so neither a reason to keep a stash nor a change to it.
fn without_defaults(mut spec: Map<String, Value>) -> Map<String, Value> {
    if spec.get("watch") == Some(&Value::Bool(false)) {
        spec.remove("watch");
    }
    if spec.get("readiness") == Some(&json!({"policy": "SuccessfulCreate"})) {
        spec.remove("readiness");
    }
    if let Some(fp) = spec.get_mut("forProvider").and_then(Value::as_object_mut) {
        if fp.get("deletionPropagationPolicy") == Some(&json!("Background")) {
            fp.remove("deletionPropagationPolicy");
        }
        if fp.is_empty() {
            spec.remove("forProvider");
        }
    }
    spec
}

/// Refuses a v1alpha1 spec whose references write outside the manifest.
fn within_manifest(spec: &Map<String, Value>) -> Result<(), ConversionError> {
    let refs = spec.get("references").and_then(Value::as_array);
    for (i, r) in refs
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        // patchesFrom (upstream's v1alpha1 word) writes inside the manifest
        // already.
        if r.get("fromObject").is_some()
            && let Some(to) = r.get("toFieldPath").and_then(Value::as_str)
            && !to.starts_with(MANIFEST_PATH)
        {
            return Err(ConversionError::OutsideManifest(i, to.to_owned()));
        }
    }
    Ok(())
}

/// v1alpha1 → v1alpha2.
fn up(spec: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in spec {
        match key.as_str() {
            "managementPolicy" => {}
            "references" => {
                let refs = value.as_array().map(Vec::as_slice).unwrap_or_default();
                out.insert(key.clone(), refs.iter().map(reference_up).collect());
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    let policy = spec.get("managementPolicy").and_then(Value::as_str);
    // In v1alpha1 an Orphan deletion policy always wins; in v1alpha2 a
    // list other than ["*"] decides alone: ObserveDelete that orphans only
    // observes.
    let orphan = spec.get("deletionPolicy").and_then(Value::as_str) == Some("Orphan");
    let policies = match policy {
        Some("ObserveDelete") if orphan => vec!["Observe"],
        _ => policies_of(policy),
    };
    out.insert("managementPolicies".into(), json!(policies));
    out
}

fn reference_up(r: &Value) -> Value {
    let Some(r) = r.as_object() else {
        return r.clone();
    };
    let mut out = Map::new();
    for (key, value) in r {
        match key.as_str() {
            "fromObject" => {
                out.insert("patchesFrom".into(), value.clone());
            }
            // fromObject's path is in the Object; patchesFrom's (upstream's
            // v1alpha1) in the manifest already.
            "toFieldPath" if r.contains_key("fromObject") => {
                let path = value.as_str().unwrap_or_default();
                let relative = path.strip_prefix(MANIFEST_PATH).unwrap_or(path);
                out.insert(key.clone(), Value::String(relative.to_owned()));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// v1alpha2 → v1alpha1.
fn down(spec: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in spec {
        match key.as_str() {
            // Nothing in v1alpha1 says these (nor anything of forProvider
            // beside the manifest, such as deletionPropagationPolicy).
            "managementPolicies" | "watch" | "publishConnectionDetailsTo" | "forProvider" => {}
            "references" => {
                let refs = value.as_array().map(Vec::as_slice).unwrap_or_default();
                out.insert(key.clone(), refs.iter().map(reference_down).collect());
            }
            "readiness" => {
                // DeriveFromCelQuery has no v1alpha1 word: the default.
                let policy = value
                    .get("policy")
                    .and_then(Value::as_str)
                    .filter(|p| ["SuccessfulCreate", "DeriveFromObject", "AllTrue"].contains(p))
                    .unwrap_or("SuccessfulCreate");
                out.insert(key.clone(), json!({"policy": policy}));
            }
            "connectionDetails" => {
                let details = value.as_array().map(Vec::as_slice).unwrap_or_default();
                out.insert(key.clone(), details.iter().map(detail_down).collect());
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    let policies = spec
        .get("managementPolicies")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let policy = if spec.contains_key("managementPolicies") {
        policy_of(policies)
    } else {
        "Default"
    };
    out.insert("managementPolicy".into(), Value::String(policy.to_owned()));
    out
}

fn reference_down(r: &Value) -> Value {
    let Some(r) = r.as_object() else {
        return r.clone();
    };
    let mut out = Map::new();
    for (key, value) in r {
        match key.as_str() {
            "patchesFrom" => {
                out.insert("fromObject".into(), value.clone());
            }
            "dependsOn" => {
                let mut d = value.as_object().cloned().unwrap_or_default();
                d.entry("apiVersion")
                    .or_insert_with(|| json!("kubernetes.crossplane.io/v1alpha1"));
                d.entry("kind").or_insert_with(|| json!("Object"));
                out.insert(key.clone(), Value::Object(d));
            }
            "toFieldPath" => {}
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if let Some(from) = r.get("patchesFrom") {
        let relative = r
            .get("toFieldPath")
            .and_then(Value::as_str)
            .or_else(|| from.get("fieldPath").and_then(Value::as_str))
            .unwrap_or_default();
        out.insert(
            "toFieldPath".into(),
            Value::String(format!("{MANIFEST_PATH}{relative}")),
        );
    } else if let Some(to) = r.get("toFieldPath") {
        out.insert("toFieldPath".into(), to.clone());
    }
    Value::Object(out)
}

fn detail_down(d: &Value) -> Value {
    let Some(d) = d.as_object() else {
        return d.clone();
    };
    let mut out: Map<String, Value> = d
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "uid" | "resourceVersion"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.entry("fieldPath").or_insert_with(|| json!(""));
    out.entry("toConnectionSecretKey")
        .or_insert_with(|| json!(""));
    Value::Object(out)
}

#[cfg(test)]
mod tests;
