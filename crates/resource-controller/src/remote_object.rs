//! Pure decisions about the remote side: what the template targets, who owns
//! a remote object, what is applied, what a propagated Secret is called and
//! whether a remote object is healthy.

use std::collections::BTreeMap;

use kube::api::GroupVersionKind;
use runtime::fieldpath;
use serde_json::{Value, json};
use types::workload::v1alpha1::ANNOTATION_RESOURCE_UID;

/// What a template targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Group, version and kind.
    pub gvk: GroupVersionKind,
    /// Object name.
    pub name: String,
    /// The namespace the template names, if any.
    pub namespace: Option<String>,
}

impl Target {
    /// "Deployment wordpress/wordpress" or "Namespace wordpress".
    pub fn describe(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) => format!("{} {ns}/{}", self.gvk.kind, self.name),
            None => format!("{} {}", self.gvk.kind, self.name),
        }
    }
}

/// Reads apiVersion, kind and metadata.name from a template, or says what to
/// add.
pub fn target(template: &Value) -> Result<Target, String> {
    let api_version = template["apiVersion"].as_str().filter(|s| !s.is_empty());
    let kind = template["kind"].as_str().filter(|s| !s.is_empty());
    let (api_version, kind) = match (api_version, kind) {
        (Some(a), Some(k)) => (a, k),
        (None, Some(_)) => return Err("spec.template has no apiVersion: set the apiVersion of the object to create (e.g. apps/v1)".to_owned()),
        (_, None) => return Err("spec.template has no kind: set the kind of the object to create (e.g. Deployment)".to_owned()),
    };
    let name = template["metadata"]["name"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or("spec.template.metadata.name is required: name the object to create")?;
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    Ok(Target {
        gvk: GroupVersionKind::gvk(group, version, kind),
        name: name.to_owned(),
        namespace: template["metadata"]["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    })
}

/// Who owns a remote object, by its UID annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Ours: it carries our UID.
    Ours,
    /// Nobody's: no annotation (created by someone else).
    Unmarked,
    /// Another resource's.
    Other(String),
}

/// The ownership of a remote object with these annotations.
pub fn ownership(annotations: Option<&BTreeMap<String, String>>, uid: &str) -> Ownership {
    match annotations.and_then(|a| a.get(ANNOTATION_RESOURCE_UID)) {
        Some(u) if u == uid => Ownership::Ours,
        Some(u) => Ownership::Other(u.clone()),
        None => Ownership::Unmarked,
    }
}

/// Why a remote object is not ours, as the condition says it.
pub fn conflict_message(what: &str, cluster: &str, ownership: &Ownership) -> String {
    let why = match ownership {
        Ownership::Unmarked => format!("it has no {ANNOTATION_RESOURCE_UID} annotation"),
        Ownership::Other(uid) => {
            format!("it belongs to the KubernetesApplicationResource with UID {uid}")
        }
        Ownership::Ours => "it is ours".to_owned(),
    };
    format!(
        "{what} already exists in cluster {cluster} and is not controlled by this resource ({why}); it is left untouched: delete it there or change the template's name"
    )
}

/// The object to apply: the template with our UID annotation and the
/// namespace decided by the kind's scope. Fails, naming the field, when the
/// template's metadata (or its annotations) is not an object.
pub fn render(template: &Value, uid: &str, namespace: Option<&str>) -> Result<Value, String> {
    let mut obj = template.clone();
    let invalid = |e: String| format!("invalid spec.template: {e}");
    fieldpath::set_fields(
        &mut obj,
        &["metadata", "annotations", ANNOTATION_RESOURCE_UID],
        json!(uid),
    )
    .map_err(invalid)?;
    match namespace {
        Some(ns) => fieldpath::set_fields(&mut obj, &["metadata", "namespace"], json!(ns))
            .map_err(invalid)?,
        None => {
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("namespace");
            }
        }
    }
    // Status is the remote cluster's to write.
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    Ok(obj)
}

/// The name a propagated Secret gets in the remote cluster.
pub fn secret_name(resource: &str, secret: &str) -> String {
    format!("{resource}-{secret}")
}

/// The label every propagated Secret carries, so that the controller
/// watches only those Secrets of a remote cluster, not all of them.
pub const LABEL_PROPAGATED: &str = "workload.crossplane.io/propagated";

/// The label selector of that watch.
pub const PROPAGATED_SELECTOR: &str = "workload.crossplane.io/propagated=true";

/// The annotation on a propagated Secret naming the version of the local
/// Secret it was copied from (`<uid>/<resourceVersion>`): while the local
/// Secret is unchanged, its copy is known current without reading its data.
pub const ANNOTATION_SOURCE: &str = "workload.crossplane.io/source-version";

/// The version of a local Secret, as [`ANNOTATION_SOURCE`] records it.
pub fn source_version(uid: &str, resource_version: &str) -> String {
    format!("{uid}/{resource_version}")
}

/// Whether a propagated Secret with these annotations was copied from the
/// local Secret at version `source`.
pub fn copied_from(annotations: Option<&BTreeMap<String, String>>, source: &str) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_SOURCE))
        .is_some_and(|v| v == source)
}

/// The propagated Secret: the local Secret's type and data, our UID and the
/// local Secret's version as annotations, the propagated label.
pub fn propagated_secret(
    name: &str,
    namespace: &str,
    uid: &str,
    source: &str,
    type_: Option<&str>,
    data: &Value,
) -> Value {
    let mut secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_PROPAGATED: "true"},
            "annotations": {ANNOTATION_RESOURCE_UID: uid, ANNOTATION_SOURCE: source},
        },
        "data": data,
    });
    if let (Some(t), Some(fields)) = (type_, secret.as_object_mut()) {
        fields.insert("type".to_owned(), json!(t));
    }
    secret
}

/// What a `WellKnown` health rule says: the built-in rule ([`unhealthy`]),
/// and for a Job, Complete (a Failed Job says why).
pub fn well_known(kind: &str, status: Option<&Value>) -> Option<String> {
    if kind != "Job" {
        return unhealthy(kind, status);
    }
    let condition = |t: &str| {
        status
            .and_then(|s| s["conditions"].as_array())
            .and_then(|cs| cs.iter().find(|c| c["type"] == t && c["status"] == "True"))
    };
    if condition("Complete").is_some() {
        return None;
    }
    Some(match condition("Failed") {
        Some(c) => format!(
            "Job failed: {} {}",
            c["reason"].as_str().unwrap_or(""),
            c["message"].as_str().unwrap_or("")
        )
        .trim()
        .to_owned(),
        None => "Job has not completed".to_owned(),
    })
}

/// None when the remote object is healthy as far as its kind lets us tell;
/// otherwise why not.
pub fn unhealthy(kind: &str, status: Option<&Value>) -> Option<String> {
    let status = status?;
    let condition = |t: &str| {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .cloned()
    };
    let explain = |c: &Value| {
        let reason = c["reason"].as_str().unwrap_or("");
        let message = c["message"].as_str().unwrap_or("");
        format!("{reason} {message}").trim().to_owned()
    };
    match kind {
        "Deployment" => match condition("Available") {
            Some(c) if c["status"] == "True" => None,
            Some(c) => Some(format!("Deployment is not available: {}", explain(&c))),
            None => Some("Deployment is not available yet".to_owned()),
        },
        "StatefulSet" | "ReplicaSet" | "DaemonSet" => {
            let (want, ready) = if kind == "DaemonSet" {
                (
                    status["desiredNumberScheduled"].as_i64(),
                    status["numberReady"].as_i64(),
                )
            } else {
                (
                    status["replicas"].as_i64(),
                    status["readyReplicas"].as_i64(),
                )
            };
            let (want, ready) = (want.unwrap_or(0), ready.unwrap_or(0));
            (ready < want).then(|| format!("{kind} has {ready} of {want} replicas ready"))
        }
        "Namespace" => (status["phase"] != "Active" && !status["phase"].is_null()).then(|| {
            format!(
                "Namespace is {}",
                status["phase"].as_str().unwrap_or("not active")
            )
        }),
        _ => match condition("Ready") {
            Some(c) if c["status"] != "True" => {
                Some(format!("{kind} is not Ready: {}", explain(&c)))
            }
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_names_its_target() {
        let t = target(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "wordpress", "namespace": "wordpress"}})).unwrap();
        assert_eq!(t.gvk, GroupVersionKind::gvk("apps", "v1", "Deployment"));
        assert_eq!(
            t.describe(Some("wordpress")),
            "Deployment wordpress/wordpress"
        );
        let core = target(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "wordpress"}}),
        )
        .unwrap();
        assert_eq!(core.gvk.group, "");
    }

    #[test]
    fn a_template_without_kind_or_name_says_what_to_add() {
        assert!(
            target(&json!({"apiVersion": "v1", "metadata": {"name": "x"}}))
                .unwrap_err()
                .contains("has no kind")
        );
        assert!(
            target(&json!({"kind": "ConfigMap", "metadata": {"name": "x"}}))
                .unwrap_err()
                .contains("has no apiVersion")
        );
        assert!(
            target(&json!({"apiVersion": "v1", "kind": "ConfigMap"}))
                .unwrap_err()
                .contains("metadata.name is required")
        );
    }

    #[test]
    fn ownership_is_read_from_the_uid_annotation() {
        let mine: BTreeMap<String, String> =
            [(ANNOTATION_RESOURCE_UID.to_owned(), "u1".to_owned())].into();
        assert_eq!(ownership(Some(&mine), "u1"), Ownership::Ours);
        assert_eq!(ownership(Some(&mine), "u2"), Ownership::Other("u1".into()));
        assert_eq!(ownership(None, "u1"), Ownership::Unmarked);
    }

    #[test]
    fn the_rendered_object_carries_our_uid_and_its_scope() {
        let t = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "w", "namespace": "x"}, "status": {"phase": "Active"}});
        let r = render(&t, "u1", None).unwrap();
        assert_eq!(r["metadata"]["annotations"][ANNOTATION_RESOURCE_UID], "u1");
        assert!(r["metadata"].get("namespace").is_none());
        assert!(r.get("status").is_none());
        let c = render(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            "u1",
            Some("default"),
        )
        .unwrap();
        assert!(
            render(&json!({"metadata": "m"}), "u1", None)
                .unwrap_err()
                .contains("metadata is a string, not an object")
        );
        assert_eq!(c["metadata"]["namespace"], "default");
    }

    #[test]
    fn a_propagated_secret_is_named_after_resource_and_secret() {
        assert_eq!(
            secret_name("wordpress-demo-deployment", "sql"),
            "wordpress-demo-deployment-sql"
        );
        let source = source_version("local-uid", "42");
        let s = propagated_secret(
            "n",
            "wordpress",
            "u1",
            &source,
            Some("Opaque"),
            &json!({"a": "Yg=="}),
        );
        assert_eq!(s["metadata"]["annotations"][ANNOTATION_RESOURCE_UID], "u1");
        assert_eq!(s["metadata"]["labels"][LABEL_PROPAGATED], "true");
        assert_eq!(s["type"], "Opaque");
        // Current while the local Secret keeps its UID and version.
        let annotations: BTreeMap<String, String> =
            serde_json::from_value(s["metadata"]["annotations"].clone()).unwrap();
        assert!(copied_from(Some(&annotations), "local-uid/42"));
        assert!(!copied_from(Some(&annotations), "local-uid/43"));
        assert!(!copied_from(Some(&annotations), "other-uid/42"));
        assert!(!copied_from(None, "local-uid/42"));
        assert_eq!(
            PROPAGATED_SELECTOR,
            format!("{LABEL_PROPAGATED}=true"),
            "the watch selects what the Secrets carry"
        );
    }

    #[test]
    fn health_follows_what_each_kind_reports() {
        let available = json!({"conditions": [{"type": "Available", "status": "True"}]});
        assert_eq!(unhealthy("Deployment", Some(&available)), None);
        let unavailable = json!({"conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]});
        assert!(
            unhealthy("Deployment", Some(&unavailable))
                .unwrap()
                .contains("MinimumReplicasUnavailable")
        );
        assert_eq!(
            unhealthy(
                "StatefulSet",
                Some(&json!({"replicas": 2, "readyReplicas": 1}))
            )
            .unwrap(),
            "StatefulSet has 1 of 2 replicas ready"
        );
        assert_eq!(
            unhealthy("Service", Some(&json!({"loadBalancer": {}}))),
            None
        );
        assert_eq!(unhealthy("ConfigMap", None), None);
        assert!(
            unhealthy(
                "Widget",
                Some(&json!({"conditions": [{"type": "Ready", "status": "False"}]}))
            )
            .is_some()
        );
    }
}
