//! Status feedback: the fields of the remote object that a resource's
//! `spec.feedbackRules` name, typed, instead of its whole `.status`. A
//! Secret's fields never come back.

use runtime::fieldpath;
use serde_json::Value;
use types::workload::v1alpha1::{
    FeedbackRule, FeedbackRuleType, FeedbackValue, FieldValue, FieldValueType, MAX_FEEDBACK_VALUES,
    MAX_RAW_FEEDBACK,
};

/// The well-known values of `kind`: (name, path).
fn well_known(kind: &str) -> &'static [(&'static str, &'static str)] {
    match kind {
        "Deployment" => &[
            ("ReadyReplicas", "status.readyReplicas"),
            ("Replicas", "status.replicas"),
            ("AvailableReplicas", "status.availableReplicas"),
        ],
        "StatefulSet" => &[
            ("ReadyReplicas", "status.readyReplicas"),
            ("Replicas", "status.replicas"),
        ],
        "DaemonSet" => &[
            ("ReadyReplicas", "status.numberReady"),
            ("Replicas", "status.desiredNumberScheduled"),
        ],
        "Job" => &[("JobSucceeded", "status.succeeded")],
        "Pod" => &[("PodPhase", "status.phase")],
        "Service" => &[("LoadBalancerIngress", "status.loadBalancer.ingress")],
        _ => &[],
    }
}

/// The values `rules` bring back from `live` of `kind`; None without rules
/// (status.remote then carries the whole status). Fields the object does not
/// have yet, and JsonRaw values over [`MAX_RAW_FEEDBACK`], are left out.
pub fn values(
    rules: &[FeedbackRule],
    kind: &str,
    live: Option<&Value>,
) -> Option<Vec<FeedbackValue>> {
    if rules.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    // A Secret's data is never copied into a status.
    let Some(live) = live.filter(|_| kind != "Secret") else {
        return Some(out);
    };
    let mut push = |name: &str, v: Option<FieldValue>| {
        if let Some(field_value) = v
            && out.len() < MAX_FEEDBACK_VALUES
            && !out.iter().any(|o: &FeedbackValue| o.name == name)
        {
            out.push(FeedbackValue {
                name: name.to_owned(),
                field_value,
            });
        }
    };
    for rule in rules {
        match rule.type_ {
            FeedbackRuleType::WellKnownStatus => {
                for (name, path) in well_known(kind) {
                    push(name, at(live, path));
                }
                if kind == "Job" {
                    push("JobComplete", job_complete(live));
                }
                if kind == "Pod" {
                    push("PodReady", pod_ready(live));
                }
            }
            FeedbackRuleType::JsonPaths => {
                for p in &rule.json_paths {
                    push(&p.name, at(live, &p.path));
                }
            }
        }
    }
    Some(out)
}

fn at(live: &Value, path: &str) -> Option<FieldValue> {
    let path = fieldpath::parse(path.trim_start_matches('.')).ok()?;
    typed(fieldpath::get(live, &path)?)
}

fn condition_true(live: &Value, type_: &str) -> Option<bool> {
    let conditions = live.pointer("/status/conditions")?.as_array()?;
    Some(conditions.iter().any(|c| {
        c.get("type").and_then(Value::as_str) == Some(type_)
            && c.get("status").and_then(Value::as_str) == Some("True")
    }))
}

fn job_complete(live: &Value) -> Option<FieldValue> {
    live.get("status")?;
    Some(boolean(condition_true(live, "Complete").unwrap_or(false)))
}

fn pod_ready(live: &Value) -> Option<FieldValue> {
    live.get("status")?;
    Some(boolean(condition_true(live, "Ready").unwrap_or(false)))
}

fn boolean(b: bool) -> FieldValue {
    FieldValue {
        type_: FieldValueType::Boolean,
        boolean: Some(b),
        ..FieldValue::default()
    }
}

/// `v`, typed; None for null and for JSON text over the bound.
fn typed(v: &Value) -> Option<FieldValue> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => boolean(*b),
        Value::String(s) => FieldValue {
            type_: FieldValueType::String,
            string: Some(s.clone()),
            ..FieldValue::default()
        },
        Value::Number(n) if n.is_i64() => FieldValue {
            type_: FieldValueType::Integer,
            integer: n.as_i64(),
            ..FieldValue::default()
        },
        other => {
            let text = serde_json::to_string(other).ok()?;
            if text.len() > MAX_RAW_FEEDBACK {
                return None;
            }
            FieldValue {
                type_: FieldValueType::JsonRaw,
                json_raw: Some(text),
                ..FieldValue::default()
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;
    use types::workload::v1alpha1::FeedbackPath;

    use super::*;

    fn rule(type_: FeedbackRuleType, paths: &[(&str, &str)]) -> FeedbackRule {
        FeedbackRule {
            type_,
            json_paths: paths
                .iter()
                .map(|(n, p)| FeedbackPath {
                    name: n.to_string(),
                    path: p.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn well_known_and_named_fields_come_back_typed() {
        let deployment = json!({"spec": {"paused": false},
            "status": {"readyReplicas": 2, "replicas": 3, "conditions": [{"type": "Available"}]}});
        let got = values(
            &[
                rule(FeedbackRuleType::WellKnownStatus, &[]),
                rule(
                    FeedbackRuleType::JsonPaths,
                    &[
                        ("paused", "spec.paused"),
                        ("first", ".status.conditions[0].type"),
                        ("missing", "status.nothing"),
                    ],
                ),
            ],
            "Deployment",
            Some(&deployment),
        )
        .unwrap();
        let names: Vec<_> = got.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["ReadyReplicas", "Replicas", "paused", "first"]);
        assert_eq!(got[0].field_value.integer, Some(2));
        assert_eq!(got[2].field_value.boolean, Some(false));
        assert_eq!(got[3].field_value.string.as_deref(), Some("Available"));
    }

    #[test]
    fn lists_come_back_as_json_text_within_the_bound() {
        let svc = json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}});
        let got = values(
            &[rule(FeedbackRuleType::WellKnownStatus, &[])],
            "Service",
            Some(&svc),
        )
        .unwrap();
        assert_eq!(got[0].field_value.type_, FieldValueType::JsonRaw);
        assert_eq!(
            got[0].field_value.json_raw.as_deref(),
            Some(r#"[{"ip":"203.0.113.7"}]"#)
        );
        let huge =
            json!({"status": {"loadBalancer": {"ingress": [{"hostname": "x".repeat(2000)}]}}});
        let got = values(
            &[rule(FeedbackRuleType::WellKnownStatus, &[])],
            "Service",
            Some(&huge),
        )
        .unwrap();
        assert!(got.is_empty());
    }

    #[test]
    fn nothing_without_rules_and_never_a_secret() {
        assert_eq!(values(&[], "Deployment", Some(&json!({}))), None);
        let secret = json!({"data": {"password": "c2VjcmV0"}});
        let got = values(
            &[rule(FeedbackRuleType::JsonPaths, &[("p", "data.password")])],
            "Secret",
            Some(&secret),
        )
        .unwrap();
        assert!(got.is_empty());
    }

    #[test]
    fn a_job_says_whether_it_completed() {
        let job = json!({"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}});
        let got = values(
            &[rule(FeedbackRuleType::WellKnownStatus, &[])],
            "Job",
            Some(&job),
        )
        .unwrap();
        assert_eq!(got[1].name, "JobComplete");
        assert_eq!(got[1].field_value.boolean, Some(true));
    }
}
