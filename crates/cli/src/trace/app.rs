//! `trace kubernetesapplication/NAME -n NS`: the application → the
//! KubernetesCluster it is scheduled to, and its
//! KubernetesApplicationResources (those it controls) → each one's remote
//! object, with the state the resource-controller recorded
//! (`status.remote`, the resource's state and conditions). Neither the
//! remote cluster nor any Secret is read.

use serde_json::Value;

use super::{parts, summary};
use crate::{
    node::{Node, text},
    source::{Got, Source, kinds},
};

/// The application's tree; `None` when there is no such application.
pub async fn trace<S: Source>(s: &S, ns: &str, name: &str) -> Option<Node> {
    let app = match s.get(&kinds::application(), Some(ns), name).await {
        Got::Found(a) => a,
        Got::Missing => return None,
        other => {
            return Some(parts::unread_node(
                &kinds::application(),
                Some(ns),
                name,
                &other,
            ));
        }
    };
    let mut root = summary::application(&app);
    if let Some(cluster) = text(&app, "/status/clusterRef/name") {
        root.children.push(
            parts::get_node(s, &kinds::cluster(), Some(ns), &cluster, summary::cluster).await,
        );
    }
    let uid = text(&app, "/metadata/uid");
    match s.list(&kinds::application_resource(), Some(ns), None).await {
        Ok(resources) => {
            let mut mine: Vec<&Value> = resources
                .iter()
                .filter(|r| controlled_by(r, uid.as_deref()))
                .collect();
            mine.sort_by_key(|r| text(r, "/metadata/name"));
            for r in mine {
                let mut n = summary::resource(r);
                n.children.push(summary::remote(r));
                root.children.push(n);
            }
        }
        Err(why) => root.children.push(parts::refused_node(
            &kinds::application_resource(),
            Some(ns),
            &why,
        )),
    }
    Some(root)
}

/// Whether `o`'s controller owner reference has UID `uid`.
fn controlled_by(o: &Value, uid: Option<&str>) -> bool {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && uid.is_some()
                && r.get("uid").and_then(Value::as_str) == uid
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fake::Fake;

    #[tokio::test]
    async fn an_application_shows_its_cluster_resources_and_their_remote_objects() {
        let mut f = Fake::default();
        let w = "workload.crossplane.io/v1alpha1";
        f.put(
            w,
            "KubernetesApplication",
            json!({
            "metadata": {"name": "wp", "namespace": "app", "uid": "a1"},
            "status": {"state": "Submitted", "clusterRef": {"name": "c1"},
                "conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        f.put(
            "compute.crossplane.io/v1alpha1",
            "KubernetesCluster",
            json!({
            "metadata": {"name": "c1", "namespace": "app"}}),
        );
        for (name, owner, state) in [
            ("wp-db", "a1", "Submitted"),
            ("other", "zz", "Failed"),
            ("wp-svc", "a1", "Failed"),
        ] {
            f.put(w, "KubernetesApplicationResource", json!({
                "metadata": {"name": name, "namespace": "app",
                    "ownerReferences": [{"uid": owner, "controller": true}]},
                "spec": {"clusterRef": {"name": "c1"},
                    "template": {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}}},
                "status": {"state": state, "conditions": [{"type": "Synced", "status": if state == "Failed" { "False" } else { "True" }, "message": "no such namespace"}]}}));
        }
        let root = trace(&f, "app", "wp").await.unwrap();
        let children: Vec<String> = root.children.iter().map(Node::title).collect();
        assert_eq!(
            children,
            [
                "KubernetesCluster/c1",
                "KubernetesApplicationResource/wp-db",
                "KubernetesApplicationResource/wp-svc"
            ]
        );
        let failed = &root.children[2];
        assert_eq!(failed.state.as_deref(), Some("Failed"));
        assert_eq!(failed.message.as_deref(), Some("Synced: no such namespace"));
        assert_eq!(failed.children[0].title(), "Service/wp-svc");
        assert_eq!(failed.children[0].details["cluster"], "c1");
        assert_eq!(trace(&f, "app", "nope").await, None);
        assert_eq!(trace(&f, "other-ns", "wp").await, None);
    }

    #[tokio::test]
    async fn forbidden_resources_still_print_the_application() {
        let mut f = Fake::default();
        f.put(
            "workload.crossplane.io/v1alpha1",
            "KubernetesApplication",
            json!({
            "metadata": {"name": "wp", "namespace": "app", "uid": "a1"}}),
        );
        f.forbid(
            "workload.crossplane.io/v1alpha1",
            "KubernetesApplicationResource",
        );
        let root = trace(&f, "app", "wp").await.unwrap();
        assert_eq!(root.children[0].state.as_deref(), Some("forbidden"));
    }
}
