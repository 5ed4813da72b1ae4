//! app.yaml: read with file structs that refuse unknown fields, checked
//! (title, version against the tag, links, icons, dependencies), and
//! turned into the stack's [`App`] (the Extension record's types) and the
//! CRDs it depends on.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

use super::file::{At, yaml};
use crate::{
    Error,
    limits::YamlBudget,
    stack::{APP_FILE, App, Contributor, CrdSelector, Icon, Link, MAX_ICON_BYTES},
};

/// A person in app.yaml (named `Person` in parse errors, as app.yaml's
/// readers know it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename = "Person")]
struct PersonFile {
    name: String,
    #[serde(default)]
    email: Option<String>,
}

/// A link in app.yaml.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename = "Link")]
struct LinkFile {
    #[serde(default)]
    description: String,
    url: String,
}

/// An icon in app.yaml: base64 data and its media type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename = "Icon")]
struct IconFile {
    base64data: String,
    mediatype: String,
}

/// One dependency in app.yaml: a CRD, by name or by kind.
#[derive(Debug, Default, Deserialize)]
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
#[derive(Debug, Default, Deserialize)]
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
    maintainers: Vec<PersonFile>,
    #[serde(default)]
    owners: Vec<PersonFile>,
    #[serde(default)]
    company: Option<String>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    links: Vec<LinkFile>,
    #[serde(default)]
    license: Option<String>,
    #[serde(default)]
    depends_on: Vec<DependencyFile>,
    #[serde(default)]
    icons: Vec<IconFile>,
}

impl From<PersonFile> for Contributor {
    fn from(p: PersonFile) -> Self {
        Self {
            name: p.name,
            email: p.email,
        }
    }
}

impl From<LinkFile> for Link {
    fn from(l: LinkFile) -> Self {
        Self {
            description: l.description,
            url: l.url,
        }
    }
}

impl From<IconFile> for Icon {
    fn from(i: IconFile) -> Self {
        Self {
            base64data: i.base64data,
            mediatype: i.mediatype,
        }
    }
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

/// Reads and checks app.yaml of `files`; `tag` is the image tag the stack
/// was pulled by. Returns its metadata and the CRDs it depends on.
pub(crate) fn read(
    at: &At<'_>,
    budget: &mut YamlBudget,
    files: &BTreeMap<String, Vec<u8>>,
    tag: Option<&str>,
) -> Result<(App, Vec<CrdSelector>), Error> {
    let (reference, layer) = (at.reference, at.layer);
    let Some(app_bytes) = files.get(APP_FILE) else {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "no {APP_FILE}: a stack package has .registry/app.yaml (its title, version, maintainers ...) and its CRDs under .registry/resources/"
            ),
        ));
    };
    let app_file: AppFile = yaml(at, budget, APP_FILE, app_bytes, |_| app_bytes.len() as u64)?;
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
    for (i, icon) in app_file.icons.iter().enumerate() {
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
    // `.registry/icon.*` files, after app.yaml's icons.
    let mut icon_files: Vec<Icon> = Vec::new();
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
        icon_files.push(Icon {
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
    let app = App {
        title,
        description: app_file
            .description
            .or(app_file.overview)
            .or(app_file.readme),
        version,
        maintainers: app_file.maintainers.into_iter().map(Into::into).collect(),
        owners: app_file.owners.into_iter().map(Into::into).collect(),
        company: app_file.company,
        keywords: app_file.keywords,
        links: app_file.links.into_iter().map(Into::into).collect(),
        license: app_file.license,
        icons: app_file
            .icons
            .into_iter()
            .map(Into::into)
            .chain(icon_files)
            .collect(),
    };
    Ok((app, depends_on))
}
