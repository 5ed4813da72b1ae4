//! Checking a package's `package.yaml`: exactly one meta Provider, CRDs
//! and webhook configurations, each object named by its document and line
//! when refused, all within the [`Limits`].

use std::borrow::Cow;

use serde_json::Value;

use super::{
    Contents, Dependency, META_GROUP, META_VERSIONS, Meta, PACKAGE_FILE, WEBHOOK_KINDS,
    WHAT_A_PACKAGE_HOLDS,
    yaml::{documents, yaml_fault},
};
use crate::{
    Error, Limits,
    limits::{Parse, YamlBudget, over, parsed_size},
    reference::{is_qualified, unqualified},
};

/// One object of a YAML stream: where it is, and what.
pub(crate) struct Object {
    /// "document N (line L)".
    pub(crate) at: String,
    pub(crate) number: usize,
    pub(crate) value: Value,
    pub(crate) meta: bool,
    /// A Validating- or MutatingWebhookConfiguration.
    pub(crate) webhook: bool,
}

/// The objects of `text` (the file `file`): meta Providers and CRDs
/// (anything else, a CRD without name or group, and malformed YAML are
/// refused), parsed within `budget`. Documents are numbered from 1, empty
/// ones (or only comments) skipped and not counted.
pub(crate) fn objects(
    reference: &str,
    layer: &str,
    file: &str,
    text: &str,
    budget: &mut YamlBudget,
) -> Result<Vec<Object>, Error> {
    let mut out = Vec::new();
    let mut number = 0;
    let documents = documents(text, budget.documents_left()).map_err(|max| {
        Error::invalid(
            reference,
            layer,
            over(file, "YAML documents per package", max),
        )
    })?;
    for (line, doc) in documents {
        let blank = doc.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#')
        });
        if blank {
            continue;
        }
        number += 1;
        let value: Value = budget.parse(file, &doc, parsed_size).map_err(|e| match e {
            Parse::Bound(refusal) => Error::invalid(reference, layer, refusal),
            Parse::Yaml(e) => Error::invalid(
                reference,
                layer,
                format!("document {number} {}", yaml_fault(line, &e)),
            ),
        })?;
        let at = format!("document {number} (line {line})");
        if value.is_null() {
            continue;
        }
        if !value.is_object() {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{at}: not an object; {WHAT_A_PACKAGE_HOLDS}"),
            ));
        }
        let field = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let webhook = group == "admissionregistration.k8s.io"
            && version == "v1"
            && WEBHOOK_KINDS.contains(&kind);
        if webhook
            && value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{at}: {kind} has no metadata.name"),
            ));
        }
        let meta = match (group, kind) {
            _ if webhook => false,
            (META_GROUP, "Provider") if META_VERSIONS.contains(&version) => true,
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                let text = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap_or_default();
                let missing: Vec<&str> = [
                    ("metadata.name", "/metadata/name"),
                    ("spec.group", "/spec/group"),
                ]
                .into_iter()
                .filter(|(_, p)| text(p).is_empty())
                .map(|(name, _)| name)
                .collect();
                if !missing.is_empty() {
                    let name = text("/metadata/name");
                    return Err(Error::invalid(
                        reference,
                        layer,
                        format!(
                            "{at}: CustomResourceDefinition {}has no {}",
                            if name.is_empty() {
                                String::new()
                            } else {
                                format!("{name} ")
                            },
                            missing.join(" and ")
                        ),
                    ));
                }
                false
            }
            _ => {
                let what = match (kind, api_version) {
                    ("", _) => "an object without kind".to_owned(),
                    (k, "") => format!("kind {k} (no apiVersion)"),
                    (k, v) => format!("kind {k} ({v})"),
                };
                return Err(Error::invalid(
                    reference,
                    layer,
                    format!("{at}: {what} is not allowed; {WHAT_A_PACKAGE_HOLDS}"),
                ));
            }
        };
        out.push(Object {
            at,
            number,
            value,
            meta,
            webhook,
        });
    }
    Ok(out)
}

/// Checks `package_yaml` (of package `reference`, found in `layer`) and
/// returns what it holds: exactly one `meta.pkg.crossplane.io/v1` (or
/// `v1alpha1`) Provider and any number of CustomResourceDefinitions.
/// Anything else (another kind, no or two metas, malformed YAML, a CRD
/// without name or group) is refused with [`Error::Invalid`], naming the
/// reference, the layer, the document and its line, and the fault. Within
/// the default [`Limits`].
pub fn parse(reference: &str, layer: &str, package_yaml: &[u8]) -> Result<Contents, Error> {
    parse_within(reference, layer, package_yaml, &Limits::default())
}

/// [`parse`] within `limits`: package.yaml's size, its documents, and what
/// they take parsed are bounded; dependencies must be fully qualified.
pub fn parse_within(
    reference: &str,
    layer: &str,
    package_yaml: &[u8],
    limits: &Limits,
) -> Result<Contents, Error> {
    let mut budget = YamlBudget::new(limits);
    if package_yaml.len() as u64 > limits.file_bytes {
        return Err(Error::invalid(
            reference,
            layer,
            over(
                &format!("{PACKAGE_FILE} ({} bytes)", package_yaml.len()),
                "bytes per file read into memory",
                limits.file_bytes,
            ),
        ));
    }
    let text = std::str::from_utf8(package_yaml).map_err(|e| {
        Error::invalid(
            reference,
            layer,
            format!("{PACKAGE_FILE} is not UTF-8: {e}"),
        )
    })?;
    let mut meta: Option<Object> = None;
    let mut crds = Vec::new();
    let mut webhooks = Vec::new();
    for object in objects(reference, layer, PACKAGE_FILE, text, &mut budget)? {
        if object.webhook {
            webhooks.push(object.value);
            continue;
        }
        if !object.meta {
            crds.push(object.value);
            continue;
        }
        if let Some(first) = &meta {
            return Err(Error::invalid(
                reference,
                layer,
                format!(
                    "{}: a second {META_GROUP} Provider (the first is document {}); a package has exactly one",
                    object.at, first.number
                ),
            ));
        }
        meta = Some(object);
    }
    let Some(meta) = meta else {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{PACKAGE_FILE} has no {META_GROUP}/v1 Provider; {WHAT_A_PACKAGE_HOLDS}"),
        ));
    };
    let meta = meta_of(meta.value);
    if let Some(d) = meta.depends_on.iter().find(|d| !is_qualified(&d.package)) {
        return Err(Error::invalid(
            reference,
            layer,
            format!("spec.dependsOn: {}", unqualified(&d.package)),
        ));
    }
    Ok(Contents {
        meta,
        objects: crds,
        webhooks,
    })
}

/// What the package cache keeps of a checked package: its objects as
/// JSON, the meta Provider first ([`from_kept`] reads it back). None when
/// they cannot be written as JSON.
pub(crate) fn kept(contents: &Contents) -> Option<Vec<u8>> {
    serde_json::to_vec(&Kept {
        meta: Cow::Borrowed(&contents.meta.raw),
        objects: Cow::Borrowed(&contents.objects),
        webhooks: Cow::Borrowed(&contents.webhooks),
    })
    .ok()
}

/// A package as [`kept`] wrote it: checked then, so only read back.
pub(crate) fn from_kept(reference: &str, layer: &str, json: &[u8]) -> Result<Contents, Error> {
    let kept: Kept<'static> = serde_json::from_slice(json).map_err(|e| {
        Error::invalid(
            reference,
            layer,
            format!("the package cache's copy of {PACKAGE_FILE} cannot be read: {e}"),
        )
    })?;
    Ok(Contents {
        meta: meta_of(kept.meta.into_owned()),
        objects: kept.objects.into_owned(),
        webhooks: kept.webhooks.into_owned(),
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Kept<'a> {
    meta: Cow<'a, Value>,
    objects: Cow<'a, [Value]>,
    webhooks: Cow<'a, [Value]>,
}

fn meta_of(raw: Value) -> Meta {
    let text = |p: &str| raw.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let depends_on = raw
        .pointer("/spec/dependsOn")
        .and_then(Value::as_array)
        .map(|deps| {
            deps.iter()
                .filter_map(|d| {
                    let (kind, package) = ["provider", "configuration", "function", "package"]
                        .iter()
                        .find_map(|k| Some((*k, d.get(*k).and_then(Value::as_str)?)))?;
                    // `package:` says its kind in `type` (Provider,
                    // Configuration, Function).
                    let kind = match kind {
                        "package" => d
                            .get("type")
                            .and_then(Value::as_str)
                            .map(str::to_ascii_lowercase)
                            .unwrap_or_default(),
                        k => k.to_owned(),
                    };
                    Some(Dependency {
                        kind,
                        package: package.to_owned(),
                        version: d
                            .get("version")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Meta {
        name: text("/metadata/name").unwrap_or_default(),
        controller_image: text("/spec/controller/image"),
        crossplane_version: text("/spec/crossplane/version"),
        depends_on,
        raw,
    }
}
