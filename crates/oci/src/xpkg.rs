//! Crossplane packages (xpkg): an OCI image whose layer annotated
//! `io.crossplane.xpkg: base` (else the image's flattened filesystem)
//! holds `package.yaml`: one `meta.pkg.crossplane.io` Provider and the
//! package's CustomResourceDefinitions.
//!
//! [`build`] writes a package from a directory, [`parse`] checks one, and
//! [`Fetcher`] (in [`crate::pull`]) pulls packages from registries.

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use crate::pull::{Fetcher, Package, auth_from_docker_config, registry_of, repository_of};
use crate::{
    Config, Error, Image, LayerBuilder, Limits,
    limits::{Parse, YamlBudget, parsed_size},
};

/// The annotation (and value) that marks the layer holding package.yaml.
pub const BASE_ANNOTATION: (&str, &str) = ("io.crossplane.xpkg", "base");
/// The file a package's layer holds.
pub const PACKAGE_FILE: &str = "package.yaml";
/// The largest (compressed) layer a package may have: the default of
/// [`Limits::layer_bytes`], where the other bounds are.
pub const MAX_BYTES: u64 = 200 * 1024 * 1024;
/// The API group of package metadata.
pub const META_GROUP: &str = "meta.pkg.crossplane.io";
/// The versions of [`META_GROUP`] a package's Provider may have.
pub const META_VERSIONS: [&str; 2] = ["v1", "v1alpha1"];

/// What a package may hold, for messages.
const WHAT_A_PACKAGE_HOLDS: &str = "a package holds one meta.pkg.crossplane.io Provider, CustomResourceDefinitions and admissionregistration.k8s.io/v1 Validating- or MutatingWebhookConfigurations";

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

/// A YAML stream split into documents: the line (1-based) each document's
/// content starts on, and its text. More than `max` documents (empty ones
/// too: each costs memory here) is `Err(max)`.
fn documents(text: &str, max: usize) -> Result<Vec<(usize, String)>, usize> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") || trimmed.starts_with("---\t") {
            if docs.len() >= max {
                return Err(max);
            }
            docs.push((start, std::mem::take(&mut current)));
            // Content after the marker (`--- {a: 1}`) stays on its line.
            let rest = &trimmed[3..];
            if rest.trim().is_empty() {
                start = i + 2;
            } else {
                start = i + 1;
                current.push_str(rest);
                current.push('\n');
            }
            continue;
        }
        if trimmed == "..." {
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    docs.push((start, current));
    Ok(docs)
}

/// Where a YAML error is (line and column within the parsed text, when
/// known) and what it says, on one line (the parser's message may add a
/// snippet, and starts with its own "line N column M: ").
pub(crate) fn yaml_error(e: &serde_saphyr::Error) -> (Option<(usize, u64)>, String) {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let what = match first.split_once(": ") {
        Some((place, rest)) if place.starts_with("line ") => rest,
        _ => first,
    };
    let place = e
        .location()
        .filter(|l| l.line() > 0)
        .map(|l| (usize::try_from(l.line()).unwrap_or(1), l.column()));
    (place, what.to_owned())
}

/// "(line L[, column C]): malformed YAML: what", L counted in the whole
/// stream (the parser counts within the document starting on `start`).
fn yaml_fault(start: usize, e: &serde_saphyr::Error) -> String {
    match yaml_error(e) {
        (Some((line, column)), what) => {
            let line = start + line - 1;
            format!("(line {line}, column {column}): malformed YAML: {what}")
        }
        (None, what) => format!("(line {start}): malformed YAML: {what}"),
    }
}

/// One object of a YAML stream: where it is, and what.
struct Object {
    /// "document N (line L)".
    at: String,
    number: usize,
    value: Value,
    meta: bool,
    /// A Validating- or MutatingWebhookConfiguration.
    webhook: bool,
}

/// The webhook configuration kinds a package may hold.
pub const WEBHOOK_KINDS: [&str; 2] = [
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// The objects of `text` (the file `file`): meta Providers and CRDs
/// (anything else, a CRD without name or group, and malformed YAML are
/// refused), parsed within `budget`. Documents are numbered from 1, empty
/// ones (or only comments) skipped and not counted.
fn objects(
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
            crate::limits::over(file, "YAML documents per package", max),
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
            crate::limits::over(
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
    if let Some(d) = meta
        .depends_on
        .iter()
        .find(|d| !crate::reference::is_qualified(&d.package))
    {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "spec.dependsOn: {}",
                crate::reference::unqualified(&d.package)
            ),
        ));
    }
    Ok(Contents {
        meta,
        objects: crds,
        webhooks,
    })
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

/// Builds a package from `dir`: `package.yaml` (the meta, and possibly
/// CRDs) and every `.yaml`/`.yml` file under `crds/` (by name; CRDs only).
/// With `runtime_image` the meta's spec.controller.image is set to it. The
/// image (linux/amd64: packages are platform independent, and pulls look
/// for linux/amd64) has one layer, annotated `io.crossplane.xpkg: base`,
/// holding the checked `package.yaml`: the meta, then the CRDs, as `---`
/// separated documents. The same input gives the same digest.
pub fn build(dir: &Path, runtime_image: Option<&str>) -> Result<Image, Error> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| Error::read(p, e));
    let source = dir.join(PACKAGE_FILE);
    let mut contents = parse(&dir.display().to_string(), PACKAGE_FILE, &read(&source)?)?;
    let mut budget = YamlBudget::new(&Limits::default());
    let crds = dir.join("crds");
    if crds.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&crds)
            .map_err(|e| Error::read(&crds, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            let name = f.display().to_string();
            let bytes = read(&f)?;
            let text = std::str::from_utf8(&bytes).map_err(|e| {
                Error::invalid(&dir.display().to_string(), &name, format!("not UTF-8: {e}"))
            })?;
            for object in objects(&dir.display().to_string(), &name, &name, text, &mut budget)? {
                if object.meta {
                    return Err(Error::invalid(
                        &dir.display().to_string(),
                        &name,
                        format!(
                            "{}: the {META_GROUP} Provider belongs in {PACKAGE_FILE}, not under crds/",
                            object.at
                        ),
                    ));
                }
                if object.webhook {
                    contents.webhooks.push(object.value);
                } else {
                    contents.objects.push(object.value);
                }
            }
        }
    }
    if let Some(image) = runtime_image {
        set_controller_image(&mut contents.meta.raw, image);
    }
    let mut yaml = String::new();
    for (i, object) in std::iter::once(&contents.meta.raw)
        .chain(contents.objects.iter())
        .chain(contents.webhooks.iter())
        .enumerate()
    {
        if i > 0 {
            yaml.push_str("---\n");
        }
        yaml.push_str(&serde_json::to_string(object).map_err(Error::Json)?);
        yaml.push('\n');
    }
    // Checked as a puller will read it.
    parse(&dir.display().to_string(), PACKAGE_FILE, yaml.as_bytes())?;
    let layer = LayerBuilder::new()
        .file(PACKAGE_FILE, 0o644, yaml.into_bytes())
        .build()?
        .annotate(BASE_ANNOTATION.0, BASE_ANNOTATION.1);
    Ok(Image::new(Config {
        os: "linux".to_owned(),
        architecture: "amd64".to_owned(),
        ..Config::default()
    })
    .layer(layer))
}

/// Sets `spec.controller.image` of a meta object, making `spec` and
/// `spec.controller` as needed.
fn set_controller_image(meta: &mut Value, image: &str) {
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let spec = meta
        .entry("spec")
        .or_insert_with(|| Value::Object(Default::default()));
    if !spec.is_object() {
        *spec = Value::Object(Default::default());
    }
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let controller = spec
        .entry("controller")
        .or_insert_with(|| Value::Object(Default::default()));
    if !controller.is_object() {
        *controller = Value::Object(Default::default());
    }
    if let Some(c) = controller.as_object_mut() {
        c.insert("image".into(), Value::String(image.to_owned()));
    }
}

/// What `xpkg inspect` prints: the reference, digest and meta (name,
/// runtime image, Crossplane constraint, dependencies), then one line per
/// CRD: name, group, kind, versions.
pub fn describe(package: &Package) -> String {
    use std::fmt::Write as _;
    let m = &package.contents.meta;
    let mut out = String::new();
    let _ = writeln!(out, "package:    {}", package.reference);
    let _ = writeln!(out, "digest:     {}", package.digest);
    let _ = writeln!(out, "name:       {}", m.name);
    let _ = writeln!(
        out,
        "controller: {}",
        m.controller_image.as_deref().unwrap_or("(none)")
    );
    let _ = writeln!(
        out,
        "crossplane: {}",
        m.crossplane_version.as_deref().unwrap_or("(any)")
    );
    if m.depends_on.is_empty() {
        let _ = writeln!(out, "dependsOn:  (none)");
    }
    for d in &m.depends_on {
        let version = if d.version.is_empty() {
            "(any)"
        } else {
            &d.version
        };
        let _ = writeln!(out, "dependsOn:  {} {version}", d.package);
    }
    let _ = writeln!(out, "CRDs:       {}", package.contents.objects.len());
    for crd in &package.contents.objects {
        let text = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("-");
        let versions: Vec<&str> = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| v.get("name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} {} {} {}",
            text("/metadata/name"),
            text("/spec/group"),
            text("/spec/names/kind"),
            if versions.is_empty() {
                "-".to_owned()
            } else {
                versions.join(",")
            }
        );
    }
    out
}

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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use std::io::Read as _;

    const META: &str = "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: provider-test\nspec:\n  controller:\n    image: example/runtime:v1\n  crossplane:\n    version: \">=v1.14.0\"\n  dependsOn:\n  - provider: xpkg.example.org/example/b\n    version: \">=v1.0.0, <v2.0.0\"\n  - function: xpkg.example.org/example/f\n    version: \"sha256:0123\"\n";
    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.org\nspec:\n  group: example.org\n  names:\n    kind: Thing\n";

    fn fault(yaml: &str) -> String {
        parse("10.0.0.1:5000/x:v1", "sha256:abcd", yaml.as_bytes())
            .unwrap_err()
            .to_string()
    }

    /// package.yaml of a built image's only layer.
    fn package_yaml(image: &Image) -> String {
        let mut gz = flate2::read::GzDecoder::new(image.layers()[0].blob());
        let mut tar = Vec::new();
        gz.read_to_end(&mut tar).unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap().to_str(), Some(PACKAGE_FILE));
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn the_example_meta_and_its_crds_parse() {
        let c = parse(
            "r",
            "l",
            format!("# a package\n---\n{META}---\n{CRD}---\n").as_bytes(),
        )
        .unwrap();
        assert_eq!(c.meta.name, "provider-test");
        assert_eq!(
            c.meta.controller_image.as_deref(),
            Some("example/runtime:v1")
        );
        assert_eq!(c.meta.crossplane_version.as_deref(), Some(">=v1.14.0"));
        assert_eq!(
            c.meta.depends_on,
            [
                Dependency {
                    kind: "provider".into(),
                    package: "xpkg.example.org/example/b".into(),
                    version: ">=v1.0.0, <v2.0.0".into()
                },
                Dependency {
                    kind: "function".into(),
                    package: "xpkg.example.org/example/f".into(),
                    version: "sha256:0123".into()
                }
            ]
        );
        assert_eq!(c.meta.raw["kind"], "Provider");
        assert_eq!(c.objects.len(), 1);
        assert_eq!(c.objects[0]["spec"]["group"], "example.org");
        let alpha = META.replace("/v1\n", "/v1alpha1\n");
        assert_eq!(
            parse("r", "l", alpha.as_bytes()).unwrap().meta.name,
            "provider-test"
        );
    }

    #[test]
    fn another_kind_is_refused_naming_reference_layer_document_and_line() {
        let f = fault(&format!(
            "{META}---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"
        ));
        assert_eq!(
            f,
            "package 10.0.0.1:5000/x:v1, layer sha256:abcd: document 2 (line 16): kind Secret (v1) \
             is not allowed; a package holds one meta.pkg.crossplane.io Provider, \
             CustomResourceDefinitions and admissionregistration.k8s.io/v1 Validating- or \
             MutatingWebhookConfigurations"
        );
        let f = fault(&META.replace("meta.pkg.crossplane.io/v1", "meta.pkg.crossplane.io/v9"));
        assert!(
            f.contains(
                "document 1 (line 1): kind Provider (meta.pkg.crossplane.io/v9) is not allowed"
            ),
            "{f}"
        );
        let f = fault(&format!("{META}---\n- a list\n"));
        assert!(f.contains("document 2 (line 16): not an object"), "{f}");
    }

    #[test]
    fn webhook_configurations_are_held_apart_from_the_crds() {
        let hook = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: things\nwebhooks: []\n";
        let c = parse("r", "l", format!("{META}---\n{CRD}---\n{hook}").as_bytes()).unwrap();
        assert_eq!(c.objects.len(), 1);
        assert_eq!(c.webhooks.len(), 1);
        assert_eq!(c.webhooks[0]["metadata"]["name"], "things");
        let f = fault(&format!(
            "{META}---\n{}",
            hook.replace("  name: things\n", "  labels: {}\n")
        ));
        assert!(
            f.ends_with("ValidatingWebhookConfiguration has no metadata.name"),
            "{f}"
        );
    }

    #[test]
    fn zero_metas_are_refused() {
        assert_eq!(
            fault(CRD),
            "package 10.0.0.1:5000/x:v1, layer sha256:abcd: package.yaml has no \
             meta.pkg.crossplane.io/v1 Provider; a package holds one meta.pkg.crossplane.io \
             Provider, CustomResourceDefinitions and admissionregistration.k8s.io/v1 Validating- \
             or MutatingWebhookConfigurations"
        );
        assert!(fault("").contains("has no meta.pkg.crossplane.io/v1 Provider"));
    }

    #[test]
    fn two_metas_are_refused() {
        let f = fault(&format!("{META}---\n{CRD}---\n{META}"));
        assert!(
            f.ends_with(
                "document 3 (line 25): a second meta.pkg.crossplane.io Provider (the first is \
                 document 1); a package has exactly one"
            ),
            "{f}"
        );
    }

    #[test]
    fn malformed_yaml_names_its_document_and_line() {
        let f = fault(&format!("{META}---\n{CRD}---\nkind: [unclosed\n"));
        assert!(
            f.starts_with(
                "package 10.0.0.1:5000/x:v1, layer sha256:abcd: document 3 (line 25, column"
            ),
            "{f}"
        );
        assert!(
            f.contains("): malformed YAML: ") && !f.contains('\n'),
            "{f}"
        );
        // The line of the fault itself, counted in the whole stream.
        let f = fault(&format!("{META}---\nkind: a\nspec:\n  x: 1\n   y: 2\n"));
        assert!(
            f.contains("document 2 (line 19, column 5): malformed YAML: mapping values"),
            "{f}"
        );
    }

    #[test]
    fn an_unqualified_dependency_is_refused() {
        let f = fault(&META.replace("xpkg.example.org/example/b", "example/b"));
        assert!(
            f.ends_with(
                "spec.dependsOn: \"example/b\" is not fully qualified: it must start with its \
                 registry host (a package is never looked for on docker.io by default), e.g. \
                 xpkg.crossplane.io/crossplane-contrib/provider-nop:v0.4.0"
            ),
            "{f}"
        );
    }

    #[test]
    fn package_yaml_over_its_bounds_is_refused_naming_the_bound() {
        let limits = Limits {
            documents: 3,
            file_bytes: 4096,
            ..Limits::default()
        };
        let within = |yaml: &str| {
            parse_within("r", "l", yaml.as_bytes(), &limits)
                .unwrap_err()
                .to_string()
        };
        // Empty documents count: each costs memory before it is parsed.
        let f = within(&format!("{META}{}", "---\n".repeat(10)));
        assert_eq!(
            f,
            "package r, layer l: package.yaml is over the bound on YAML documents per package (3)"
        );
        let f = within(&format!("{META}---\n{CRD}---\n{CRD}---\n{CRD}"));
        assert!(
            f.ends_with("package.yaml is over the bound on YAML documents per package (3)"),
            "{f}"
        );
        let big = format!("{META}# {}\n", "x".repeat(5000));
        assert!(
            within(&big).ends_with(&format!(
                "package.yaml ({} bytes) is over the bound on bytes per file read into memory \
                 (4096)",
                big.len()
            )),
            "{}",
            within(&big)
        );
    }

    #[test]
    fn a_crd_without_group_or_name_is_refused() {
        let f = fault(&format!(
            "{META}---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: x.example.org\n"
        ));
        assert!(
            f.ends_with(
                "document 2 (line 16): CustomResourceDefinition x.example.org has no spec.group"
            ),
            "{f}"
        );
        let f = fault(&format!(
            "{META}---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {{}}\n"
        ));
        assert!(
            f.ends_with("CustomResourceDefinition has no metadata.name and spec.group"),
            "{f}"
        );
    }

    fn package_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("package.yaml"), format!("{META}---\n{CRD}")).unwrap();
        std::fs::create_dir(dir.path().join("crds")).unwrap();
        let crd = |group: &str| CRD.replace("example.org", group);
        std::fs::write(dir.path().join("crds/b.yaml"), crd("b.example.org")).unwrap();
        std::fs::write(
            dir.path().join("crds/a.yml"),
            format!("{}---\n{}", crd("a1.example.org"), crd("a2.example.org")),
        )
        .unwrap();
        std::fs::write(dir.path().join("crds/notes.txt"), "not yaml").unwrap();
        dir
    }

    #[test]
    fn build_is_deterministic_and_annotates_its_one_layer() {
        let dir = package_dir();
        let a = build(dir.path(), None).unwrap();
        let b = build(dir.path(), None).unwrap();
        let s = a.serialize().unwrap();
        assert_eq!(s.digest, b.serialize().unwrap().digest);
        assert_eq!(a.layers().len(), 1);
        assert_eq!(
            a.layers()[0]
                .annotations()
                .get("io.crossplane.xpkg")
                .map(String::as_str),
            Some("base")
        );
        let manifest: Value = serde_json::from_slice(&s.manifest).unwrap();
        assert_eq!(
            manifest["layers"][0]["annotations"],
            serde_json::json!({"io.crossplane.xpkg": "base"})
        );
        let config: Value = serde_json::from_slice(&s.config).unwrap();
        assert_eq!(
            (config["os"].as_str(), config["architecture"].as_str()),
            (Some("linux"), Some("amd64"))
        );

        // The meta first, then the CRDs of package.yaml, then crds/ by name.
        let yaml = package_yaml(&a);
        let c = parse("r", "l", yaml.as_bytes()).unwrap();
        assert_eq!(
            c.meta.controller_image.as_deref(),
            Some("example/runtime:v1")
        );
        let groups: Vec<&str> = c
            .objects
            .iter()
            .map(|o| o["spec"]["group"].as_str().unwrap())
            .collect();
        assert_eq!(
            groups,
            [
                "example.org",
                "a1.example.org",
                "a2.example.org",
                "b.example.org"
            ]
        );
        assert!(
            yaml.starts_with('{') && yaml.matches("\n---\n").count() == 4,
            "{yaml}"
        );
    }

    #[test]
    fn the_runtime_image_overrides_or_sets_spec_controller_image() {
        let dir = package_dir();
        let plain = build(dir.path(), None).unwrap();
        let image = build(dir.path(), Some("reg/runtime:v2")).unwrap();
        let c = parse("r", "l", package_yaml(&image).as_bytes()).unwrap();
        assert_eq!(c.meta.controller_image.as_deref(), Some("reg/runtime:v2"));
        assert_ne!(
            plain.serialize().unwrap().digest,
            image.serialize().unwrap().digest
        );

        // A meta without spec gets one.
        let bare = tempfile::tempdir().unwrap();
        std::fs::write(
            bare.path().join("package.yaml"),
            "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: bare\n",
        )
        .unwrap();
        let c = parse(
            "r",
            "l",
            package_yaml(&build(bare.path(), None).unwrap()).as_bytes(),
        )
        .unwrap();
        assert_eq!(c.meta.controller_image, None);
        let image = build(bare.path(), Some("reg/runtime:v3")).unwrap();
        let c = parse("r", "l", package_yaml(&image).as_bytes()).unwrap();
        assert_eq!(c.meta.controller_image.as_deref(), Some("reg/runtime:v3"));
        assert!(c.objects.is_empty());
    }

    #[test]
    fn build_refuses_a_bad_crds_file_naming_it() {
        let dir = package_dir();
        std::fs::write(
            dir.path().join("crds/c.yaml"),
            format!("{CRD}---\napiVersion: v1\nkind: ConfigMap\n"),
        )
        .unwrap();
        let f = build(dir.path(), None).unwrap_err().to_string();
        assert!(
            f.contains("crds/c.yaml") && f.contains("document 2 (line 10): kind ConfigMap"),
            "{f}"
        );
        std::fs::write(dir.path().join("crds/c.yaml"), META).unwrap();
        let f = build(dir.path(), None).unwrap_err().to_string();
        assert!(f.contains("belongs in package.yaml"), "{f}");
        let empty = tempfile::tempdir().unwrap();
        let f = build(empty.path(), None).unwrap_err().to_string();
        assert!(f.contains("package.yaml"), "{f}");
    }

    #[test]
    fn describe_prints_the_meta_and_a_line_per_crd() {
        let crd = CRD.replace(
            "    kind: Thing\n",
            "    kind: Thing\n  versions:\n  - name: v1alpha1\n  - name: v1\n",
        );
        let package = Package {
            reference: "reg/x:v1".into(),
            digest: crate::Digest::of(b"m"),
            contents: parse("r", "l", format!("{META}---\n{crd}").as_bytes()).unwrap(),
        };
        let text = describe(&package);
        assert!(
            text.contains(&format!("digest:     {}\n", package.digest)),
            "{text}"
        );
        assert!(text.contains("controller: example/runtime:v1\n"), "{text}");
        assert!(text.contains("crossplane: >=v1.14.0\n"), "{text}");
        assert!(
            text.contains("dependsOn:  xpkg.example.org/example/b >=v1.0.0, <v2.0.0\n"),
            "{text}"
        );
        assert!(
            text.ends_with("CRDs:       1\n  things.example.org example.org Thing v1alpha1,v1\n"),
            "{text}"
        );
    }

    #[test]
    fn semver_tags_skip_partial_and_other_tags() {
        let tags: Vec<String> = ["v0.9.0", "v1.0.0", "v1.2.0", "v1", "latest", "2.0.0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let got: Vec<String> = semver_tags(&tags).into_iter().map(|t| t.1).collect();
        assert_eq!(got, ["v0.9.0", "v1.0.0", "v1.2.0", "2.0.0"]);
    }
}
