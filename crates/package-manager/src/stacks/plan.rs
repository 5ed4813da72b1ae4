//! Install planning for stacks: which stacks a request installs (each
//! `dependsOn` CRD not installed resolved to the stack that owns it in the
//! registry), the order they install in, the Extension a stack is recorded
//! as, and its name. All pure but [`plan`], which asks the registry.

use std::collections::BTreeMap;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::OwnerReference, jiff::Timestamp};
use kube::{
    ResourceExt as _,
    runtime::reflector::{ObjectRef, Store},
};
use oci::{Digest, stack::Stack};
use serde_json::json;
use types::extensions::v1alpha1::{
    ControllerDeployment, ControllerSpec, CrdRef, CrdRefs, Extension, PermissionsSpec,
};

use super::{
    error::Error,
    index::{Candidate, Index},
    ownership::OWNER_ANNOTATION,
};

/// Records on an Extension the package it was installed from.
pub const PACKAGE_ANNOTATION: &str = "extensions.crossplane.io/package";

/// The Extension name for a package reference: the last path segment of
/// its repository, as a DNS label (`.../stacks/redis:v0.1.0` → `redis`).
pub fn extension_name(reference: &str) -> String {
    crate::packages::object_name(&oci::xpkg::repository_of(reference), "stack")
}

/// One stack of an install plan.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The package reference.
    pub reference: String,
    /// Its digest.
    pub digest: Digest,
    /// What it holds.
    pub stack: Stack,
    /// Extensions (`namespace/name`) that own CRDs this stack depends on
    /// and were installed before: it waits until they are Ready.
    pub waits_on: Vec<String>,
}

impl Planned {
    /// What is being deleted that installing this stack as Extension
    /// `ns/name` would write: the record itself or one of its CRDs (a
    /// finalizer deleting a stack's CRDs, or a CRD on its way out).
    /// Writing now would leave it behind the deletion; the stack is
    /// installed once it is gone.
    pub async fn deleting(
        &self,
        extensions: &Store<Extension>,
        crds: &super::known::Known,
        (ns, name): (&str, &str),
    ) -> Result<Option<String>, Error> {
        let deleting = |m: &kube::core::ObjectMeta| m.deletion_timestamp.is_some();
        if let Some(e) = extensions.get(&ObjectRef::new(name).within(ns))
            && deleting(&e.metadata)
        {
            return Ok(Some(format!("Extension {ns}/{name} is being deleted")));
        }
        for o in &self.stack.crds {
            let Some(crd) = o.pointer("/metadata/name").and_then(|n| n.as_str()) else {
                continue;
            };
            let live = crds.get(crd).await?;
            if live.is_some_and(|l| deleting(&l.metadata)) {
                return Ok(Some(format!("CRD {crd} is being deleted")));
            }
        }
        Ok(None)
    }
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

/// The Extension record of a stack (seed 001: "the file based content is
/// translated into a YAML based version"): the app's metadata, the CRDs it
/// owns and depends on, its controller (run as its own ServiceAccount,
/// which the rbac-manager binds to the stack's role) and the rules that
/// controller needs.
pub fn extension_body(
    ns: &str,
    name: &str,
    p: &Planned,
    owner: &OwnerReference,
    (owns, depends_on): (Vec<CrdRef>, Vec<CrdRef>),
) -> Extension {
    let mut spec = p.stack.app.record();
    spec.custom_resource_definitions = Some(CrdRefs { owns, depends_on });
    spec.controller = p.stack.install.as_ref().map(|d| {
        let mut deployment_spec = d.get("spec").cloned().unwrap_or_else(|| json!({}));
        let dname = d
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or(name);
        if deployment_spec
            .pointer("/template/spec/serviceAccountName")
            .is_none()
            && let Some(pod) = deployment_spec
                .pointer_mut("/template/spec")
                .and_then(|s| s.as_object_mut())
        {
            pod.insert("serviceAccountName".into(), dname.into());
        }
        ControllerSpec {
            deployment: Some(ControllerDeployment {
                name: dname.to_owned(),
                spec: deployment_spec,
            }),
        }
    });
    spec.permissions = (!p.stack.rules.is_empty()).then(|| PermissionsSpec {
        rules: p.stack.rules.clone(),
    });
    let mut record = Extension::new(name, spec);
    record.metadata.namespace = Some(ns.to_owned());
    record.metadata.annotations = Some(
        [(
            PACKAGE_ANNOTATION.to_owned(),
            format!("{}@{}", p.reference, p.digest),
        )]
        .into(),
    );
    record.metadata.owner_references = Some(vec![owner.clone()]);
    record
}

/// The stacks to install for `root`, dependencies first: every
/// `dependsOn` CRD not installed is resolved to the stack that owns it
/// in `source` (by a registry scan begun after `asked`, see
/// [`Index::owner`]), recursively; cycles are refused naming their path.
pub async fn plan(
    index: &Index,
    crds: &super::known::Known,
    (ns, source, asked): (&str, &str, Option<Timestamp>),
    root: Candidate,
) -> Result<Vec<Planned>, Error> {
    let mut stacks: BTreeMap<String, Planned> = BTreeMap::new();
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut queue = vec![root.clone()];
    while let Some(c) = queue.pop() {
        if stacks.contains_key(&c.reference) {
            continue;
        }
        let package = index
            .packages()
            .fetch_stack(&c.reference, &c.digest)
            .await?;
        let mut resolved = Vec::new();
        let mut waits_on = Vec::new();
        for selector in &package.contents.depends_on {
            if let Some(crd) = crds.installed(selector).await? {
                if let Some(owner) = crd.annotations().get(OWNER_ANNOTATION)
                    && *owner != format!("{ns}/{}", extension_name(&c.reference))
                {
                    waits_on.push(owner.clone());
                }
                continue;
            }
            // A stack already in the plan (this one included) that owns it.
            let planned = stacks
                .values()
                .map(|p| (&p.reference, &p.stack))
                .chain(std::iter::once((&c.reference, &package.contents)))
                .find(|(_, stack)| stack.crds.iter().any(|crd| selector.matches(crd)))
                .map(|(reference, _)| reference.clone());
            let dependency = match planned {
                Some(p) => p,
                None => {
                    let owner =
                        index
                            .owner(source, selector, asked)
                            .await
                            .map_err(|e| match e {
                                Error::NotFound(m) => Error::NotFound(format!(
                                    "{} depends on CRD {selector}: {m}",
                                    c.reference
                                )),
                                Error::Ambiguous(m) => Error::Ambiguous(format!(
                                    "{} depends on CRD {selector}: {m}",
                                    c.reference
                                )),
                                e => e,
                            })?;
                    let reference = owner.reference.clone();
                    queue.push(owner);
                    reference
                }
            };
            if dependency != c.reference {
                resolved.push(dependency);
            }
        }
        deps.insert(c.reference.clone(), resolved);
        stacks.insert(
            c.reference.clone(),
            Planned {
                reference: c.reference,
                digest: c.digest,
                stack: package.contents,
                waits_on,
            },
        );
    }
    let order = install_order(&root.reference, &deps).map_err(|path| {
        Error::Cycle(format!(
            "the stacks' dependencies form a cycle: {path}; a stack cannot depend, even indirectly, on a CRD of its own dependents"
        ))
    })?;
    Ok(order
        .into_iter()
        .filter_map(|r| stacks.remove(&r))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::stacks::ownership::{OWNS, STACK_LABEL_PREFIX, marked, stack_label};

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

    #[test]
    fn a_stacks_record_runs_its_controller_as_its_own_service_account() {
        let stack = Stack {
            app: oci::stack::App {
                title: "Redis".into(),
                ..Default::default()
            },
            depends_on: vec![],
            install: Some(json!({
                "metadata": {"name": "redis-controller"},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            })),
            rules: vec![
                serde_json::from_value(
                    json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}),
                )
                .unwrap(),
            ],
            crds: vec![],
        };
        let p = Planned {
            reference: "registry.example/stacks/redis:v1".into(),
            digest: Digest::of(b"redis"),
            stack,
            waits_on: vec![],
        };
        let owner = OwnerReference {
            api_version: "extensions.crossplane.io/v1alpha1".into(),
            kind: "ExtensionRequest".into(),
            name: "redis".into(),
            uid: "u".into(),
            ..Default::default()
        };
        let owns = vec![CrdRef {
            kind: "Redis".into(),
            api_version: "cache.example/v1".into(),
        }];
        let body = serde_json::to_value(extension_body("ns", "redis", &p, &owner, (owns, vec![])))
            .unwrap();
        assert_eq!(
            body,
            json!({
                "apiVersion": "extensions.crossplane.io/v1alpha1",
                "kind": "Extension",
                "metadata": {
                    "name": "redis",
                    "namespace": "ns",
                    "annotations": {PACKAGE_ANNOTATION: format!("registry.example/stacks/redis:v1@{}", p.digest)},
                    "ownerReferences": [{"apiVersion": "extensions.crossplane.io/v1alpha1", "kind": "ExtensionRequest", "name": "redis", "uid": "u"}],
                },
                "spec": {
                    "title": "Redis",
                    "customresourcedefinitions": {"owns": [{"kind": "Redis", "apiVersion": "cache.example/v1"}], "dependsOn": []},
                    "controller": {"deployment": {"name": "redis-controller", "spec": {"template": {"spec": {
                        "containers": [{"name": "c", "image": "i"}],
                        "serviceAccountName": "redis-controller",
                    }}}}},
                    "permissions": {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
                },
            })
        );
    }
}
