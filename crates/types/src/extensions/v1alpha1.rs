//! `extensions.crossplane.io/v1alpha1`: ExtensionRequest and Extension
//! (seed 001, Stacks).

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, TypedReference, conditions_schema, opaque_object_schema};

/// Desired state of an ExtensionRequest.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "An ExtensionRequest asks the package manager to install a Stack, named either by its package or by a CRD it owns.",
    group = "extensions.crossplane.io",
    version = "v1alpha1",
    kind = "ExtensionRequest",
    namespaced,
    status = "ExtensionRequestStatus",
    shortname = "extreq",
    category = "crossplane",
    printcolumn = r#"{"name":"PACKAGE","type":"string","jsonPath":".spec.package"}"#,
    printcolumn = r#"{"name":"CRD","type":"string","jsonPath":".spec.crd"}"#,
    printcolumn = r#"{"name":"READY","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"EXTENSION","type":"string","jsonPath":".status.extensionRecord.name"}"#,
    printcolumn = r#"{"name":"SOURCE","type":"string","jsonPath":".spec.source","priority":1}"#,
    printcolumn = r#"{"name":"MESSAGE","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].message","priority":1}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.package) != has(self.crd)",
    "message": "set exactly one of spec.package (e.g. redis:v0.1.0) or spec.crd (e.g. redisclusters.cache.crossplane.io/v1alpha1)"
}]))]
pub struct ExtensionRequestSpec {
    /// Source is the registry (host[:port][/path]) to find the package in,
    /// e.g. registry.crossplane.io. Defaults to the package manager's
    /// --default-registry. An ImageConfig whose prefix matches it may read
    /// it from a mirror, with a pull Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Package to install, as a repository under the source and a tag (for
    /// example redis:v0.1.0). Without a tag, the highest semver tag is
    /// installed (once; it is not followed afterwards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// CRD whose owning package to install, as <plural>.<group>/<version>
    /// (for example redisclusters.cache.crossplane.io/v1alpha1). The source
    /// registry is searched for the stack that owns it; if it is installed
    /// already, the request points at the Extension that owns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crd: Option<String>,
}

/// Observed state of an ExtensionRequest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionRequestStatus {
    /// Conditions of the request: Ready once the Stack is installed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ExtensionRecord is the Extension created for the installed Stack (in
    /// the request's namespace, or the one that already owned the CRD
    /// asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_record: Option<TypedReference>,
}

/// Desired state of an Extension.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    doc = "An Extension records an installed Stack: its metadata, the CRDs it owns and depends on, its controller and the permissions that controller needs.",
    group = "extensions.crossplane.io",
    version = "v1alpha1",
    kind = "Extension",
    namespaced,
    status = "ExtensionStatus",
    shortname = "ext",
    category = "crossplane",
    printcolumn = r#"{"name":"VERSION","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"READY","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"RBAC","type":"string","jsonPath":".status.conditions[?(@.type=='RBACReady')].status"}"#,
    printcolumn = r#"{"name":"CONTROLLER","type":"string","jsonPath":".spec.controller.deployment.name"}"#,
    printcolumn = r#"{"name":"TITLE","type":"string","jsonPath":".spec.title","priority":1}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionSpec {
    /// CRDs this Stack owns and depends on.
    #[serde(
        default,
        rename = "customresourcedefinitions",
        skip_serializing_if = "Option::is_none"
    )]
    pub custom_resource_definitions: Option<CrdRefs>,
    /// Human readable title of the Stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Markdown description of the Stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Version of the Stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Icons of the Stack.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
    /// Maintainers of the Stack.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintainers: Vec<Contributor>,
    /// Owners of the Stack.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<Contributor>,
    /// Human readable company name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub company: Option<String>,
    /// Keywords that describe the Stack and help search indexing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    /// Links to more information about the Stack.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    /// License of the Stack, as an SPDX name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// Controller is the implementation of the Stack run in the control
    /// cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<ControllerSpec>,
    /// Permissions the Stack's controller needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionsSpec>,
}

/// CRDs a Stack owns and depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrdRefs {
    /// CRDs this Stack defines; by convention bundled in the same package.
    #[serde(default)]
    pub owns: Vec<CrdRef>,
    /// CRDs this Stack requires; they drive dependency resolution.
    #[serde(default)]
    pub depends_on: Vec<CrdRef>,
}

/// A CRD named by kind and apiVersion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrdRef {
    /// Kind of the CRD's resources.
    pub kind: String,
    /// APIVersion (group/version) of the CRD's resources.
    pub api_version: String,
}

impl CrdRef {
    /// Its apiVersion as (group, version): `v1` alone is the core group
    /// `""`, as in any apiVersion.
    pub fn group_version(&self) -> (&str, &str) {
        self.api_version
            .split_once('/')
            .unwrap_or(("", &self.api_version))
    }
}

/// `Kind (apiVersion)`, as conditions name a reference.
impl std::fmt::Display for CrdRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.kind, self.api_version)
    }
}

/// An icon.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Icon {
    /// Base64 encoded image data.
    #[serde(default)]
    pub base64data: String,
    /// Media type of the image, for example image/png.
    #[serde(default)]
    pub mediatype: String,
}

/// A person.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Contributor {
    /// Name of the person.
    #[serde(default)]
    pub name: String,
    /// Email of the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

/// A link.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Link {
    /// What the link points to.
    #[serde(default)]
    pub description: String,
    /// The URL.
    pub url: String,
}

/// How a Stack's controller runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControllerSpec {
    /// Deployment that runs the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<ControllerDeployment>,
}

/// A Deployment that runs a Stack's controller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControllerDeployment {
    /// Name of the Deployment.
    pub name: String,
    /// Spec of the Deployment (an apps/v1 DeploymentSpec).
    #[schemars(schema_with = "opaque_object_schema")]
    pub spec: serde_json::Value,
}

/// Permissions a Stack's controller needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PermissionsSpec {
    /// RBAC policy rules granted to the controller's service account.
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
}

/// Observed state of an Extension.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionStatus {
    /// Conditions of the Extension.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

crate::conditioned!(ExtensionRequest => ExtensionRequestStatus, Extension => ExtensionStatus);

/// On a CRD: the Extension (`namespace/name`) that owns it. Written by the
/// package-manager only on CRDs a stack installed (or that its Extension
/// already owned); the rbac-manager grants an Extension rights on a kind it
/// `owns` only when that kind's CRD names it here.
pub const OWNER_ANNOTATION: &str = "extensions.crossplane.io/owner";
/// On what the package-manager runs for an Extension (its controller
/// Deployment and ServiceAccount): the Extension's name.
pub const EXTENSION_LABEL: &str = "extensions.crossplane.io/extension";

impl Extension {
    /// The ServiceAccount the Extension's controller runs as: the name its
    /// pod template gives (`serviceAccountName`), else the Extension's own
    /// name. It is always one the package-manager created for this
    /// Extension (controlled by it); an existing ServiceAccount of that name
    /// that is not is a conflict, and the rbac-manager binds the role only
    /// to one this Extension controls. `None` without a controller.
    pub fn controller_service_account(&self) -> Option<String> {
        let d = self.spec.controller.as_ref()?.deployment.as_ref()?;
        let named = d
            .spec
            .pointer("/template/spec/serviceAccountName")
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty());
        Some(match named {
            Some(n) => n.to_owned(),
            None => self.metadata.name.clone().unwrap_or_default(),
        })
    }
}
