//! The package-manager with many Providers of many large CRDs: it knows
//! every CRD of the cluster, so what it keeps of each must be its name and
//! kind, not the CRD. Alone in its binary (its own installation of the six
//! controllers as pods from `deploy/`), so that the package-manager's
//! memory moves with this test's CRDs only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::json;

use e2e::packages::{apply, condition, get_json, kubectl, provider, provider_yaml, wait_blocking};
use e2e::shipped::{
    explain, idle_heap_bytes, package_dir, pod_of, resident_bytes, shipped, xpkg_push,
};

/// Providers per batch, CRDs per Provider and properties per large CRD
/// schema, each with a description (100: about 15 KiB of schema per CRD,
/// twice the budget per kind below, so a cache that kept the CRD fails;
/// generated providers' CRDs are 30 KiB and more, 200 properties).
/// `CROSSPLANE_RS_SCALE` set to `providers,crds,properties` runs it larger
/// (by hand: `10,500,5` is three batches of 10 Providers of 500 CRDs, most
/// of the time the API server's).
fn scale() -> (usize, usize, usize) {
    std::env::var("CROSSPLANE_RS_SCALE")
        .ok()
        .and_then(|s| {
            let n: Vec<usize> = s.split(',').filter_map(|n| n.trim().parse().ok()).collect();
            (n.len() == 3).then(|| (n[0], n[1], n[2]))
        })
        .unwrap_or((5, 100, 100))
}

/// A CRD of `group` with a schema of `properties` described fields.
fn crd(group: &str, kind: &str, properties: usize) -> (String, String) {
    let plural = format!("{}s", kind.to_lowercase());
    let properties: serde_json::Map<String, serde_json::Value> = (0..properties)
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

/// Pushes and installs `count` Providers of `crds_each` CRDs of
/// `properties` fields each; returns their names once every one is
/// Healthy.
fn install(batch: &str, count: usize, crds_each: usize, properties: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..count {
        let name = testenv::unique_name(&format!("{batch}{i}"));
        let group = format!("{name}.example.org");
        let crds: Vec<(String, String)> = (0..crds_each)
            .map(|k| crd(&group, &format!("Kind{k}"), properties))
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
            &format!("Provider {name} Healthy with its {crds_each} CRDs"),
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
    let (providers, crds_each, properties) = scale();
    let (pod, restarts) = pod_of("package-manager");
    let rss_start = resident_bytes("package-manager");
    let started = Instant::now();
    // What the package-manager holds once idle, after each of three
    // batches of as many Providers of as many CRDs: a first one (what it
    // sets up once, and what grows once with the number of objects it
    // knows), then one of CRDs whose schema is one field, then one of
    // large schemas. What each of the last two costs is what the
    // package-manager keeps per CRD (and per Provider, far less); the
    // cheaper of the two is the one in which no map doubled. They differ in
    // schema size only, so what the last costs more than the one before is
    // what is kept of a schema.
    let first = install("a", providers, crds_each, properties);
    let heap_first = idle_heap_bytes("package-manager");
    let plain = install("b", providers, crds_each, 1);
    let heap_plain = idle_heap_bytes("package-manager");
    let large = install("c", providers, crds_each, properties);
    let heap_large = idle_heap_bytes("package-manager");
    let rss_end = resident_bytes("package-manager");
    let crds = get_json(&["customresourcedefinitions"])
        .and_then(|l| l["items"].as_array().map(Vec::len))
        .unwrap_or(0);
    let mib = |b: i64| b as f64 / f64::from(1 << 20);
    let signed = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
    let plain_cost = signed(heap_plain) - signed(heap_first);
    let large_cost = signed(heap_large) - signed(heap_plain);
    let batch = (providers * crds_each).max(1) as i64;
    let per_crd = plain_cost.min(large_cost) / batch;
    let per_schema = (large_cost - plain_cost) / batch;
    eprintln!(
        "package-manager heap when idle: {:.2} MiB after {providers} Providers of {crds_each} CRDs; {:+.2} MiB for {providers} of {crds_each} of one field, {:+.2} MiB for {providers} of {crds_each} of {properties} fields: {per_crd} bytes per CRD, {per_schema} per large schema; RSS {:.1} MiB at start, {:.1} MiB at the end; {crds} CRDs in the cluster, {:?}",
        mib(signed(heap_first)),
        mib(plain_cost),
        mib(large_cost),
        mib(signed(rss_start)),
        mib(signed(rss_end)),
        started.elapsed()
    );
    assert!(crds >= 3 * providers * crds_each, "{crds} CRDs");
    // A managed kind costs the package-manager its CRD's name and kind,
    // its ManagedResourceDefinition's name, owners, state and conditions
    // (two caches), and two lines in its revision's status, not a copy of
    // either: a large schema here is 15 KiB. A heap profile shows the MRD
    // controller's cache entry, about 3.5 KiB, and a few hundred bytes in
    // each of four maps by name; with the maps' room to grow and what the
    // batch's Providers cost, a batch reads about 6.5 KiB per CRD. (Whole
    // MRD objects in two more caches, every revision's object list in the
    // Provider controller's, and oci-spec's regular expression compiled
    // per thread each cost more than the rest of this budget, and a
    // profile found each.)
    assert!(
        per_crd < 8192,
        "the package-manager keeps {per_crd} bytes per CRD installed ({plain_cost} bytes for {providers} Providers of {crds_each} CRDs of one field, {large_cost} for {providers} of {crds_each} of {properties} fields)",
    );
    assert!(
        per_schema < 4096,
        "the package-manager keeps {per_schema} bytes more per CRD of {properties} fields than of one: part of each schema ({plain_cost} bytes for {providers} Providers of {crds_each} CRDs of one field, {large_cost} for {providers} of {crds_each} of {properties} fields)",
    );
    assert_eq!(
        pod_of("package-manager"),
        (pod, restarts),
        "the package-manager restarted"
    );
    for name in first.iter().chain(&plain).chain(&large) {
        kubectl(&[
            "delete",
            "providers.pkg.crossplane.io",
            name,
            "--wait=false",
        ]);
    }
}
