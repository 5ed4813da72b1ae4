//! `trace extensionrequest/NAME -n NS`: the request → the Extension it
//! installed (its record) → the CRDs the Extension owns and those it
//! depends on (each depended-on CRD with the Extension that owns it: the
//! stack's dependency, with its own status), its controller Deployment and
//! pods (in the Extension's namespace), and the role and binding the
//! rbac-manager rendered for it.

use serde_json::Value;
use types::extensions::v1alpha1::{OWNER_ANNOTATION, ROLE_NAME_LABEL, ROLE_NAMESPACE_LABEL};

use super::{parts, summary};
use crate::{
    node::{Node, text},
    source::{Got, Source, kinds},
};

/// The request's tree; `None` when there is no such request.
pub async fn trace<S: Source>(s: &S, ns: &str, name: &str) -> Option<Node> {
    let req = match s.get(&kinds::extension_request(), Some(ns), name).await {
        Got::Found(r) => r,
        Got::Missing => return None,
        other => {
            return Some(parts::unread_node(
                &kinds::extension_request(),
                Some(ns),
                name,
                &other,
            ));
        }
    };
    let mut root = summary::extension_request(&req);
    let crds = s.list(&kinds::crd(), None, None).await;
    let Some(record) = text(&req, "/status/extensionRecord/name") else {
        return Some(root);
    };
    // The record names the Extension but not its namespace: the request's
    // own, else (a request by CRD for a stack installed elsewhere) the
    // namespace of the Extension that owns the requested CRD.
    let mut ext = s.get(&kinds::extension(), Some(ns), &record).await;
    let mut ext_ns = ns.to_owned();
    if ext == Got::Missing
        && let (Some(crd), Ok(all)) = (text(&req, "/spec/crd"), &crds)
        && let Some((owner_ns, owner)) = owner_of(all, crd.split('/').next().unwrap_or_default())
        && owner == record
    {
        ext = s.get(&kinds::extension(), Some(&owner_ns), &owner).await;
        ext_ns = owner_ns;
    }
    let e = match ext {
        Got::Found(e) => e,
        other => {
            root.children.push(parts::unread_node(
                &kinds::extension(),
                Some(&ext_ns),
                &record,
                &other,
            ));
            return Some(root);
        }
    };
    root.children
        .push(extension(s, &e, &ext_ns, crds.as_ref()).await);
    Some(root)
}

async fn extension<S: Source>(
    s: &S,
    e: &Value,
    ns: &str,
    crds: Result<&Vec<Value>, &crate::source::Refused>,
) -> Node {
    let mut n = summary::extension(e);
    let name = n.name.clone();
    match crds {
        Ok(all) => {
            for (field, state) in [("owns", "owns"), ("dependsOn", "depends on")] {
                for want in refs(e, field) {
                    n.children.push(crd_node(s, all, &want, state).await);
                }
            }
        }
        Err(why) => n
            .children
            .push(parts::refused_node(&kinds::crd(), None, why)),
    }
    if let Some(d) = text(e, "/spec/controller/deployment/name") {
        n.children
            .push(match s.get(&kinds::deployment(), Some(ns), &d).await {
                Got::Found(dep) => parts::deployment_with_pods(s, &dep).await,
                other => parts::unread_node(&kinds::deployment(), Some(ns), &d, &other),
            });
    }
    let selector = format!("{ROLE_NAMESPACE_LABEL}={ns},{ROLE_NAME_LABEL}={name}");
    n.children
        .extend(parts::roles(s, Some(ns), &selector).await);
    n
}

/// The `(kind, apiVersion)` an Extension lists under
/// `spec.customresourcedefinitions.<field>`.
fn refs(e: &Value, field: &str) -> Vec<(String, String)> {
    e.pointer(&format!("/spec/customresourcedefinitions/{field}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| Some((text(r, "/kind")?, text(r, "/apiVersion")?)))
        .collect()
}

/// The CRD serving `kind` of `api_version`'s group, among `all`.
fn crd_for<'a>(all: &'a [Value], kind: &str, api_version: &str) -> Option<&'a Value> {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    all.iter().find(|c| {
        text(c, "/spec/group").as_deref() == Some(group)
            && text(c, "/spec/names/kind").as_deref() == Some(kind)
    })
}

/// The Extension (`namespace`, `name`) that owns the CRD `name`.
fn owner_of(all: &[Value], name: &str) -> Option<(String, String)> {
    let crd = all
        .iter()
        .find(|c| text(c, "/metadata/name").as_deref() == Some(name))?;
    let owner = crd
        .pointer("/metadata/annotations")?
        .get(OWNER_ANNOTATION)?
        .as_str()?;
    let (ns, name) = owner.split_once('/')?;
    Some((ns.to_owned(), name.to_owned()))
}

async fn crd_node<S: Source>(s: &S, all: &[Value], want: &(String, String), how: &str) -> Node {
    let (kind, api_version) = want;
    let Some(c) = crd_for(all, kind, api_version) else {
        return Node::unread(
            &kinds::crd().api_version,
            "CustomResourceDefinition",
            kind,
            None,
        )
        .with(
            "missing",
            format!("{how} {kind} ({api_version}): no CRD installs it"),
        );
    };
    let mut n = summary::crd(c, None);
    n.state = Some(how.to_owned());
    let owner = text(c, "/metadata/name").and_then(|name| owner_of(all, &name));
    n.detail(
        "owner",
        owner.as_ref().map(|(ns, name)| format!("{ns}/{name}")),
    );
    if how != "owns"
        && let Some((ons, oname)) = owner
    {
        n.children.push(
            parts::get_node(
                s,
                &kinds::extension(),
                Some(&ons),
                &oname,
                summary::extension,
            )
            .await,
        );
    }
    n
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fake::Fake;

    fn crd(name: &str, group: &str, kind: &str, owner: &str) -> Value {
        json!({"metadata": {"name": name, "annotations": {"extensions.crossplane.io/owner": owner}},
            "spec": {"group": group, "names": {"kind": kind}, "versions": [{"name": "v1alpha1", "served": true}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]}})
    }

    #[tokio::test]
    async fn a_request_shows_its_extension_crds_controller_roles_and_dependencies() {
        let mut f = Fake::default();
        let x = "extensions.crossplane.io/v1alpha1";
        f.put(x, "ExtensionRequest", json!({"metadata": {"name": "redis", "namespace": "s"},
            "spec": {"package": "redis:v0.1.0"},
            "status": {"extensionRecord": {"name": "redis"}, "conditions": [{"type": "Ready", "status": "True"}]}}));
        f.put(x, "Extension", json!({"metadata": {"name": "redis", "namespace": "s"},
            "spec": {"version": "0.1.0",
                "customresourcedefinitions": {
                    "owns": [{"kind": "RedisCluster", "apiVersion": "cache.io/v1alpha1"}],
                    "dependsOn": [{"kind": "Network", "apiVersion": "net.io/v1"}, {"kind": "Gone", "apiVersion": "gone.io/v1"}]},
                "controller": {"deployment": {"name": "redis-controller", "spec": {}}}},
            "status": {"conditions": [{"type": "Ready", "status": "False", "message": "controller not available"}]}}));
        f.put(
            x,
            "Extension",
            json!({"metadata": {"name": "net", "namespace": "infra"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        let c = "apiextensions.k8s.io/v1";
        f.put(
            c,
            "CustomResourceDefinition",
            crd(
                "redisclusters.cache.io",
                "cache.io",
                "RedisCluster",
                "s/redis",
            ),
        );
        f.put(
            c,
            "CustomResourceDefinition",
            crd("networks.net.io", "net.io", "Network", "infra/net"),
        );
        f.put(
            "apps/v1",
            "Deployment",
            json!({"metadata": {"name": "redis-controller", "namespace": "s"},
            "spec": {"selector": {"matchLabels": {"app": "redis"}}}}),
        );
        f.put("v1", "Pod", json!({"metadata": {"name": "redis-controller-1", "namespace": "s", "labels": {"app": "redis"}},
            "status": {"phase": "Running"}}));
        f.put("rbac.authorization.k8s.io/v1", "Role", json!({"metadata": {"name": "crossplane:extension:s:redis:system", "namespace": "s",
            "labels": {"extensions.crossplane.io/namespace": "s", "extensions.crossplane.io/name": "redis"}}}));

        let root = trace(&f, "s", "redis").await.unwrap();
        let ext = &root.children[0];
        assert_eq!(ext.title(), "Extension/redis");
        assert_eq!(
            ext.message.as_deref(),
            Some("Ready: controller not available")
        );
        let children: Vec<(String, Option<&str>)> = ext
            .children
            .iter()
            .map(|c| (c.title(), c.state.as_deref()))
            .collect();
        assert_eq!(
            children,
            [
                (
                    "CustomResourceDefinition/redisclusters.cache.io".into(),
                    Some("owns")
                ),
                (
                    "CustomResourceDefinition/networks.net.io".into(),
                    Some("depends on")
                ),
                ("CustomResourceDefinition/Gone".into(), Some("missing")),
                ("Deployment/redis-controller".into(), Some("0/1 ready")),
                (
                    "Role/crossplane:extension:s:redis:system".into(),
                    Some("0 rules")
                ),
            ]
        );
        let dependency = &ext.children[1].children[0];
        assert_eq!(dependency.title(), "Extension/net");
        assert_eq!(dependency.ready.as_deref(), Some("True"));
        assert_eq!(
            ext.children[3].children[0].state.as_deref(),
            Some("Running")
        );
        assert_eq!(trace(&f, "s", "nope").await, None);
    }
}
