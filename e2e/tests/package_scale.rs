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

/// Providers per batch (three batches: of all the CRDs, of a tenth, of
/// all), CRDs per Provider and properties per CRD schema, each with a
/// description (100: about 15 KiB of schema per CRD, twice the budget per
/// kind below, so a cache that kept the CRD fails; generated providers'
/// CRDs are 30 KiB and more, 200 properties). `CROSSPLANE_RS_SCALE` set to
/// `providers,crds,properties` runs it larger (by hand: `10,500,5` is 20
/// Providers of 500 CRDs and 10 of 50, about 22 minutes, most of it the
/// API server's).
fn scale() -> (usize, usize, usize) {
    std::env::var("CROSSPLANE_RS_SCALE")
        .ok()
        .and_then(|s| {
            let n: Vec<usize> = s.split(',').filter_map(|n| n.trim().parse().ok()).collect();
            (n.len() == 3).then(|| (n[0], n[1], n[2]))
        })
        .unwrap_or((5, 100, 100))
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

/// Pushes and installs `count` Providers of `crds_each` large CRDs each;
/// returns their names once every one is Healthy.
fn install(batch: &str, count: usize, crds_each: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..count {
        let name = testenv::unique_name(&format!("{batch}{i}"));
        let group = format!("{name}.example.org");
        let crds: Vec<(String, String)> = (0..crds_each)
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
    let (providers, crds_each, _) = scale();
    let few = (crds_each / 10).max(1);
    let (pod, restarts) = pod_of("package-manager");
    let rss_start = resident_bytes("package-manager");
    let started = Instant::now();
    // What the package-manager holds once idle, after each batch: a first
    // batch (what it sets up once, whatever the CRDs), then as many
    // Providers of a tenth of the CRDs, then as many of all of them. The
    // last two differ in CRDs only, so what the last costs more than the
    // one before is what the package-manager keeps per CRD.
    let first = install("a", providers, crds_each);
    let heap_first = idle_heap_bytes("package-manager");
    let small = install("b", providers, few);
    let heap_small = idle_heap_bytes("package-manager");
    let large = install("c", providers, crds_each);
    let heap_large = idle_heap_bytes("package-manager");
    let rss_end = resident_bytes("package-manager");
    let crds = get_json(&["customresourcedefinitions"])
        .and_then(|l| l["items"].as_array().map(Vec::len))
        .unwrap_or(0);
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let small_cost = heap_small.saturating_sub(heap_first);
    let large_cost = heap_large.saturating_sub(heap_small);
    let more_crds = (providers * (crds_each - few)).max(1);
    let per_crd = large_cost.saturating_sub(small_cost) / more_crds as u64;
    eprintln!(
        "package-manager heap when idle: {:.2} MiB after {providers} Providers of {crds_each} CRDs, +{:.2} MiB for {providers} of {few}, +{:.2} MiB for {providers} of {crds_each}: {per_crd} bytes per CRD; RSS {:.1} MiB at start, {:.1} MiB at the end; {crds} CRDs in the cluster, {:?}",
        mib(heap_first),
        mib(small_cost),
        mib(large_cost),
        mib(rss_start),
        mib(rss_end),
        started.elapsed()
    );
    assert!(crds >= providers * (2 * crds_each + few), "{crds} CRDs");
    // A managed kind costs the package-manager its CRD's name and kind,
    // its ManagedResourceDefinition's name, owners, state and conditions
    // (two caches), and two lines in its revision's status, not a copy of
    // either: a schema here is 15 KiB. (Before MRDs a kind cost under
    // 2 KiB; with them 2.9 KiB, then 7 to 11 KiB once the revision
    // remembered what it saw of each CRD and MRD, whatever the schema's
    // size: a jemalloc heap profile showed whole MRD objects in two more
    // caches and every revision's object list in the Provider
    // controller's. Those now keep a name and a fact per MRD
    // (runtime::controller::summaries) and no object lists: 2.0 to 4.4
    // KiB then. CI read up to 12.5 KiB under load: the references the
    // package-manager parsed went through oci-spec's regular expression,
    // 8 MiB compiled plus a search cache of up to a MiB for each thread
    // that parsed at once, so a batch cost megabytes more or less by how
    // busy it had been. References are read by hand now (oci::reference);
    // a profile then shows the MRD controller's cache entry, about 3.5
    // KiB, and a few hundred bytes in each of four maps by name.)
    assert!(
        per_crd < 8192,
        "the package-manager keeps {per_crd} bytes per CRD installed ({} bytes for {providers} Providers of {few} CRDs, {} for {providers} of {crds_each})",
        small_cost,
        large_cost
    );
    assert_eq!(
        pod_of("package-manager"),
        (pod, restarts),
        "the package-manager restarted"
    );
    for name in first.iter().chain(&small).chain(&large) {
        kubectl(&[
            "delete",
            "providers.pkg.crossplane.io",
            name,
            "--wait=false",
        ]);
    }
}
