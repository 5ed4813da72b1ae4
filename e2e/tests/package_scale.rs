//! The package-manager with many Providers of many large CRDs: it keeps
//! every CRD of the cluster in a cache, so what it keeps of each must not
//! be the CRD itself. Alone in its binary (its own installation of the six
//! controllers as pods from `deploy/`), so that the package-manager's
//! memory moves with this test's CRDs only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::json;

use e2e::packages::{apply, condition, get_json, kubectl, provider, provider_yaml, wait_blocking};
use e2e::shipped::{explain, package_dir, pod_of, resident_bytes, shipped, xpkg_push};

/// Providers per batch (two batches), CRDs per Provider and properties
/// per CRD schema, each with a description (200: about 30 KiB of schema
/// per CRD, as generated providers' CRDs are). `CROSSPLANE_RS_SCALE` set to
/// `providers,crds,properties` runs it larger (by hand: 20 Providers of 500
/// CRDs is `10,500,20`).
fn scale() -> (usize, usize, usize) {
    std::env::var("CROSSPLANE_RS_SCALE")
        .ok()
        .and_then(|s| {
            let n: Vec<usize> = s.split(',').filter_map(|n| n.trim().parse().ok()).collect();
            (n.len() == 3).then(|| (n[0], n[1], n[2]))
        })
        .unwrap_or((5, 100, 200))
}

/// A CRD of `group` with a schema of [`scale`]'s described fields.
fn large_crd(group: &str, kind: &str) -> (String, String) {
    let plural = format!("{}s", kind.to_lowercase());
    let properties: serde_json::Map<String, serde_json::Value> = (0..scale().2)
        .map(|i| {
            (
                format!("field{i}"),
                json!({"type": "string", "description": format!("Field {i} of {kind}: what a generated provider says of one of the cloud API's parameters, about a hundred characters long.")}),
            )
        })
        .collect();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": properties},
                }}},
            }],
        },
    });
    (format!("{group}_{plural}.yaml"), crd.to_string())
}

/// Pushes and installs `count` Providers of [`scale`]'s large CRDs each;
/// returns their names once every one is Healthy.
fn install(batch: &str, count: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..count {
        let name = testenv::unique_name(&format!("{batch}{i}"));
        let group = format!("{name}.example.org");
        let crds: Vec<(String, String)> = (0..scale().1)
            .map(|k| large_crd(&group, &format!("Kind{k}")))
            .collect();
        let dir = package_dir(&format!("provider-{name}"), "", &crds);
        let reference = format!("{}/scale/provider-{name}:v1", shipped().registry.address);
        xpkg_push(&dir, &reference, Some(&shipped().pause_image));
        apply(&provider_yaml(&name, &reference, ""));
        names.push(name);
    }
    for name in &names {
        wait_blocking(
            Duration::from_secs(600),
            &format!("Provider {name} Healthy with its {} CRDs", scale().1),
            || {
                let p = provider(name)?;
                (condition(&p, "Healthy")?.0 == "True").then_some(())
            },
            explain,
        );
    }
    names
}

#[test]
fn providers_of_many_large_crds_install_and_the_package_manager_does_not_grow_with_them() {
    shipped();
    let (providers, crds_each, _) = scale();
    let (pod, restarts) = pod_of("package-manager");
    let start = resident_bytes("package-manager");
    let started = Instant::now();
    let first = install("a", providers);
    let half = resident_bytes("package-manager");
    let halfway = started.elapsed();
    let second = install("b", providers);
    let full = resident_bytes("package-manager");
    let crds = get_json(&["customresourcedefinitions"])
        .and_then(|l| l["items"].as_array().map(Vec::len))
        .unwrap_or(0);
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "package-manager RSS: {:.1} MiB at start, {:.1} MiB with {} Providers of {crds_each} CRDs ({halfway:?}), {:.1} MiB with {} ({:?}); {crds} CRDs in the cluster",
        mib(start),
        mib(half),
        first.len(),
        mib(full),
        first.len() + second.len(),
        started.elapsed()
    );
    assert!(crds >= 2 * providers * crds_each, "{crds} CRDs");
    // The second half of the CRDs costs the package-manager nothing it
    // keeps: what it caches of a CRD is its names, not its schema (about
    // 30 KiB each, 15 MiB for the second half as text, several times that
    // as objects: kept whole, they took it past its memory limit).
    assert!(
        full < half + 16 * (1 << 20),
        "RSS grew from {half} to {full} bytes with {} more CRDs",
        providers * crds_each
    );
    assert_eq!(
        pod_of("package-manager"),
        (pod, restarts),
        "the package-manager restarted"
    );
    for name in first.iter().chain(&second) {
        kubectl(&[
            "delete",
            "providers.pkg.crossplane.io",
            name,
            "--wait=false",
        ]);
    }
}
