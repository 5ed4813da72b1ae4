//! Both Object versions answer for every Object: `v1alpha1` (the design's
//! shape) and `v1alpha2` (upstream's, stored), converted by the
//! object-provider's own webhook, with nothing lost either way.

use super::*;
use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, PostParams};

/// Objects written at v1alpha1 and read back at both versions.
const MANY: usize = 1000;

/// The `i`th of a variety of v1alpha1 specs: every management policy, both
/// deletion policies, both kinds of reference, every readiness policy.
fn varied(i: usize, ns: &str) -> Value {
    let policies = ["Default", "ObserveCreateUpdate", "ObserveDelete", "Observe"];
    let readiness = ["SuccessfulCreate", "DeriveFromObject", "AllTrue"];
    let reference = if i.is_multiple_of(2) {
        json!({"fromObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "source",
            "namespace": ns, "fieldPath": "data.color"},
            "toFieldPath": format!("spec.forProvider.manifest.data.k{i}")})
    } else {
        json!({"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object",
            "name": format!("other-{i}")}})
    };
    json!({
        "managementPolicy": policies[i % 4],
        "deletionPolicy": if i.is_multiple_of(3) { "Orphan" } else { "Delete" },
        "references": [reference],
        "readiness": {"policy": readiness[i % 3]},
    })
}

#[tokio::test]
async fn a_thousand_objects_written_at_v1alpha1_read_back_at_v1alpha2_and_again_unchanged() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "versions").await;
    let label = format!("e2e.crossplane-rs.io/versions={ns}");
    let written: Vec<Value> = (0..MANY)
        .map(|i| {
            let mut o = object(
                &format!("{ns}-{i}"),
                "remote",
                configmap(&format!("cm-{i}"), &ns, json!({})),
                varied(i, &ns),
            );
            // Paused: this test is about what the API server answers, not
            // about reconciling.
            let meta = json!({"name": format!("{ns}-{i}"),
                "labels": {"e2e.crossplane-rs.io/versions": ns},
                "annotations": {"crossplane.io/paused": "true"}});
            if let Some(o) = o.as_object_mut() {
                o.insert("metadata".into(), meta);
            }
            o
        })
        .collect();
    let v1 = Api::<DynamicObject>::all_with(client.clone(), &e2e::objects::at_version("v1alpha1"));
    let v2 = Api::<DynamicObject>::all_with(client.clone(), &e2e::objects::at_version("v1alpha2"));
    futures::stream::iter(written.iter())
        .map(|o| {
            let v1 = v1.clone();
            async move {
                let o: DynamicObject = serde_json::from_value(o.clone()).unwrap();
                v1.create(&PostParams::default(), &o).await.map(drop)
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
        .unwrap_or_else(|e| panic!("creating an Object at v1alpha1: {e}"));

    // At v1alpha2: upstream's shape.
    let listed = v2
        .list(&ListParams::default().labels(&label))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), MANY);
    for o in &listed.items {
        let i: usize = o.metadata.name.as_deref().unwrap()[ns.len() + 1..]
            .parse()
            .unwrap();
        let spec = &o.data["spec"];
        let policies = match (i % 4, i.is_multiple_of(3)) {
            (0, _) => json!(["*"]),
            (1, _) => json!(["Observe", "Create", "Update"]),
            (2, true) => json!(["Observe"]),
            (2, false) => json!(["Observe", "Delete"]),
            _ => json!(["Observe"]),
        };
        assert_eq!(spec["managementPolicies"], policies, "{i}: {spec}");
        assert!(spec.get("managementPolicy").is_none(), "{i}: {spec}");
        let r = &spec["references"][0];
        if i.is_multiple_of(2) {
            assert_eq!(r["patchesFrom"]["fieldPath"], "data.color", "{i}: {r}");
            assert_eq!(r["toFieldPath"], format!("data.k{i}"), "{i}: {r}");
        } else {
            assert_eq!(r["dependsOn"]["name"], format!("other-{i}"), "{i}: {r}");
        }
    }

    // At v1alpha1 again: what was written, field for field.
    let listed = v1
        .list(&ListParams::default().labels(&label))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), MANY);
    for o in &listed.items {
        let name = o.metadata.name.clone().unwrap();
        let i: usize = name[ns.len() + 1..].parse().unwrap();
        let wrote = &written[i];
        for (key, value) in wrote["spec"].as_object().unwrap() {
            assert_eq!(&o.data["spec"][key], value, "{name}: spec.{key}");
        }
        assert_eq!(
            o.metadata.annotations.as_ref().unwrap().len(),
            1,
            "{name}: only the paused annotation: {:?}",
            o.metadata.annotations
        );
    }
    v1.delete_collection(
        &kube::api::DeleteParams::default(),
        &ListParams::default().labels(&label),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn what_v1alpha1_cannot_say_survives_a_round_trip_through_it() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "v2-first").await;
    let name = format!("{ns}-cel");
    let v1 = Api::<DynamicObject>::all_with(client.clone(), &e2e::objects::at_version("v1alpha1"));
    let v2 = Api::<DynamicObject>::all_with(client.clone(), &e2e::objects::at_version("v1alpha2"));
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
        "metadata": {"name": name, "annotations": {"crossplane.io/paused": "true"}},
        "spec": {
            "managementPolicies": ["Observe", "Create"],
            "readiness": {"policy": "DeriveFromCelQuery", "celQuery": "object.data.color == 'blue'"},
            "watch": true,
            "providerConfigRef": {"name": "remote"},
            "forProvider": {"manifest": configmap("cel", &ns, json!({}))},
        }
    }))
    .unwrap();
    let created = v2.create(&PostParams::default(), &o).await.unwrap();
    // The provider has said it leaves the Object alone (and writes nothing
    // more): a read and a write back race nobody.
    wait(WAIT, &format!("Object {name} paused"), || async {
        let o = get_object(&client, &name).await?;
        let (_, reason, _) = cond(&o, "Synced")?;
        (reason == "ReconcilePaused").then_some(())
    })
    .await;
    let created = v2.get(&name).await.unwrap_or(created);
    // Read at v1alpha1 (the closest policy, the default readiness), and
    // written back whole at v1alpha1, as a v1alpha1 client would.
    let old = v1.get(&name).await.unwrap();
    assert_eq!(old.data["spec"]["managementPolicy"], "Observe");
    assert_eq!(old.data["spec"]["readiness"]["policy"], "SuccessfulCreate");
    v1.replace(&name, &PostParams::default(), &old)
        .await
        .unwrap();
    let again = v2.get(&name).await.unwrap();
    assert_eq!(again.data["spec"], created.data["spec"]);
    // A change through v1alpha1 wins over what it could not say.
    let mut changed = v1.get(&name).await.unwrap();
    changed.data["spec"]["managementPolicy"] = json!("Default");
    v1.replace(&name, &PostParams::default(), &changed)
        .await
        .unwrap();
    let now = v2.get(&name).await.unwrap();
    assert_eq!(now.data["spec"]["managementPolicies"], json!(["*"]));
    v2.delete(&name, &Default::default()).await.unwrap();
}

#[tokio::test]
async fn a_v1alpha1_reference_outside_the_manifest_is_refused_when_applied() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "outside").await;
    let body = object(
        &format!("{ns}-outside"),
        "remote",
        configmap("x", &ns, json!({})),
        json!({"references": [{"fromObject": {"apiVersion": "v1", "kind": "ConfigMap",
            "name": "c", "namespace": ns, "fieldPath": "data.a"}, "toFieldPath": "spec.cidrBlock"}]}),
    );
    let o: DynamicObject = serde_json::from_value(body).unwrap();
    let err = Api::<DynamicObject>::all_with(client, &e2e::objects::at_version("v1alpha1"))
        .create(&PostParams::default(), &o)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.references[0].toFieldPath \"spec.cidrBlock\" is outside the manifest"),
        "{err}"
    );
}
