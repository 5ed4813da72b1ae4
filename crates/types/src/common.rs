//! Shapes shared by every group: Crossplane's typed conditions, references and
//! the schemas of arbitrary embedded objects.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// Annotation that pauses all reconciling of a managed resource when "true".
pub const ANNOTATION_PAUSED: &str = "crossplane.io/paused";
/// Annotation that carries the name of the external (managed) object.
pub const ANNOTATION_EXTERNAL_NAME: &str = "crossplane.io/external-name";

/// A condition of a Crossplane resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of this condition. At most one of each condition type may apply to
    /// a resource at any point in time (for example Ready or Synced).
    #[serde(rename = "type")]
    pub type_: String,
    /// Status of this condition: "True", "False" or "Unknown".
    pub status: String,
    /// LastTransitionTime is the last time this condition transitioned from
    /// one status to another (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// A Reason for this condition's last transition from one status to
    /// another, in CamelCase (for example Available, ReconcileError).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A Message containing details about this condition's last transition
    /// from one status to another, if any; it says what to fix when the status
    /// is not the one wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// ObservedGeneration is the metadata.generation of the resource that this
    /// condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Schema attribute helper: a list of conditions is a list-map keyed by type,
/// so server-side apply merges conditions by type rather than replacing the
/// whole list.
pub fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<Condition>();
    json_schema!({
        "type": "array",
        "description": "Conditions of the resource, one per type (Ready, Synced and kind-specific ones).",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// A reference to a Secret key in a known namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    /// Name of the Secret.
    pub name: String,
    /// Namespace of the Secret.
    pub namespace: String,
    /// The key to select within the Secret's data.
    pub key: String,
}

/// A reference to a Secret by name and namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    pub name: String,
    /// Namespace of the Secret.
    pub namespace: String,
}

/// A reference to an object in the same namespace, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// Name of the referenced object.
    pub name: String,
}

/// A reference to a cluster-scoped object by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedReference {
    /// Name of the referenced object.
    pub name: String,
}

impl Default for NamedReference {
    fn default() -> Self {
        Self {
            name: "default".to_owned(),
        }
    }
}

/// A typed reference to an object of any kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TypedReference {
    /// APIVersion of the referenced object, for example pkg.crossplane.io/v1.
    pub api_version: String,
    /// Kind of the referenced object.
    pub kind: String,
    /// Name of the referenced object.
    pub name: String,
    /// UID of the referenced object, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// What happens to the external object when its managed resource is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the external object with its managed resource.
    #[default]
    Delete,
    /// Leave the external object in place when its managed resource is deleted.
    Orphan,
}

/// Schema of an arbitrary Kubernetes object embedded in a resource (a
/// template or a manifest). Only type and object metadata are declared, so
/// that CEL rules can see them and `kubectl explain` can describe them;
/// everything else is kept as written (the kind may be unknown to this API
/// server). The lengths are Kubernetes' own limits; they also bound the cost
/// the API server estimates for CEL rules on these fields. apiVersion and kind are not required here on purpose: a missing
/// kind is reported by the controller as a condition that says what to fix.
pub fn embedded_object_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion of the embedded object, for example apps/v1.",
                "maxLength": 317
            },
            "kind": {
                "type": "string",
                "description": "Kind of the embedded object, for example Deployment.",
                "maxLength": 63
            },
            "metadata": {
                "type": "object",
                "description": "Object metadata of the embedded object.",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "name": {"type": "string", "description": "Name of the embedded object.", "maxLength": 253},
                    "namespace": {"type": "string", "description": "Namespace of the embedded object; ignored for cluster-scoped kinds.", "maxLength": 63},
                    "labels": {
                        "type": "object",
                        "description": "Labels of the embedded object.",
                        "additionalProperties": {"type": "string"}
                    },
                    "annotations": {
                        "type": "object",
                        "description": "Annotations of the embedded object.",
                        "additionalProperties": {"type": "string"}
                    }
                }
            }
        }
    })
}

/// Schema of an opaque JSON object kept exactly as written (a remote status,
/// an embedded Deployment spec).
pub fn opaque_object_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of object metadata used in templates: labels and annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Name of the templated object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace of the templated object; see the field's owner for whether it
    /// is honoured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels of the templated object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// Annotations of the templated object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// A kind whose status carries Crossplane conditions (Synced, Ready, ...):
/// what the shared reconciler needs to read and write a status without
/// knowing the kind.
pub trait Conditioned {
    /// The kind's status.
    type Status: Clone + Default + PartialEq + Serialize + serde::de::DeserializeOwned + Send + Sync;
    /// The status, if the object has one yet.
    fn status(&self) -> Option<&Self::Status>;
    /// The conditions of a status.
    fn conditions(status: &Self::Status) -> &[Condition];
    /// The conditions of a status, to change.
    fn conditions_mut(status: &mut Self::Status) -> &mut Vec<Condition>;
}

/// Implements [`Conditioned`] for kinds whose status has a `conditions` list.
#[macro_export]
macro_rules! conditioned {
    ($($kind:ty => $status:ty),+ $(,)?) => {$(
        impl $crate::common::Conditioned for $kind {
            type Status = $status;
            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn conditions(status: &$status) -> &[$crate::common::Condition] {
                &status.conditions
            }
            fn conditions_mut(status: &mut $status) -> &mut Vec<$crate::common::Condition> {
                &mut status.conditions
            }
        }
    )+};
}

/// The condition type a resource gets while someone else keeps changing
/// what it manages: True once its fields were put back more than the
/// controller's threshold within an hour (`--drift-loop-threshold`).
pub const TYPE_DRIFT_LOOP: &str = "DriftLoop";

/// What the last corrections of drift were: someone else changed fields
/// this resource manages in its target and they were put back. Paths only:
/// a value (a Secret's, say) never appears here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftReport {
    /// When the fields were last put back (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_corrected_time: Option<String>,
    /// Paths of the fields found changed that last time (at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The field manager that had changed them (from the object's
    /// managedFields), when one other than this controller owned them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    /// How many corrections the hour up to lastCorrectedTime saw.
    #[serde(default)]
    pub corrections_in_last_hour: i64,
    /// When each of those corrections was (RFC 3339, the latest 32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<String>,
}
