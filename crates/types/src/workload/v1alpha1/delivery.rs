//! How a KubernetesApplicationResource delivers its template: which fields
//! of the remote object come back to its status (`feedbackRules`), how it
//! writes the object (`writeStrategy`) and what deleting it does to the
//! object (`deletionPolicy`). All optional: without them a template is
//! server-side applied, owned whole, its whole `.status` copied back, and
//! deleted with its resource.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most feedback values one resource brings back.
pub const MAX_FEEDBACK_VALUES: usize = 32;
/// The longest JSON text one JsonRaw feedback value carries; a longer one
/// is left out rather than cut.
pub const MAX_RAW_FEEDBACK: usize = 1024;

/// One rule naming fields of the remote object to bring back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.type != 'JSONPaths' || (has(self.jsonPaths) && size(self.jsonPaths) > 0)",
    "message": "a JSONPaths feedback rule needs jsonPaths, e.g. [{name: ingress, path: status.loadBalancer.ingress}]"
}, {
    "rule": "self.type == 'JSONPaths' || !has(self.jsonPaths)",
    "message": "jsonPaths belong to JSONPaths feedback rules only"
}]))]
pub struct FeedbackRule {
    /// Type of the rule: WellKnownStatus, the fields that matter for the
    /// object's kind (Deployment: ReadyReplicas, Replicas,
    /// AvailableReplicas; StatefulSet and DaemonSet: ReadyReplicas,
    /// Replicas; Job: JobComplete, JobSucceeded; Pod: PodPhase, PodReady;
    /// Service: LoadBalancerIngress), or JSONPaths, the fields named.
    #[serde(rename = "type")]
    pub type_: FeedbackRuleType,
    /// JSONPaths, for JSONPaths rules: each value to bring back, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub json_paths: Vec<FeedbackPath>,
}

/// The kinds of feedback rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FeedbackRuleType {
    /// The well-known fields of the object's kind.
    #[default]
    WellKnownStatus,
    /// The fields named by path.
    #[serde(rename = "JSONPaths")]
    JsonPaths,
}

/// One field of the remote object to bring back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackPath {
    /// Name the value has in status.feedback.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Path of the field in the remote object, from its root, e.g.
    /// `status.readyReplicas`, `status.loadBalancer.ingress`,
    /// `status.conditions[0].reason` or `metadata.annotations[example.org/x]`.
    /// A field the object does not have yet is left out.
    #[schemars(length(min = 1, max = 512))]
    pub path: String,
}

/// One value brought back from the remote object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackValue {
    /// Name of the value: the rule's name for it, or the well-known one.
    pub name: String,
    /// The value, typed.
    pub field_value: FieldValue,
}

/// A typed value: exactly one of integer, string, boolean or jsonRaw is
/// set, as `type` says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldValue {
    /// Type of the value: Integer, String, Boolean or JsonRaw (a list, an
    /// object or a number that is not an integer, as JSON text).
    #[serde(rename = "type")]
    pub type_: FieldValueType,
    /// The value, when an Integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer: Option<i64>,
    /// The value, when a String.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// The value, when a Boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boolean: Option<bool>,
    /// The value, when JsonRaw: its JSON text (at most 1024 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_raw: Option<String>,
}

/// The types of a feedback value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FieldValueType {
    /// A whole number.
    #[default]
    Integer,
    /// A string.
    String,
    /// true or false.
    Boolean,
    /// Anything else, as JSON text.
    JsonRaw,
}

/// How the remote object is written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.type == 'ServerSideApply' || !has(self.ignoreFields)",
    "message": "ignoreFields belong to the ServerSideApply write strategy only"
}]))]
pub struct WriteStrategy {
    /// Type of the strategy. ServerSideApply (the default): the template is
    /// applied and its fields owned; a field someone else changes is put
    /// back (drift), except ignoreFields. CreateOnly: created when missing,
    /// then never written again (edits by others stay). ReadOnly: never
    /// created, written or deleted; only observed (health, feedback), and
    /// it need not be this resource's.
    #[serde(rename = "type")]
    pub type_: WriteStrategyType,
    /// IgnoreFields, for ServerSideApply: paths of the template (e.g.
    /// `spec.replicas`, `metadata.annotations[example.org/x]`) that are set
    /// when the object is created and then left to other managers (an HPA
    /// owning replicas): never applied again, never drift. Object fields
    /// only; a list is ignored whole by its path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub ignore_fields: Vec<String>,
}

/// The write strategies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WriteStrategyType {
    /// Apply and own the template's fields; put back what others change.
    #[default]
    ServerSideApply,
    /// Create when missing; never write again.
    CreateOnly,
    /// Never write; observe only.
    ReadOnly,
}

/// What deleting the resource does to the remote object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the remote object and its propagated Secrets.
    #[default]
    Delete,
    /// Leave them in place, no longer marked as this resource's.
    Orphan,
}

/// How the resource delivers its object, when not the default
/// (ServerSideApply, Delete): what status says it does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The write strategy in force.
    pub write_strategy: WriteStrategyType,
    /// The fields left to other managers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored_fields: Vec<String>,
    /// What deleting the resource does to the remote object.
    pub deletion_policy: DeletionPolicy,
}
