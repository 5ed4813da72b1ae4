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
}
