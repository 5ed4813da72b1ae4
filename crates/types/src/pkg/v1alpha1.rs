//! `pkg.crossplane.io/v1alpha1`: ControllerConfig, deprecated in favour of
//! DeploymentRuntimeConfig (seed 004) and kept for migration.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::opaque_object_schema;

pub use super::runtime_config::v1alpha1::{DeploymentRuntimeConfig, DeploymentRuntimeConfigSpec};

/// Desired state of a ControllerConfig.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A ControllerConfig configures a provider's runtime Deployment. Deprecated: use DeploymentRuntimeConfig. Honoured only when the package manager runs with --enable-runtime-config=false.",
    group = "pkg.crossplane.io",
    version = "v1alpha1",
    kind = "ControllerConfig",
    category = "crossplane",
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ControllerConfigSpec {
    /// Metadata (labels and annotations) for the runtime's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<PodObjectMeta>,
    /// Replicas of the runtime Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Image overrides the package's runtime image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// ImagePullPolicy of the runtime container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// ServiceAccountName to run the runtime as; created when missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// NodeSelector of the runtime pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Args of the runtime container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Env of the runtime container (core/v1 EnvVar list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_list_schema")]
    pub env: Option<serde_json::Value>,
    /// Resources of the runtime container (core/v1 ResourceRequirements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_object_schema")]
    pub resources: Option<serde_json::Value>,
    /// SecurityContext of the runtime container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_object_schema")]
    pub security_context: Option<serde_json::Value>,
    /// PodSecurityContext of the runtime pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_object_schema")]
    pub pod_security_context: Option<serde_json::Value>,
    /// Tolerations of the runtime pods (core/v1 Toleration list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_list_schema")]
    pub tolerations: Option<serde_json::Value>,
    /// Affinity of the runtime pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_object_schema")]
    pub affinity: Option<serde_json::Value>,
}

/// Labels and annotations for runtime pods.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PodObjectMeta {
    /// Annotations of the runtime pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Labels of the runtime pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

fn opaque_list_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    })
}
