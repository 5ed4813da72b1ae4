//! How a runtime's health is read, the same for a Provider revision's
//! runtime and a stack Extension's controller: the Deployment's Available
//! condition, and while it is not True, the pods' waiting reasons (an image
//! that cannot be pulled, a container that keeps crashing).

use k8s_openapi::api::{
    apps::v1::{Deployment, DeploymentCondition},
    core::v1::Pod,
};
use kube::ResourceExt as _;

/// The Deployment's Available condition, if it has one.
pub fn available(d: Option<&Deployment>) -> Option<&DeploymentCondition> {
    d.and_then(|d| d.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Available"))
}

/// Whether the Deployment is Available.
pub fn is_available(d: Option<&Deployment>) -> bool {
    available(d).is_some_and(|c| c.status == "True")
}

/// Why the pods' containers wait, one line each (`pod P container C:
/// Reason (message)`); a container still being created is not a reason.
pub fn waiting_reasons(pods: &[Pod]) -> Vec<String> {
    let mut reasons = Vec::new();
    for p in pods {
        let statuses = p.status.iter().flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        });
        for c in statuses {
            let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
            if let Some(w) = waiting.filter(|w| w.reason.as_deref() != Some("ContainerCreating")) {
                let mut line = format!(
                    "pod {} container {}: {}",
                    p.name_any(),
                    c.name,
                    w.reason.clone().unwrap_or_default()
                );
                if let Some(m) = &w.message {
                    line.push_str(&format!(" ({})", m.chars().take(200).collect::<String>()));
                }
                reasons.push(line);
            }
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn pod(statuses: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "status": {"containerStatuses": statuses}}),
        )
        .unwrap()
    }

    #[test]
    fn waiting_containers_are_named_with_their_reason_and_a_short_message() {
        let long = "x".repeat(500);
        let pods = [pod(json!([
            {"name": "runtime", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ErrImagePull", "message": long}}},
            {"name": "new", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ContainerCreating"}}},
            {"name": "up", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
             "state": {"running": {}}},
        ]))];
        let reasons = waiting_reasons(&pods);
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(reasons[0].starts_with("pod p container runtime: ErrImagePull ("));
        assert_eq!(
            reasons[0].len(),
            "pod p container runtime: ErrImagePull ()".len() + 200
        );
    }

    #[test]
    fn a_deployment_is_available_only_when_it_says_so() {
        let d = |status: &str| -> Deployment {
            serde_json::from_value(
                json!({"status": {"conditions": [{"type": "Available", "status": status}]}}),
            )
            .unwrap()
        };
        assert!(is_available(Some(&d("True"))));
        assert!(!is_available(Some(&d("False"))));
        assert!(!is_available(Some(&Deployment::default())));
        assert!(!is_available(None));
    }
}
