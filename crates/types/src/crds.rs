//! The full set of CRDs, as crdgen writes them to crds/ and tests install
//! them.

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{apiextensions, compute, extensions, kubernetes, kubernetes_m, pkg, workload};

/// Every CRD this project defines, one per kind (multi-version kinds merged).
pub fn all() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let drc = kube::core::crd::merge_crds(
        vec![
            pkg::v1beta1::DeploymentRuntimeConfig::crd(),
            pkg::v1alpha1::DeploymentRuntimeConfig::crd(),
        ],
        "v1beta1",
    )
    .context("merging DeploymentRuntimeConfig versions")?;
    let object = kube::core::crd::merge_crds(
        vec![
            kubernetes::v1alpha2::Object::crd(),
            kubernetes::v1alpha1::Object::crd(),
        ],
        "v1alpha2",
    )
    .context("merging Object versions")?;
    Ok(vec![
        workload::v1alpha1::KubernetesApplication::crd(),
        workload::v1alpha1::KubernetesApplicationResource::crd(),
        compute::v1alpha1::KubernetesCluster::crd(),
        converted_by_object_provider(object),
        kubernetes::v1alpha1::ProviderConfig::crd(),
        kubernetes::v1alpha1::ProviderConfigUsage::crd(),
        kubernetes_m::v1alpha1::Object::crd(),
        kubernetes_m::v1alpha1::ProviderConfig::crd(),
        kubernetes_m::v1alpha1::ClusterProviderConfig::crd(),
        kubernetes_m::v1alpha1::provider_config_usage_crd(),
        name_at_most_63(kubernetes::v1alpha1::ObservedObjectCollection::crd()),
        name_at_most_63(kubernetes_m::v1alpha1::ObservedObjectCollection::crd()),
        extensions::v1alpha1::ExtensionRequest::crd(),
        extensions::v1alpha1::Extension::crd(),
        pkg::v1::Provider::crd(),
        spec_optional(
            pkg::v1::ProviderRevision::crd(),
            serde_json::json!({"desiredState": "Inactive", "package": "", "revision": 0}),
        ),
        drc,
        pkg::v1beta1::ImageConfig::crd(),
        pkg::v1alpha1::ControllerConfig::crd(),
        apiextensions::v1alpha1::ManagedResourceDefinition::crd(),
        apiextensions::v1alpha1::ManagedResourceActivationPolicy::crd(),
    ])
}

/// `crd` converted between its versions by the object-provider's webhook,
/// reached through its Service in `crossplane-system` (the object-provider
/// points it at itself with the CA bundle it made, and at its own namespace).
/// Until then a version other than the stored one cannot be read or
/// written: refused, never converted wrongly.
fn converted_by_object_provider(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceConversion, ServiceReference, WebhookClientConfig, WebhookConversion,
    };
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".to_owned()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: "crossplane-system".to_owned(),
                    name: "object-provider-webhook".to_owned(),
                    path: Some("/convert".to_owned()),
                    port: Some(443),
                }),
                ..WebhookClientConfig::default()
            }),
        }),
    });
    crd
}

/// `crd` with `spec` optional, as upstream's (kube-derive always requires
/// it): a missing `spec` is defaulted by the API server to `default`, so
/// an object written without one is accepted and still reads back whole
/// (the controllers' types need a spec; a list with one object they cannot
/// read would stop every reconcile).
fn spec_optional(
    mut crd: CustomResourceDefinition,
    default: serde_json::Value,
) -> CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON;
    for v in &mut crd.spec.versions {
        let Some(schema) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        if let Some(required) = schema.required.as_mut() {
            required.retain(|r| r != "spec");
            if required.is_empty() {
                schema.required = None;
            }
        }
        if let Some(spec) = schema.properties.as_mut().and_then(|p| p.get_mut("spec")) {
            spec.default = Some(JSON(default.clone()));
        }
    }
    crd
}

/// `crd` refusing names longer than 63 characters, as upstream's
/// ObservedObjectCollection does: its name is the value of the membership
/// label on its Objects, and a label value is at most 63 characters.
fn name_at_most_63(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ValidationRule;
    for v in &mut crd.spec.versions {
        if let Some(schema) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema
                .x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .push(ValidationRule {
                    rule: "size(self.metadata.name) < 64".to_owned(),
                    message: Some("metadata.name max length is 63".to_owned()),
                    ..ValidationRule::default()
                });
        }
    }
    crd
}

/// The file name a CRD is written to: `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// A CRD as YAML, with a header saying it is generated.
pub fn to_yaml(crd: &CustomResourceDefinition) -> anyhow::Result<String> {
    let body = serde_saphyr::to_string(crd).context("serializing CRD to YAML")?;
    Ok(format!(
        "# Generated by `cargo run -p types --bin crdgen`; do not edit.\n---\n{body}"
    ))
}

/// crds/kustomization.yaml: lists every CRD file, so that kustomize
/// overlays (deploy/) can take crds/ as a base.
pub fn kustomization(crds: &[CustomResourceDefinition]) -> String {
    let mut out = String::from(
        "# Generated by `cargo run -p types --bin crdgen`; do not edit.\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n",
    );
    for crd in crds {
        out.push_str(&format!("  - {}\n", file_name(crd)));
    }
    out
}
