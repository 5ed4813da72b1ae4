//! One object of a trace as it is printed: what it is, a short summary of
//! its status (readiness, the kind's own state, the message that explains
//! it), its conditions and what it is made of. Built from the object's JSON
//! as the API server returned it; nothing here does I/O.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// A condition, as any kind writes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cond {
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// One node of the tree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    pub kind: String,
    pub api_version: String,
    pub name: String,
    pub namespace: Option<String>,
    /// The node's readiness: the status of the condition that says whether
    /// it works (Ready, Healthy, Available, Established), `None` when the
    /// kind has none.
    pub ready: Option<String>,
    /// The kind's own state: `Synced=True`, `Installed=True`, `Active`,
    /// `Submitted`, `Running`, `ErrImagePull`, `forbidden`.
    pub state: Option<String>,
    /// What explains the state: the message of a condition that is not
    /// True, a container's waiting message, why the node could not be read.
    pub message: Option<String>,
    /// More to show with `-o wide` and in JSON (cluster, image, versions).
    pub details: BTreeMap<String, String>,
    pub conditions: Vec<Cond>,
    pub children: Vec<Node>,
}

/// The conditions of `obj` (its `status.conditions`).
pub fn conditions_of(obj: &Value) -> Vec<Cond> {
    conditions_at(obj.pointer("/status/conditions"))
}

/// The conditions in `list`, skipping entries without a type.
pub fn conditions_at(list: Option<&Value>) -> Vec<Cond> {
    let text = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).map(str::to_owned);
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some(Cond {
                type_: text(c, "type")?,
                status: text(c, "status").unwrap_or_else(|| "Unknown".to_owned()),
                reason: text(c, "reason"),
                message: text(c, "message").filter(|m| !m.is_empty()),
            })
        })
        .collect()
}

/// The string at `pointer` in `v`, if it is one.
pub fn text(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A number or string at `pointer`, as text.
pub fn scalar(v: &Value, pointer: &str) -> Option<String> {
    match v.pointer(pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl Node {
    /// A node for `obj` with its identity and conditions, readiness from its
    /// `ready` condition type and the message of the first condition that
    /// is not True (the one that explains).
    pub fn of(obj: &Value, ready: &str) -> Self {
        let conditions = conditions_of(obj);
        let mut n = Self {
            kind: text(obj, "/kind").unwrap_or_default(),
            api_version: text(obj, "/apiVersion").unwrap_or_default(),
            name: text(obj, "/metadata/name").unwrap_or_default(),
            namespace: text(obj, "/metadata/namespace"),
            conditions,
            ..Self::default()
        };
        n.ready = n.condition(ready).map(|c| c.status.clone());
        n.message = n.explaining();
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            n.details.insert("deleting".into(), "true".into());
        }
        n
    }

    /// A node for an object that is named but was not (or could not be)
    /// read: its identity, `state`, and `message` saying why.
    pub fn unread(api_version: &str, kind: &str, name: &str, ns: Option<&str>) -> Self {
        Self {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
            name: name.to_owned(),
            namespace: ns.map(str::to_owned),
            ..Self::default()
        }
    }

    /// This node with `state` and `message`.
    pub fn with(mut self, state: &str, message: impl Into<String>) -> Self {
        self.state = Some(state.to_owned());
        self.message = Some(message.into());
        self
    }

    /// The condition of type `type_`, if any.
    pub fn condition(&self, type_: &str) -> Option<&Cond> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// `Type=Status` of the condition `type_`, when the node has it.
    pub fn condition_state(&self, type_: &str) -> Option<String> {
        self.condition(type_)
            .map(|c| format!("{}={}", c.type_, c.status))
    }

    /// The message of the first condition that is not True, with its
    /// reason when there is no message.
    fn explaining(&self) -> Option<String> {
        self.conditions
            .iter()
            .find(|c| c.status != "True")
            .and_then(|c| {
                let reason = c.reason.as_deref().filter(|r| !r.is_empty());
                match (&c.message, reason) {
                    (Some(m), Some(r)) => Some(format!("{}: {r}: {m}", c.type_)),
                    (Some(m), None) => Some(format!("{}: {m}", c.type_)),
                    (None, Some(r)) => Some(format!("{}: {r}", c.type_)),
                    (None, None) => None,
                }
            })
    }

    /// Adds a detail when there is a value.
    pub fn detail(&mut self, key: &str, value: Option<String>) {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            self.details.insert(key.to_owned(), v);
        }
    }

    /// `kind/name`, as the tree prints it.
    pub fn title(&self) -> String {
        format!("{}/{}", self.kind, self.name)
    }

    /// The node and its children as JSON (`-o json`).
    pub fn to_json(&self) -> Value {
        let mut status = serde_json::Map::new();
        for (k, v) in [
            ("ready", &self.ready),
            ("state", &self.state),
            ("message", &self.message),
        ] {
            if let Some(v) = v {
                status.insert(k.to_owned(), json!(v));
            }
        }
        for (k, v) in &self.details {
            status.insert(k.clone(), json!(v));
        }
        let mut out = json!({
            "kind": self.kind,
            "apiVersion": self.api_version,
            "name": self.name,
            "status": status,
            "conditions": self.conditions.iter().map(|c| {
                let mut o = serde_json::Map::new();
                o.insert("type".into(), json!(c.type_));
                o.insert("status".into(), json!(c.status));
                if let Some(r) = &c.reason {
                    o.insert("reason".into(), json!(r));
                }
                if let Some(m) = &c.message {
                    o.insert("message".into(), json!(m));
                }
                Value::Object(o)
            }).collect::<Vec<_>>(),
            "children": self.children.iter().map(Self::to_json).collect::<Vec<_>>(),
        });
        if let (Some(ns), Some(o)) = (&self.namespace, out.as_object_mut()) {
            o.insert("namespace".into(), json!(ns));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_of_the_first_condition_that_is_not_true_explains_the_node() {
        let obj = json!({
            "apiVersion": "pkg.crossplane.io/v1", "kind": "Provider",
            "metadata": {"name": "p"},
            "status": {"conditions": [
                {"type": "Installed", "status": "True", "reason": "ActivePackageRevision"},
                {"type": "Healthy", "status": "False", "reason": "UnhealthyPackageRevision", "message": "pods cannot pull"},
            ]},
        });
        let n = Node::of(&obj, "Healthy");
        assert_eq!(n.ready.as_deref(), Some("False"));
        assert_eq!(
            n.message.as_deref(),
            Some("Healthy: UnhealthyPackageRevision: pods cannot pull")
        );
        assert_eq!(
            n.condition_state("Installed").as_deref(),
            Some("Installed=True")
        );
        assert_eq!(n.namespace, None);
    }

    #[test]
    fn an_object_without_status_has_no_readiness_and_no_message() {
        let n = Node::of(
            &json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "c", "namespace": "d"}}),
            "Ready",
        );
        assert_eq!((n.ready, n.message), (None, None));
        assert_eq!(n.namespace.as_deref(), Some("d"));
    }

    #[test]
    fn malformed_conditions_are_skipped_not_fatal() {
        let c = conditions_at(Some(&json!([{"status": "True"}, 3, {"type": "Ready"}])));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, "Unknown");
    }

    #[test]
    fn json_carries_identity_status_conditions_and_children() {
        let mut n =
            Node::unread("v1", "Pod", "p", Some("ns")).with("ErrImagePull", "no such image");
        n.detail("image", Some("r/i:v1".into()));
        n.children.push(Node::unread("v1", "ConfigMap", "c", None));
        let j = n.to_json();
        assert_eq!(j["namespace"], "ns");
        assert_eq!(j["status"]["state"], "ErrImagePull");
        assert_eq!(j["status"]["image"], "r/i:v1");
        assert_eq!(j["children"][0]["kind"], "ConfigMap");
        assert!(j["children"][0].get("namespace").is_none());
    }
}
