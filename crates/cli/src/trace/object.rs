//! `trace object/NAME`: the Object → its ProviderConfig, each of its
//! references (`spec.references`, resolved and read where the user may,
//! with its status; a Secret is never read), and the managed object as the
//! Object's status records it (`status.atProvider.manifest`; the cluster it
//! lives in is never read).

use serde_json::Value;

use super::{parts, summary};
use crate::{
    node::{Node, text},
    source::{Got, Source, kinds},
};

/// The Object's tree; `None` when there is no such Object.
pub async fn trace<S: Source>(s: &S, name: &str) -> Option<Node> {
    let o = match s.get(&kinds::object(), None, name).await {
        Got::Found(o) => o,
        Got::Missing => return None,
        other => return Some(parts::unread_node(&kinds::object(), None, name, &other)),
    };
    let mut root = summary::managed_resource(&o);
    if let Some(pc) = text(&o, "/spec/providerConfigRef/name") {
        root.children
            .push(parts::get_node(s, &kinds::provider_config(), None, &pc, summary::any).await);
    }
    let references: Vec<(Value, &'static str)> = o
        .pointer("/spec/references")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            r.get("dependsOn")
                .map(|d| (d.clone(), "dependsOn"))
                .or_else(|| r.get("fromObject").map(|f| (f.clone(), "fromObject")))
        })
        .collect();
    for (r, how) in references {
        root.children.push(reference(s, &r, how).await);
    }
    root.children.push(managed(&o));
    Some(root)
}

/// A reference's node: what it names, read and summarised, or why not.
async fn reference<S: Source>(s: &S, r: &Value, how: &str) -> Node {
    let api_version = text(r, "/apiVersion").unwrap_or_default();
    let kind = text(r, "/kind").unwrap_or_default();
    let name = text(r, "/name").unwrap_or_default();
    let ns = text(r, "/namespace");
    let mut n = if api_version == "v1" && kind == "Secret" {
        // NB: trace reads only what crossplane-view may, and never a
        // Secret, not even to say it exists.
        Node::unread(&api_version, &kind, &name, ns.as_deref())
            .with("not read", "trace never reads Secrets")
    } else {
        match s.resolve(&api_version, &kind).await {
            Ok(res) => parts::get_node(s, &res, ns.as_deref(), &name, summary::any).await,
            Err(why) => {
                let (state, message) = why.explain();
                Node::unread(&api_version, &kind, &name, ns.as_deref()).with(state, message)
            }
        }
    };
    n.detail("reference", Some(how.to_owned()));
    n.detail("fieldPath", text(r, "/fieldPath"));
    n
}

/// The managed object as the Object's status records it.
fn managed(o: &Value) -> Node {
    let observed = o.pointer("/status/atProvider/manifest");
    let wanted = o.pointer("/spec/forProvider/manifest");
    let mut n = match observed.or(wanted) {
        Some(m) => summary::any(m),
        None => Node::unread("", "", "", None),
    };
    if observed.is_none() {
        n.state = Some("not observed".into());
        n.message =
            Some("the provider has not recorded it yet (status.atProvider.manifest)".into());
        n.conditions.clear();
        n.ready = None;
    }
    if let Some(r) = o.pointer("/status/managedObjectRef") {
        n.detail("ref", text(r, "/name"));
    }
    n.detail("managed", Some("status.atProvider.manifest".into()));
    n
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fake::Fake;

    #[tokio::test]
    async fn an_object_shows_its_config_references_and_managed_object() {
        let mut f = Fake::default();
        let k = "kubernetes.crossplane.io/v1alpha1";
        f.put(k, "Object", json!({"metadata": {"name": "app"},
            "spec": {"providerConfigRef": {"name": "remote"},
                "forProvider": {"manifest": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}},
                "references": [
                    {"dependsOn": {"apiVersion": k, "kind": "Object", "name": "crd"}},
                    {"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg", "namespace": "d", "fieldPath": "data.x"}, "toFieldPath": "metadata.labels.x"},
                    {"fromObject": {"apiVersion": "v1", "kind": "Secret", "name": "s", "namespace": "d", "fieldPath": "data.p"}, "toFieldPath": "x"},
                    {"dependsOn": {"apiVersion": "x.io/v1", "kind": "Unserved", "name": "u"}}]},
            "status": {"conditions": [{"type": "Synced", "status": "True"}, {"type": "Ready", "status": "True"}],
                "atProvider": {"manifest": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}, "status": {"phase": "Active"}}}}}));
        f.put(k, "Object", json!({"metadata": {"name": "crd"},
            "status": {"conditions": [{"type": "Ready", "status": "False", "message": "waiting"}]}}));
        f.put(k, "ProviderConfig", json!({"metadata": {"name": "remote"}}));
        f.put(
            "v1",
            "ConfigMap",
            json!({"metadata": {"name": "cfg", "namespace": "d"}}),
        );

        let root = trace(&f, "app").await.unwrap();
        assert_eq!(root.state.as_deref(), Some("Synced=True"));
        let titles: Vec<String> = root.children.iter().map(Node::title).collect();
        assert_eq!(
            titles,
            [
                "ProviderConfig/remote",
                "Object/crd",
                "ConfigMap/cfg",
                "Secret/s",
                "Unserved/u",
                "Namespace/app"
            ]
        );
        assert_eq!(root.children[1].message.as_deref(), Some("Ready: waiting"));
        assert_eq!(root.children[2].details["fieldPath"], "data.x");
        assert_eq!(root.children[3].state.as_deref(), Some("not read"));
        assert_eq!(root.children[4].state.as_deref(), Some("error"));
        assert_eq!(root.children[5].state.as_deref(), Some("Active"));
        assert_eq!(trace(&f, "nope").await, None);
    }

    #[test]
    fn an_unobserved_managed_object_says_so() {
        let o = json!({"spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}}}}});
        let n = managed(&o);
        assert_eq!(n.title(), "ConfigMap/c");
        assert_eq!(n.state.as_deref(), Some("not observed"));
    }
}
