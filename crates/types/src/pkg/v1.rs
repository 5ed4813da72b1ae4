//! `pkg.crossplane.io/v1`: Provider and ProviderRevision (seed 004).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, LocalObjectReference, TypedReference, conditions_schema};

/// Desired state of a Provider.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A Provider installs a Crossplane provider package: its CRDs and a package runtime (by default a Deployment) configured by a runtime config.",
    group = "pkg.crossplane.io",
    version = "v1",
    kind = "Provider",
    status = "ProviderStatus",
    category = "crossplane",
    category = "pkg",
    printcolumn = r#"{"name":"INSTALLED","type":"string","jsonPath":".status.conditions[?(@.type=='Installed')].status"}"#,
    printcolumn = r#"{"name":"HEALTHY","type":"string","jsonPath":".status.conditions[?(@.type=='Healthy')].status"}"#,
    printcolumn = r#"{"name":"PACKAGE","type":"string","jsonPath":".spec.package"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSpec {
    /// Package is the OCI reference of the provider package, for example
    /// xpkg.upbound.io/crossplane-contrib/provider-example:v1.0.0.
    pub package: String,
    /// RevisionActivationPolicy: Automatic activates a new revision at once;
    /// Manual waits for the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_activation_policy: Option<RevisionActivationPolicy>,
    /// RevisionHistoryLimit is how many inactive revisions are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i64>,
    /// PackagePullPolicy: Always, IfNotPresent or Never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_pull_policy: Option<String>,
    /// PackagePullSecrets used to pull the package.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub package_pull_secrets: Vec<LocalObjectReference>,
    /// SkipDependencyResolution installs the package without its
    /// dependencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_dependency_resolution: Option<bool>,
    /// IgnoreCrossplaneConstraints installs the package whatever Crossplane
    /// version it asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_crossplane_constraints: Option<bool>,
    /// RuntimeConfigRef names the runtime config of the package runtime.
    /// Defaults to the DeploymentRuntimeConfig named "default".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_config_ref: Option<RuntimeConfigReference>,
    /// ControllerConfigRef names a deprecated ControllerConfig; used only when
    /// the package manager runs with --enable-runtime-config=false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_config_ref: Option<LocalObjectReference>,
    /// CommonLabels are put on the revision and on everything the package
    /// manager makes for it: its CRDs, the runtime's ServiceAccount,
    /// Deployment (and pods) and Service, and the rbac-manager's
    /// ClusterRoles. Editing them updates those objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_labels: Option<std::collections::BTreeMap<String, String>>,
    /// CommonAnnotations are put on the same objects as commonLabels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// A reference to a runtime config, which may be of any kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeConfigReference {
    /// APIVersion of the runtime config. Defaults to pkg.crossplane.io/v1beta1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the runtime config. Defaults to DeploymentRuntimeConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the runtime config.
    pub name: String,
}

/// When a new package revision becomes active.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RevisionActivationPolicy {
    /// Activate new revisions automatically.
    Automatic,
    /// Wait for a user to activate new revisions.
    Manual,
}

/// Observed state of a Provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    /// Conditions of the Provider: Installed and Healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// CurrentRevision is the name of the active ProviderRevision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// CurrentIdentifier is the package reference of the active revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_identifier: Option<String>,
    /// ResolvedPackage is where the package is read from: spec.package
    /// after the ImageConfigs' rewrites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_package: Option<String>,
    /// AppliedImageConfigRefs are the ImageConfigs applied to the package,
    /// and what each did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_image_config_refs: Vec<super::v1beta1::ImageConfigRef>,
}

/// Desired state of a ProviderRevision.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "A ProviderRevision is one revision of a Provider's package: the CRDs it delivers and, with --package-runtime=Deployment, its runtime.",
    group = "pkg.crossplane.io",
    version = "v1",
    kind = "ProviderRevision",
    status = "ProviderRevisionStatus",
    category = "crossplane",
    category = "pkgrev",
    printcolumn = r#"{"name":"HEALTHY","type":"string","jsonPath":".status.conditions[?(@.type=='Healthy')].status"}"#,
    printcolumn = r#"{"name":"REVISION","type":"integer","jsonPath":".spec.revision"}"#,
    printcolumn = r#"{"name":"IMAGE","type":"string","jsonPath":".spec.image"}"#,
    printcolumn = r#"{"name":"STATE","type":"string","jsonPath":".spec.desiredState"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRevisionSpec {
    /// DesiredState of the revision: Active or Inactive.
    pub desired_state: RevisionState,
    /// Package is the package reference this revision was made from.
    pub package: String,
    /// Image is the runtime image: the package's `spec.controller.image`
    /// (a v1-style package), else the package image itself when it
    /// carries a runtime (built with an embedded runtime image). None for
    /// a package of CRDs alone, which runs nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Revision number; higher is newer.
    pub revision: i64,
    /// PackagePullPolicy: Always, IfNotPresent or Never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_pull_policy: Option<String>,
    /// PackagePullSecrets used to pull the package.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub package_pull_secrets: Vec<LocalObjectReference>,
    /// SkipDependencyResolution installs the package without its
    /// dependencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_dependency_resolution: Option<bool>,
    /// IgnoreCrossplaneConstraints installs the package whatever Crossplane
    /// version it asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_crossplane_constraints: Option<bool>,
    /// RuntimeConfigRef names the runtime config of the package runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_config_ref: Option<RuntimeConfigReference>,
    /// ControllerConfigRef names a deprecated ControllerConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_config_ref: Option<LocalObjectReference>,
    /// CommonLabels (copied from the Provider) are put on the revision and everything the package
    /// manager makes for it: its CRDs, the runtime's ServiceAccount,
    /// Deployment (and pods) and Service, and the rbac-manager's
    /// ClusterRoles. Editing them updates those objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_labels: Option<std::collections::BTreeMap<String, String>>,
    /// CommonAnnotations are put on the same objects as commonLabels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// Whether a revision is the active one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RevisionState {
    /// The revision's runtime runs and it controls its CRDs.
    Active,
    /// The revision is kept but does not run.
    #[default]
    Inactive,
}

/// Observed state of a ProviderRevision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRevisionStatus {
    /// Conditions of the revision: Healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ObjectRefs are the objects (CRDs) this revision delivered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_refs: Vec<TypedReference>,
    /// PermissionRequests are the extra RBAC rules the package asks for its
    /// runtime (`spec.controller.permissionRequests` of its meta), written
    /// by the package-manager; the rbac-manager grants them only within
    /// its allow-list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "policy_rules_schema")]
    pub permission_requests: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
    /// FoundDependencies is how many dependencies were found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_dependencies: Option<i64>,
    /// InstalledDependencies is how many dependencies are installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_dependencies: Option<i64>,
    /// InvalidDependencies is how many dependencies are invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_dependencies: Option<i64>,
    /// ResolvedPackage is where the package is read from: spec.package
    /// after the ImageConfigs' rewrites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_package: Option<String>,
    /// ResolvedImage is the runtime image the Deployment runs, after the
    /// ImageConfigs' rewrites (spec.image as written otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_image: Option<String>,
    /// AppliedImageConfigRefs are the ImageConfigs applied to the package
    /// and to the runtime image, and what each did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_image_config_refs: Vec<super::v1beta1::ImageConfigRef>,
}

crate::conditioned!(Provider => ProviderStatus, ProviderRevision => ProviderRevisionStatus);

impl ProviderRevision {
    /// The names of the CRDs the revision delivered (its status' object
    /// references).
    pub fn crd_names(&self) -> Vec<String> {
        self.names_of("CustomResourceDefinition")
    }

    /// The names of the ManagedResourceDefinitions the revision delivered
    /// (its managed-resource kinds; the CRDs of the Active ones are in
    /// [`Self::crd_names`] too).
    pub fn mrd_names(&self) -> Vec<String> {
        self.names_of("ManagedResourceDefinition")
    }

    fn names_of(&self, kind: &str) -> Vec<String> {
        self.status
            .iter()
            .flat_map(|s| &s.object_refs)
            .filter(|o| o.kind == kind)
            .map(|o| o.name.clone())
            .collect()
    }
}

fn policy_rules_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let strings = serde_json::json!({"type": "array", "items": {"type": "string"}});
    schemars::json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["verbs"],
            "properties": {
                "apiGroups": strings,
                "nonResourceURLs": strings,
                "resourceNames": strings,
                "resources": strings,
                "verbs": strings,
            },
        },
    })
}
