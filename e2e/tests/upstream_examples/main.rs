//! provider-kubernetes' own examples (the `examples/` of the newest pinned
//! release in hack/versions.env, applied unchanged) do on crossplane-rs's
//! object-provider, running as a pod from deploy/, what they do on
//! upstream's provider, run side by side: the same conditions, the same
//! managed objects.
//!
//! Ours runs on the control cluster (the shipped installation). Upstream's
//! runs as a process with the second remote cluster as its control plane
//! (its CRDs are ours' names: the two cannot share an API server), with its
//! conversion webhook served on the host. Each file is applied to both;
//! `ProviderConfig`/`ClusterProviderConfig kubernetes-provider` (the
//! examples' own `config.yaml`, unchanged) names a kubeconfig Secret
//! `crossplane-system/cluster-config` that, on each side, reaches that
//! side's own cluster, as the examples expect (an Object observes the
//! ConfigMap its file creates with kubectl).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod collections;
mod sides;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use e2e::wait_blocking;
use serde_json::Value;

use sides::*;

/// The YAML documents of an example file.
fn documents(path: &Path) -> Vec<Value> {
    e2e::yaml_documents_of(
        &std::fs::read_to_string(path).unwrap(),
        &path.display().to_string(),
    )
}

/// An Object of a file: (resource for kubectl, namespace, name).
fn objects_of(docs: &[Value]) -> Vec<(String, Option<String>, String)> {
    docs.iter()
        .filter(|d| d["kind"] == "Object")
        .map(|d| {
            let group = d["apiVersion"]
                .as_str()
                .and_then(|v| v.split_once('/'))
                .map(|(g, _)| g.to_owned())
                .unwrap_or_default();
            (
                format!("objects.{group}"),
                d.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                d.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// An Object as one side has it now.
fn object_on(side: Side, (resource, ns, name): &(String, Option<String>, String)) -> Option<Value> {
    let mut args = vec![resource.as_str(), name.as_str()];
    if let Some(ns) = ns {
        args.extend(["-n", ns.as_str()]);
    }
    side.get_json(&args)
}

fn condition(o: &Value, t: &str) -> Option<String> {
    o.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

/// Where an Object has settled: Ready, or not Synced. (Synced, Ready).
fn settled(o: &Value) -> Option<(String, String)> {
    let synced = condition(o, "Synced")?;
    let ready = condition(o, "Ready").unwrap_or_else(|| "Unknown".to_owned());
    (ready == "True" || synced == "False").then_some((synced, ready))
}

/// The managed object an Object manages, as its side's cluster has it.
fn managed_on(side: Side, o: &Value) -> Option<Value> {
    let m = o.pointer("/spec/forProvider/manifest")?;
    let kind = m["kind"].as_str()?;
    let group = m["apiVersion"]
        .as_str()?
        .split_once('/')
        .map_or(String::new(), |(g, _)| format!(".{g}"));
    let name = m
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .or_else(|| o.pointer("/metadata/name").and_then(Value::as_str))?;
    let resource = format!("{}{group}", kind.to_lowercase());
    let ns = m
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .or_else(|| o.pointer("/metadata/namespace").and_then(Value::as_str));
    let mut args = vec![resource.as_str(), name];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    side.get_json(&args)
}

/// What of a managed object the comparison looks at: the fields a user
/// set (labels, data), not what each API server assigns (a Secret's
/// values, such as a service account token, are each cluster's own: its
/// keys are compared).
fn essence(live: &Value) -> Value {
    let data = match live["kind"].as_str() {
        Some("Secret") => live["data"]
            .as_object()
            .map(|d| d.keys().cloned().collect::<Vec<_>>())
            .map_or(Value::Null, Value::from),
        _ => live["data"].clone(),
    };
    serde_json::json!({
        "kind": live["kind"],
        "labels": live.pointer("/metadata/labels").cloned().unwrap_or(Value::Null),
        "data": data,
    })
}

/// Applies one example file to both sides, waits until every Object of it
/// has settled on both, and says how they differ (empty: they do not).
fn compare(file: &str) -> Vec<String> {
    let (ours, upstream) = (ours(), upstream());
    let path = examples().join(file);
    let docs = documents(&path);
    let objects = objects_of(&docs);
    let mut differences = Vec::new();
    // A namespace a file's objects are in but that it does not make
    // (`other-ns`) is made first on both sides, as the file expects.
    for ns in docs
        .iter()
        .filter_map(|d| d.pointer("/metadata/namespace").and_then(Value::as_str))
    {
        for side in [ours, upstream] {
            if side.get_json(&["namespace", ns]).is_none() {
                side.kubectl_ok(&["create", "namespace", ns]);
            }
        }
    }
    let applied: Vec<(bool, String)> = [ours, upstream]
        .iter()
        .map(|side| side.kubectl(&["apply", "-f", &path.to_string_lossy()]))
        .collect();
    let refused = applied[0].0 != applied[1].0;
    if refused {
        differences.push(format!(
            "{file}: kubectl apply: ours {:?}, upstream's {:?}",
            applied[0], applied[1]
        ));
    }
    for object in objects.iter().filter(|_| !refused) {
        let states = match on_both(
            &format!(
                "{file}: {} {} to settle alike on both sides",
                object.0, object.2
            ),
            |side| object_on(side, object).as_ref().and_then(settled),
        ) {
            Ok(state) => state,
            Err((mine, theirs)) => {
                differences.push(format!(
                    "{file}: Object {}: (Synced, Ready) ours {mine:?}, upstream's {theirs:?}",
                    object.2
                ));
                continue;
            }
        };
        if states.1 == "True" {
            let managed = on_both(
                &format!(
                    "{file}: {} {}'s managed object alike on both sides",
                    object.0, object.2
                ),
                |side| object_on(side, object).map(|o| managed_on(side, &o).map(|l| essence(&l))),
            );
            if let Err((mine, theirs)) = managed {
                differences.push(format!(
                    "{file}: Object {}: managed object ours {mine:?}, upstream's {theirs:?}",
                    object.2
                ));
            }
        }
    }
    if !refused {
        differences.extend(collections::compare_collections(file, &docs));
    }
    let path = path.to_string_lossy();
    let args = [
        "delete",
        "-f",
        &path,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=120s",
    ];
    // Ours must let go of every Object of the file.
    ours.kubectl_ok(&args);
    // Upstream's provider finalizes an Object only once 30 s have passed
    // since it created the managed object (crossplane-runtime's creation
    // grace period, "Waiting for external resource existence to be
    // confirmed"), so each file would wait half a minute for it: the
    // annotation that starts that clock is cleared before the delete.
    // The deletion is still upstream's own.
    for (resource, ns, name) in &objects {
        let mut args = vec![
            "annotate",
            resource.as_str(),
            name.as_str(),
            "crossplane.io/external-create-succeeded-",
        ];
        if let Some(ns) = ns {
            args.extend(["-n", ns.as_str()]);
        }
        let _ = upstream.kubectl(&args);
    }
    let (ok, text) = upstream.kubectl(&args);
    // Upstream's sometimes keeps a referenced Object past its referrer's
    // deletion (seen with namespaced dependsOn): not ours to judge, but
    // the next file reuses the names, so what it keeps is let go.
    if !ok {
        eprintln!(
            "{file}: upstream's provider did not finish deleting within 120s ({text}); its finalizers removed"
        );
        for (resource, ns, name) in &objects {
            let mut patch = vec![
                "patch",
                resource.as_str(),
                name.as_str(),
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ];
            if let Some(ns) = ns {
                patch.extend(["-n", ns.as_str()]);
            }
            let _ = upstream.kubectl(&patch);
        }
        upstream.kubectl_ok(&args);
    }
    differences
}

/// Every example file of `dir` (recursively), relative to examples/,
/// sorted; scripts (testhooks) are not examples.
fn example_files(dir: &str) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                out.push(
                    path.strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    let root = examples();
    let mut out = Vec::new();
    walk(&root, &root.join(dir), &mut out);
    out.sort();
    out
}

#[test]
fn upstreams_object_and_collection_examples_do_on_ours_what_they_do_on_upstreams() {
    plane();
    let mut files = example_files("cluster/object");
    files.extend(example_files("namespaced/object"));
    files.extend(example_files("cluster/collection"));
    files.extend(example_files("namespaced/collection"));
    assert!(files.len() >= 22, "the examples are there: {files:?}");
    let mut differences = Vec::new();
    for file in &files {
        let found = compare(file);
        eprintln!("{file}: {} differences", found.len());
        differences.extend(found);
    }
    assert!(
        differences.is_empty(),
        "ours and upstream's provider differ:\n{}",
        differences.join("\n")
    );
}

#[test]
fn upstreams_provider_configs_apply_and_cloud_identities_are_named_in_the_condition() {
    let ours = ours();
    let dir = examples();
    // The in-cluster configs: the provider's own identity, with the
    // opt-in component that lets it manage kinds in its own cluster, as
    // an operator would apply it.
    let injected = testenv::repo_root()
        .join("deploy/components/object-provider-injected-identity/clusterrole.yaml");
    ours.kubectl_ok(&["apply", "-f", &injected.to_string_lossy()]);
    for file in [
        "cluster/provider/config-in-cluster.yaml",
        "namespaced/provider/config-in-cluster.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        // Applied under another name, so that the examples running
        // meanwhile keep theirs.
        ours.apply_text(&text.replace("name: kubernetes-provider", "name: in-cluster-example"));
    }
    let probe = |name: &str, config: &str| {
        serde_json::json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
            "metadata": {"name": name},
            "spec": {"managementPolicies": ["Observe"], "providerConfigRef": {"name": config},
                "forProvider": {"manifest": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}}},
        })
        .to_string()
    };
    ours.apply_text(&probe("in-cluster-example-probe", "in-cluster-example"));
    // A namespaced Object on the namespaced in-cluster config (in
    // `default`, as the example has it): it manages its own namespace.
    let namespaced = serde_json::json!({
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object",
        "metadata": {"name": "in-cluster-example-probe", "namespace": "default"},
        "spec": {"providerConfigRef": {"kind": "ProviderConfig", "name": "in-cluster-example"},
            "forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "in-cluster-example-probe"}, "data": {"made": "here"}}}},
    });
    ours.apply_text(&namespaced.to_string());
    for (resource, ns) in [
        ("objects.kubernetes.crossplane.io", None),
        ("objects.kubernetes.m.crossplane.io", Some("default")),
    ] {
        let mut args = vec![resource, "in-cluster-example-probe"];
        args.extend(ns.map(|ns| ["-n", ns]).into_iter().flatten());
        wait_blocking(
            SETTLE,
            &format!("{resource} in-cluster-example-probe on the in-cluster config to be Ready"),
            || match ours.get_json(&args).as_ref().and_then(settled) {
                Some((s, r)) if s == "True" && r == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            },
            || {
                format!(
                    "{:?}",
                    ours.get_json(&args)
                        .and_then(|o| o.pointer("/status").cloned())
                )
            },
        );
        let mut delete = vec!["delete"];
        delete.extend(&args);
        delete.push("--wait=true");
        ours.kubectl_ok(&delete);
    }
    // The cloud identity configs: each applies, and an Object using it says
    // which identity type this provider does not exchange.
    let identities: Vec<String> = std::fs::read_dir(dir.join("cluster/provider"))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.starts_with("provider-config-with-").then_some(name)
        })
        .collect();
    assert!(identities.len() >= 4, "{identities:?}");
    for file in identities {
        let text = std::fs::read_to_string(dir.join("cluster/provider").join(&file)).unwrap();
        let config = format!("identity-{}", file.trim_end_matches(".yaml"));
        let text = text
            .replace("name: kubernetes-provider", &format!("name: {config}"))
            .replace("name: cluster-config", &format!("name: {config}"));
        let ty = e2e::yaml_documents_of(&text, &file)
            .iter()
            .find_map(|d| {
                d.pointer("/spec/identity/type")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .expect("an identity type");
        ours.apply_text(&text);
        let name = format!("{config}-probe");
        ours.apply_text(&probe(&name, &config));
        wait_blocking(
            SETTLE,
            &format!("Object {name} to name {ty} as not supported"),
            || {
                let o = ours.get_json(&["objects.kubernetes.crossplane.io", &name]);
                let message = o
                    .as_ref()
                    .and_then(|o| o.pointer("/status/conditions"))
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "Synced"))
                    .and_then(|c| c["message"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                if message.contains(&format!("identity.type {ty} is not supported")) {
                    Ok(())
                } else {
                    Err(message)
                }
            },
            String::new,
        );
        ours.kubectl_ok(&[
            "delete",
            "objects.kubernetes.crossplane.io",
            &name,
            "--wait=true",
        ]);
    }
}
