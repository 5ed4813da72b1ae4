//! `kubernetes.crossplane.io/v1alpha2`: the Object as upstream
//! provider-kubernetes serves it (a list of management policies,
//! `patchesFrom` references whose `toFieldPath` is inside the manifest, a
//! CEL readiness query). The same Objects as v1alpha1, converted by
//! [`super::conversion`].

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::v1alpha1::{ManagedObjectReference, ObjectObservation};
use crate::common::{
    Condition, DeletionPolicy, NamedReference, SecretReference, conditions_schema,
    embedded_object_schema,
};

/// Desired state of an Object.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "An Object manages one arbitrary Kubernetes object (its manifest) in the local cluster or a remote one, as its ProviderConfig says.",
    group = "kubernetes.crossplane.io",
    version = "v1alpha2",
    kind = "Object",
    status = "ObjectStatus",
    category = "crossplane",
    category = "managed",
    category = "kubernetes",
    printcolumn = r#"{"name":"KIND","type":"string","jsonPath":".spec.forProvider.manifest.kind"}"#,
    printcolumn = r#"{"name":"APIVERSION","type":"string","jsonPath":".spec.forProvider.manifest.apiVersion","priority":1}"#,
    printcolumn = r#"{"name":"METANAME","type":"string","jsonPath":".spec.forProvider.manifest.metadata.name","priority":1}"#,
    printcolumn = r#"{"name":"METANAMESPACE","type":"string","jsonPath":".spec.forProvider.manifest.metadata.namespace","priority":1}"#,
    printcolumn = r#"{"name":"PROVIDERCONFIG","type":"string","jsonPath":".spec.providerConfigRef.name"}"#,
    printcolumn = r#"{"name":"SYNCED","type":"string","jsonPath":".status.conditions[?(@.type=='Synced')].status"}"#,
    printcolumn = r#"{"name":"READY","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSpec {
    /// ForProvider holds the desired state of the managed object.
    pub for_provider: ObjectParameters,

    /// ManagementPolicies lists what the provider may do to the managed
    /// object: Observe, Create, Update, Delete, LateInitialize, or "*" for
    /// all of them.
    #[serde(default = "all_policies")]
    pub management_policies: Vec<ManagementAction>,

    /// DeletionPolicy says whether the managed object is deleted (Delete) or
    /// left in place (Orphan) when this Object is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// ProviderConfigRef names the ProviderConfig that says which cluster the
    /// managed object lives in and how to reach it. Defaults to "default".
    #[serde(default)]
    pub provider_config_ref: NamedReference,

    /// WriteConnectionSecretToRef names the Secret that connection details
    /// are published to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_connection_secret_to_ref: Option<SecretReference>,

    /// ConnectionDetails lists values read from objects in the target
    /// cluster and published to the connection Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connection_details: Vec<ConnectionDetail>,

    /// References to other objects in the control cluster, resolved in order
    /// before anything is done to the managed object: dependsOn only
    /// orders, patchesFrom also copies a value into the manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,

    /// Readiness says how the Object's Ready condition is derived.
    #[serde(default)]
    pub readiness: Readiness,

    /// Watch is accepted as upstream's provider accepts it. This provider
    /// always watches what it manages and references, so it changes
    /// nothing.
    #[serde(default)]
    pub watch: bool,
}

fn all_policies() -> Vec<ManagementAction> {
    vec![ManagementAction::All]
}

/// The desired state of the managed object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectParameters {
    /// Manifest of the managed object: any kind the target cluster knows.
    #[schemars(schema_with = "embedded_object_schema")]
    pub manifest: serde_json::Value,

    /// DeletionPropagationPolicy is how the managed object's dependents go
    /// when it is deleted: Foreground (before it), Background (after it,
    /// the default) or Orphan (they stay).
    #[serde(default)]
    pub deletion_propagation_policy: DeletionPropagation,
}

/// How a deleted object's dependents go (the API server's
/// `propagationPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPropagation {
    Orphan,
    #[default]
    Background,
    Foreground,
}

/// One thing the provider may do to the managed object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ManagementAction {
    /// Everything below.
    #[serde(rename = "*")]
    All,
    /// Read it.
    Observe,
    /// Create it when it is missing.
    Create,
    /// Update it to the manifest.
    Update,
    /// Delete it with the Object.
    Delete,
    /// Fill unset fields of the manifest from it.
    LateInitialize,
}

/// An object this Object depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependsOn {
    /// APIVersion of the referenced object; an Object's by default.
    #[serde(default = "object_api_version")]
    pub api_version: String,
    /// Kind of the referenced object; Object by default.
    #[serde(default = "object_kind")]
    pub kind: String,
    /// Name of the referenced object.
    pub name: String,
    /// Namespace of the referenced object; empty for cluster-scoped kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn object_api_version() -> String {
    "kubernetes.crossplane.io/v1alpha1".to_owned()
}

fn object_kind() -> String {
    "Object".to_owned()
}

/// An object a value is copied from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchesFrom {
    /// The object.
    #[serde(flatten)]
    pub object: DependsOn,
    /// FieldPath of the value in the referenced object.
    pub field_path: String,
}

/// A reference: dependsOn orders, patchesFrom also copies a value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    /// DependsOn orders this Object after the referenced object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<DependsOn>,
    /// PatchesFrom copies the value at its fieldPath into the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches_from: Option<PatchesFrom>,
    /// ToFieldPath is the path in the manifest the value is written to;
    /// patchesFrom.fieldPath when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_field_path: Option<String>,
}

/// A connection detail read from an object in the target cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionDetail {
    /// APIVersion of the object the value is read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the object the value is read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the object the value is read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace of the object the value is read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// FieldPath of the value, for example data.password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_path: Option<String>,
    /// ToConnectionSecretKey is the key it is published under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_connection_secret_key: Option<String>,
}

/// How an Object's Ready condition is derived.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.policy != 'DeriveFromCelQuery' || (has(self.celQuery) && size(self.celQuery) > 0)",
    "message": "celQuery must be set if policy is DeriveFromCelQuery"
}]))]
pub struct Readiness {
    /// Policy: SuccessfulCreate, DeriveFromObject, AllTrue or
    /// DeriveFromCelQuery.
    #[serde(default)]
    pub policy: ReadinessPolicy,
    /// CelQuery decides readiness when policy is DeriveFromCelQuery; the
    /// managed object is `object`, e.g. `object.status.readyReplicas > 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel_query: Option<String>,
}

/// How readiness is derived from the managed object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ReadinessPolicy {
    /// Ready as soon as the object was created or observed.
    #[default]
    SuccessfulCreate,
    /// Ready when the object's own Ready condition is True.
    DeriveFromObject,
    /// Ready when every condition of the object is True.
    AllTrue,
    /// Ready when readiness.celQuery is true of the object.
    DeriveFromCelQuery,
}

/// Observed state of an Object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    /// Conditions of the Object: Synced and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// AtProvider is the observed state of the managed object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_provider: Option<ObjectObservation>,
    /// ManagedObjectRef identifies the managed object this Object last
    /// applied or observed in its target cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_object_ref: Option<ManagedObjectReference>,
    /// Drift reports the last corrections of fields someone else changed in
    /// the managed object: which paths, by which field manager, how often
    /// in the last hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::common::DriftReport>,
}

crate::conditioned!(Object => ObjectStatus);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_upstream_object_with_defaults_reads_and_converts_to_the_design_shape() {
        let yaml = r#"
apiVersion: kubernetes.crossplane.io/v1alpha2
kind: Object
metadata:
  name: foo
spec:
  references:
  - patchesFrom:
      apiVersion: v1
      kind: ConfigMap
      name: bar
      namespace: default
      fieldPath: data.color
    toFieldPath: data.color
  - dependsOn:
      name: other
  readiness:
    policy: DeriveFromCelQuery
    celQuery: "object.data.color == 'blue'"
  forProvider:
    manifest:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        namespace: default
"#;
        let o: Object = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(o.spec.management_policies, vec![ManagementAction::All]);
        assert_eq!(
            o.spec.references[1].depends_on.as_ref().unwrap().kind,
            "Object"
        );
        assert_eq!(
            o.spec.references[0]
                .patches_from
                .as_ref()
                .unwrap()
                .object
                .name,
            "bar"
        );
        let json = serde_json::to_value(&o).unwrap();
        let v1 =
            super::super::conversion::convert(&json, "kubernetes.crossplane.io/v1alpha1").unwrap();
        let v1: super::super::v1alpha1::Object = serde_json::from_value(v1).unwrap();
        assert_eq!(
            v1.spec.references[0].to_field_path.as_deref(),
            Some("spec.forProvider.manifest.data.color")
        );
        assert_eq!(
            v1.spec.management_policy,
            super::super::v1alpha1::ManagementPolicy::Default
        );
    }
}
