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
//! This room is the stack format: what a stack holds ([`Stack`], its
//! [`App`] metadata in the Extension record's types). [`parse`] checks a
//! stack's files and refuses a malformed or missing part naming the file
//! and line; [`build`] makes the image from a directory, annotating the
//! layer with the CRDs it owns ([`OWNS_ANNOTATION`]) so a registry can be
//! searched by CRD without downloading layers; [`CrdSelector`] names a CRD
//! a stack asks for.

mod build;
mod crd;
mod parse;

use serde_json::Value;
use types::extensions::v1alpha1::ExtensionSpec;
pub use types::extensions::v1alpha1::{Contributor, Icon, Link};
use types::k8s_openapi::api::rbac::v1::PolicyRule;

pub use self::{
    build::{build, read_dir},
    crd::{CrdSelector, owned_names, versions_of},
    parse::{parse, parse_within},
};
pub use crate::describe::stack as describe;

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

/// A stack's metadata, from app.yaml: the part of the Extension record
/// ([`App::record`]) a stack gives, with the title app.yaml must have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct App {
    /// Human readable title.
    pub title: String,
    /// Markdown description (description, else overview, else readme).
    pub description: Option<String>,
    /// The stack's version (from the image tag when app.yaml has none).
    pub version: Option<String>,
    /// Maintainers.
    pub maintainers: Vec<Contributor>,
    /// Owners.
    pub owners: Vec<Contributor>,
    /// Company.
    pub company: Option<String>,
    /// Keywords.
    pub keywords: Vec<String>,
    /// Links.
    pub links: Vec<Link>,
    /// SPDX license.
    pub license: Option<String>,
    /// Icons: app.yaml's, then `.registry/icon.*`.
    pub icons: Vec<Icon>,
}

impl App {
    /// The Extension record's spec as far as app.yaml fills it; its CRDs,
    /// controller and permissions are the package-manager's to add.
    pub fn record(&self) -> ExtensionSpec {
        ExtensionSpec {
            title: Some(self.title.clone()),
            description: self.description.clone(),
            version: self.version.clone(),
            icons: self.icons.clone(),
            maintainers: self.maintainers.clone(),
            owners: self.owners.clone(),
            company: self.company.clone(),
            keywords: self.keywords.clone(),
            links: self.links.clone(),
            license: self.license.clone(),
            ..ExtensionSpec::default()
        }
    }
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
    pub rules: Vec<PolicyRule>,
    /// Its CRDs, by file name.
    pub crds: Vec<Value>,
}

impl Stack {
    /// The CRDs it owns, as `<plural>.<group>/<version>`.
    pub fn owns(&self) -> Vec<String> {
        owned_names(&self.crds)
    }
}

#[cfg(test)]
mod tests;
