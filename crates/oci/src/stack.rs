//! Stack packages (seed 001): an OCI image whose package layer (annotated
//! `io.crossplane.xpkg: base`) holds a `.registry/` directory:
//!
//! ```text
//! .registry/
//! ├── app.yaml        required: title, description (or overview/readme),
//! │                   version, maintainers, owners, company, keywords,
//! │                   links, license, dependsOn, icons
//! ├── install.yaml    optional: the controller's apps/v1 Deployment
//! ├── rbac.yaml       optional: `rules:` the controller needs
//! ├── icon.<ext>      optional: the stack's icon (png, jpg, svg, gif)
//! └── resources/**/*crd.yaml   the CRDs the stack owns; group.yaml,
//!                     resource.yaml and icons beside them are optional
//! ```
//!
//! [`parse`] checks a stack's files and refuses a malformed or missing part
//! naming the file and line; [`build`] makes the image from a directory,
//! annotating the layer with the CRDs it owns ([`OWNS_ANNOTATION`]) so a
//! registry can be searched by CRD without downloading layers.

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    Config, Error, Image, LayerBuilder, Limits,
    limits::{Parse, YamlBudget, object_size, over, parsed_size},
    xpkg::BASE_ANNOTATION,
};

/// The directory a stack's files are in.
pub const REGISTRY_DIR: &str = ".registry";
/// The stack's metadata.
pub const APP_FILE: &str = ".registry/app.yaml";
/// How its controller is installed.
pub const INSTALL_FILE: &str = ".registry/install.yaml";
/// The permissions its controller needs.
pub const RBAC_FILE: &str = ".registry/rbac.yaml";
/// Where its CRDs are.
pub const RESOURCES_DIR: &str = ".registry/resources/";
/// The layer annotation listing the CRDs a stack owns, comma separated, as
/// `<plural>.<group>/<version>`.
pub const OWNS_ANNOTATION: &str = "io.crossplane.stack.owns";
/// The largest icon kept (base64 goes into the Extension record).
pub const MAX_ICON_BYTES: usize = 256 * 1024;

/// Whether a path in a layer belongs to a stack.
pub fn is_stack_file(path: &str) -> bool {
    path.starts_with(".registry/")
}

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
    /// [`OWNS_ANNOTATION`] form) is this one. A selector by kind cannot be
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

/// A person in app.yaml.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Person {
    /// Their name.
    pub name: String,
    /// Their email.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

/// A link in app.yaml.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// What it points to.
    #[serde(default)]
    pub description: String,
    /// Where.
    pub url: String,
}

/// An icon: base64 data and its media type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Icon {
    /// Base64 image data.
    pub base64data: String,
    /// The media type, e.g. image/png.
    pub mediatype: String,
}

/// One dependency in app.yaml: a CRD, by name or by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DependencyFile {
    #[serde(default)]
    crd: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    api_version: Option<String>,
}

/// app.yaml as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AppFile {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    overview: Option<String>,
    #[serde(default)]
    readme: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    maintainers: Vec<Person>,
    #[serde(default)]
    owners: Vec<Person>,
    #[serde(default)]
    company: Option<String>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    links: Vec<Link>,
    #[serde(default)]
    license: Option<String>,
    #[serde(default)]
    depends_on: Vec<DependencyFile>,
    #[serde(default)]
    icons: Vec<Icon>,
}

/// A stack's metadata, as the Extension record carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct App {
    /// Human readable title.
    pub title: String,
    /// Markdown description (description, else overview, else readme).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The stack's version (from the image tag when app.yaml has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Maintainers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintainers: Vec<Person>,
    /// Owners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<Person>,
    /// Company.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub company: Option<String>,
    /// Keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    /// Links.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    /// SPDX license.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// Icons: app.yaml's, then `.registry/icon.*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
}

/// What a stack package holds, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Stack {
    /// app.yaml.
    pub app: App,
    /// The CRDs it depends on.
    pub depends_on: Vec<CrdSelector>,
    /// install.yaml: the controller Deployment.
    pub install: Option<Value>,
    /// rbac.yaml: the rules its controller needs.
    pub rules: Vec<Value>,
    /// Its CRDs, by file name.
    pub crds: Vec<Value>,
}

impl Stack {
    /// The CRDs it owns, as `<plural>.<group>/<version>`.
    pub fn owns(&self) -> Vec<String> {
        owned_names(&self.crds)
    }
}

/// "(line L, column C): what" from a YAML error, on one line.
fn at_line(e: &serde_saphyr::Error) -> String {
    match crate::xpkg::yaml_error(e) {
        (Some((line, column)), what) => format!("(line {line}, column {column}): {what}"),
        (None, what) => format!(": {what}"),
    }
}

fn text_of<'a>(
    reference: &str,
    layer: &str,
    path: &str,
    bytes: &'a [u8],
) -> Result<&'a str, Error> {
    std::str::from_utf8(bytes)
        .map_err(|e| Error::invalid(reference, layer, format!("{path} is not UTF-8: {e}")))
}

/// One YAML file of a stack, parsed within `budget` (`size` estimates what
/// the result takes in memory).
fn yaml<T: serde::de::DeserializeOwned>(
    at: &At<'_>,
    budget: &mut YamlBudget,
    path: &str,
    bytes: &[u8],
    size: impl FnOnce(&T) -> u64,
) -> Result<T, Error> {
    let (reference, layer) = (at.reference, at.layer);
    let text = text_of(reference, layer, path, bytes)?;
    budget.parse(path, text, size).map_err(|e| match e {
        Parse::Bound(refusal) => Error::invalid(reference, layer, refusal),
        Parse::Yaml(e) => Error::invalid(reference, layer, format!("{path} {}", at_line(&e))),
    })
}

/// Where a stack's files come from (for messages).
struct At<'a> {
    reference: &'a str,
    layer: &'a str,
}

/// The media type of an icon file, by extension.
fn icon_type(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "svg" => "image/svg+xml",
        "gif" => "image/gif",
        _ => return None,
    })
}

/// Checks a stack's files (paths as in the layer, `.registry/...`) and
/// returns what it holds. `tag` is the image tag it was pulled by: app.yaml
/// without a version takes it, one with a version must match it. Anything
/// malformed or missing is refused naming the file, the line and what to
/// fix; nothing is half-read. Within the default [`Limits`].
pub fn parse(
    reference: &str,
    layer: &str,
    files: &BTreeMap<String, Vec<u8>>,
    tag: Option<&str>,
) -> Result<Stack, Error> {
    parse_within(reference, layer, files, tag, &Limits::default())
}

/// [`parse`] within `limits`: each file's size, the YAML files parsed and
/// what they take parsed are bounded.
pub fn parse_within(
    reference: &str,
    layer: &str,
    files: &BTreeMap<String, Vec<u8>>,
    tag: Option<&str>,
    limits: &Limits,
) -> Result<Stack, Error> {
    for (path, bytes) in files {
        if bytes.len() as u64 > limits.file_bytes {
            return Err(Error::invalid(
                reference,
                layer,
                over(
                    &format!("{} ({} bytes)", crate::registry::text(path), bytes.len()),
                    "bytes per file read into memory",
                    limits.file_bytes,
                ),
            ));
        }
    }
    let at = At { reference, layer };
    let budget = &mut YamlBudget::new(limits);
    let Some(app_bytes) = files.get(APP_FILE) else {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "no {APP_FILE}: a stack package has .registry/app.yaml (its title, version, maintainers ...) and its CRDs under .registry/resources/"
            ),
        ));
    };
    let app_file: AppFile = yaml(&at, budget, APP_FILE, app_bytes, |_| app_bytes.len() as u64)?;
    let title = app_file.title.clone().unwrap_or_default();
    if title.trim().is_empty() {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{APP_FILE}: title is required (a human readable name for the stack)"),
        ));
    }
    let plain = |v: &str| v.trim_start_matches('v').to_owned();
    let tag_version = tag.filter(|t| semver::Version::parse(&plain(t)).is_ok());
    let version = match (&app_file.version, tag_version) {
        (Some(v), Some(t)) if plain(v) != plain(t) => {
            return Err(Error::invalid(
                reference,
                layer,
                format!(
                    "{APP_FILE}: version {v} does not match the image tag {t}; set it to {} or leave it out (the tag is used)",
                    plain(t)
                ),
            ));
        }
        (Some(v), _) => Some(v.clone()),
        (None, Some(t)) => Some(plain(t)),
        (None, None) => None,
    };
    for (i, link) in app_file.links.iter().enumerate() {
        if !(link.url.starts_with("https://") || link.url.starts_with("http://")) {
            return Err(Error::invalid(
                reference,
                layer,
                format!(
                    "{APP_FILE}: links[{i}].url {:?} is not an http(s) URL",
                    link.url
                ),
            ));
        }
    }
    let mut icons = app_file.icons.clone();
    for (i, icon) in icons.iter().enumerate() {
        if base64::engine::general_purpose::STANDARD
            .decode(icon.base64data.trim())
            .is_err()
        {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{APP_FILE}: icons[{i}].base64data is not base64"),
            ));
        }
    }
    for (path, bytes) in files {
        let Some(rest) = path.strip_prefix(".registry/icon.") else {
            continue;
        };
        let Some(mediatype) = icon_type(path) else {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{path}: icon.{rest} is not png, jpg, svg or gif"),
            ));
        };
        if bytes.len() > MAX_ICON_BYTES {
            return Err(Error::invalid(
                reference,
                layer,
                format!(
                    "{path} is {} bytes; an icon may have at most {MAX_ICON_BYTES}",
                    bytes.len()
                ),
            ));
        }
        icons.push(Icon {
            base64data: base64::engine::general_purpose::STANDARD.encode(bytes),
            mediatype: mediatype.to_owned(),
        });
    }
    let mut depends_on = Vec::new();
    for (i, d) in app_file.depends_on.iter().enumerate() {
        let at = format!("{APP_FILE}: dependsOn[{i}]");
        let selector = match (&d.crd, &d.kind, &d.api_version) {
            (Some(crd), None, None) => CrdSelector::parse(crd)
                .map_err(|e| Error::invalid(reference, layer, format!("{at}: {e}")))?,
            (None, Some(kind), Some(api)) if !kind.is_empty() && api.contains('/') => {
                CrdSelector::of_kind(kind, api)
            }
            _ => {
                return Err(Error::invalid(
                    reference,
                    layer,
                    format!(
                        "{at}: name a CRD either as crd: <plural>.<group>/<version> or as kind and apiVersion (<group>/<version>)"
                    ),
                ));
            }
        };
        depends_on.push(selector);
    }
    let install = match files.get(INSTALL_FILE) {
        None => None,
        Some(bytes) => Some(deployment(&at, budget, bytes)?),
    };
    let rules = match files.get(RBAC_FILE) {
        None => Vec::new(),
        Some(bytes) => rules(&at, budget, bytes)?,
    };
    let mut crds = Vec::new();
    for (path, bytes) in files.range(RESOURCES_DIR.to_owned()..) {
        if !path.starts_with(RESOURCES_DIR) {
            break;
        }
        let name = path.rsplit('/').next().unwrap_or_default();
        if name.ends_with("crd.yaml") || name.ends_with("crd.yml") {
            crds.push(crd(&at, budget, path, bytes)?);
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            // group.yaml and resource.yaml: UI metadata, checked to be YAML
            // mappings.
            let _: serde_json::Map<String, Value> = yaml(&at, budget, path, bytes, object_size)?;
        }
    }
    if crds.is_empty() && install.is_none() {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "the stack has neither CRDs (.registry/resources/**/*crd.yaml) nor a controller ({INSTALL_FILE}); it would install nothing"
            ),
        ));
    }
    let mut seen = BTreeMap::new();
    for crd in &crds {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if seen.insert(name.clone(), ()).is_some() {
            return Err(Error::invalid(
                reference,
                layer,
                format!("CRD {name} is defined twice under {RESOURCES_DIR}"),
            ));
        }
    }
    Ok(Stack {
        app: App {
            title,
            description: app_file
                .description
                .or(app_file.overview)
                .or(app_file.readme),
            version,
            maintainers: app_file.maintainers,
            owners: app_file.owners,
            company: app_file.company,
            keywords: app_file.keywords,
            links: app_file.links,
            license: app_file.license,
            icons,
        },
        depends_on,
        install,
        rules,
        crds,
    })
}

fn deployment(at: &At<'_>, budget: &mut YamlBudget, bytes: &[u8]) -> Result<Value, Error> {
    let (reference, layer) = (at.reference, at.layer);
    let value: Value = yaml(at, budget, INSTALL_FILE, bytes, parsed_size)?;
    let text = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap_or_default();
    if text("/kind") != "Deployment" || text("/apiVersion") != "apps/v1" {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "{INSTALL_FILE}: is {} {}; it must be one apps/v1 Deployment (the stack's controller)",
                text("/apiVersion"),
                text("/kind")
            ),
        ));
    }
    if text("/metadata/name").is_empty() {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{INSTALL_FILE}: the Deployment has no metadata.name"),
        ));
    }
    let containers = value
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array);
    if containers.is_none_or(|c| {
        c.is_empty()
            || c.iter().any(|c| {
                c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            })
    }) {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "{INSTALL_FILE}: spec.template.spec.containers must list the controller's containers, each with an image"
            ),
        ));
    }
    Ok(value)
}

fn rules(at: &At<'_>, budget: &mut YamlBudget, bytes: &[u8]) -> Result<Vec<Value>, Error> {
    let (reference, layer) = (at.reference, at.layer);
    let value: Value = yaml(at, budget, RBAC_FILE, bytes, parsed_size)?;
    let Some(rules) = value.get("rules").and_then(Value::as_array) else {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{RBAC_FILE}: has no rules: list (each rule: apiGroups, resources, verbs)"),
        ));
    };
    for (i, r) in rules.iter().enumerate() {
        let strings = |k: &str| {
            r.get(k)
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string))
        };
        let allowed = [
            "apiGroups",
            "resources",
            "verbs",
            "resourceNames",
            "nonResourceURLs",
        ];
        if let Some(k) = r
            .as_object()
            .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())))
        {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{RBAC_FILE}: rules[{i}] has an unknown field {k}"),
            ));
        }
        if !strings("verbs") || !(strings("resources") || strings("nonResourceURLs")) {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{RBAC_FILE}: rules[{i}] needs verbs and resources (lists of strings)"),
            ));
        }
    }
    Ok(rules.clone())
}

fn crd(at: &At<'_>, budget: &mut YamlBudget, path: &str, bytes: &[u8]) -> Result<Value, Error> {
    let (reference, layer) = (at.reference, at.layer);
    let value: Value = yaml(at, budget, path, bytes, parsed_size)?;
    let text = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap_or_default();
    if text("/kind") != "CustomResourceDefinition"
        || text("/apiVersion") != "apiextensions.k8s.io/v1"
    {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "{path}: is {} {}; files named *crd.yaml hold one apiextensions.k8s.io/v1 CustomResourceDefinition",
                text("/apiVersion"),
                text("/kind")
            ),
        ));
    }
    let missing: Vec<&str> = [
        ("metadata.name", "/metadata/name"),
        ("spec.group", "/spec/group"),
        ("spec.names.kind", "/spec/names/kind"),
        ("spec.names.plural", "/spec/names/plural"),
    ]
    .into_iter()
    .filter(|(_, p)| text(p).is_empty())
    .map(|(n, _)| n)
    .collect();
    if !missing.is_empty() {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{path}: the CRD has no {}", missing.join(", ")),
        ));
    }
    let name = format!("{}.{}", text("/spec/names/plural"), text("/spec/group"));
    if text("/metadata/name") != name {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "{path}: the CRD is named {} but must be named {name} (<plural>.<group>)",
                text("/metadata/name")
            ),
        ));
    }
    if versions_of(&value).is_empty() {
        return Err(Error::invalid(
            reference,
            layer,
            format!("{path}: the CRD has no spec.versions"),
        ));
    }
    Ok(value)
}

/// The files of `dir/.registry`, by layer path.
pub fn read_dir(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let root = dir.join(REGISTRY_DIR);
    let mut files = BTreeMap::new();
    let mut pending: Vec<PathBuf> = vec![root.clone()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::read(&d, e))? {
            let entry = entry.map_err(|e| Error::read(&d, e))?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::read(&path, e))?;
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                let bound = Limits::default().file_bytes;
                if meta.len() > bound {
                    return Err(Error::invalid(
                        &dir.display().to_string(),
                        "-",
                        over(
                            &format!("{} ({} bytes)", path.display(), meta.len()),
                            "bytes per file read into memory",
                            bound,
                        ),
                    ));
                }
                let rel = path.strip_prefix(dir).map_err(|_| Error::Path {
                    path: path.display().to_string(),
                    reason: "is outside the stack directory",
                })?;
                let rel = rel.to_string_lossy().replace('\\', "/");
                files.insert(
                    rel,
                    std::fs::read(&path).map_err(|e| Error::read(&path, e))?,
                );
            }
        }
    }
    Ok(files)
}

/// Builds a stack package from `dir` (which holds `.registry/`), checked
/// as a puller will read it: one layer, annotated `io.crossplane.xpkg:
/// base` and with the CRDs it owns ([`OWNS_ANNOTATION`]). The same files
/// give the same digest.
pub fn build(dir: &Path) -> Result<(Image, Stack), Error> {
    let files = read_dir(dir)?;
    let stack = parse(&dir.display().to_string(), REGISTRY_DIR, &files, None)?;
    let mut layer = LayerBuilder::new();
    for (path, bytes) in &files {
        layer = layer.file(path.clone(), 0o644, bytes.clone());
    }
    let layer = layer
        .build()?
        .annotate(BASE_ANNOTATION.0, BASE_ANNOTATION.1)
        .annotate(OWNS_ANNOTATION, stack.owns().join(","));
    let image = Image::new(Config {
        os: "linux".to_owned(),
        architecture: "amd64".to_owned(),
        ..Config::default()
    })
    .layer(layer);
    Ok((image, stack))
}

/// What `xpkg inspect` prints of a stack.
pub fn describe(reference: &str, digest: &str, stack: &Stack) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "stack:      {reference}");
    let _ = writeln!(out, "digest:     {digest}");
    let _ = writeln!(out, "title:      {}", stack.app.title);
    let _ = writeln!(
        out,
        "version:    {}",
        stack.app.version.as_deref().unwrap_or("(from the tag)")
    );
    let image = stack
        .install
        .as_ref()
        .and_then(|d| d.pointer("/spec/template/spec/containers/0/image"))
        .and_then(Value::as_str)
        .unwrap_or("(none)");
    let _ = writeln!(out, "controller: {image}");
    let _ = writeln!(out, "rules:      {}", stack.rules.len());
    for d in &stack.depends_on {
        let _ = writeln!(out, "dependsOn:  {d}");
    }
    for o in stack.owns() {
        let _ = writeln!(out, "owns:       {o}");
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: redisclusters.cache.crossplane.io\nspec:\n  group: cache.crossplane.io\n  scope: Namespaced\n  names: {kind: RedisCluster, plural: redisclusters}\n  versions:\n  - {name: v1alpha1, served: true, storage: true}\n";

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec()))
            .collect()
    }

    fn fault(r: Result<Stack, Error>) -> String {
        match r {
            Err(Error::Invalid { fault, .. }) => fault,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_stacks_files_over_their_bounds_are_refused_naming_the_bound() {
        let limits = Limits {
            documents: 2,
            file_bytes: 1024,
            ..Limits::default()
        };
        let crd = |n: &str| {
            CRD.replace("redisclusters", &format!("{n}s"))
                .replace("RedisCluster", n)
        };
        let (a, b) = (crd("Aa"), crd("Bb"));
        let three = files(&[
            (APP_FILE, "title: x\n"),
            (".registry/resources/a.crd.yaml", &a),
            (".registry/resources/b.crd.yaml", &b),
        ]);
        assert!(parse("r", "l", &three, None).is_ok());
        assert_eq!(
            fault(parse_within("r", "l", &three, None, &limits)),
            ".registry/resources/b.crd.yaml is over the bound on YAML documents per package (2)"
        );
        let big = format!("title: x\ndescription: {}\n", "x".repeat(2000));
        let f = fault(parse_within(
            "r",
            "l",
            &files(&[(APP_FILE, &big)]),
            None,
            &limits,
        ));
        assert_eq!(
            f,
            format!(
                ".registry/app.yaml ({} bytes) is over the bound on bytes per file read into \
                 memory (1024)",
                big.len()
            )
        );
    }

    #[test]
    fn the_seeds_app_yaml_parses_into_the_record() {
        let app = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/seeds/001-app-yaml.yaml"
        ))
        .unwrap();
        let f = files(&[
            (APP_FILE, &app),
            (
                ".registry/resources/cache/redis/v1alpha1/redis.v1alpha1.crd.yaml",
                CRD,
            ),
        ]);
        let stack = parse("r", "l", &f, Some("v0.0.1")).unwrap();
        assert_eq!(stack.app.title, "Sample Crossplane Stack");
        assert_eq!(stack.app.version.as_deref(), Some("0.0.1"));
        assert_eq!(stack.app.company.as_deref(), Some("Upbound"));
        assert_eq!(stack.app.keywords, ["samples", "examples", "tutorials"]);
        assert_eq!(stack.app.links.len(), 2);
        assert_eq!(stack.app.license.as_deref(), Some("Apache-2.0"));
        assert_eq!(stack.owns(), ["redisclusters.cache.crossplane.io/v1alpha1"]);
        // The seed's version 0.0.1 does not match a v0.1.0 tag.
        let f2 = f.clone();
        assert!(
            fault(parse("r", "l", &f2, Some("v0.1.0")))
                .contains("does not match the image tag v0.1.0")
        );
    }

    #[test]
    fn malformed_and_missing_parts_name_file_and_line() {
        let crd = (".registry/resources/x/redis.crd.yaml", CRD);
        assert!(fault(parse("r", "l", &files(&[crd]), None)).contains("no .registry/app.yaml"));
        let f = fault(parse(
            "r",
            "l",
            &files(&[(APP_FILE, "title: x\nkeywords: [a\n"), crd]),
            None,
        ));
        assert!(f.starts_with(".registry/app.yaml (line "), "{f}");
        let f = fault(parse(
            "r",
            "l",
            &files(&[(APP_FILE, "title: x\nmaintainers: 3\n"), crd]),
            None,
        ));
        assert!(f.contains(".registry/app.yaml (line 2"), "{f}");
        let f = fault(parse(
            "r",
            "l",
            &files(&[(APP_FILE, "version: 1.0.0\n"), crd]),
            None,
        ));
        assert!(f.contains("title is required"), "{f}");
        let f = fault(parse(
            "r",
            "l",
            &files(&[(APP_FILE, "title: x\ntitel: y\n"), crd]),
            None,
        ));
        assert!(f.contains("(line 2") && f.contains("titel"), "{f}");
        let f = fault(parse(
            "r",
            "l",
            &files(&[(APP_FILE, "title: x\ndependsOn:\n- crd: nodots\n"), crd]),
            None,
        ));
        assert!(f.contains("dependsOn[0]"), "{f}");
        let f = fault(parse(
            "r",
            "l",
            &files(&[
                (APP_FILE, "title: x\n"),
                (INSTALL_FILE, "apiVersion: v1\nkind: Pod\n"),
                crd,
            ]),
            None,
        ));
        assert!(f.contains("apps/v1 Deployment"), "{f}");
        let f = fault(parse(
            "r",
            "l",
            &files(&[
                (APP_FILE, "title: x\n"),
                (RBAC_FILE, "rules:\n- resources: [a]\n"),
                crd,
            ]),
            None,
        ));
        assert!(f.contains("rules[0] needs verbs"), "{f}");
        let bad = CRD.replace("name: redisclusters.cache", "name: wrong.cache");
        let f = fault(parse(
            "r",
            "l",
            &files(&[
                (APP_FILE, "title: x\n"),
                (".registry/resources/x/r.crd.yaml", &bad),
            ]),
            None,
        ));
        assert!(
            f.contains("must be named redisclusters.cache.crossplane.io"),
            "{f}"
        );
        let f = fault(parse("r", "l", &files(&[(APP_FILE, "title: x\n")]), None));
        assert!(f.contains("would install nothing"), "{f}");
    }

    #[test]
    fn dependencies_by_name_or_kind() {
        let f = files(&[
            (
                APP_FILE,
                "title: x\ndependsOn:\n- crd: widgets.base.example.org/v1alpha1\n- kind: Gadget\n  apiVersion: base.example.org/v1\n",
            ),
            (".registry/resources/r.crd.yaml", CRD),
        ]);
        let s = parse("r", "l", &f, None).unwrap();
        assert_eq!(
            s.depends_on[0].to_string(),
            "widgets.base.example.org/v1alpha1"
        );
        assert_eq!(s.depends_on[1].to_string(), "Gadget.base.example.org/v1");
        let crd: Value = serde_saphyr::from_str(CRD).unwrap();
        assert!(
            CrdSelector::parse("redisclusters.cache.crossplane.io/v1alpha1")
                .unwrap()
                .matches(&crd)
        );
        assert!(
            CrdSelector::parse("redisclusters.cache.crossplane.io")
                .unwrap()
                .matches(&crd)
        );
        assert!(
            !CrdSelector::parse("redisclusters.cache.crossplane.io/v1")
                .unwrap()
                .matches(&crd)
        );
        assert!(CrdSelector::of_kind("RedisCluster", "cache.crossplane.io/v1alpha1").matches(&crd));
        assert_eq!(
            CrdSelector::parse("redisclusters.cache.crossplane.io/v1alpha1")
                .unwrap()
                .matches_name("redisclusters.cache.crossplane.io/v1alpha1"),
            Some(true)
        );
        assert!(CrdSelector::parse("Redis").is_err());
    }

    #[test]
    fn the_example_redis_stack_builds() {
        let dir = std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/stacks/redis"
        ));
        let (image, stack) = build(dir).unwrap();
        assert_eq!(stack.app.title, "Redis");
        assert_eq!(stack.owns(), ["redisclusters.cache.crossplane.io/v1alpha1"]);
        assert_eq!(stack.app.icons.len(), 1);
        assert_eq!(stack.rules.len(), 1);
        let deployment = stack.install.unwrap();
        assert_eq!(
            deployment.pointer("/metadata/name").and_then(Value::as_str),
            Some("redis-controller")
        );
        assert_eq!(image.layers().len(), 1);
    }

    #[test]
    fn build_annotates_owned_crds_and_is_reproducible() {
        let dir = tempfile::tempdir().unwrap();
        let res = dir
            .path()
            .join(".registry/resources/cache.crossplane.io/redis/v1alpha1");
        std::fs::create_dir_all(&res).unwrap();
        std::fs::write(
            dir.path().join(".registry/app.yaml"),
            "title: Redis\nversion: 0.1.0\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".registry/icon.png"),
            [0x89, b'P', b'N', b'G'],
        )
        .unwrap();
        std::fs::write(res.join("redis.v1alpha1.crd.yaml"), CRD).unwrap();
        let (image, stack) = build(dir.path()).unwrap();
        assert_eq!(stack.app.icons.len(), 1);
        assert_eq!(stack.app.icons[0].mediatype, "image/png");
        let layer = &image.layers()[0];
        assert_eq!(
            layer.annotations().get(OWNS_ANNOTATION).map(String::as_str),
            Some("redisclusters.cache.crossplane.io/v1alpha1")
        );
        let (again, _) = build(dir.path()).unwrap();
        assert_eq!(again.layers()[0].digest(), layer.digest());
    }
}
