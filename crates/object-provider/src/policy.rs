//! What the management and deletion policies allow, how readiness is
//! derived, and what of a live object may be shown in status.

use serde_json::{Value, json};
use types::{
    common::DeletionPolicy,
    kubernetes::v1alpha2::{ManagementAction, Readiness, ReadinessPolicy},
};

/// Whether `policies` name `action`, or `*`.
fn allows(policies: &[ManagementAction], action: ManagementAction) -> bool {
    policies
        .iter()
        .any(|p| *p == action || *p == ManagementAction::All)
}

/// Whether `policies` name `action` and nothing else (as a set: repeats
/// count once).
fn only(policies: &[ManagementAction], action: ManagementAction) -> bool {
    !policies.is_empty() && policies.iter().all(|p| *p == action)
}

/// May the provider create the managed object?
pub fn can_create(policies: &[ManagementAction]) -> bool {
    allows(policies, ManagementAction::Create)
}

/// May the provider update the managed object? (LateInitialize is accepted
/// and changes nothing: this provider never fills the manifest from the
/// live object.)
pub fn can_update(policies: &[ManagementAction]) -> bool {
    allows(policies, ManagementAction::Update)
}

/// May the provider delete the managed object? With the default policies
/// (`["*"]`) the deletion policy decides; any other list decides alone, by
/// naming Delete (or `*`), and the deletion policy is ignored, as upstream
/// Crossplane does.
pub fn can_delete(policies: &[ManagementAction], d: DeletionPolicy) -> bool {
    if only(policies, ManagementAction::All) {
        return d != DeletionPolicy::Orphan;
    }
    allows(policies, ManagementAction::Delete)
}

/// Whether the provider only reads the managed object (the policies are
/// exactly Observe).
pub fn observe_only(policies: &[ManagementAction]) -> bool {
    only(policies, ManagementAction::Observe)
}

/// None when an Object with these policies may be reconciled, else what to
/// fix: every reconcile starts by observing, so the list must name Observe
/// (or `*`).
pub fn invalid(policies: &[ManagementAction]) -> Option<String> {
    if policies.is_empty() {
        return Some(
            "managementPolicies is empty: set it to [\"*\"], or to a list that includes Observe (to stop reconciling, annotate the Object crossplane.io/paused: \"true\" instead)"
                .to_owned(),
        );
    }
    if allows(policies, ManagementAction::Observe) {
        return None;
    }
    Some(format!(
        "managementPolicies {} must include Observe (or be [\"*\"])",
        listed(policies)
    ))
}

/// The policies as a user writes them, e.g. `[Observe, Create]` or
/// `["*"]` (a bare `*` is not a YAML string).
pub fn listed(policies: &[ManagementAction]) -> String {
    let names: Vec<&str> = policies
        .iter()
        .map(|p| match p {
            ManagementAction::All => "\"*\"",
            ManagementAction::Observe => "Observe",
            ManagementAction::Create => "Create",
            ManagementAction::Update => "Update",
            ManagementAction::Delete => "Delete",
            ManagementAction::LateInitialize => "LateInitialize",
        })
        .collect();
    format!("[{}]", names.join(", "))
}

/// None when Ready by `readiness`, else why not.
pub fn unready(readiness: &Readiness, live: &Value) -> Option<String> {
    let conditions = live["status"]["conditions"].as_array();
    match readiness.policy {
        ReadinessPolicy::SuccessfulCreate => None,
        ReadinessPolicy::DeriveFromObject => {
            match conditions.and_then(|cs| cs.iter().find(|c| c["type"] == "Ready")) {
                Some(c) if c["status"] == "True" => None,
                Some(c) => Some(format!(
                    "the managed object is not Ready: {}",
                    c["message"].as_str().unwrap_or("")
                )),
                None => Some("the managed object has no Ready condition yet".to_owned()),
            }
        }
        ReadinessPolicy::AllTrue => match conditions {
            Some(cs) if !cs.is_empty() => cs.iter().find(|c| c["status"] != "True").map(|c| {
                format!(
                    "condition {} of the managed object is {}",
                    c["type"].as_str().unwrap_or("?"),
                    c["status"].as_str().unwrap_or("?")
                )
            }),
            _ => Some("the managed object has no conditions yet".to_owned()),
        },
        // The query is evaluated by the caller (it is async); without one
        // (the CRD refuses that) there is nothing to be Ready by.
        ReadinessPolicy::DeriveFromCelQuery => {
            Some("readiness.policy DeriveFromCelQuery needs readiness.celQuery".to_owned())
        }
    }
}

/// The live object as status shows it: managedFields dropped, a Secret's
/// values redacted (keys kept, so users see what is there).
pub fn for_status(live: &Value) -> Value {
    let mut v = live.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if v["kind"] == "Secret" && v["apiVersion"] == "v1" {
        for field in ["data", "stringData"] {
            if let Some(map) = v.get_mut(field).and_then(Value::as_object_mut) {
                for value in map.values_mut() {
                    *value = json!("REDACTED");
                }
            }
        }
    }
    v
}

/// Values read from Secrets while resolving references: they are kept out
/// of status, conditions, events and logs (shown as `REDACTED`).
#[derive(Debug, Default)]
pub struct Redactions(Vec<String>);

/// Values shorter than this are redacted only where they are a whole
/// string: cutting "1" or "yes" out of every text would say nothing and
/// hide everything.
const MIN_INFIX: usize = 4;

impl Redactions {
    /// Remembers every string in `value` (read from a Secret's data), and its
    /// base64-decoded text.
    pub fn add(&mut self, value: &Value) {
        match value {
            Value::String(s) if !s.is_empty() => {
                self.0.push(s.clone());
                if let Ok(k8s_openapi::ByteString(bytes)) =
                    serde_json::from_value::<k8s_openapi::ByteString>(value.clone())
                    && let Ok(text) = String::from_utf8(bytes)
                    && !text.is_empty()
                {
                    self.0.push(text);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| self.add(v)),
            Value::Object(map) => map.values().for_each(|v| self.add(v)),
            _ => {}
        }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every secret value in it replaced.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.0 {
            if s.len() >= MIN_INFIX {
                out = out.replace(s.as_str(), "REDACTED");
            } else if out == *s {
                out = "REDACTED".to_owned();
            }
        }
        out
    }

    /// Every string in `value` that holds a secret value, replaced.
    pub fn value(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                let shown = self.text(s);
                if shown != *s {
                    *s = "REDACTED".to_owned();
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.value(v)),
            _ => {}
        }
    }
}

/// A core Secret's `stringData` folded into `data` (base64), as the API
/// server does on every write (`stringData` wins). Applying `data` makes the
/// fields this provider owns the ones the server stores, so a value changed
/// by someone else is seen and put back; `stringData` itself is never stored
/// and could not be compared. Anything that is not a Secret, or whose
/// stringData is not a map of strings, is left for the API server to judge.
pub fn fold_string_data(manifest: &mut Value) {
    if manifest.get("apiVersion") != Some(&json!("v1"))
        || manifest.get("kind") != Some(&json!("Secret"))
    {
        return;
    }
    let Some(fields) = manifest.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = fields.get("stringData") else {
        return;
    };
    if !strings.values().all(Value::is_string) {
        return;
    }
    let strings = strings.clone();
    let mut data = match fields.get("data") {
        Some(Value::Object(d)) => d.clone(),
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(_) => return,
    };
    for (k, v) in strings {
        let text = v.as_str().unwrap_or_default();
        data.insert(k, json!(k8s_openapi::ByteString(text.as_bytes().to_vec())));
    }
    fields.remove("stringData");
    fields.insert("data".to_owned(), Value::Object(data));
}

#[cfg(test)]
mod tests {
    use super::*;
    use ManagementAction::*;

    #[test]
    fn create_and_update_follow_their_policy_or_the_wildcard() {
        // (policies, create, update)
        let rows: [(&[ManagementAction], bool, bool); 7] = [
            (&[All], true, true),
            (&[Observe, Create, Update], true, true),
            (&[Observe, Create], true, false),
            (&[Observe, Update, LateInitialize], false, true),
            (&[Observe, Delete], false, false),
            (&[Observe, LateInitialize], false, false),
            (&[Observe], false, false),
        ];
        for (p, create, update) in rows {
            assert_eq!(can_create(p), create, "{p:?} create");
            assert_eq!(can_update(p), update, "{p:?} update");
        }
    }

    #[test]
    fn the_deletion_policy_decides_only_with_the_default_policies() {
        use DeletionPolicy::{Delete as Del, Orphan};
        // (policies, deletionPolicy, may delete)
        let rows: [(&[ManagementAction], DeletionPolicy, bool); 10] = [
            (&[All], Del, true),
            (&[All], Orphan, false),
            (&[All, All], Orphan, false),
            (&[Observe, Delete], Del, true),
            (&[Observe, Delete], Orphan, true),
            (&[Observe, Create, Update], Del, false),
            (&[Observe], Del, false),
            (&[All, Observe], Orphan, true),
            (&[], Del, false),
            (&[Create], Del, false),
        ];
        for (p, d, delete) in rows {
            assert_eq!(can_delete(p, d), delete, "{p:?} {d:?}");
        }
    }

    #[test]
    fn observe_only_is_exactly_observe() {
        assert!(observe_only(&[Observe]));
        assert!(observe_only(&[Observe, Observe]));
        assert!(!observe_only(&[]));
        assert!(!observe_only(&[All]));
        assert!(!observe_only(&[Observe, LateInitialize]));
        assert!(!observe_only(&[Observe, Create]));
    }

    #[test]
    fn policies_without_observe_are_refused_saying_what_to_fix() {
        for ok in [&[All][..], &[Observe], &[Create, All], &[Delete, Observe]] {
            assert_eq!(invalid(ok), None, "{ok:?}");
        }
        assert_eq!(
            invalid(&[Create]).unwrap(),
            "managementPolicies [Create] must include Observe (or be [\"*\"])"
        );
        assert!(
            invalid(&[Create, Delete])
                .unwrap()
                .starts_with("managementPolicies [Create, Delete] must include Observe")
        );
        assert!(
            invalid(&[])
                .unwrap()
                .starts_with("managementPolicies is empty: set it to [\"*\"]")
        );
    }

    #[test]
    fn policies_are_listed_as_a_user_writes_them() {
        assert_eq!(listed(&[All]), "[\"*\"]");
        assert_eq!(
            listed(&[Observe, LateInitialize]),
            "[Observe, LateInitialize]"
        );
        assert_eq!(listed(&[]), "[]");
    }

    #[test]
    fn readiness_follows_its_policy() {
        let by = |policy: ReadinessPolicy| Readiness {
            policy,
            cel_query: None,
        };
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]}});
        assert_eq!(
            unready(&by(ReadinessPolicy::SuccessfulCreate), &json!({})),
            None
        );
        assert_eq!(
            unready(&by(ReadinessPolicy::DeriveFromObject), &ready),
            None
        );
        assert!(
            unready(&by(ReadinessPolicy::AllTrue), &ready)
                .unwrap()
                .contains("Synced")
        );
        assert!(unready(&by(ReadinessPolicy::DeriveFromObject), &json!({})).is_some());
    }

    #[test]
    fn a_secret_is_shown_without_its_values() {
        let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "managedFields": []}, "data": {"password": "c2VjcmV0"}});
        let shown = for_status(&s);
        assert_eq!(shown["data"]["password"], "REDACTED");
        assert!(shown["metadata"].get("managedFields").is_none());
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}});
        assert_eq!(for_status(&cm)["data"]["a"], "b");
    }

    #[test]
    fn string_data_is_folded_into_data_and_wins() {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "s3cr3t"}});
        fold_string_data(&mut s);
        assert_eq!(
            s,
            json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "eA==", "b": "czNjcjN0"}})
        );
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "stringData": {"b": "x"}});
        fold_string_data(&mut cm);
        assert!(cm.get("stringData").is_some());
        let mut odd = json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"b": 1}});
        fold_string_data(&mut odd);
        assert!(
            odd.get("stringData").is_some(),
            "left for the API server to refuse"
        );
    }

    #[test]
    fn values_from_secrets_are_redacted_wherever_they_appear() {
        let mut r = Redactions::default();
        r.add(&json!("czNjcjN0"));
        r.add(&json!({"short": "MQ=="}));
        let mut shown = json!({"data": {"copy": "czNjcjN0", "cmd": "--password=s3cr3t", "n": "1", "other": "10"}});
        r.value(&mut shown);
        assert_eq!(
            shown,
            json!({"data": {"copy": "REDACTED", "cmd": "REDACTED", "n": "REDACTED", "other": "10"}})
        );
        assert_eq!(
            r.text("refused: bad value \"s3cr3t\""),
            "refused: bad value \"REDACTED\""
        );
    }
}
