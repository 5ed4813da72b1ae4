//! The benchmark's Provider package: N managed-resource CRDs of one group,
//! each with a schema the size of a generated (upjet) provider's, its meta
//! declaring SafeStart; built as `xpkg build` builds it and pushed to the
//! run's registry.

use std::path::Path;

use serde_json::{Map, Value, json};

/// The group of every kind of the package.
pub const GROUP: &str = "bench-mrd.example.org";
/// The Provider (and its package's meta) name.
pub const PROVIDER: &str = "provider-bench-mrd";

/// Kind `i`: Kind000, Kind001, ...
pub fn kind(i: usize) -> String {
    format!("Kind{i:03}")
}

/// The CRD (and MRD) name of kind `i`: `kind000s.bench-mrd.example.org`.
pub fn crd_name(i: usize) -> String {
    format!("{}s.{GROUP}", kind(i).to_lowercase())
}

/// A description of exactly 100 characters for field `field` of `kind`, as a
/// generated provider copies one from the cloud API's documentation.
fn description(kind: &str, field: &str) -> String {
    let text = format!(
        "{field} of the {kind}: what the cloud API's reference says of this parameter, its format and its default value, in a sentence."
    );
    text.chars().take(100).collect()
}

/// `count` string properties, each described.
fn properties(kind: &str, prefix: &str, count: usize) -> Map<String, Value> {
    (0..count)
        .map(|j| {
            let field = format!("{prefix}{j:03}");
            let d = description(kind, &field);
            (field, json!({"type": "string", "description": d}))
        })
        .collect()
}

/// Kind `i`'s CRD, shaped as an upjet managed resource: cluster scoped,
/// status subresource, the managed-resource printer columns,
/// `spec.forProvider` of `spec_fields` described strings, `status.atProvider`
/// of `status_fields`, and the usual conditions.
pub fn crd(i: usize, spec_fields: usize, status_fields: usize) -> Value {
    let kind = kind(i);
    let plural = format!("{}s", kind.to_lowercase());
    let column = |name: &str, path: &str| json!({"name": name, "type": "string", "jsonPath": path});
    let condition = json!({
        "type": "object",
        "required": ["lastTransitionTime", "reason", "status", "type"],
        "properties": {
            "lastTransitionTime": {"type": "string", "format": "date-time", "description": "LastTransitionTime is the last time this condition transitioned from one status to another."},
            "message": {"type": "string", "description": "A Message containing details about this condition's last transition from one status to another, if any."},
            "observedGeneration": {"type": "integer", "format": "int64", "description": "ObservedGeneration represents the .metadata.generation that the condition was set based upon."},
            "reason": {"type": "string", "description": "A Reason for this condition's last transition from one status to another."},
            "status": {"type": "string", "description": "Status of this condition; is it currently True, False, or Unknown?"},
            "type": {"type": "string", "description": "Type of this condition. At most one of each condition type may apply to a resource at any point in time."},
        },
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                "singular": kind.to_lowercase(), "categories": ["crossplane", "managed", "bench"],
            },
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    column("SYNCED", ".status.conditions[?(@.type=='Synced')].status"),
                    column("READY", ".status.conditions[?(@.type=='Ready')].status"),
                    column("EXTERNAL-NAME", ".metadata.annotations.crossplane\\.io/external-name"),
                    {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": description(&kind, &kind),
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
                        "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
                        "metadata": {"type": "object"},
                        "spec": {
                            "type": "object",
                            "required": ["forProvider"],
                            "properties": {
                                "deletionPolicy": {"type": "string", "enum": ["Orphan", "Delete"], "default": "Delete", "description": description(&kind, "deletionPolicy")},
                                "forProvider": {"type": "object", "properties": properties(&kind, "parameter", spec_fields)},
                                "providerConfigRef": {
                                    "type": "object", "required": ["name"], "default": {"name": "default"},
                                    "properties": {"name": {"type": "string", "description": description(&kind, "name")}},
                                },
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "atProvider": {"type": "object", "properties": properties(&kind, "observation", status_fields)},
                                "conditions": {
                                    "type": "array", "items": condition,
                                    "x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map",
                                },
                            },
                        },
                    },
                }},
            }],
        },
    })
}

/// What was pushed: the reference the Provider names, its digest, and the
/// CRDs' sizes.
pub struct Pushed {
    pub reference: String,
    pub digest: String,
    pub crd_bytes_total: usize,
    pub crd_bytes_average: f64,
    /// The package's one layer, compressed (as pushed) and as a tar.
    pub layer_bytes: u64,
    pub layer_uncompressed_bytes: u64,
}

/// Writes the package (N kinds, `properties` described fields each, half
/// under spec.forProvider and half under status.atProvider; meta with
/// `capabilities: [SafeStart]`) under `work`, builds it as `xpkg build`
/// does and pushes it to `registry`.
pub async fn push(
    registry: &testenv::registry::Registry,
    work: &Path,
    kinds: usize,
    properties: usize,
) -> Pushed {
    let spec_fields = properties / 2;
    let crds: Vec<(String, String)> = (0..kinds)
        .map(|i| {
            let text = crd(i, spec_fields, properties - spec_fields).to_string();
            (format!("{GROUP}_{}.yaml", kind(i).to_lowercase()), text)
        })
        .collect();
    let crd_bytes_total: usize = crds.iter().map(|(_, t)| t.len()).sum();
    let dir = e2e::artifacts::package_dir_in(
        work,
        PROVIDER,
        "v1.0.0",
        &e2e::artifacts::crds_of(&crds),
        "  capabilities:\n  - SafeStart\n",
    );
    let image = oci::xpkg::build(&dir, None).expect("the package builds");
    let layer = image.layers().first().expect("the package's layer");
    let (layer_bytes, layer_uncompressed_bytes) = (layer.size(), layer.uncompressed_size());
    let reference = format!("{}/bench/{PROVIDER}:v1.0.0", registry.address);
    let pushed = image
        .push(
            &reference,
            &oci::Auth::Anonymous,
            &oci::Tls::Ca(registry.ca_pem.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("push {reference}: {e}"));
    Pushed {
        reference,
        digest: pushed.digest.as_str().to_owned(),
        crd_bytes_total,
        crd_bytes_average: crd_bytes_total as f64 / kinds.max(1) as f64,
        layer_bytes,
        layer_uncompressed_bytes,
    }
}

/// The Provider installing the package (the default revision policy).
pub fn provider_yaml(reference: &str) -> String {
    format!(
        "apiVersion: pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {PROVIDER}\nspec:\n  package: {reference}\n"
    )
}

/// A ManagedResourceActivationPolicy `name` activating `patterns`.
pub fn policy_yaml(name: &str, patterns: &[&str]) -> String {
    let list: String = patterns.iter().map(|p| format!("  - \"{p}\"\n")).collect();
    format!(
        "apiVersion: apiextensions.crossplane.io/v1alpha1\nkind: ManagedResourceActivationPolicy\nmetadata:\n  name: {name}\nspec:\n  activate:\n{list}"
    )
}
