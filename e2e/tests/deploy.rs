//! deploy/ for real: the project's image built by crates/oci and pushed to
//! testenv's registry, deploy/ rendered with the local-node overlay and
//! applied to the control cluster, whose node then runs the six controllers
//! as pods under their shipped ServiceAccounts and RBAC.

use std::{collections::BTreeMap, process::Command};

use serde_json::Value;

const BINARIES: [&str; 6] = [
    "scheduler",
    "application-controller",
    "resource-controller",
    "object-provider",
    "package-manager",
    "rbac-manager",
];

/// The image the local-node overlay names (see its kustomization.yaml).
const OVERLAY_IMAGE: &str = "registry.crossplane-rs.test/crossplane-rs:dev";

/// `kubectl kustomize <dir>` (dir relative to the repository root), as JSON
/// documents keyed by apiVersion, kind, namespace and name.
fn render(dir: &str) -> BTreeMap<String, Value> {
    let kubectl = testenv::bin_dir().unwrap().join("kubectl");
    let path = testenv::repo_root().join(dir);
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "kubectl kustomize {dir} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("kubectl kustomize {dir} rendered invalid YAML: {e}"));
    let mut by_key = BTreeMap::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let key = format!(
            "{} {} {}/{}",
            doc["apiVersion"].as_str().unwrap_or_default(),
            doc["kind"].as_str().unwrap_or_default(),
            doc["metadata"]["namespace"].as_str().unwrap_or_default(),
            doc["metadata"]["name"].as_str().unwrap_or_default(),
        );
        assert!(
            by_key.insert(key.clone(), doc).is_none(),
            "{dir} renders {key} twice"
        );
    }
    by_key
}

/// The images of every container of a workload's pod template.
fn images(doc: &Value) -> Vec<&str> {
    let spec = &doc["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec[k].as_array())
        .flatten()
        .map(|c| c["image"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn overlay_changes_only_the_image() {
    let shipped = render("deploy");
    let local = render("deploy/overlays/local-node");
    assert_eq!(
        shipped.keys().collect::<Vec<_>>(),
        local.keys().collect::<Vec<_>>(),
        "the local-node overlay renders other objects than deploy/"
    );
    let mut deployments = 0;
    for (key, want) in &shipped {
        let got = &local[key];
        if want["kind"] == "Deployment" {
            deployments += 1;
            assert_eq!(images(want), ["crossplane-rs:latest"], "{key} in deploy/");
            assert_eq!(images(got), [OVERLAY_IMAGE], "{key} in the overlay");
            let mut got = got.clone();
            for c in got["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap()
            {
                c["image"] = Value::from("crossplane-rs:latest");
            }
            assert_eq!(&got, want, "{key} differs beyond its image");
        } else {
            assert_eq!(got, want, "the overlay changes {key}");
        }
    }
    assert_eq!(deployments, BINARIES.len());
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ] {
        let n = local.values().filter(|d| d["kind"] == kind).count();
        assert!(n >= BINARIES.len(), "only {n} {kind}s rendered");
    }
}
