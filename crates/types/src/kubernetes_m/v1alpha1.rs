//! `kubernetes.m.crossplane.io/v1alpha1`: the namespaced Object, with the
//! namespaced ProviderConfig and the ClusterProviderConfig it uses, as
//! upstream provider-kubernetes serves them on Crossplane v2. A namespaced
//! Object is `kubernetes.crossplane.io/v1alpha2`'s Object without
//! `deletionPolicy` (its `managementPolicies` decide), whose connection
//! Secret and references are in its own namespace and whose
//! `providerConfigRef` names a kind.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, LocalObjectReference, conditions_schema};
use crate::kubernetes::{
    v1alpha1::{
        Identity, ObserveObjectCriteria, ObservedObjectCollectionStatus, ObservedObjectTemplate,
        ProviderCredentials,
    },
    v1alpha2::{ConnectionDetail, ManagementAction, ObjectParameters, ObjectStatus, Readiness},
};

/// This API group.
pub const GROUP: &str = "kubernetes.m.crossplane.io";

/// The apiVersion of a namespaced Object.
pub const API_VERSION: &str = "kubernetes.m.crossplane.io/v1alpha1";

/// Desired state of a namespaced Object.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "An Object manages one arbitrary Kubernetes object (its manifest) in the local cluster or a remote one, as its ProviderConfig or ClusterProviderConfig says. With the provider's own identity it reaches only its own namespace, unless the ClusterProviderConfig says otherwise.",
    group = "kubernetes.m.crossplane.io",
    version = "v1alpha1",
    kind = "Object",
    namespaced,
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
    /// all of them. The managed object is deleted with this Object when
    /// the list is ["*"] or holds Delete.
    #[serde(default = "all_policies")]
    pub management_policies: Vec<ManagementAction>,

    /// ProviderConfigRef names the ProviderConfig (in this namespace) or
    /// ClusterProviderConfig that says which cluster the managed object
    /// lives in and how to reach it.
    #[serde(default)]
    pub provider_config_ref: ProviderConfigReference,

    /// WriteConnectionSecretToRef names the Secret, in this namespace, that
    /// connection details are published to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_connection_secret_to_ref: Option<LocalObjectReference>,

    /// ConnectionDetails lists values read from objects in the target
    /// cluster and published to the connection Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connection_details: Vec<ConnectionDetail>,

    /// References to other objects in this namespace of the control
    /// cluster, resolved in order before anything is done to the managed
    /// object: dependsOn only orders, patchesFrom also copies a value into
    /// the manifest.
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

/// The ProviderConfig or ClusterProviderConfig a namespaced Object uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigReference {
    /// Kind: ProviderConfig (in the Object's namespace) or
    /// ClusterProviderConfig.
    pub kind: ProviderConfigKind,
    /// Name of the config.
    pub name: String,
}

impl Default for ProviderConfigReference {
    fn default() -> Self {
        Self {
            kind: ProviderConfigKind::ClusterProviderConfig,
            name: "default".to_owned(),
        }
    }
}

/// Which kind of config a namespaced Object uses.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum ProviderConfigKind {
    /// A ProviderConfig in the Object's namespace.
    ProviderConfig,
    /// A ClusterProviderConfig.
    ClusterProviderConfig,
}

/// An object in the control cluster this Object depends on; in the
/// Object's namespace unless `namespace` says otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependsOn {
    /// APIVersion of the referenced object; a namespaced Object's by
    /// default.
    #[serde(default = "object_api_version")]
    pub api_version: String,
    /// Kind of the referenced object; Object by default.
    #[serde(default = "object_kind")]
    pub kind: String,
    /// Name of the referenced object.
    pub name: String,
    /// Namespace of the referenced object: this Object's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn object_api_version() -> String {
    API_VERSION.to_owned()
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

/// Desired state of a namespaced ProviderConfig.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A ProviderConfig says which cluster the Objects of its namespace that use it manage their objects in, and with which credentials (a Secret of its own namespace, or the provider's identity confined to this namespace).",
    group = "kubernetes.m.crossplane.io",
    version = "v1alpha1",
    kind = "ProviderConfig",
    namespaced,
    status = "ProviderConfigStatus",
    category = "crossplane",
    category = "provider",
    category = "kubernetes",
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"SECRET-NAME","type":"string","jsonPath":".spec.credentials.secretRef.name","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigSpec {
    /// Credentials used to reach the target cluster. A Secret must be in
    /// this ProviderConfig's namespace.
    pub credentials: ProviderCredentials,
    /// Identity supplements the kubeconfig with a cloud identity
    /// (upstream's field): accepted, and refused in the condition of every
    /// Object using this config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
}

/// Desired state of a ClusterProviderConfig.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A ClusterProviderConfig says which cluster the namespaced Objects that use it manage their objects in, and with which credentials; with the provider's own identity, how far those Objects reach.",
    group = "kubernetes.m.crossplane.io",
    version = "v1alpha1",
    kind = "ClusterProviderConfig",
    status = "ProviderConfigStatus",
    category = "crossplane",
    category = "provider",
    category = "kubernetes",
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"SECRET-NAME","type":"string","jsonPath":".spec.credentials.secretRef.name","priority":1}"#,
    printcolumn = r#"{"name":"REACH","type":"string","jsonPath":".spec.reach","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProviderConfigSpec {
    /// Credentials used to reach the target cluster.
    pub credentials: ProviderCredentials,
    /// Identity supplements the kubeconfig with a cloud identity
    /// (upstream's field): accepted, and refused in the condition of every
    /// Object using this config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// Reach of the namespaced Objects using this config (this project's
    /// field). OwnNamespace (the default): an Object manages objects only
    /// in its own namespace when the target is the control cluster
    /// (credentials.source InjectedIdentity), and reads references only in
    /// its own namespace. Cluster: anywhere the provider's identity may,
    /// as upstream's provider does; whoever may create namespaced Objects
    /// using this config then acts with the provider's rights.
    #[serde(default)]
    pub reach: Reach,
}

/// How far the namespaced Objects using a ClusterProviderConfig reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Reach {
    /// Their own namespace only.
    #[default]
    OwnNamespace,
    /// Anywhere the provider may act.
    Cluster,
}

/// Observed state of a ProviderConfig or ClusterProviderConfig.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigStatus {
    /// Conditions of the config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Users is the number of Objects using this config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<i64>,
}

/// Desired state of a namespaced ObservedObjectCollection.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "An ObservedObjectCollection keeps one observe-only Object, in its own namespace, for every object of a kind that matches a label selector in the cluster its ProviderConfig or ClusterProviderConfig reaches. With the provider's own identity it looks only in its own namespace, unless the ClusterProviderConfig says otherwise.",
    group = "kubernetes.m.crossplane.io",
    version = "v1alpha1",
    kind = "ObservedObjectCollection",
    namespaced,
    status = "ObservedObjectCollectionStatus",
    category = "crossplane",
    category = "managed",
    category = "kubernetes",
    // As the cluster collection's columns (see there).
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
    /// With the provider's own identity (InjectedIdentity), only objects
    /// in this collection's namespace can be, unless its
    /// ClusterProviderConfig says spec.reach: Cluster.
    pub observe_objects: ObserveObjectCriteria,

    /// ProviderConfigRef names the ProviderConfig (in this namespace) or
    /// ClusterProviderConfig of the cluster the objects are looked for in;
    /// the collection's Objects use it too.
    #[serde(default)]
    pub provider_config_ref: ProviderConfigReference,

    /// ObjectTemplate, when set, gives the labels and annotations of the
    /// collection's Objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_template: Option<ObservedObjectTemplate>,
}

crate::conditioned!(
    Object => ObjectStatus,
    ProviderConfig => ProviderConfigStatus,
    ClusterProviderConfig => ProviderConfigStatus,
    ObservedObjectCollection => ObservedObjectCollectionStatus,
);

/// The ProviderConfigUsage CRD as upstream serves it (its fields at the
/// top level, not under spec, which kube-derive cannot express). This
/// provider counts a config's users from its Objects' cache and writes no
/// usages; the kind is served so that manifests and tools that name it
/// work.
pub fn provider_config_usage_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let reference = |fields: &[&str], required: &[&str]| {
        let properties: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .map(|f| ((*f).to_owned(), serde_json::json!({"type": "string"})))
            .collect();
        serde_json::json!({"type": "object", "properties": properties, "required": required})
    };
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("providerconfigusages.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": "ProviderConfigUsage", "listKind": "ProviderConfigUsageList",
                "plural": "providerconfigusages", "singular": "providerconfigusage",
                "categories": ["crossplane", "provider", "kubernetes"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "additionalPrinterColumns": [
                    {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    {"name": "CONFIG-NAME", "type": "string", "jsonPath": ".providerConfigRef.name"},
                    {"name": "RESOURCE-KIND", "type": "string", "jsonPath": ".resourceRef.kind"},
                    {"name": "RESOURCE-NAME", "type": "string", "jsonPath": ".resourceRef.name"},
                ],
                "schema": {"openAPIV3Schema": {
                    "description": "A ProviderConfigUsage records that a resource uses a ProviderConfig or ClusterProviderConfig (upstream's kind; this provider writes none).",
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "providerConfigRef": reference(&["kind", "name"], &["kind", "name"]),
                        "resourceRef": reference(&["apiVersion", "kind", "name", "uid"], &["apiVersion", "kind", "name"]),
                    },
                    "required": ["providerConfigRef", "resourceRef"],
                }},
            }],
        },
    });
    #[allow(clippy::expect_used)] // a literal above: a test reads it
    serde_json::from_value(crd).expect("the ProviderConfigUsage CRD literal is a CRD")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn upstreams_namespaced_object_reads_with_its_defaults() {
        let yaml = r#"
apiVersion: kubernetes.m.crossplane.io/v1alpha1
kind: Object
metadata: {name: foo, namespace: team-a}
spec:
  references:
  - dependsOn: {name: bar}
  writeConnectionSecretToRef: {name: creds}
  forProvider:
    manifest: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}
"#;
        let o: Object = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(o.spec.management_policies, vec![ManagementAction::All]);
        assert_eq!(
            o.spec.provider_config_ref,
            ProviderConfigReference {
                kind: ProviderConfigKind::ClusterProviderConfig,
                name: "default".to_owned()
            }
        );
        let depends = o.spec.references[0].depends_on.as_ref().unwrap();
        assert_eq!(depends.api_version, API_VERSION);
        assert_eq!(depends.namespace, None);
    }

    #[test]
    fn the_usage_crd_is_upstreams_shape() {
        let crd = provider_config_usage_crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        assert_eq!(
            schema["openAPIV3Schema"]["required"],
            serde_json::json!(["providerConfigRef", "resourceRef"])
        );
    }
}
