//! What Provider revisions and stacks both do with the CRDs a package
//! installs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{Patch, PatchParams},
};

/// Whether a CRD is Established.
pub fn established(c: &CustomResourceDefinition) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Why the CRDs of a package did not pass their dry run.
#[derive(Debug)]
pub enum DryRunError {
    /// The API server refuses the CRD `name` as it is.
    Refused {
        /// The CRD.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// The dry run itself failed.
    Failed(kube::Error),
}

/// Checks every CRD of `bodies` (name, object to apply) with a server-side
/// dry run, so that a package's CRDs are written all or none.
pub async fn dry_run(
    crds: &Api<CustomResourceDefinition>,
    field_manager: &str,
    bodies: &[(&str, &serde_json::Value)],
) -> Result<(), DryRunError> {
    let dry = PatchParams::apply(field_manager).force().dry_run();
    for &(name, body) in bodies {
        if let Err(e) = crds.patch(name, &dry, &Patch::Apply(body)).await {
            return Err(match e {
                kube::Error::Api(a) if a.code == 422 || a.code == 400 => DryRunError::Refused {
                    name: name.to_owned(),
                    message: a.message,
                },
                e => DryRunError::Failed(e),
            });
        }
    }
    Ok(())
}

/// Who made or controls a CRD, for a conflict message: its controller
/// (`ProviderRevision provider-x-1a2b`), else the managers that wrote it
/// (`written by kubectl-client-side-apply`), else `made by hand`.
pub fn maker(crd: &CustomResourceDefinition) -> String {
    use kube::ResourceExt as _;
    if let Some(o) = crd
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
    {
        return format!("controlled by {} {}", o.kind, o.name);
    }
    let mut managers: Vec<&str> = crd
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    managers.sort_unstable();
    managers.dedup();
    if managers.is_empty() {
        "made by hand".to_owned()
    } else {
        format!("written by {}", managers.join(", "))
    }
}

/// Why a package may not install the CRD `object` at all, whoever it is:
/// a group of Kubernetes or of crossplane-rs itself, or a conversion
/// webhook anywhere but a Service in `namespace` (the package runtimes'
/// namespace; `None` for stacks, which run no webhook). `None` when it
/// may.
pub fn refused(object: &serde_json::Value, namespace: Option<&str>) -> Option<String> {
    let name = object
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let group = object
        .pointer("/spec/group")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    if types::is_protected_group(group) {
        return Some(format!(
            "CustomResourceDefinition {name} is in API group \"{group}\", which belongs to Kubernetes or to crossplane-rs itself; no package may install it"
        ));
    }
    let webhook = object.pointer("/spec/conversion/webhook/clientConfig");
    if let Some(client) = webhook {
        if client.get("url").is_some() {
            return Some(format!(
                "CustomResourceDefinition {name} sends conversions to a URL (spec.conversion.webhook.clientConfig.url); a package's conversion webhook may only be its own runtime's Service"
            ));
        }
        let service_ns = client
            .pointer("/service/namespace")
            .and_then(serde_json::Value::as_str);
        if namespace.is_none() || service_ns != namespace {
            return Some(format!(
                "CustomResourceDefinition {name} sends conversions to Service {}/{} (spec.conversion.webhook.clientConfig.service); a package's conversion webhook may only be its own runtime's Service{}",
                service_ns.unwrap_or_default(),
                client
                    .pointer("/service/name")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default(),
                namespace.map_or_else(|| " (a stack runs none)".to_owned(), |n| format!(" in {n}"))
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn crd(group: &str, conversion: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": format!("things.{group}")}, "spec": {"group": group, "conversion": conversion}})
    }

    #[test]
    fn a_package_cannot_install_kubernetes_or_crossplane_rs_groups() {
        for g in [
            "pkg.crossplane.io",
            "extensions.crossplane.io",
            "rbac.authorization.k8s.io",
            "apps",
            "",
            "x.kubernetes.io",
        ] {
            let why = refused(&crd(g, json!(null)), Some("crossplane-system")).unwrap();
            assert!(
                why.contains("belongs to Kubernetes or to crossplane-rs"),
                "{why}"
            );
        }
        assert_eq!(
            refused(&crd("example.org", json!(null)), Some("crossplane-system")),
            None
        );
    }

    #[test]
    fn a_conversion_webhook_may_only_be_a_service_of_the_runtimes_namespace() {
        let url = json!({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://10.0.0.1:8443/convert"}}});
        assert!(
            refused(&crd("example.org", url), Some("crossplane-system"))
                .unwrap()
                .contains("clientConfig.url")
        );
        let service = |ns: &str| json!({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"namespace": ns, "name": "p"}}}});
        assert_eq!(
            refused(
                &crd("example.org", service("crossplane-system")),
                Some("crossplane-system")
            ),
            None
        );
        assert!(
            refused(
                &crd("example.org", service("kube-system")),
                Some("crossplane-system")
            )
            .is_some()
        );
        assert!(refused(&crd("example.org", service("crossplane-system")), None).is_some());
    }
}
