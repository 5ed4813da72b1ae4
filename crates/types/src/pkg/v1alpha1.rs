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
    /// EnvFrom of the runtime container (core/v1 EnvFromSource list): each
    /// item names a ConfigMap (`configMapRef`) or Secret (`secretRef`)
    /// whose keys all become environment variables, optionally behind a
    /// `prefix`, e.g. `[{secretRef: {name: provider-creds}}]`. A key found
    /// in several sources takes the last one's value; a variable in `env`
    /// wins over any from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_list_schema")]
    pub env_from: Option<serde_json::Value>,
    /// ImagePullSecrets of the runtime pods (core/v1 LocalObjectReference
    /// list, e.g. `[{name: regcred}]`): Secrets in the runtime's namespace
    /// the kubelet uses to pull the runtime image. The package's
    /// packagePullSecrets are added after these (a name listed in both
    /// appears once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_list_schema")]
    pub image_pull_secrets: Option<serde_json::Value>,
    /// NodeName puts the runtime pods on this node directly, bypassing the
    /// scheduler; the node's kubelet still rejects a pod that does not fit
    /// there (not enough resources, or a nodeSelector the node does not
    /// match). Prefer nodeSelector or affinity unless you must pin a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Ports of the runtime container (core/v1 ContainerPort list), e.g.
    /// `[{name: profiling, containerPort: 6060}]`. The package manager
    /// still adds its own `metrics` port (8080) and, when it serves the
    /// provider's webhooks, its `webhook` port (9443), unless a port of
    /// that name is listed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_list_schema")]
    pub ports: Option<serde_json::Value>,
    /// PriorityClassName of the runtime pods: the name of a PriorityClass,
    /// or one of the built-in `system-cluster-critical` and
    /// `system-node-critical` (the highest). Higher-priority pods are
    /// scheduled first and may preempt lower ones. Unset: the cluster's
    /// default PriorityClass, else priority zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// RuntimeClassName of the runtime pods: the name of a RuntimeClass
    /// (node.k8s.io) whose handler runs their containers, e.g. a sandboxed
    /// runtime such as gVisor. Pods naming a RuntimeClass that does not
    /// exist are not run. Unset: the nodes' default container runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// Volumes of the runtime pods (core/v1 Volume list), for volumeMounts
    /// to mount into the runtime container, e.g.
    /// `[{name: cache, emptyDir: {}}]` or
    /// `[{name: ca, configMap: {name: corporate-ca}}]`. The package
    /// manager adds its certificate volumes (`tls-server-certs`,
    /// `tls-client-certs`) after these, replacing any of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_list_schema")]
    pub volumes: Option<serde_json::Value>,
    /// VolumeMounts of the runtime container (core/v1 VolumeMount list):
    /// where each of `volumes` appears in its filesystem, e.g.
    /// `[{name: cache, mountPath: /cache}]`. The package manager adds its
    /// certificate mounts (`/tls/server`, `/tls/client`) after these,
    /// replacing any of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_list_schema")]
    pub volume_mounts: Option<serde_json::Value>,
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
