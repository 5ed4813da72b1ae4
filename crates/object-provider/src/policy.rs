//! What the management and deletion policies allow, how readiness is
//! derived, and what of a live object may be shown in status.

use serde_json::{Value, json};
use types::{
    common::DeletionPolicy,
    kubernetes::v1alpha1::{ManagementPolicy, ReadinessPolicy},
};

/// May the provider create the managed object?
pub fn can_create(p: ManagementPolicy) -> bool {
    matches!(
        p,
        ManagementPolicy::Default | ManagementPolicy::ObserveCreateUpdate
    )
}

/// May the provider update the managed object?
pub fn can_update(p: ManagementPolicy) -> bool {
    can_create(p)
}

/// May the provider delete the managed object, given both policies? Orphan
/// always wins; with Delete the management policy decides.
pub fn can_delete(p: ManagementPolicy, d: DeletionPolicy) -> bool {
    d == DeletionPolicy::Delete
        && matches!(
            p,
            ManagementPolicy::Default | ManagementPolicy::ObserveDelete
        )
}

/// None when Ready by `policy`, else why not.
pub fn unready(policy: ReadinessPolicy, live: &Value) -> Option<String> {
    let conditions = live["status"]["conditions"].as_array();
    match policy {
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

    #[test]
    fn the_management_policy_table_of_the_seed() {
        use ManagementPolicy::*;
        // Observe | Create & Update | Delete, as the seed's table rows.
        let rows = [
            (Default, true, true),
            (ObserveCreateUpdate, true, false),
            (ObserveDelete, false, true),
            (Observe, false, false),
        ];
        for (p, cu, d) in rows {
            assert_eq!(can_create(p), cu, "{p:?} create");
            assert_eq!(can_update(p), cu, "{p:?} update");
            assert_eq!(can_delete(p, DeletionPolicy::Delete), d, "{p:?} delete");
        }
    }

    #[test]
    fn orphan_wins_over_every_management_policy() {
        use ManagementPolicy::*;
        for p in [Default, ObserveCreateUpdate, ObserveDelete, Observe] {
            assert!(!can_delete(p, DeletionPolicy::Orphan), "{p:?}");
        }
    }

    #[test]
    fn readiness_follows_its_policy() {
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]}});
        assert_eq!(unready(ReadinessPolicy::SuccessfulCreate, &json!({})), None);
        assert_eq!(unready(ReadinessPolicy::DeriveFromObject, &ready), None);
        assert!(
            unready(ReadinessPolicy::AllTrue, &ready)
                .unwrap()
                .contains("Synced")
        );
        assert!(unready(ReadinessPolicy::DeriveFromObject, &json!({})).is_some());
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
