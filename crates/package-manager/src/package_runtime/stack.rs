//! A stack Extension's controller as a runtime: the Deployment
//! `spec.controller.deployment` describes, hardened, running as the
//! ServiceAccount made for the Extension alone, both controlled by the
//! Extension and labelled with it. Pure: the Extension controller reads
//! what exists and applies what this renders.

use k8s_openapi::{api::rbac::v1::PolicyRule, apimachinery::pkg::apis::meta::v1::OwnerReference};
use serde_json::{Value, json};
use types::extensions::v1alpha1::EXTENSION_LABEL;

use super::stack_fields;
use crate::podsecurity;

/// Where the pod spec sits, as the Extension spells it.
pub const POD_PATH: &str = "spec.controller.deployment.spec.template.spec";

/// A rendered controller, ready for server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The ServiceAccount it runs as.
    pub service_account: Value,
    /// The Deployment.
    pub deployment: Value,
}

/// Where the Deployment spec sits, as the Extension spells it.
pub const SPEC_PATH: &str = "spec.controller.deployment.spec";

/// What `spec` (a DeploymentSpec) asks that a stack's controller may never
/// have, one clause each naming the field: host access, privilege and root
/// ([`podsecurity`]), and any field outside what a controller needs or a
/// Secret or ConfigMap the Extension's `rules` do not let it read
/// ([`stack_fields`]). A `null` field is unset.
pub fn refusals(spec: &Value, rules: &[PolicyRule]) -> Vec<String> {
    let spec = stack_fields::without_nulls(spec);
    let mut out = podsecurity::violations(
        spec.pointer("/template/spec").unwrap_or(&Value::Null),
        POD_PATH,
    );
    out.extend(stack_fields::refusals(&spec, SPEC_PATH, rules));
    out
}

/// The controller of Extension `extension` in `namespace`: Deployment
/// `deployment` from `spec`, made "restricted" and run as
/// `service_account`, both owned by `owner`.
pub fn render(
    namespace: &str,
    extension: &str,
    (deployment, spec): (&str, &Value),
    service_account: &str,
    owner: &OwnerReference,
) -> Rendered {
    let labels = json!({EXTENSION_LABEL: extension});
    // A field set to null is unset, and hardened like one.
    let mut spec = stack_fields::without_nulls(spec);
    if let Some(pod) = spec
        .pointer_mut("/template/spec")
        .and_then(|p| p.as_object_mut())
    {
        pod.remove("serviceAccount");
        pod.insert(
            "serviceAccountName".into(),
            Value::String(service_account.to_owned()),
        );
    }
    if let Some(pod) = spec.pointer_mut("/template/spec") {
        podsecurity::harden(pod);
    }
    Rendered {
        service_account: json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": service_account, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
        }),
        deployment: json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": deployment, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
            "spec": spec,
        }),
    }
}

/// The images the pod of `spec` (a DeploymentSpec) runs: its containers'
/// and init containers'.
pub fn images(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for list in ["/template/spec/containers", "/template/spec/initContainers"] {
        for c in spec
            .pointer(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(image) = c.get("image").and_then(Value::as_str)
                && !out.iter().any(|i| i == image)
            {
                out.push(image.to_owned());
            }
        }
    }
    out
}

/// Replaces every image of the rendered `deployment` that `rewritten` has
/// another name for (where the ImageConfigs say it is pulled from).
pub fn rewrite_images(deployment: &mut Value, rewritten: &[(String, String)]) {
    for list in [
        "/spec/template/spec/containers",
        "/spec/template/spec/initContainers",
    ] {
        let Some(containers) = deployment.pointer_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let Some(image) = c.get("image").and_then(Value::as_str) else {
                continue;
            };
            if let Some((_, to)) = rewritten.iter().find(|(from, _)| from == image) {
                c.insert("image".into(), Value::String(to.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "extensions.crossplane.io/v1alpha1".into(),
            kind: "Extension".into(),
            name: "redis".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn the_controller_runs_as_its_own_service_account_whatever_the_pod_asks() {
        let spec = json!({"template": {"spec": {"serviceAccount": "admin", "containers": [{"name": "c", "image": "i"}]}}});
        let r = render(
            "ns",
            "redis",
            ("redis-controller", &spec),
            "redis",
            &owner(),
        );
        let pod = r.deployment.pointer("/spec/template/spec").unwrap();
        assert_eq!(pod["serviceAccountName"], "redis");
        assert!(pod.get("serviceAccount").is_none());
        assert_eq!(
            r.service_account.pointer("/metadata/name").unwrap(),
            "redis"
        );
        for o in [&r.service_account, &r.deployment] {
            assert_eq!(
                o.pointer("/metadata/labels").unwrap()[EXTENSION_LABEL],
                "redis"
            );
            assert_eq!(o.pointer("/metadata/ownerReferences/0/uid").unwrap(), "u");
        }
    }

    #[test]
    fn a_pod_that_asks_for_host_access_is_refused_naming_the_field() {
        let spec = json!({"template": {"spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "i"}]}}});
        let why = refusals(&spec, &[]);
        assert!(why.iter().any(|w| w.contains("hostNetwork")), "{why:?}");
        assert!(
            refusals(
                &json!({"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}),
                &[]
            )
            .is_empty()
        );
    }

    #[test]
    fn security_fields_set_to_null_are_hardened_as_unset() {
        let spec = json!({"template": {"spec": {
            "securityContext": {"runAsNonRoot": null, "runAsUser": null},
            "containers": [{"name": "c", "image": "i", "securityContext": {"allowPrivilegeEscalation": null}}],
        }}});
        assert!(refusals(&spec, &[]).is_empty());
        let r = render("ns", "x", ("x", &spec), "x", &owner());
        let pod = r.deployment.pointer("/spec/template/spec").unwrap();
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            pod["securityContext"]["runAsUser"],
            podsecurity::NON_ROOT_USER
        );
        assert_eq!(
            pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"],
            false
        );
    }

    #[test]
    fn images_are_read_and_rewritten_in_containers_and_init_containers() {
        let spec = json!({"template": {"spec": {
            "initContainers": [{"name": "i", "image": "registry.crossplane.io/init:1"}],
            "containers": [{"name": "c", "image": "registry.crossplane.io/c:1"}, {"name": "d", "image": "other/d:1"}, {"name": "e"}],
        }}});
        assert_eq!(
            images(&spec),
            [
                "registry.crossplane.io/c:1",
                "other/d:1",
                "registry.crossplane.io/init:1"
            ]
        );
        let mut d = json!({"spec": spec});
        rewrite_images(
            &mut d,
            &[
                (
                    "registry.crossplane.io/c:1".into(),
                    "10.0.0.1:5000/c:1".into(),
                ),
                (
                    "registry.crossplane.io/init:1".into(),
                    "10.0.0.1:5000/init:1".into(),
                ),
            ],
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            "10.0.0.1:5000/c:1"
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][1]["image"],
            "other/d:1"
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["initContainers"][0]["image"],
            "10.0.0.1:5000/init:1"
        );
    }
}
