//! `kubernetes.crossplane.io/v1alpha1`: Object, ProviderConfig,
//! ProviderConfigUsage (seeds 002 and 003) and ObservedObjectCollection
//! (upstream provider-kubernetes' kind).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    Condition, DeletionPolicy, NamedReference, SecretKeySelector, SecretReference, TypedReference,
    conditions_schema, embedded_object_schema,
};

/// The finalizer every Object carries until its managed object is handled.
pub const OBJECT_FINALIZER: &str = "finalizer.managedresource.crossplane.io";

/// The label naming the ProviderConfig an Object uses.
pub const PROVIDER_CONFIG_LABEL: &str = "kubernetes.crossplane.io/provider-config";

/// Desired state of an Object.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "An Object manages one arbitrary Kubernetes object (its manifest) in the local cluster or a remote one, as its ProviderConfig says.",
    group = "kubernetes.crossplane.io",
    version = "v1alpha1",
    kind = "Object",
    status = "ObjectStatus",
    category = "crossplane",
    category = "managed",
    category = "kubernetes",
    printcolumn = r#"{"name":"KIND","type":"string","jsonPath":".spec.forProvider.manifest.kind"}"#,
    printcolumn = r#"{"name":"TARGET-NAME","type":"string","jsonPath":".spec.forProvider.manifest.metadata.name"}"#,
    printcolumn = r#"{"name":"TARGET-NAMESPACE","type":"string","jsonPath":".spec.forProvider.manifest.metadata.namespace"}"#,
    printcolumn = r#"{"name":"PROVIDERCONFIG","type":"string","jsonPath":".spec.providerConfigRef.name"}"#,
    printcolumn = r#"{"name":"SYNCED","type":"string","jsonPath":".status.conditions[?(@.type=='Synced')].status"}"#,
    printcolumn = r#"{"name":"READY","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSpec {
    /// ForProvider holds the desired state of the managed object.
    pub for_provider: ObjectParameters,

    /// ManagementPolicy says what the provider may do to the managed object:
    /// Default (observe, create, update, delete), ObserveCreateUpdate (never
    /// delete), ObserveDelete (never create or update) or Observe (read only).
    #[serde(default)]
    pub management_policy: ManagementPolicy,

    /// DeletionPolicy says whether the managed object is deleted (Delete) or
    /// left in place (Orphan) when this Object is deleted. Orphan always wins;
    /// with Delete, the management policy must also allow deletion.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// ProviderConfigRef names the ProviderConfig that says which cluster the
    /// managed object lives in and how to reach it. Defaults to "default".
    #[serde(default)]
    pub provider_config_ref: NamedReference,

    /// References to other objects in the control cluster, resolved in order
    /// before anything is done to the managed object. A fromObject reference
    /// copies a value into the manifest; a dependsOn reference only orders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,

    /// WriteConnectionSecretToRef names the Secret that connection details are
    /// published to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_connection_secret_to_ref: Option<SecretReference>,

    /// ConnectionDetails lists values read from objects in the target cluster
    /// (for example a Secret's data key or a status field) and published to
    /// the connection Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connection_details: Vec<ConnectionDetail>,

    /// Readiness says how the Object's Ready condition is derived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
}

/// The desired state of the managed object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectParameters {
    /// Manifest of the managed object: any kind the target cluster knows.
    /// metadata.name defaults to the Object's name (or its
    /// crossplane.io/external-name annotation).
    #[schemars(schema_with = "embedded_object_schema")]
    pub manifest: serde_json::Value,
}

/// What the provider may do to the managed object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ManagementPolicy {
    /// Observe, create, update and delete.
    #[default]
    Default,
    /// Observe, create and update; never delete.
    ObserveCreateUpdate,
    /// Observe and delete; never create or update.
    ObserveDelete,
    /// Only observe.
    Observe,
}

/// A reference to another object, resolved before the managed object is
/// touched. Exactly one of dependsOn and fromObject is set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.dependsOn) || has(self.fromObject) || has(self.patchesFrom)",
        "message": "set dependsOn (order only), or fromObject or patchesFrom (copy a value)"
    },
    {
        "rule": "!has(self.fromObject) || !(has(self.dependsOn) || has(self.patchesFrom))",
        "message": "a fromObject reference stands alone: remove dependsOn and patchesFrom"
    },
    {
        "rule": "!has(self.fromObject) || has(self.toFieldPath)",
        "message": "a fromObject reference needs toFieldPath: the field of this Object the value is written to"
    }
]))]
pub struct Reference {
    /// DependsOn orders this Object after the referenced object without
    /// copying any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<DependsOn>,
    /// FromObject copies the value at its fieldPath into toFieldPath.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_object: Option<FromObject>,
    /// PatchesFrom is upstream provider-kubernetes' word for the same in
    /// this version: it copies the value at its fieldPath into the
    /// manifest, at toFieldPath taken inside the manifest (e.g. data.key;
    /// patchesFrom.fieldPath when unset), as `v1alpha2` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches_from: Option<FromObject>,
    /// ToFieldPath is where the value is written: for fromObject, the path
    /// in this Object (e.g. spec.forProvider.manifest.metadata.name); for
    /// patchesFrom, the path inside the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_field_path: Option<String>,
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

/// An object a value is read from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FromObject {
    /// APIVersion of the referenced object.
    pub api_version: String,
    /// Kind of the referenced object.
    pub kind: String,
    /// Name of the referenced object.
    pub name: String,
    /// Namespace of the referenced object; empty for cluster-scoped kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// FieldPath of the value in the referenced object, for example
    /// status.atProvider.manifest.status.currentCSV.
    pub field_path: String,
}

/// A connection detail read from an object in the target cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionDetail {
    /// APIVersion of the object the value is read from.
    pub api_version: String,
    /// Kind of the object the value is read from.
    pub kind: String,
    /// Name of the object the value is read from.
    pub name: String,
    /// Namespace of the object the value is read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// FieldPath of the value, for example data.password or status.host.
    pub field_path: String,
    /// ToConnectionSecretKey is the key it is published under.
    pub to_connection_secret_key: String,
}

/// How an Object's Ready condition is derived.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// Policy: SuccessfulCreate (Ready once the object exists),
    /// DeriveFromObject (Ready when the object's Ready condition is True) or
    /// AllTrue (Ready when every condition of the object is True).
    #[serde(default)]
    pub policy: ReadinessPolicy,
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
    /// applied or observed in its target cluster. Deleting the Object deletes
    /// that object even when the manifest can no longer be worked out (a
    /// fromObject source was deleted first, say), so nothing is left behind
    /// unnoticed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_object_ref: Option<ManagedObjectReference>,
    /// Drift reports the last corrections of fields someone else changed in
    /// the managed object: which paths, by which field manager, how often
    /// in the last hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::common::DriftReport>,
}

/// Where a managed object lives in its target cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedObjectReference {
    /// APIVersion of the managed object, e.g. v1 or apps/v1.
    pub api_version: String,
    /// Kind of the managed object, e.g. ConfigMap.
    pub kind: String,
    /// Namespace of the managed object; unset for a cluster-scoped kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the managed object.
    pub name: String,
}

/// The observed managed object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectObservation {
    /// Manifest is the live object, status included. A Secret's data is
    /// redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "embedded_object_schema")]
    pub manifest: Option<serde_json::Value>,
}

/// Desired state of a ProviderConfig.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A ProviderConfig says which cluster Objects that use it manage their objects in, and with which credentials.",
    group = "kubernetes.crossplane.io",
    version = "v1alpha1",
    kind = "ProviderConfig",
    status = "ProviderConfigStatus",
    category = "crossplane",
    category = "provider",
    category = "kubernetes",
    printcolumn = r#"{"name":"SOURCE","type":"string","jsonPath":".spec.credentials.source"}"#,
    printcolumn = r#"{"name":"USERS","type":"integer","jsonPath":".status.users"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigSpec {
    /// Credentials used to reach the target cluster.
    pub credentials: ProviderCredentials,
    /// Identity supplements the kubeconfig with a cloud identity
    /// (upstream's field). Accepted, and refused in the condition of every
    /// Object using this ProviderConfig: this provider does not exchange
    /// cloud identities for tokens; put a kubeconfig with its own
    /// credentials in the Secret instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
}

/// A cloud identity that supplements a kubeconfig (upstream's field).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// Type of the identity.
    #[serde(rename = "type")]
    pub type_: IdentityType,
    /// Where the identity's own credentials come from.
    #[serde(flatten)]
    pub credentials: ProviderCredentials,
}

/// The cloud identity types upstream's provider knows.
#[allow(clippy::upper_case_acronyms)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum IdentityType {
    GoogleApplicationCredentials,
    AzureServicePrincipalCredentials,
    AzureWorkloadIdentityCredentials,
    UpboundTokens,
    AWSWebIdentityCredentials,
    NebiusServiceAccountCredentials,
}

/// Credentials for the target cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.source != 'Secret' || has(self.secretRef)",
    "message": "credentials.source Secret needs credentials.secretRef naming the Secret key that holds a kubeconfig"
}]))]
pub struct ProviderCredentials {
    /// Source of the credentials: Secret (a kubeconfig in a Secret key) or
    /// InjectedIdentity (the provider's own in-cluster identity, so the target
    /// is the control cluster). None, Environment and Filesystem are
    /// upstream's words, accepted and refused in the Objects' condition.
    pub source: CredentialsSource,
    /// SecretRef selects the Secret key holding a kubeconfig, when source is
    /// Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeySelector>,
    /// Env names an environment variable of the provider, for source
    /// Environment (refused: see `source`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<EnvSelector>,
    /// Fs names a file of the provider, for source Filesystem (refused: see
    /// `source`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsSelector>,
}

/// An environment variable (upstream's selector).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EnvSelector {
    /// Name of the variable.
    pub name: String,
}

/// A file (upstream's selector).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FsSelector {
    /// Path of the file.
    pub path: String,
}

/// Where credentials come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CredentialsSource {
    /// A kubeconfig held in a Secret.
    #[default]
    Secret,
    /// The provider's own in-cluster identity.
    InjectedIdentity,
    /// No credentials (refused: an Object needs a cluster to reach).
    None,
    /// An environment variable of the provider (refused: whoever writes a
    /// ProviderConfig would choose what of the provider's own environment
    /// it reads).
    Environment,
    /// A file of the provider (refused: whoever writes a ProviderConfig
    /// would choose which of the provider's files it reads).
    Filesystem,
}

/// Observed state of a ProviderConfig.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigStatus {
    /// Conditions of the ProviderConfig.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Users is the number of Objects using this ProviderConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<i64>,
}

/// Desired state of a ProviderConfigUsage.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A ProviderConfigUsage records that an Object uses a ProviderConfig, so the ProviderConfig cannot be deleted while it is in use.",
    group = "kubernetes.crossplane.io",
    version = "v1alpha1",
    kind = "ProviderConfigUsage",
    category = "crossplane",
    category = "provider",
    category = "kubernetes",
    printcolumn = r#"{"name":"CONFIG-NAME","type":"string","jsonPath":".spec.providerConfigRef.name"}"#,
    printcolumn = r#"{"name":"RESOURCE-KIND","type":"string","jsonPath":".spec.resourceRef.kind"}"#,
    printcolumn = r#"{"name":"RESOURCE-NAME","type":"string","jsonPath":".spec.resourceRef.name"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigUsageSpec {
    /// ProviderConfigRef names the ProviderConfig in use.
    pub provider_config_ref: NamedReference,
    /// ResourceRef is the Object using it.
    pub resource_ref: TypedReference,
}

/// The label every Object of an ObservedObjectCollection carries; its value
/// is the collection's name (upstream's key).
pub const COLLECTION_MEMBERSHIP_LABEL: &str = "kubernetes.crossplane.io/owned-by-collection";

/// Desired state of an ObservedObjectCollection.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "An ObservedObjectCollection keeps one observe-only Object for every object of a kind, in the cluster its ProviderConfig reaches, that matches a label selector.",
    group = "kubernetes.crossplane.io",
    version = "v1alpha1",
    kind = "ObservedObjectCollection",
    status = "ObservedObjectCollectionStatus",
    category = "crossplane",
    category = "managed",
    category = "kubernetes",
    // Upstream's columns by name and order. Upstream points KIND and
    // APIVERSION at .spec.kind and .spec.apiVersion, which do not exist
    // (always empty); these point at the fields that hold them.
    printcolumn = r#"{"name":"KIND","type":"string","jsonPath":".spec.observeObjects.kind"}"#,
    printcolumn = r#"{"name":"APIVERSION","type":"string","jsonPath":".spec.observeObjects.apiVersion","priority":1}"#,
    printcolumn = r#"{"name":"PROVIDERCONFIG","type":"string","jsonPath":".spec.providerConfigRef.name"}"#,
    printcolumn = r#"{"name":"SYNCED","type":"string","jsonPath":".status.conditions[?(@.type=='Synced')].status"}"#,
    printcolumn = r#"{"name":"READY","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ObservedObjectCollectionSpec {
    /// ObserveObjects says which objects are members of this collection.
    pub observe_objects: ObserveObjectCriteria,

    /// ProviderConfigRef names the ProviderConfig of the cluster the objects
    /// are looked for in; the collection's Objects use it too. Defaults to
    /// "default".
    #[serde(default)]
    pub provider_config_ref: NamedReference,

    /// ObjectTemplate, when set, gives the labels and annotations of the
    /// collection's Objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_template: Option<ObservedObjectTemplate>,
}

/// Which objects are members of a collection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObserveObjectCriteria {
    /// APIVersion of the objects, for example v1 or apps/v1.
    #[schemars(length(min = 1))]
    pub api_version: String,
    /// Kind of the objects, for example ConfigMap.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Namespace the objects are looked for in. Unset: every namespace. Leave
    /// it unset for a cluster-scoped kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Selector: the labels an object must have to be a member. An empty
    /// selector matches every object of the kind.
    pub selector: LabelSelector,
}

/// What the Objects of a collection are made with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedObjectTemplate {
    /// Metadata of each Object.
    #[serde(default)]
    pub metadata: ObservedObjectTemplateMetadata,
}

/// Labels and annotations of a collection's Objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedObjectTemplateMetadata {
    /// Labels of each Object (beside the membership label, which wins).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations of each Object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Observed state of an ObservedObjectCollection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedObjectCollectionStatus {
    /// Conditions of the collection: Synced and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// MembershipLabel is the label every Object of this collection carries:
    /// select them with it (`kubectl get objects -l key=value`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub membership_label: BTreeMap<String, String>,
    /// ObservedGeneration is the metadata.generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

crate::conditioned!(
    Object => ObjectStatus,
    ProviderConfig => ProviderConfigStatus,
    ObservedObjectCollection => ObservedObjectCollectionStatus,
);
