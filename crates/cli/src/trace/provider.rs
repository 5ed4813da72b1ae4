//! `trace provider/NAME`: the Provider → its ProviderRevisions (the active
//! one first) → for each, the ManagedResourceDefinitions it delivered
//! (Active or Inactive, an Active one's CRD under it) and its other CRDs
//! (controlled by the active revision, owned by the others), its runtime Deployment and pods in the
//! runtimes' namespace, the roles and bindings the rbac-manager
//! rendered for it, and the Providers it depends on (each with its own
//! status).

use std::collections::BTreeMap;

use serde_json::Value;
use types::pkg::contract::{annotations, labels};

use super::{parts, summary};
use crate::{
    node::{Node, text},
    source::{Source, kinds},
};

/// The Provider's tree; `None` when there is no such Provider (the
/// caller's one-line error), `Err` with a node when it cannot be read.
pub async fn trace<S: Source>(s: &S, name: &str, system_ns: &str) -> Option<Node> {
    let p = match s.get(&kinds::provider(), None, name).await {
        crate::source::Got::Found(p) => p,
        crate::source::Got::Missing => return None,
        other => return Some(parts::unread_node(&kinds::provider(), None, name, &other)),
    };
    let mut root = summary::provider(&p);
    let revisions = match s
        .list(
            &kinds::revision(),
            None,
            Some(&format!("{}={name}", labels::PACKAGE)),
        )
        .await
    {
        Ok(r) => r,
        Err(why) => {
            root.children
                .push(parts::refused_node(&kinds::revision(), None, &why));
            return Some(root);
        }
    };
    let providers = s.list(&kinds::provider(), None, None).await;
    for r in ordered(revisions) {
        root.children
            .push(revision(s, &r, system_ns, providers.as_ref().ok()).await);
    }
    if let Err(why) = &providers
        && root.children.iter().any(|r| !dependencies(r).is_empty())
    {
        root.children
            .push(parts::refused_node(&kinds::provider(), None, why));
    }
    Some(root)
}

/// The active revision first, then the newest.
fn ordered(mut revisions: Vec<Value>) -> Vec<Value> {
    let key = |r: &Value| {
        (
            text(r, "/spec/desiredState").as_deref() != Some("Active"),
            -r.pointer("/spec/revision")
                .and_then(Value::as_i64)
                .unwrap_or(0),
        )
    };
    revisions.sort_by_key(key);
    revisions
}

/// The dependencies a revision node records (its `dependencies` detail).
fn dependencies(n: &Node) -> Vec<String> {
    n.details
        .get("dependencies")
        .map(|d| annotations::entries(d))
        .unwrap_or_default()
}

async fn revision<S: Source>(
    s: &S,
    r: &Value,
    system_ns: &str,
    providers: Option<&Vec<Value>>,
) -> Node {
    let mut n = summary::revision(r);
    n.detail(
        "dependencies",
        text(
            r,
            &format!(
                "/metadata/annotations/{}",
                pointer_key(annotations::DEPENDENCIES)
            ),
        ),
    );
    let uid = text(r, "/metadata/uid");
    let refs_of = |kind: &str| -> Vec<String> {
        r.pointer("/status/objectRefs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
            .filter_map(|o| text(o, "/name"))
            .collect()
    };
    let mrds = refs_of("ManagedResourceDefinition");
    // A managed-resource kind shows as its MRD (Active or Inactive), with
    // the CRD it serves under it; the other CRDs as before.
    for mrd in &mrds {
        let mut uid = None;
        let mut m = parts::get_node(s, &kinds::mrd(), None, mrd, |v| {
            uid = text(v, "/metadata/uid");
            summary::mrd(v)
        })
        .await;
        if m.state.as_deref() == Some("Active") {
            m.children.push(
                parts::get_node(s, &kinds::crd(), None, mrd, |c| {
                    summary::crd(c, uid.as_deref())
                })
                .await,
            );
        }
        n.children.push(m);
    }
    for crd in refs_of("CustomResourceDefinition")
        .into_iter()
        .filter(|c| !mrds.contains(c))
    {
        let owner = uid.as_deref();
        n.children
            .push(parts::get_node(s, &kinds::crd(), None, &crd, |c| summary::crd(c, owner)).await);
    }
    let selector = format!("{}={}", labels::REVISION, n.name);
    n.children
        .extend(parts::deployments(s, system_ns, &selector).await);
    n.children.extend(parts::roles(s, None, &selector).await);
    let deps = dependencies(&n);
    if let Some(providers) = providers {
        let by_repository = repositories(providers);
        for dep in deps {
            n.children.push(match by_repository.get(&dep) {
                Some(p) => {
                    let mut d = summary::provider(p);
                    d.detail("dependency", Some(dep));
                    d
                }
                None => Node::unread(&kinds::provider().api_version, "Provider", &dep, None).with(
                    "missing",
                    format!("dependency {dep}: no Provider installs it"),
                ),
            });
        }
    }
    n
}

/// Installed Providers by the repository of their package.
fn repositories(providers: &[Value]) -> BTreeMap<String, &Value> {
    providers
        .iter()
        .filter_map(|p| Some((oci::xpkg::repository_of(&text(p, "/spec/package")?), p)))
        .collect()
}

/// A map key as a JSON pointer segment.
fn pointer_key(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fake::Fake;

    fn cond(t: &str, s: &str, m: &str) -> Value {
        json!({"type": t, "status": s, "message": m})
    }

    #[tokio::test]
    async fn a_provider_shows_its_revisions_crds_runtime_roles_and_dependencies() {
        let mut f = Fake::default();
        f.put("pkg.crossplane.io/v1", "Provider", json!({
            "metadata": {"name": "p", "uid": "pu"},
            "spec": {"package": "reg.io/org/p:v1"},
            "status": {"conditions": [cond("Installed", "True", ""), cond("Healthy", "False", "runtime not ready")]}}));
        f.put(
            "pkg.crossplane.io/v1",
            "Provider",
            json!({
            "metadata": {"name": "dep"}, "spec": {"package": "reg.io/org/dep:v2"},
            "status": {"conditions": [cond("Healthy", "True", "")]}}),
        );
        f.put("pkg.crossplane.io/v1", "ProviderRevision", json!({
            "metadata": {"name": "p-old", "uid": "old", "labels": {"pkg.crossplane.io/package": "p"}},
            "spec": {"desiredState": "Inactive", "revision": 1, "package": "reg.io/org/p:v0"}}));
        f.put("pkg.crossplane.io/v1", "ProviderRevision", json!({
            "metadata": {"name": "p-new", "uid": "new", "labels": {"pkg.crossplane.io/package": "p"},
                "annotations": {"pkg.crossplane.io/dependencies": "reg.io/org/dep,reg.io/org/gone"}},
            "spec": {"desiredState": "Active", "revision": 2, "package": "reg.io/org/p:v1", "image": "reg.io/org/p-rt:v1"},
            "status": {"objectRefs": [
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "name": "gears.x.io"},
                {"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition", "name": "cogs.x.io"},
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "name": "cogs.x.io"},
                {"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition", "name": "nuts.x.io"}]}}));
        f.put("apiextensions.crossplane.io/v1alpha1", "ManagedResourceDefinition", json!({
            "metadata": {"name": "cogs.x.io", "uid": "cogs"}, "spec": {"state": "Active", "group": "x.io", "names": {"kind": "Cog"}},
            "status": {"conditions": [cond("Established", "True", "")]}}));
        f.put("apiextensions.crossplane.io/v1alpha1", "ManagedResourceDefinition", json!({
            "metadata": {"name": "nuts.x.io"}, "spec": {"state": "Inactive", "group": "x.io", "names": {"kind": "Nut"}},
            "status": {"conditions": [cond("Established", "False", "Inactive")]}}));
        f.put("apiextensions.k8s.io/v1", "CustomResourceDefinition", json!({
            "metadata": {"name": "cogs.x.io", "ownerReferences": [{"uid": "cogs", "controller": true}]},
            "status": {"conditions": [cond("Established", "True", "")]}}));
        f.put("apiextensions.k8s.io/v1", "CustomResourceDefinition", json!({
            "metadata": {"name": "gears.x.io", "ownerReferences": [{"uid": "new", "controller": true}]},
            "status": {"conditions": [cond("Established", "True", "")]}}));
        f.put("apps/v1", "Deployment", json!({
            "metadata": {"name": "p-new", "namespace": "crossplane-system", "labels": {"pkg.crossplane.io/revision": "p-new"}},
            "spec": {"selector": {"matchLabels": {"pkg.crossplane.io/revision": "p-new"}}}}));
        f.put("v1", "Pod", json!({
            "metadata": {"name": "p-new-1", "namespace": "crossplane-system", "labels": {"pkg.crossplane.io/revision": "p-new"}},
            "status": {"containerStatuses": [{"name": "package-runtime", "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}}));
        f.put("rbac.authorization.k8s.io/v1", "ClusterRole", json!({
            "metadata": {"name": "crossplane:provider:p-new:system", "labels": {"pkg.crossplane.io/revision": "p-new"}}, "rules": []}));
        f.forbid("rbac.authorization.k8s.io/v1", "ClusterRoleBinding");

        let root = trace(&f, "p", "crossplane-system").await.unwrap();
        assert_eq!(root.ready.as_deref(), Some("False"));
        let names: Vec<&str> = root.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["p-new", "p-old"], "the active revision first");
        let active = &root.children[0];
        let kinds: Vec<(&str, &str)> = active
            .children
            .iter()
            .map(|c| (c.kind.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("ManagedResourceDefinition", "cogs.x.io"),
                ("ManagedResourceDefinition", "nuts.x.io"),
                ("CustomResourceDefinition", "gears.x.io"),
                ("Deployment", "p-new"),
                ("ClusterRole", "crossplane:provider:p-new:system"),
                ("ClusterRoleBinding", "*"),
                ("Provider", "dep"),
                ("Provider", "reg.io/org/gone"),
            ]
        );
        let (cogs, nuts) = (&active.children[0], &active.children[1]);
        assert_eq!(cogs.state.as_deref(), Some("Active"));
        assert_eq!(cogs.ready.as_deref(), Some("True"));
        assert_eq!(
            cogs.children.len(),
            1,
            "an Active MRD shows the CRD it serves"
        );
        assert_eq!(cogs.children[0].kind, "CustomResourceDefinition");
        assert_eq!(cogs.children[0].state.as_deref(), Some("controlled"));
        assert_eq!(nuts.state.as_deref(), Some("Inactive"));
        assert_eq!(nuts.ready.as_deref(), Some("False"));
        assert!(nuts.children.is_empty(), "an Inactive MRD serves no CRD");
        let active = {
            let mut a = active.clone();
            a.children.drain(..2);
            a
        };
        assert_eq!(active.children[0].state.as_deref(), Some("controlled"));
        let pod = &active.children[1].children[0];
        assert_eq!(pod.state.as_deref(), Some("ErrImagePull"));
        assert_eq!(
            active.children[3].message.as_deref(),
            Some("forbidden: clusterrolebindings.rbac.authorization.k8s.io (bind crossplane-view)")
        );
        assert_eq!(active.children[4].ready.as_deref(), Some("True"));
        assert_eq!(active.children[5].state.as_deref(), Some("missing"));
        assert!(
            root.children[1]
                .children
                .iter()
                .all(|c| c.kind != "Deployment")
        );
    }

    #[tokio::test]
    async fn a_missing_provider_is_none() {
        assert_eq!(
            trace(&Fake::default(), "nope", "crossplane-system").await,
            None
        );
    }
}
