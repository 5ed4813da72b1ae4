#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const V1: &str = "kubernetes.crossplane.io/v1alpha1";
const V2: &str = "kubernetes.crossplane.io/v1alpha2";

fn object(api_version: &str, spec: Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "Object",
        "metadata": {"name": "csv-kong", "labels": {"team": "a"}},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn manifest() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}, "data": {"a": "1"}})
}

fn stash_of(o: &Value) -> Option<&Value> {
    o.pointer("/metadata/annotations")?.get(STASH_ANNOTATION)
}

#[test]
fn the_seeds_object_reads_as_upstreams_and_back_with_no_stash() {
    let v1 = object(
        V1,
        json!({
            "references": [
                {"dependsOn": {"apiVersion": V1, "kind": "Object", "name": "sub-kong"}},
                {"fromObject": {"apiVersion": V1, "kind": "Object", "name": "sub-kong",
                    "fieldPath": "status.atProvider.manifest.status.currentCSV"},
                 "toFieldPath": "spec.forProvider.manifest.metadata.name"},
            ],
            "managementPolicy": "ObserveDelete",
            "deletionPolicy": "Delete",
            "providerConfigRef": {"name": "default"},
            "forProvider": {"manifest": manifest()},
        }),
    );
    let v2 = convert(&v1, V2).unwrap();
    assert_eq!(v2["apiVersion"], V2);
    assert_eq!(
        v2["spec"]["managementPolicies"],
        json!(["Observe", "Delete"])
    );
    assert_eq!(
        v2["spec"]["references"][1],
        json!({"patchesFrom": {"apiVersion": V1, "kind": "Object", "name": "sub-kong",
            "fieldPath": "status.atProvider.manifest.status.currentCSV"},
         "toFieldPath": "metadata.name"})
    );
    assert_eq!(v2["spec"]["forProvider"]["manifest"], manifest());
    assert_eq!(v2["status"], v1["status"]);
    assert_eq!(v2["metadata"], v1["metadata"], "nothing to keep: no stash");
    assert_eq!(convert(&v2, V1).unwrap(), v1);
}

#[test]
fn what_v1alpha1_cannot_say_comes_back_when_read_at_v1alpha2_again() {
    let v2 = object(
        V2,
        json!({
            "managementPolicies": ["Observe", "Create", "LateInitialize"],
            "readiness": {"policy": "DeriveFromCelQuery", "celQuery": "object.status.ready == true"},
            "watch": true,
            "references": [{"patchesFrom": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c",
                "namespace": "default", "fieldPath": "data.a"}}],
            "forProvider": {"manifest": manifest()},
        }),
    );
    let v1 = convert(&v2, V1).unwrap();
    // The nearest v1alpha1 can say, and the rest kept aside.
    assert_eq!(v1["spec"]["managementPolicy"], "Observe");
    assert_eq!(
        v1["spec"]["readiness"],
        json!({"policy": "SuccessfulCreate"})
    );
    assert_eq!(
        v1["spec"]["references"][0]["toFieldPath"], "spec.forProvider.manifest.data.a",
        "upstream's default: the same path in the manifest"
    );
    assert!(stash_of(&v1).is_some());
    assert_eq!(convert(&v1, V2).unwrap(), v2);
    // An edit to the manifest through v1alpha1 keeps the rest.
    let mut edited = v1.clone();
    edited["spec"]["forProvider"]["manifest"]["data"]["a"] = json!("2");
    let back = convert(&edited, V2).unwrap();
    assert_eq!(
        back["spec"]["readiness"]["celQuery"],
        "object.status.ready == true"
    );
    assert_eq!(back["spec"]["forProvider"]["manifest"]["data"]["a"], "2");
    // A policy changed through v1alpha1 wins over the kept list.
    let mut changed = v1;
    changed["spec"]["managementPolicy"] = json!("Default");
    let back = convert(&changed, V2).unwrap();
    assert_eq!(back["spec"]["managementPolicies"], json!(["*"]));
    assert!(back["spec"].get("watch").is_none());
    assert!(stash_of(&back).is_none());
}

#[test]
fn another_group_or_version_is_refused() {
    let o = object(V1, json!({}));
    assert!(convert(&o, "kubernetes.crossplane.io/v1").is_err());
    assert!(convert(&object("example.org/v1alpha1", json!({})), V2).is_err());
    assert_eq!(convert(&o, V1).unwrap(), o);
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,8}"
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-z][a-zA-Z]{0,6}", 1..4).prop_map(|p| p.join("."))
}

fn target() -> impl Strategy<Value = Value> {
    (name(), prop::option::of(name()), any::<bool>()).prop_map(|(name, ns, object)| {
        let mut t = if object {
            json!({"apiVersion": V1, "kind": "Object", "name": name})
        } else {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name})
        };
        if let Some(ns) = ns {
            t["namespace"] = json!(ns);
        }
        t
    })
}

fn v1_reference() -> impl Strategy<Value = Value> {
    prop_oneof![
        target().prop_map(|t| json!({"dependsOn": t})),
        // v1alpha2 cannot say a path outside the manifest (refused below).
        (target(), path(), path()).prop_map(|(mut t, from, to)| {
            t["fieldPath"] = json!(from);
            json!({"fromObject": t, "toFieldPath": format!("spec.forProvider.manifest.{to}")})
        }),
    ]
}

fn v1_spec() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "Default",
            "ObserveCreateUpdate",
            "ObserveDelete",
            "Observe",
        ]),
        prop::sample::select(vec!["Delete", "Orphan"]),
        prop::collection::vec(v1_reference(), 0..4),
        prop::option::of(prop::sample::select(vec![
            "SuccessfulCreate",
            "DeriveFromObject",
            "AllTrue",
        ])),
        prop::option::of((name(), path(), name())),
    )
        .prop_map(|(policy, deletion, refs, readiness, detail)| {
            let mut spec = json!({
                "managementPolicy": policy,
                "deletionPolicy": deletion,
                "providerConfigRef": {"name": "default"},
                "forProvider": {"manifest": manifest()},
            });
            if !refs.is_empty() {
                spec["references"] = json!(refs);
            }
            if let Some(r) = readiness {
                spec["readiness"] = json!({"policy": r});
            }
            if let Some((name, field, key)) = detail {
                spec["connectionDetails"] = json!([{"apiVersion": "v1", "kind": "Secret",
                    "name": name, "namespace": "default", "fieldPath": field,
                    "toConnectionSecretKey": key}]);
            }
            spec
        })
}

fn v2_reference() -> impl Strategy<Value = Value> {
    prop_oneof![
        (name(), prop::option::of(name())).prop_map(|(name, ns)| {
            // apiVersion and kind default to an Object.
            let mut d = json!({"name": name});
            if let Some(ns) = ns {
                d["namespace"] = json!(ns);
            }
            json!({"dependsOn": d})
        }),
        (target(), path(), prop::option::of(path())).prop_map(|(mut t, from, to)| {
            t["fieldPath"] = json!(from);
            let mut r = json!({"patchesFrom": t});
            if let Some(to) = to {
                r["toFieldPath"] = json!(to);
            }
            r
        }),
    ]
}

fn v2_spec() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(
            prop::sample::select(vec![
                "*",
                "Observe",
                "Create",
                "Update",
                "Delete",
                "LateInitialize",
            ]),
            0..4,
        ),
        prop::collection::vec(v2_reference(), 0..4),
        prop::option::of((
            prop::sample::select(vec![
                "SuccessfulCreate",
                "DeriveFromObject",
                "AllTrue",
                "DeriveFromCelQuery",
            ]),
            "[a-z. =]{1,20}",
        )),
        any::<bool>(),
        prop::option::of((name(), prop::option::of(path()))),
    )
        .prop_map(|(policies, refs, readiness, watch, detail)| {
            let mut spec = json!({
                "managementPolicies": policies,
                "deletionPolicy": "Delete",
                "providerConfigRef": {"name": "default"},
                "forProvider": {"manifest": manifest()},
                "watch": watch,
            });
            if !refs.is_empty() {
                spec["references"] = json!(refs);
            }
            if let Some((policy, query)) = readiness {
                spec["readiness"] = json!({"policy": policy});
                if policy == "DeriveFromCelQuery" {
                    spec["readiness"]["celQuery"] = json!(query);
                }
            }
            if let Some((name, field)) = detail {
                let mut d = json!({"apiVersion": "v1", "kind": "Secret", "name": name,
                    "namespace": "default", "uid": "u-1", "toConnectionSecretKey": "k"});
                if let Some(f) = field {
                    d["fieldPath"] = json!(f);
                }
                spec["connectionDetails"] = json!([d]);
            }
            spec
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn every_v1alpha1_object_reads_back_unchanged_through_v1alpha2(spec in v1_spec()) {
        let v1 = object(V1, spec);
        let v2 = convert(&v1, V2).unwrap();
        prop_assert_eq!(&v2["spec"]["forProvider"], &v1["spec"]["forProvider"]);
        prop_assert_eq!(convert(&v2, V1).unwrap(), v1);
    }

    #[test]
    fn every_v1alpha2_object_reads_back_unchanged_through_v1alpha1(spec in v2_spec()) {
        let v2 = object(V2, spec);
        let v1 = convert(&v2, V1).unwrap();
        let policy = v1["spec"]["managementPolicy"].as_str().unwrap_or_default();
        prop_assert!(["Default", "ObserveCreateUpdate", "ObserveDelete", "Observe"].contains(&policy));
        // `watch: false` is the API server's default: it may come back as
        // the server fills it in again, and needs no stash.
        let defaulted = |mut o: Value| {
            if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut)
                && spec.get("watch") == Some(&Value::Bool(false))
            {
                spec.remove("watch");
            }
            o
        };
        prop_assert_eq!(defaulted(convert(&v1, V2).unwrap()), defaulted(v2));
    }
}

#[test]
fn a_v1alpha1_reference_writing_outside_the_manifest_is_refused_naming_it() {
    let o = json!({"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
        "metadata": {"name": "o"},
        "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap"}},
            "references": [{"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c",
                "fieldPath": "data.a"}, "toFieldPath": "spec.cidrBlock"}]}});
    let e = convert(&o, "kubernetes.crossplane.io/v1alpha2").unwrap_err();
    assert!(
        e.to_string().starts_with(
            "spec.references[0].toFieldPath \"spec.cidrBlock\" is outside the manifest"
        ),
        "{e}"
    );
}

#[test]
fn an_orphaning_observe_delete_only_observes_in_v1alpha2() {
    let o = |deletion: &str| {
        json!({"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
            "metadata": {"name": "o"},
            "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap"}},
                "managementPolicy": "ObserveDelete", "deletionPolicy": deletion}})
    };
    let to = "kubernetes.crossplane.io/v1alpha2";
    let orphan = convert(&o("Orphan"), to).unwrap();
    assert_eq!(orphan["spec"]["managementPolicies"], json!(["Observe"]));
    let delete = convert(&o("Delete"), to).unwrap();
    assert_eq!(
        delete["spec"]["managementPolicies"],
        json!(["Observe", "Delete"])
    );
    let back = convert(&orphan, "kubernetes.crossplane.io/v1alpha1").unwrap();
    assert_eq!(back, o("Orphan"));
}

#[test]
fn a_stored_default_v1alpha1_cannot_say_needs_no_stash() {
    let stored = json!({"apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
        "metadata": {"name": "o"},
        "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap"}},
            "managementPolicies": ["*"], "watch": false}});
    let v1 = convert(&stored, "kubernetes.crossplane.io/v1alpha1").unwrap();
    assert!(v1["metadata"].get("annotations").is_none(), "{v1}");
}

#[test]
fn a_stash_still_restores_once_the_api_server_filled_in_v1alpha2_defaults() {
    let v1 = json!({"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
        "metadata": {"name": "o"},
        "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap"}},
            "managementPolicy": "ObserveDelete", "deletionPolicy": "Orphan"}});
    let mut stored = convert(&v1, "kubernetes.crossplane.io/v1alpha2").unwrap();
    let spec = stored["spec"].as_object_mut().unwrap();
    spec.insert("watch".into(), json!(false));
    spec.insert("readiness".into(), json!({"policy": "SuccessfulCreate"}));
    if let Some(fp) = spec.get_mut("forProvider").and_then(Value::as_object_mut) {
        fp.insert("deletionPropagationPolicy".into(), json!("Background"));
    }
    assert_eq!(
        convert(&stored, "kubernetes.crossplane.io/v1alpha1").unwrap(),
        v1
    );
}

#[test]
fn a_stash_too_big_for_annotations_is_not_kept_and_the_conversion_still_answers() {
    let query = "true || ".repeat(64 * 1024) + "true";
    let v2 = json!({"apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
        "metadata": {"name": "o"},
        "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap"}},
            "readiness": {"policy": "DeriveFromCelQuery", "celQuery": query}}});
    let v1 = convert(&v2, "kubernetes.crossplane.io/v1alpha1").unwrap();
    assert!(
        v1["metadata"]
            .get("annotations")
            .is_none_or(|a| a.get(STASH_ANNOTATION).is_none())
    );
    assert_eq!(v1["spec"]["readiness"]["policy"], "SuccessfulCreate");
}

#[test]
fn upstreams_v1alpha1_patches_from_reads_as_v1alpha2_and_back_unchanged() {
    // provider-kubernetes' deprecated v1alpha1 examples write patchesFrom
    // with a toFieldPath inside the manifest, as v1alpha2 does.
    let v1 = object(
        V1,
        json!({
            "references": [{"patchesFrom": {"apiVersion": "v1", "kind": "ConfigMap", "name": "bar",
                "namespace": "default", "fieldPath": "data.sample-key"},
                "toFieldPath": "data.sample-key-from-bar"}],
            "managementPolicy": "Default",
            "providerConfigRef": {"name": "kubernetes-provider"},
            "forProvider": {"manifest": manifest()},
        }),
    );
    let v2 = convert(&v1, V2).unwrap();
    assert_eq!(
        v2["spec"]["references"][0]["toFieldPath"],
        "data.sample-key-from-bar"
    );
    assert_eq!(v2["spec"]["references"][0]["patchesFrom"]["name"], "bar");
    let back = convert(&v2, V1).unwrap();
    assert_eq!(back["spec"], v1["spec"]);
    assert_eq!(stash_of(&back), None);
}
