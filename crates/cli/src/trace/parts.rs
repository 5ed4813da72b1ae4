//! Pieces of a package's tree that Providers and stacks share: reads that
//! become nodes whatever they find (a forbidden or failed read is a node
//! saying so), a runtime Deployment with its pods, and the rbac-manager's
//! roles and bindings.

use kube::discovery::ApiResource;
use serde_json::Value;

use super::summary;
use crate::{
    node::Node,
    source::{Got, Refused, Source, forbidden, kinds},
};

/// The node for a read of `name`: `build` on what was found, else a node
/// saying it is missing, forbidden or unreadable.
pub async fn get_node<S: Source>(
    s: &S,
    r: &ApiResource,
    ns: Option<&str>,
    name: &str,
    build: impl FnOnce(&Value) -> Node,
) -> Node {
    match s.get(r, ns, name).await {
        Got::Found(v) => build(&v),
        other => unread_node(r, ns, name, &other),
    }
}

/// A node for `name` that was not found or could not be read.
pub fn unread_node(r: &ApiResource, ns: Option<&str>, name: &str, got: &Got) -> Node {
    let n = Node::unread(&r.api_version, &r.kind, name, ns);
    match got {
        Got::Found(_) | Got::Missing => n.with("missing", "not found"),
        Got::Forbidden(what) => n.with("forbidden", forbidden(what)),
        Got::Failed(why) => n.with("error", why.clone()),
    }
}

/// A node standing for a list that could not be read (its kind, named by
/// what was refused).
pub fn refused_node(r: &ApiResource, ns: Option<&str>, why: &Refused) -> Node {
    let (state, message) = why.explain();
    Node::unread(&r.api_version, &r.kind, "*", ns).with(state, message)
}

/// The objects `r` in `ns` selected by `selector`, each as `build` makes
/// it, or one node saying why they could not be listed.
pub async fn list_nodes<S: Source>(
    s: &S,
    r: &ApiResource,
    ns: Option<&str>,
    selector: &str,
    build: impl Fn(&Value) -> Node,
) -> Vec<Node> {
    match s.list(r, ns, Some(selector)).await {
        Ok(items) => {
            let mut nodes: Vec<Node> = items.iter().map(build).collect();
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            nodes
        }
        Err(why) => vec![refused_node(r, ns, &why)],
    }
}

/// A label selector (`k=v,…`) from a Deployment's `spec.selector.matchLabels`.
pub fn selector_of(deployment: &Value) -> Option<String> {
    let labels = deployment
        .pointer("/spec/selector/matchLabels")?
        .as_object()?;
    let pairs: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
        .collect();
    (!pairs.is_empty()).then(|| pairs.join(","))
}

/// A Deployment's node with its pods (those its selector selects) as
/// children.
pub async fn deployment_with_pods<S: Source>(s: &S, d: &Value) -> Node {
    let mut n = summary::deployment(d);
    let ns = n.namespace.clone();
    if let Some(selector) = selector_of(d) {
        n.children = list_nodes(s, &kinds::pod(), ns.as_deref(), &selector, summary::pod).await;
    }
    n
}

/// The Deployments in `ns` labelled by `selector`, each with its pods.
pub async fn deployments<S: Source>(s: &S, ns: &str, selector: &str) -> Vec<Node> {
    match s.list(&kinds::deployment(), Some(ns), Some(selector)).await {
        Ok(items) => {
            let mut out = Vec::new();
            for d in &items {
                out.push(deployment_with_pods(s, d).await);
            }
            out
        }
        Err(why) => vec![refused_node(&kinds::deployment(), Some(ns), &why)],
    }
}

/// The ClusterRoles and ClusterRoleBindings labelled by `selector` (what
/// the rbac-manager rendered for one revision or Extension), and with `ns`
/// the Roles and RoleBindings there (an Extension's rights are namespaced).
pub async fn roles<S: Source>(s: &S, ns: Option<&str>, selector: &str) -> Vec<Node> {
    let role: fn(&Value) -> Node = summary::cluster_role;
    let binding: fn(&Value) -> Node = summary::binding;
    let mut kinds = vec![
        (kinds::cluster_role(), None, role),
        (kinds::cluster_role_binding(), None, binding),
    ];
    if let Some(ns) = ns {
        kinds.push((kinds::role(), Some(ns), role));
        kinds.push((kinds::role_binding(), Some(ns), binding));
    }
    let mut out = Vec::new();
    for (kind, scope, build) in kinds {
        out.extend(list_nodes(s, &kind, scope, selector, build).await);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_selector_is_made_of_the_match_labels() {
        let d = json!({"spec": {"selector": {"matchLabels": {"a": "1", "b": "2"}}}});
        assert_eq!(selector_of(&d).as_deref(), Some("a=1,b=2"));
        assert_eq!(selector_of(&json!({"spec": {"selector": {}}})), None);
    }

    #[test]
    fn a_forbidden_read_names_what_to_bind() {
        let n = unread_node(
            &kinds::pod(),
            Some("crossplane-system"),
            "p",
            &Got::Forbidden("pods in crossplane-system".into()),
        );
        assert_eq!(n.state.as_deref(), Some("forbidden"));
        assert_eq!(
            n.message.as_deref(),
            Some("forbidden: pods in crossplane-system (bind crossplane-view)")
        );
    }
}
