//! `workload.crossplane.io/v1alpha1`: KubernetesApplication and
//! KubernetesApplicationResource (seed 000, complex workloads).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod delivery;
pub use delivery::*;

use crate::common::{
    Condition, DriftReport, LocalObjectReference, TemplateMetadata, conditions_schema,
    embedded_object_schema, opaque_object_schema,
};

/// Annotation put on every remote object (and propagated Secret) created by a
/// KubernetesApplicationResource; its value is the resource's UID. A remote
/// object without it, or with another UID, is never touched.
pub const ANNOTATION_RESOURCE_UID: &str =
    "kubernetesapplicationresource.workload.crossplane.io/uid";

/// The finalizer that holds a KubernetesApplicationResource until the
/// resource-controller removed its remote objects. The application-controller
/// creates each resource with it already, so that the resource-controller
/// need not add it with a request of its own per resource (it still adds it
/// to a resource created without it).
pub const RESOURCE_FINALIZER: &str = "workload.crossplane.io/resource-controller";

/// The reason of a resource's Ready condition (and Warning event) when one
/// of its health rules cannot be evaluated.
pub const REASON_HEALTH_RULE_FAILED: &str = "HealthRuleFailed";

/// Desired state of a KubernetesApplication.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A KubernetesApplication is a unit of scheduled work: a set of resource templates deployed together to one KubernetesCluster that matches its cluster selector.",
    group = "workload.crossplane.io",
    version = "v1alpha1",
    kind = "KubernetesApplication",
    namespaced,
    status = "KubernetesApplicationStatus",
    shortname = "kapp",
    category = "crossplane",
    printcolumn = r#"{"name":"CLUSTER","type":"string","jsonPath":".status.clusterRef.name"}"#,
    printcolumn = r#"{"name":"STATUS","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"DESIRED","type":"integer","jsonPath":".status.desiredResources"}"#,
    printcolumn = r#"{"name":"SUBMITTED","type":"integer","jsonPath":".status.submittedResources"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
// Moving a scheduled application would orphan everything it submitted; the
// seed makes the selector immutable, so the API server rejects the change.
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.clusterSelector) == has(oldSelf.clusterSelector) && (!has(self.clusterSelector) || self.clusterSelector == oldSelf.clusterSelector)",
    "message": "spec.clusterSelector is immutable: delete and recreate the KubernetesApplication to schedule it elsewhere",
    "fieldPath": ".clusterSelector"
}]))]
pub struct KubernetesApplicationSpec {
    /// ClusterSelector selects the KubernetesClusters (in this namespace) this
    /// application may be scheduled to. An empty or absent selector matches
    /// every cluster. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,

    /// ResourceTemplates: each is used to create one
    /// KubernetesApplicationResource, in this application's namespace, named
    /// by the template's metadata.name.
    #[serde(default)]
    pub resource_templates: Vec<KubernetesApplicationResourceTemplate>,
}

/// A template for a KubernetesApplicationResource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesApplicationResourceTemplate {
    /// Metadata of the KubernetesApplicationResource: name, labels and
    /// annotations. The namespace is ignored; resources are always created in
    /// the namespace of their controlling KubernetesApplication.
    pub metadata: TemplateMetadata,
    /// Spec of the KubernetesApplicationResource.
    pub spec: ResourceTemplateSpec,
}

/// The spec a KubernetesApplication gives each of its
/// KubernetesApplicationResources; the application controller adds the
/// cluster it scheduled to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplateSpec {
    /// Template of the Kubernetes object to create in the remote cluster. It
    /// must contain type and object metadata (apiVersion, kind,
    /// metadata.name). Namespaced kinds without metadata.namespace go to the
    /// namespace "default"; cluster-scoped kinds ignore it.
    // NB: no immutability rules here: list items cannot be correlated with
    // their old selves, so the API server refuses transition rules in them.
    // The KubernetesApplicationResource enforces them instead.
    #[schemars(schema_with = "embedded_object_schema")]
    pub template: serde_json::Value,

    /// Secrets (in the application's namespace) to propagate to the namespace
    /// of the templated object in the remote cluster, each as a Secret named
    /// <resource name>-<secret name>.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<LocalObjectReference>,

    /// HealthRules decide when the templated object is healthy (its
    /// resource's Ready condition); see KubernetesApplicationResource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub health_rules: Vec<HealthRule>,

    /// FeedbackRules name the fields of the templated object its resource
    /// brings back; see KubernetesApplicationResource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub feedback_rules: Vec<FeedbackRule>,

    /// WriteStrategy says how the templated object is written; see
    /// KubernetesApplicationResource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_strategy: Option<WriteStrategy>,

    /// DeletionPolicy says what deleting the resource does to the templated
    /// object; see KubernetesApplicationResource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

/// The state of a KubernetesApplication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum KubernetesApplicationState {
    /// Waiting to be scheduled to a KubernetesCluster.
    Pending,
    /// Scheduled to a KubernetesCluster; resources not yet submitted.
    Scheduled,
    /// Some, but not all, resources were submitted.
    PartiallySubmitted,
    /// Every resource was submitted to the scheduled cluster.
    Submitted,
    /// Submitting the application's resources failed.
    Failed,
    /// The application is being deleted.
    Deleting,
}

/// Observed state of a KubernetesApplication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesApplicationStatus {
    /// Conditions of the application: Scheduled, Synced and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// State of the application: Pending, Scheduled, PartiallySubmitted,
    /// Submitted, Failed or Deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<KubernetesApplicationState>,
    /// ClusterRef is the KubernetesCluster this application is scheduled to.
    /// Once set it never changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<LocalObjectReference>,
    /// DesiredResources is the number of resource templates in the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_resources: Option<i64>,
    /// SubmittedResources is how many of them were submitted to the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_resources: Option<i64>,
    /// ObservedGeneration is the metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Desired state of a KubernetesApplicationResource.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A KubernetesApplicationResource templates exactly one Kubernetes object (of any kind, built-in or CRD, known only to the remote cluster) and submits it to the KubernetesCluster its application is scheduled to.",
    group = "workload.crossplane.io",
    version = "v1alpha1",
    kind = "KubernetesApplicationResource",
    namespaced,
    status = "KubernetesApplicationResourceStatus",
    shortname = "kares",
    category = "crossplane",
    printcolumn = r#"{"name":"TEMPLATE-KIND","type":"string","jsonPath":".spec.template.kind"}"#,
    printcolumn = r#"{"name":"TEMPLATE-NAME","type":"string","jsonPath":".spec.template.metadata.name"}"#,
    printcolumn = r#"{"name":"CLUSTER","type":"string","jsonPath":".spec.clusterRef.name"}"#,
    printcolumn = r#"{"name":"STATUS","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(oldSelf.clusterRef) || (has(self.clusterRef) && self.clusterRef == oldSelf.clusterRef)",
    "message": "spec.clusterRef is immutable once set: a scheduled resource never moves to another cluster",
    "fieldPath": ".clusterRef"
}]))]
pub struct KubernetesApplicationResourceSpec {
    /// Template of the Kubernetes object to create in the remote cluster. It
    /// must contain type and object metadata (apiVersion, kind,
    /// metadata.name). Namespaced kinds without metadata.namespace go to the
    /// namespace "default"; cluster-scoped kinds ignore it. apiVersion, kind,
    /// metadata.name and metadata.namespace are immutable.
    #[schemars(schema_with = "template_schema")]
    pub template: serde_json::Value,

    /// Secrets (in this resource's namespace) to propagate to the namespace of
    /// the templated object in the remote cluster, each as a Secret named
    /// <resource name>-<secret name>.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<LocalObjectReference>,

    /// ClusterRef is the KubernetesCluster (in this namespace) the resource is
    /// submitted to. The application controller sets it from its
    /// application's scheduling decision; immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<LocalObjectReference>,

    /// HealthRules decide when the remote object is healthy, which is what
    /// the Ready condition says: every rule must hold, and the first that
    /// does not gives Ready's message. Without rules, the built-in rule for
    /// the object's kind decides (Deployment Available; StatefulSet,
    /// ReplicaSet and DaemonSet replicas ready; Namespace Active; otherwise
    /// a Ready condition, when there is one). A rule that cannot be
    /// evaluated makes Ready False with reason HealthRuleFailed, naming it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub health_rules: Vec<HealthRule>,

    /// FeedbackRules name the fields of the remote object to bring back to
    /// status.feedback, typed (Integer, String, Boolean or JsonRaw), instead
    /// of copying its whole .status to status.remote (left empty when there
    /// are rules). A Secret's fields never come back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub feedback_rules: Vec<FeedbackRule>,

    /// WriteStrategy says how the remote object is written: ServerSideApply
    /// (the default), optionally leaving ignoreFields to other managers;
    /// CreateOnly; or ReadOnly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_strategy: Option<WriteStrategy>,

    /// DeletionPolicy says what deleting this resource does to the remote
    /// object and its propagated Secrets: Delete (the default) or Orphan
    /// (left in place, no longer marked as this resource's). A ReadOnly
    /// object is never deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

/// One rule of what healthy means for a remote object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.type != 'CEL' || (has(self.expression) && size(self.expression) > 0)",
    "message": "a CEL health rule needs an expression, e.g. object.status.phase == 'Running'"
}, {
    "rule": "self.type == 'CEL' || (!has(self.expression) && !has(self.messageExpression))",
    "message": "expression and messageExpression belong to CEL rules only"
}]))]
pub struct HealthRule {
    /// Type of the rule: WellKnown, the built-in rule for the object's kind
    /// (those above, and a Job is healthy once Complete and says why when
    /// Failed), or CEL, an expression over the remote object.
    #[serde(rename = "type")]
    pub type_: HealthRuleType,
    /// Expression, for CEL rules: true when the remote object is healthy.
    /// The object, as the remote cluster serves it, is the variable
    /// `object`, e.g. `object.status.phase == 'Running'`. It is compiled
    /// once and evaluated within bounds (1 s, 100,000 loop steps); a rule
    /// over them is an error, never a hang.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 8192))]
    pub expression: String,
    /// MessageExpression, for CEL rules: a string expression over `object`
    /// saying why it is not healthy, e.g. `'phase is ' + object.status.phase`
    /// (not evaluated for Secrets). Without it, Ready's message names the
    /// rule.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 8192))]
    pub message_expression: String,
}

/// The kinds of health rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HealthRuleType {
    /// The built-in rule for the object's kind.
    #[default]
    WellKnown,
    /// A CEL expression over the object.
    #[serde(rename = "CEL")]
    Cel,
}

fn template_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = embedded_object_schema(generator);
    // Changing any of these would orphan the remote object and create another.
    // NB: `namespace` is a CEL reserved word; Kubernetes exposes such
    // properties as `__namespace__` in rules.
    let immutable = |path: &str, field: &str| -> serde_json::Value {
        let (parent, leaf) = match path.rsplit_once('.') {
            Some((p, l)) => (Some(p), l),
            None => (None, path),
        };
        let get = |root: &str| match parent {
            Some(p) => {
                format!("(has({root}.{p}) && has({root}.{p}.{leaf}) ? {root}.{p}.{leaf} : '')")
            }
            None => format!("(has({root}.{leaf}) ? {root}.{leaf} : '')"),
        };
        serde_json::json!({
            "rule": format!("{} == {}", get("self"), get("oldSelf")),
            "message": format!("{field} is immutable: delete and recreate the resource to change it"),
        })
    };
    schema.insert(
        "x-kubernetes-validations".to_owned(),
        serde_json::json!([
            immutable("apiVersion", "spec.template.apiVersion"),
            immutable("kind", "spec.template.kind"),
            immutable("metadata.name", "spec.template.metadata.name"),
            immutable("metadata.__namespace__", "spec.template.metadata.namespace"),
        ]),
    );
    schema
}

/// The state of a KubernetesApplicationResource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum KubernetesApplicationResourceState {
    /// Not yet scheduled to a cluster.
    Pending,
    /// Scheduled; not yet submitted.
    Scheduled,
    /// The templated object was submitted to the remote cluster.
    Submitted,
    /// Submitting the templated object failed; see the conditions.
    Failed,
    /// The resource and its remote object are being deleted.
    Deleting,
}

/// Observed state of a KubernetesApplicationResource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesApplicationResourceStatus {
    /// Conditions of the resource: Synced and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// State of the resource: Scheduled, Submitted, Failed or Deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<KubernetesApplicationResourceState>,
    /// Remote is the .status of the templated object in the remote cluster,
    /// copied verbatim. Absent when the kind exposes no status, and when
    /// spec.feedbackRules name what comes back (status.feedback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_object_schema")]
    pub remote: Option<serde_json::Value>,
    /// Feedback is what spec.feedbackRules bring back from the remote
    /// object, when there are rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<Vec<FeedbackValue>>,
    /// Delivery says how the remote object is written and what deleting
    /// this resource does to it, when that is not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
    /// Drift reports the last corrections of fields someone else changed in
    /// the remote object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftReport>,
    /// ObservedGeneration is the metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Labels and annotations, as the application copies them from a template.
pub type StringMap = BTreeMap<String, String>;

crate::conditioned!(
    KubernetesApplication => KubernetesApplicationStatus,
    KubernetesApplicationResource => KubernetesApplicationResourceStatus,
);
