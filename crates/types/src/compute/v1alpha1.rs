//! `compute.crossplane.io/v1alpha1`: KubernetesCluster, the scheduling target
//! of KubernetesApplications.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, conditions_schema};

/// The Secret key that holds a kubeconfig unless the cluster names another.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

/// Desired state of a KubernetesCluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A KubernetesCluster is a Kubernetes cluster that applications can be scheduled to. Its labels are what application cluster selectors match; it is reached through the kubeconfig in its connection Secret.",
    group = "compute.crossplane.io",
    version = "v1alpha1",
    kind = "KubernetesCluster",
    namespaced,
    status = "KubernetesClusterStatus",
    shortname = "kcluster",
    category = "crossplane",
    printcolumn = r#"{"name":"READY","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"SECRET","type":"string","jsonPath":".spec.connectionSecretRef.name"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesClusterSpec {
    /// ConnectionSecretRef names the Secret, in this cluster's namespace, that
    /// holds a kubeconfig for the cluster.
    pub connection_secret_ref: ConnectionSecretRef,
}

/// A reference to the Secret holding a cluster's kubeconfig.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSecretRef {
    /// Name of the Secret, in the KubernetesCluster's namespace.
    pub name: String,
    /// Key of the Secret's data that holds the kubeconfig. Defaults to
    /// "kubeconfig".
    #[serde(default = "default_key")]
    pub key: String,
}

fn default_key() -> String {
    DEFAULT_KUBECONFIG_KEY.to_owned()
}

/// Observed state of a KubernetesCluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesClusterStatus {
    /// Conditions of the cluster. Ready is True when its connection Secret
    /// exists, holds a valid kubeconfig and the cluster answers; otherwise its
    /// message says what is wrong.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ObservedGeneration is the metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

crate::conditioned!(KubernetesCluster => KubernetesClusterStatus);
