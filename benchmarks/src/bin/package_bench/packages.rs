//! The packages both package managers install, built once by upstream's
//! CLI (`crossplane xpkg build --embed-runtime-image-tarball`, then `xpkg
//! push`) and pushed once: provider-kubernetes at its newest pinned
//! release (its own package directory and binary), and generated Providers
//! of N managed-resource CRDs whose runtime is the node's small pause
//! program, at two versions (v2 adds a served version to every CRD, which
//! becomes the storage version; v1alpha1 stays served).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// A generated Provider: its name (the Provider object's too) and group.
pub struct Generated {
    pub name: String,
    pub group: String,
    /// Package references of v1 and v2.
    pub v1: String,
    pub v2: String,
    /// Its CRDs' names.
    pub crds: Vec<String>,
    /// Described fields per CRD.
    pub properties: usize,
}

impl Generated {
    /// Its CRDs at v1, as its package holds them.
    pub fn v1_crds(&self) -> Vec<Value> {
        (0..self.crds.len())
            .map(|k| crd(&self.group, &kind(k), self.properties, 1))
            .collect()
    }
}

/// The group of generated Provider `i`.
pub fn group(i: usize) -> String {
    format!("p{i:03}.bench.example.org")
}

fn kind(k: usize) -> String {
    format!("Kind{k:03}")
}

/// A managed-resource CRD with `properties` described fields under
/// spec.forProvider (about what a generated provider's kind carries), at
/// v1alpha1, or at v1alpha1 and v1beta1 (storage) for `version` 2.
fn crd(group: &str, kind: &str, properties: usize, version: u32) -> Value {
    let plural = format!("{}s", kind.to_lowercase());
    let fields: serde_json::Map<String, Value> = (0..properties)
        .map(|i| {
            (
                format!("field{i}"),
                json!({"type": "string", "description": format!("Parameter {i} of {kind}, as a generated provider describes one of its cloud API's fields in about a hundred characters.")}),
            )
        })
        .collect();
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "forProvider": {"type": "object", "properties": fields},
            "providerConfigRef": {"type": "object", "properties": {"name": {"type": "string"}}},
            "managementPolicies": {"type": "array", "items": {"type": "string"}},
        }},
        "status": {"type": "object", "properties": {
            "atProvider": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        }},
    }}});
    let version_of = |name: &str, storage: bool| {
        json!({
            "name": name, "served": true, "storage": storage,
            "schema": schema.clone(),
            "subresources": {"status": {}},
        })
    };
    let versions = if version == 1 {
        vec![version_of("v1alpha1", true)]
    } else {
        vec![version_of("v1alpha1", false), version_of("v1beta1", true)]
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {
                "kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                "listKind": format!("{kind}List"), "categories": ["crossplane", "managed"],
            },
            "versions": versions,
        },
    })
}

/// Writes a package directory for upstream's CLI: `crossplane.yaml` and
/// `crds/`.
fn package_root(work: &Path, name: &str, version: u32, crds: &[Value]) -> PathBuf {
    let root = work.join(format!("{name}-v{version}"));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("crds")).unwrap();
    std::fs::write(
        root.join("crossplane.yaml"),
        format!(
            "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\n  annotations:\n    meta.crossplane.io/version: v{version}\n"
        ),
    )
    .unwrap();
    for c in crds {
        let file = c["metadata"]["name"].as_str().unwrap_or("crd").to_owned();
        std::fs::write(
            root.join("crds").join(format!("{file}.yaml")),
            c.to_string(),
        )
        .unwrap();
    }
    root
}

/// Builds and pushes `count` generated Providers of `crds_each` CRDs at
/// v1 and v2, with the pause program as their runtime.
pub fn generated(
    registry: &testenv::registry::Registry,
    ca_file: &Path,
    work: &Path,
    count: usize,
    crds_each: usize,
    properties: usize,
) -> Vec<Generated> {
    let pause = testenv::bin_dir()
        .expect("CROSSPLANE_RS_BIN (hack/build-binaries.sh)")
        .join("pause");
    let archive =
        testenv::image::binary_image_archive(work, "bench/provider-runtime:v1", &pause).unwrap();
    (0..count)
        .map(|i| {
            let name = format!("provider-bench-{i:03}");
            let group = group(i);
            let mut refs = Vec::new();
            let mut names = Vec::new();
            for version in [1, 2] {
                let crds: Vec<Value> = (0..crds_each)
                    .map(|k| crd(&group, &kind(k), properties, version))
                    .collect();
                names = crds
                    .iter()
                    .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_owned))
                    .collect();
                let root = package_root(work, &name, version, &crds);
                let reference = format!("{}/bench/{name}:v{version}", registry.address);
                e2e::upstream::crank_build_and_push(&root, &archive, &reference, ca_file, work);
                let _ = std::fs::remove_dir_all(&root);
                refs.push(reference);
            }
            if (i + 1) % 10 == 0 || i + 1 == count {
                eprintln!(
                    "package-bench: {} of {count} generated Providers pushed",
                    i + 1
                );
            }
            Generated {
                name,
                group,
                v1: refs[0].clone(),
                v2: refs[1].clone(),
                crds: names,
                properties,
            }
        })
        .collect()
}

/// provider-kubernetes at its newest pinned release, as upstream builds
/// it; answers its reference and its CRDs' names.
pub fn provider_kubernetes(
    registry: &testenv::registry::Registry,
    ca_file: &Path,
    work: &Path,
) -> (String, Vec<String>) {
    let version = e2e::upstream::provider_kubernetes_versions()
        .pop()
        .expect("a provider-kubernetes version");
    let reference = format!(
        "{}/crossplane-contrib/provider-kubernetes:{version}",
        registry.address
    );
    e2e::upstream::build_and_push(&version, &reference, ca_file, work);
    let crds_dir = testenv::bin_dir()
        .expect("CROSSPLANE_RS_BIN")
        .join(format!("provider-kubernetes-{version}-package"))
        .join("crds");
    let mut crds: Vec<String> = std::fs::read_dir(&crds_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", crds_dir.display()))
        .flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            let doc: Value = serde_saphyr::from_str(&text).ok()?;
            doc["metadata"]["name"].as_str().map(str::to_owned)
        })
        .collect();
    crds.sort();
    (reference, crds)
}

/// A Provider object for `package`.
pub fn provider(name: &str, package: &str) -> Value {
    json!({
        "apiVersion": "pkg.crossplane.io/v1", "kind": "Provider",
        "metadata": {"name": name},
        "spec": {"package": package},
    })
}
