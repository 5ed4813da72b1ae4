//! DeploymentRuntimeConfig, served at v1beta1 (stored) and v1alpha1 (the
//! seed's example uses it) with one schema; `None` conversion suffices.

/// Defines the DeploymentRuntimeConfig types for one API version.
macro_rules! deployment_runtime_config {
    ($version:literal) => {
        use kube::CustomResource;
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        use crate::common::opaque_object_schema;

/// Desired state of a DeploymentRuntimeConfig.
        #[derive(
            CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema,
        )]
#[kube(
    doc = "A DeploymentRuntimeConfig configures the Deployment, Service and ServiceAccount the package manager creates for a package runtime when it runs with --package-runtime=Deployment. Packages that name no runtime config use the one named \"default\".",
            group = "pkg.crossplane.io",
            version = $version,
            kind = "DeploymentRuntimeConfig",
            category = "crossplane",
            printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
        )]
        #[serde(rename_all = "camelCase")]
        pub struct DeploymentRuntimeConfigSpec {
            /// DeploymentTemplate is the template of the runtime Deployment:
            /// metadata and an apps/v1 DeploymentSpec. The package manager
            /// overlays the package's image, pull policy and pull secrets,
            /// the label selector, and any volumes, env vars and ports a
            /// runtime needs, into the container named 'package-runtime'.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(schema_with = "opaque_object_schema")]
            pub deployment_template: Option<serde_json::Value>,
            /// ServiceTemplate is the template of the runtime's Service.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(schema_with = "opaque_object_schema")]
            pub service_template: Option<serde_json::Value>,
            /// ServiceAccountTemplate is the template of the runtime's
            /// ServiceAccount; naming an existing one updates it.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(schema_with = "opaque_object_schema")]
            pub service_account_template: Option<serde_json::Value>,
        }
    };
}

/// `pkg.crossplane.io/v1beta1`, the storage version.
pub mod v1beta1 {
    deployment_runtime_config!("v1beta1");
}

/// `pkg.crossplane.io/v1alpha1`, served for the seed's example.
pub mod v1alpha1 {
    deployment_runtime_config!("v1alpha1");
}
