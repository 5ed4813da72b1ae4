//! Stacks (seed 001): ExtensionRequests install stack packages (by package
//! or by a CRD they own, found by searching the registry), dependencies
//! first; Extensions, however made, get their controller Deployment and
//! their CRDs labelled with who owns and who depends on them, so a CRD goes
//! only when no installed stack has a use for it.
//!
//! The pure parts (install order, cycles, names, labels) are plain
//! functions here; [`index`] searches registries, [`requests`] and
//! [`extensions`] are the two controllers.

pub mod extensions;
pub mod index;
pub mod requests;

use std::{collections::BTreeMap, time::Duration};

use runtime::{events::ReconcileError, reconciler::ControlError};
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::reflector::Store;
use oci::stack::CrdSelector;
use types::{
    common::Condition,
    extensions::v1alpha1::{CrdRef, Extension},
};

use crate::packages::FetchError;

/// Marks a CRD a stack installed (only those are ever deleted by one).
pub const INSTALLED_LABEL: &str = "extensions.crossplane.io/installed";
pub use types::extensions::v1alpha1::{EXTENSION_LABEL, OWNER_ANNOTATION};
/// Prefix of the per-Extension label on CRDs: `owns` or `depends-on`.
pub const STACK_LABEL_PREFIX: &str = "stack.extensions.crossplane.io/";
/// Label values.
pub const OWNS: &str = "owns";
/// Label values.
pub const DEPENDS_ON: &str = "depends-on";
/// Records on an Extension the package it was installed from.
pub const PACKAGE_ANNOTATION: &str = "extensions.crossplane.io/package";

/// The label an Extension puts on the CRDs it owns or depends on: a key
/// per Extension (a hash of `namespace/name`, which may be too long for a
/// label), so any number of stacks can mark one CRD without a
/// read-modify-write.
pub fn stack_label(namespace: &str, name: &str) -> String {
    let digest = oci::Digest::of(format!("{namespace}/{name}").as_bytes());
    format!("{STACK_LABEL_PREFIX}{}", &digest.hex()[..16])
}

/// Whether a CRD still carries any stack's label.
pub fn marked(labels: &BTreeMap<String, String>) -> bool {
    labels.keys().any(|k| k.starts_with(STACK_LABEL_PREFIX))
}

/// The Extension name for a package reference: the last path segment of
/// its repository, as a DNS label (`.../stacks/redis:v0.1.0` → `redis`).
pub fn extension_name(reference: &str) -> String {
    crate::packages::object_name(&oci::xpkg::repository_of(reference), "stack")
}

/// Sets Ready on a stack object's conditions.
pub fn set_ready(conditions: &mut Vec<Condition>, ok: bool, reason: &str, message: String) {
    runtime::conditions::set(
        conditions,
        runtime::conditions::custom(runtime::conditions::TYPE_READY, ok, reason, Some(message)),
        &runtime::conditions::now(),
    );
}

/// The installed CRD `selector` names.
pub fn installed_crd(
    crds: &Store<CustomResourceDefinition>,
    selector: &CrdSelector,
) -> Option<Arc<CustomResourceDefinition>> {
    crds.state().into_iter().find(|c| {
        selector.matches_parts(
            &c.spec.group,
            &c.spec.names.plural,
            &c.spec.names.kind,
            c.spec.versions.iter().map(|v| v.name.as_str()),
        )
    })
}

/// The references (kind and apiVersion, one per version) of an installed
/// CRD's versions that `selector` asks for (all when it names none).
pub fn crd_refs(crd: &CustomResourceDefinition, selector: &CrdSelector) -> Vec<CrdRef> {
    crd.spec
        .versions
        .iter()
        .filter(|v| selector.version.as_ref().is_none_or(|want| *want == v.name))
        .map(|v| CrdRef {
            kind: crd.spec.names.kind.clone(),
            api_version: format!("{}/{}", crd.spec.group, v.name),
        })
        .collect()
}

/// Whether the Extension `namespace/name` exists.
pub async fn extension_exists(client: &kube::Client, key: &str) -> Result<bool, Error> {
    let Some((ns, name)) = key.split_once('/') else {
        return Ok(false);
    };
    Ok(kube::Api::<Extension>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::Request("read the Extension that owns a CRD", e))?
        .is_some())
}

/// The order to install packages in: every package after the packages it
/// depends on (`deps`: package → the packages its dependencies resolved
/// to), `root` last. A cycle is refused with its path (`a → b → a`).
pub fn install_order(
    root: &str,
    deps: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, String> {
    fn visit(
        p: &str,
        deps: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Result<(), String> {
        if done.iter().any(|d| d == p) {
            return Ok(());
        }
        if let Some(at) = path.iter().position(|q| q == p) {
            let mut cycle: Vec<String> = path[at..].to_vec();
            cycle.push(p.to_owned());
            return Err(cycle.join(" → "));
        }
        path.push(p.to_owned());
        for d in deps.get(p).map(Vec::as_slice).unwrap_or_default() {
            visit(d, deps, path, done)?;
        }
        path.pop();
        done.push(p.to_owned());
        Ok(())
    }
    let mut done = Vec::new();
    visit(root, deps, &mut Vec::new(), &mut done)?;
    Ok(done)
}

/// Why a stack could not be installed or run; each message says what to
/// fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request or Extension says something that cannot work.
    #[error("{0}")]
    Invalid(String),
    /// A package could not be read.
    #[error("{0}")]
    Package(#[from] FetchError),
    /// No package in the registry owns a CRD asked for (yet).
    #[error("{0}")]
    NotFound(String),
    /// More than one package owns a CRD asked for.
    #[error("{0}")]
    Ambiguous(String),
    /// Dependencies form a cycle.
    #[error("{0}")]
    Cycle(String),
    /// A CRD belongs to another Extension.
    #[error("{0}")]
    Conflict(String),
    /// The API server refused a CRD of the package.
    #[error("the API server refuses CustomResourceDefinition {name} of the stack: {message}")]
    InvalidCrd {
        /// The CRD.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// A request to the control cluster failed.
    #[error("failed to {0}")]
    Request(&'static str, #[source] kube::Error),
    /// A request made by the skeleton failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl From<crate::crds::DryRunError> for Error {
    fn from(e: crate::crds::DryRunError) -> Self {
        match e {
            crate::crds::DryRunError::Refused { name, message } => {
                Error::InvalidCrd { name, message }
            }
            crate::crds::DryRunError::Failed(e) => Error::Request("check a CRD (dry run)", e),
        }
    }
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Invalid(_) => "InvalidExtensionRequest",
            Error::Package(_) => "CannotReadPackage",
            Error::NotFound(_) | Error::Ambiguous(_) => "CannotResolvePackage",
            Error::Cycle(_) => "UnresolvedDependencies",
            Error::Conflict(_) => "ConflictingCustomResourceDefinition",
            Error::InvalidCrd { .. } | Error::Request(..) => "CannotEstablishPackageObjects",
            Error::Control(_) => runtime::reconciler::CONTROL_REQUEST_FAILED,
        }
    }

    fn retry_within(&self) -> Option<Duration> {
        match self {
            // A package pushed later, an owner going away and a registry
            // coming back are noticed within these bounds.
            Error::NotFound(_) => Some(Duration::from_secs(15)),
            Error::Conflict(_) => Some(Duration::from_secs(10)),
            // A registry coming back, or credentials (a Secret the
            // package manager reads, not a watched object) being given.
            Error::Package(p)
                if p.is_transient()
                    || matches!(
                        p,
                        FetchError::PullSecret(_)
                            | FetchError::Oci(oci::Error::Unauthorized { .. })
                    ) =>
            {
                Some(Duration::from_secs(30))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
            .collect()
    }

    #[test]
    fn dependencies_install_first_and_once() {
        let g = graph(&[("app", &["db", "net"]), ("db", &["net"]), ("net", &[])]);
        assert_eq!(install_order("app", &g).unwrap(), ["net", "db", "app"]);
        assert_eq!(install_order("solo", &BTreeMap::new()).unwrap(), ["solo"]);
    }

    #[test]
    fn cycles_are_named_by_their_path() {
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])]);
        assert_eq!(install_order("a", &g).unwrap_err(), "b → c → b");
        let g = graph(&[("a", &["a"])]);
        assert_eq!(install_order("a", &g).unwrap_err(), "a → a");
    }

    #[test]
    fn names_and_labels() {
        assert_eq!(
            extension_name("reg.example:5000/stacks/redis:v0.1.0"),
            "redis"
        );
        assert_eq!(
            extension_name("reg.example/My_Stack@sha256:abc"),
            "my-stack"
        );
        let l = stack_label("ns", "redis");
        assert!(l.starts_with(STACK_LABEL_PREFIX) && l.len() == STACK_LABEL_PREFIX.len() + 16);
        assert_ne!(l, stack_label("ns2", "redis"));
        assert!(marked(&[(l, OWNS.to_owned())].into_iter().collect()));
    }
}
