//! ObservedObjectCollections: one observe-only Object per matching object
//! in the remote cluster, following the matches as they come and go, and
//! gone with the collection; a namespaced collection's Objects in its own
//! namespace, looking only there with the provider's own identity.

use super::*;
use types::kubernetes::{
    v1alpha1::{COLLECTION_MEMBERSHIP_LABEL, ObservedObjectCollection},
    v1alpha2::{ManagementAction, Object as ObjectV2},
};
use types::kubernetes_m::v1alpha1 as m;

/// Generous: a hundred Objects are made and each observes its ConfigMap.
const MANY: Duration = Duration::from_secs(180);

/// Creates the collection `name` of the ConfigMaps in `ns` labelled
/// `selected: <ns>`, through the ProviderConfig `config`.
async fn create_collection(client: &Client, name: &str, ns: &str, config: &str) {
    let c: ObservedObjectCollection = serde_json::from_value(json!({
        "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "ObservedObjectCollection",
        "metadata": {"name": name},
        "spec": {
            "observeObjects": {
                "apiVersion": "v1", "kind": "ConfigMap", "namespace": ns,
                "selector": {"matchLabels": {"selected": ns}},
            },
            "providerConfigRef": {"name": config},
            "objectTemplate": {"metadata": {"labels": {"team": "blue"}, "annotations": {"note": "observed"}}},
        },
    }))
    .unwrap();
    Api::<ObservedObjectCollection>::all(client.clone())
        .create(&PostParams::default(), &c)
        .await
        .unwrap_or_else(|e| panic!("creating ObservedObjectCollection {name}: {e}"));
}

/// The Objects carrying the collection's membership label (read at
/// v1alpha2, the stored version).
async fn members(client: &Client, collection: &str) -> Vec<ObjectV2> {
    let selector = format!("{COLLECTION_MEMBERSHIP_LABEL}={collection}");
    Api::<ObjectV2>::all(client.clone())
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
}

/// The ConfigMap names the Objects observe.
fn observed(objects: &[ObjectV2]) -> std::collections::BTreeSet<String> {
    objects
        .iter()
        .filter_map(|o| o.spec.for_provider.manifest.pointer("/metadata/name"))
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// The condition `t` of a collection of either kind: (status, message).
fn condition_of<C: types::common::Conditioned>(c: &C, t: &str) -> Option<(String, String)> {
    let (status, _, message) = condition_in(C::conditions(c.status()?), t)?;
    Some((status, message))
}

fn is_true(o: &ObjectV2, t: &str) -> bool {
    o.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    })
}

#[tokio::test]
async fn a_collection_keeps_one_observe_only_object_per_matching_configmap() {
    let (client, remote, _dump, ns) = begin(&PROVIDER, "coll").await;
    let cms = Api::<ConfigMap>::namespaced(remote.clone(), &ns);
    let names: Vec<String> = (0..100).map(|i| format!("cm-{i:03}")).collect();
    for name in &names {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"selected": ns}},
            "data": {"n": name},
        }))
        .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    // Not selected: same namespace, other label.
    let other: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "other", "labels": {"selected": "no"}}}),
    )
    .unwrap();
    cms.create(&PostParams::default(), &other).await.unwrap();

    let name = testenv::unique_name("coll");
    create_collection(&client, &name, &ns, "remote").await;

    let all: std::collections::BTreeSet<String> = names.iter().cloned().collect();
    let made = wait(MANY, "100 Ready observe-only Objects", || async {
        let objects = members(&client, &name).await;
        let ready = objects
            .iter()
            .filter(|o| is_true(o, "Ready") && is_true(o, "Synced"))
            .count();
        if objects.len() == 100 && ready == 100 && observed(&objects) == all {
            Ok(objects)
        } else {
            Err(format!("{} Objects, {ready} Ready", objects.len()))
        }
    })
    .await;
    for o in &made {
        assert_eq!(o.spec.management_policies, [ManagementAction::Observe]);
        assert_eq!(o.spec.provider_config_ref.name, "remote");
        assert_eq!(o.labels().get("team").map(String::as_str), Some("blue"));
        assert_eq!(
            o.annotations().get("note").map(String::as_str),
            Some("observed")
        );
        let owners = o.owner_references();
        assert!(
            owners.iter().any(|r| r.kind == "ObservedObjectCollection"
                && r.name == name
                && r.controller == Some(true)),
            "{owners:?}"
        );
    }

    let collections = Api::<ObservedObjectCollection>::all(client.clone());
    let c = wait(WAIT, "the collection Synced and Ready", || async {
        let c = collections.get_opt(&name).await.ok()??;
        (condition_of(&c, "Synced")?.0 == "True" && condition_of(&c, "Ready")?.0 == "True")
            .then_some(c)
    })
    .await;
    let status = c.status.unwrap_or_default();
    assert_eq!(
        status.membership_label.get(COLLECTION_MEMBERSHIP_LABEL),
        Some(&name),
        "{:?}",
        status.membership_label
    );
    assert_eq!(status.observed_generation, c.metadata.generation);

    // Ten matches go: exactly their ten Objects go.
    let (gone, kept) = names.split_at(10);
    for cm in gone {
        cms.delete(cm, &DeleteParams::default()).await.unwrap();
    }
    let kept: std::collections::BTreeSet<String> = kept.iter().cloned().collect();
    wait(
        MANY,
        "the 10 Objects of deleted ConfigMaps to go",
        || async {
            let objects = members(&client, &name).await;
            let now = observed(&objects);
            if objects.len() == 90 && now == kept {
                Ok(())
            } else {
                Err(format!("{} Objects", objects.len()))
            }
        },
    )
    .await;
    let survivors: std::collections::BTreeSet<Option<String>> = made
        .iter()
        .filter(|o| {
            o.spec
                .for_provider
                .manifest
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_some_and(|n| kept.contains(n))
        })
        .map(|o| o.metadata.uid.clone())
        .collect();
    let now: std::collections::BTreeSet<Option<String>> = members(&client, &name)
        .await
        .into_iter()
        .map(|o| o.metadata.uid)
        .collect();
    assert_eq!(now, survivors, "the other 90 Objects are the same ones");

    // The collection goes: the garbage collector takes its Objects; the
    // ConfigMaps they observed stay.
    collections
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait(MANY, "the collection's Objects to go with it", || async {
        let left = members(&client, &name).await.len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} Objects left"))
        }
    })
    .await;
    assert!(remote_cm(&remote, &ns, &names[50]).await.is_some());
}

#[tokio::test]
async fn a_collection_whose_provider_config_does_not_exist_says_so() {
    let (client, _, _dump, ns) = begin(&PROVIDER, "collpc").await;
    let name = testenv::unique_name("collpc");
    let missing = format!("missing-{ns}");
    create_collection(&client, &name, &ns, &missing).await;
    let collections = Api::<ObservedObjectCollection>::all(client.clone());
    let needle = format!("ProviderConfig {missing} not found");
    let msg = wait(
        WAIT,
        "the collection Synced=False naming its ProviderConfig",
        || async {
            let c = collections.get_opt(&name).await.ok()??;
            let (status, msg) = condition_of(&c, "Synced")?;
            (status == "False" && msg.contains(&needle)).then_some(msg)
        },
    )
    .await;
    assert!(msg.contains("spec.providerConfigRef.name"), "{msg}");
    let event = wait(
        WAIT,
        "a Warning event naming the ProviderConfig",
        || async {
            events_of(&client, &name)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("ProviderConfigNotFound"))
        },
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.message.unwrap_or_default().contains(&missing));
    assert!(members(&client, &name).await.is_empty());
    collections
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A namespaced collection `name` in `ns` of the ConfigMaps labelled
/// `selected: <label>` (in `namespace` if given), through the
/// ClusterProviderConfig `config`.
async fn create_namespaced_collection(
    client: &Client,
    (ns, name): (&str, &str),
    label: &str,
    namespace: Option<&str>,
    config: &str,
) {
    let mut what = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "selector": {"matchLabels": {"selected": label}}});
    if let (Some(n), Some(w)) = (namespace, what.as_object_mut()) {
        w.insert("namespace".to_owned(), json!(n));
    }
    let c: m::ObservedObjectCollection = serde_json::from_value(json!({
        "apiVersion": m::API_VERSION, "kind": "ObservedObjectCollection",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"observeObjects": what,
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": config}},
    }))
    .unwrap();
    Api::<m::ObservedObjectCollection>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &c)
        .await
        .unwrap_or_else(|e| panic!("creating ObservedObjectCollection {ns}/{name}: {e}"));
}

/// The namespaced Objects of `ns` carrying the membership label of
/// `collection`, as (namespace/name observed, Ready).
async fn namespaced_members(
    client: &Client,
    ns: &str,
    collection: &str,
) -> std::collections::BTreeMap<String, bool> {
    let selector = format!("{COLLECTION_MEMBERSHIP_LABEL}={collection}");
    let objects = Api::<m::Object>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items;
    objects
        .iter()
        .map(|o| {
            let manifest = &o.spec.for_provider.manifest;
            let at = |p| manifest.pointer(p).and_then(Value::as_str).unwrap_or("");
            let seen = format!("{}/{}", at("/metadata/namespace"), at("/metadata/name"));
            let ready = o.status.as_ref().is_some_and(|s| {
                (s.conditions.iter()).any(|c| c.type_ == "Ready" && c.status == "True")
            });
            (seen, ready)
        })
        .collect()
}

#[tokio::test]
async fn a_namespaced_collection_observes_only_its_own_namespace_unless_its_config_reaches_further()
{
    let (client, _, _dump, _) = begin(&PROVIDER, "nscoll").await;
    let control = &testenv::control_plane().control;
    let ns = control.namespace(&client, "nscoll").await;
    let other = control.namespace(&client, "nscoll-other").await;
    let label = testenv::unique_name("sel");
    for (at, name) in [(&ns, "a"), (&ns, "b"), (&other, "c")] {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"selected": label}}}))
        .unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), at)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let (confined, wide) = (
        testenv::unique_name("confined"),
        testenv::unique_name("wide"),
    );
    let configs = Api::<m::ClusterProviderConfig>::all(client.clone());
    for (name, reach) in [(&confined, "OwnNamespace"), (&wide, "Cluster")] {
        let pc: m::ClusterProviderConfig = serde_json::from_value(json!({
            "apiVersion": m::API_VERSION, "kind": "ClusterProviderConfig",
            "metadata": {"name": name},
            "spec": {"credentials": {"source": "InjectedIdentity"}, "reach": reach},
        }))
        .unwrap();
        configs.create(&PostParams::default(), &pc).await.unwrap();
    }

    // The provider's own identity, confined: only this namespace's two.
    create_namespaced_collection(&client, (&ns, "mine"), &label, None, &confined).await;
    let want = |seen: &[&String]| -> std::collections::BTreeMap<String, bool> {
        let names = ["a", "b", "c"];
        seen.iter()
            .zip(names)
            .filter(|(at, _)| !at.is_empty())
            .map(|(at, n)| (format!("{at}/{n}"), true))
            .collect()
    };
    let empty = String::new();
    let own = want(&[&ns, &ns, &empty]);
    wait(
        MANY,
        "two Ready Objects observing this namespace's ConfigMaps",
        || async {
            let now = namespaced_members(&client, &ns, "mine").await;
            if now == own {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await;

    // Another namespace, or a cluster-scoped kind: refused by field.
    create_namespaced_collection(&client, (&ns, "theirs"), &label, Some(&other), &confined).await;
    let clusterwide: m::ObservedObjectCollection = serde_json::from_value(json!({
        "apiVersion": m::API_VERSION, "kind": "ObservedObjectCollection",
        "metadata": {"name": "roles", "namespace": ns},
        "spec": {"observeObjects": {"apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole", "selector": {}},
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": confined}},
    }))
    .unwrap();
    let collections = Api::<m::ObservedObjectCollection>::namespaced(client.clone(), &ns);
    collections
        .create(&PostParams::default(), &clusterwide)
        .await
        .unwrap();
    for (name, needle) in [
        (
            "theirs",
            format!(
                "spec.observeObjects.namespace is outside namespace {ns:?}: ConfigMap objects in namespace {other}"
            ),
        ),
        (
            "roles",
            format!(
                "spec.observeObjects.kind is outside namespace {ns:?}: ClusterRole objects (cluster-scoped)"
            ),
        ),
    ] {
        wait(
            WAIT,
            &format!("collection {name} Synced=False saying {needle}"),
            || async {
                let c = collections.get_opt(name).await.ok()??;
                let (status, msg) = condition_of(&c, "Synced")?;
                (status == "False" && msg.contains(&needle)).then_some(())
            },
        )
        .await;
        assert!(namespaced_members(&client, &ns, name).await.is_empty());
    }

    // A config that reaches the cluster: all three.
    create_namespaced_collection(&client, (&ns, "all"), &label, None, &wide).await;
    let every = want(&[&ns, &ns, &other]);
    wait(
        MANY,
        "three Ready Objects, one observing the other namespace",
        || async {
            let now = namespaced_members(&client, &ns, "all").await;
            if now == every {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await;

    // A match goes: its Object goes; the collection goes: its Objects go.
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    let left = want(&[&empty, &ns, &empty]);
    wait(
        MANY,
        "the Object of the deleted ConfigMap to go",
        || async {
            let now = namespaced_members(&client, &ns, "mine").await;
            if now == left {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await;
    for name in ["mine", "all", "theirs", "roles"] {
        collections
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait(MANY, "the collections' Objects to go with them", || async {
        let mut left = 0;
        for name in ["mine", "all"] {
            left += namespaced_members(&client, &ns, name).await.len();
        }
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} Objects left"))
        }
    })
    .await;
    // Observe-only: what they observed stays.
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), &other)
            .get_opt("c")
            .await
            .unwrap()
            .is_some()
    );
    for name in [&confined, &wide] {
        configs
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
}
