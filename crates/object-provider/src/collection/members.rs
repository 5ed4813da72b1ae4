//! What a collection's Objects should be, as plain functions of the
//! collection, the objects that match it and the Objects it has: each
//! member's name (upstream's, so Objects made by upstream's provider are
//! taken over, not doubled), the selector the target is listed with, and
//! which Objects to apply and which to delete.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use types::kubernetes::{v1alpha1::COLLECTION_MEMBERSHIP_LABEL, v1alpha2::ManagementAction};

use super::kind::CollectionKind;
use crate::object::{
    configs::{ConfigRef, config_of},
    kind::ObjectKind,
};

/// One object in the target that matches a collection.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Match {
    /// Its namespace; `None` for a cluster-scoped kind.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// The name of the Object that observes `m` for the collection `collection`:
/// the collection's name and the first 7 hex digits of the SHA-256 of the
/// match's group/version, kind, namespace and name, written as upstream
/// writes them (`<group>/<version>, Kind=<kind>/<namespace>/<name>`).
pub fn object_name(collection: &str, api_version: &str, kind: &str, m: &Match) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let id = format!(
        "{group}/{version}, Kind={kind}/{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name
    );
    let digest = Sha256::digest(id.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{collection}-{}", hex.get(..7).unwrap_or_default())
}

/// The selector in the API's syntax (`a=b,c in (d,e),!f`); `None` for an
/// empty selector, which matches every object. A requirement the API would
/// refuse is named with what to fix.
pub fn selector(sel: &LabelSelector) -> Result<Option<String>, String> {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        let values = e.values.as_deref().unwrap_or_default();
        let at = format!("spec.observeObjects.selector.matchExpressions[{i}]");
        let listed = || format!("({})", values.join(","));
        let part = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!(
                    "{at}: operator {} needs values: list them, or use Exists",
                    e.operator
                ));
            }
            "In" => format!("{} in {}", e.key, listed()),
            "NotIn" => format!("{} notin {}", e.key, listed()),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!(
                    "{at}: operator {} takes no values: remove them, or use In",
                    e.operator
                ));
            }
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => {
                return Err(format!(
                    "{at}: operator {other:?} is not one of In, NotIn, Exists, DoesNotExist"
                ));
            }
        };
        parts.push(part);
    }
    Ok((!parts.is_empty()).then(|| parts.join(",")))
}

/// The Object one member should be: its name, its labels and annotations
/// (the template's, with the membership label), and the manifest naming
/// the match.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// The Object's name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    pub annotations: BTreeMap<String, String>,
    /// spec.forProvider.manifest: apiVersion, kind, name and namespace.
    pub manifest: Value,
}

/// The member of `c` that observes `m`.
pub fn member<C: CollectionKind>(c: &C, m: &Match) -> Member {
    let name = c.meta().name.as_deref().unwrap_or_default();
    let what = c.criteria();
    let template = c.template().map(|t| &t.metadata);
    let mut labels = template.map(|t| t.labels.clone()).unwrap_or_default();
    labels.insert(COLLECTION_MEMBERSHIP_LABEL.to_owned(), name.to_owned());
    let mut metadata = json!({"name": m.name});
    if let (Some(ns), Some(meta)) = (&m.namespace, metadata.as_object_mut()) {
        meta.insert("namespace".to_owned(), json!(ns));
    }
    Member {
        name: object_name(name, &what.api_version, &what.kind, m),
        labels,
        annotations: template.map(|t| t.annotations.clone()).unwrap_or_default(),
        manifest: json!({"apiVersion": what.api_version, "kind": what.kind, "metadata": metadata}),
    }
}

/// The server-side apply body of `member`: an observe-only Object of the
/// kind `c`'s members are, in `c`'s namespace if it has one, using `c`'s
/// config, controlled by `owner`. Only these fields are the collection's;
/// the Object controller's finalizer and labels stay its own.
pub fn body<C: CollectionKind>(member: &Member, owner: &OwnerReference, c: &C) -> Value {
    let mut metadata = json!({
        "name": member.name,
        "labels": member.labels,
        "annotations": member.annotations,
        "ownerReferences": [owner],
    });
    if let (Some(ns), Some(meta)) = (c.namespace(), metadata.as_object_mut()) {
        meta.insert("namespace".to_owned(), json!(ns));
    }
    json!({
        "apiVersion": C::Member::api_version(&()),
        "kind": C::Member::kind(&()),
        "metadata": metadata,
        "spec": {
            "managementPolicies": ["Observe"],
            "providerConfigRef": c.config_ref(),
            "forProvider": {"manifest": member.manifest},
        },
    })
}

/// Whether the Object `o` (its manifest opened) already is `member` using
/// `config`, controlled by the owner whose UID is `owner`: then applying
/// it again would change nothing.
pub fn up_to_date<K: ObjectKind>(o: &K, member: &Member, owner: &str, config: &ConfigRef) -> bool {
    let (uses, o) = (config_of(o), o.view());
    let has_all = |have: &Option<BTreeMap<String, String>>, want: &BTreeMap<String, String>| {
        want.iter()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let controlled = o
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == owner && r.controller == Some(true));
    controlled
        && has_all(&o.metadata.labels, &member.labels)
        && has_all(&o.metadata.annotations, &member.annotations)
        && o.spec.management_policies == [ManagementAction::Observe]
        && uses == *config
        && o.spec.for_provider.manifest == member.manifest
}

/// What to do to bring a collection's Objects in line.
#[derive(Debug, Default, PartialEq)]
pub struct Plan<'a> {
    /// Members to apply: missing, or not as they should be.
    pub apply: Vec<&'a Member>,
    /// Objects of the collection whose match is gone.
    pub delete: Vec<String>,
    /// Members whose Object is still being deleted: applied once it is gone.
    pub waiting: usize,
}

/// Compares the members wanted with the Objects the collection controls
/// (`existing`, manifests opened). `force` applies every member (the
/// collection's spec changed since it was last in line, so a label or
/// annotation the template dropped goes too).
pub fn plan<'a, K: ObjectKind>(
    wanted: &'a [Member],
    existing: &[K],
    owner: &str,
    config: &ConfigRef,
    force: bool,
) -> Plan<'a> {
    let by_name: BTreeMap<&str, &K> = existing
        .iter()
        .filter_map(|o| Some((o.meta().name.as_deref()?, o)))
        .collect();
    let mut plan = Plan::default();
    for m in wanted {
        match by_name.get(m.name.as_str()) {
            Some(o) if o.meta().deletion_timestamp.is_some() => plan.waiting += 1,
            Some(o) if !force && up_to_date(*o, m, owner, config) => {}
            _ => plan.apply.push(m),
        }
    }
    let names: BTreeSet<&str> = wanted.iter().map(|m| m.name.as_str()).collect();
    plan.delete = by_name
        .iter()
        .filter(|(name, o)| !names.contains(*name) && o.meta().deletion_timestamp.is_none())
        .map(|(name, _)| (*name).to_owned())
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use types::kubernetes::{v1alpha1::ObservedObjectCollection, v1alpha2::Object};

    use super::*;

    fn collection(template: Value) -> ObservedObjectCollection {
        serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "ObservedObjectCollection",
            "metadata": {"name": "foo-collection", "uid": "u1", "generation": 1},
            "spec": {
                "observeObjects": {"apiVersion": "v1", "kind": "ConfigMap", "selector": {"matchLabels": {"foo": "bar"}}},
                "providerConfigRef": {"name": "pc"},
                "objectTemplate": template,
            },
        }))
        .unwrap()
    }

    fn at(ns: Option<&str>, name: &str) -> Match {
        Match {
            namespace: ns.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "kubernetes.crossplane.io/v1alpha1".into(),
            kind: "ObservedObjectCollection".into(),
            name: "foo-collection".into(),
            uid: "u1".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    fn pc(name: &str) -> ConfigRef {
        ConfigRef::Legacy(name.to_owned())
    }

    /// The Object as the API server would hand it back after `body`.
    fn applied(member: &Member) -> Object {
        let c = collection(Value::Null);
        serde_json::from_value(body(member, &owner(), &c)).unwrap()
    }

    #[test]
    fn an_object_name_is_the_collection_and_a_stable_digest_of_what_it_observes() {
        let a = object_name("c", "v1", "ConfigMap", &at(Some("ns"), "a"));
        assert_eq!(a, object_name("c", "v1", "ConfigMap", &at(Some("ns"), "a")));
        assert!(a.starts_with("c-") && a.len() == "c-".len() + 7, "{a}");
        for other in [
            object_name("c", "v1", "ConfigMap", &at(Some("ns"), "b")),
            object_name("c", "v1", "ConfigMap", &at(Some("other"), "a")),
            object_name("c", "v1", "Secret", &at(Some("ns"), "a")),
            object_name("c", "apps/v1", "ConfigMap", &at(Some("ns"), "a")),
            object_name("d", "v1", "ConfigMap", &at(Some("ns"), "a")),
        ] {
            assert_ne!(a, other);
        }
        // sha256("/v1, Kind=Pod/crossplane-system/pod-bar"), as upstream
        // writes a core group's identity.
        let digest = Sha256::digest(b"/v1, Kind=Pod/crossplane-system/pod-bar");
        let want = format!(
            "{:02x}{:02x}{:02x}{:02x}",
            digest[0], digest[1], digest[2], digest[3]
        );
        let name = object_name("c", "v1", "Pod", &at(Some("crossplane-system"), "pod-bar"));
        assert_eq!(name, format!("c-{}", &want[..7]));
    }

    #[test]
    fn a_selector_is_written_in_the_apis_syntax_and_a_bad_one_says_what_to_fix() {
        let req = |op: &str, values: Option<Vec<&str>>| LabelSelectorRequirement {
            key: "k".into(),
            operator: op.into(),
            values: values.map(|v| v.into_iter().map(str::to_owned).collect()),
        };
        let sel = |labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>| LabelSelector {
            match_labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            }),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        };
        assert_eq!(selector(&sel(&[], vec![])), Ok(None));
        assert_eq!(
            selector(&sel(&[("b", "2"), ("a", "1")], vec![])),
            Ok(Some("a=1,b=2".into()))
        );
        let all = vec![
            req("In", Some(vec!["x", "y"])),
            req("NotIn", Some(vec!["z"])),
            req("Exists", None),
            req("DoesNotExist", Some(vec![])),
        ];
        assert_eq!(
            selector(&sel(&[("a", "1")], all)),
            Ok(Some("a=1,k in (x,y),k notin (z),k,!k".into()))
        );
        let empty_in = selector(&sel(&[], vec![req("In", None)])).unwrap_err();
        assert!(empty_in.contains("matchExpressions[0]") && empty_in.contains("needs values"));
        let valued = selector(&sel(&[], vec![req("Exists", Some(vec!["x"]))])).unwrap_err();
        assert!(valued.contains("takes no values"), "{valued}");
        let unknown = selector(&sel(&[], vec![req("Gt", None)])).unwrap_err();
        assert!(unknown.contains("\"Gt\" is not one of"), "{unknown}");
    }

    #[test]
    fn a_member_carries_the_template_the_membership_label_and_the_match() {
        let c = collection(
            json!({"metadata": {"labels": {"l1": "v1", COLLECTION_MEMBERSHIP_LABEL: "spoof"}, "annotations": {"a1": "v1"}}}),
        );
        let m = member(&c, &at(Some("ns"), "cm"));
        assert_eq!(m.labels.get("l1").map(String::as_str), Some("v1"));
        assert_eq!(
            m.labels
                .get(COLLECTION_MEMBERSHIP_LABEL)
                .map(String::as_str),
            Some("foo-collection")
        );
        assert_eq!(m.annotations.get("a1").map(String::as_str), Some("v1"));
        assert_eq!(
            m.manifest,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}})
        );
        let cluster_scoped = member(&collection(Value::Null), &at(None, "n"));
        assert_eq!(cluster_scoped.manifest["metadata"], json!({"name": "n"}));
        assert!(cluster_scoped.annotations.is_empty());
        let o = applied(&m);
        assert_eq!(o.spec.management_policies, [ManagementAction::Observe]);
        assert!(up_to_date(&o, &m, "u1", &pc("pc")));
    }

    #[test]
    fn the_plan_applies_what_is_missing_or_different_and_deletes_what_no_longer_matches() {
        let c = collection(json!({"metadata": {"labels": {"l1": "v1"}}}));
        let wanted: Vec<Member> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| member(&c, &at(Some("ns"), n)))
            .collect();
        let in_line = applied(&wanted[0]);
        let mut relabelled = applied(&wanted[1]);
        relabelled.metadata.labels = Some(BTreeMap::new());
        let mut deleting = applied(&wanted[2]);
        let now = || serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
        deleting.metadata.deletion_timestamp = Some(now());
        let gone = applied(&member(&c, &at(Some("ns"), "gone")));
        let mut gone_deleting = applied(&member(&c, &at(Some("ns"), "gone-too")));
        gone_deleting.metadata.deletion_timestamp = Some(now());
        let existing = [in_line, relabelled, deleting, gone.clone(), gone_deleting];

        let p = plan(&wanted, &existing, "u1", &pc("pc"), false);
        let applied_names: Vec<&str> = p.apply.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            applied_names,
            [wanted[1].name.as_str(), wanted[3].name.as_str()]
        );
        assert_eq!(p.delete, [gone.metadata.name.clone().unwrap()]);
        assert_eq!(p.waiting, 1);

        // A steady state costs nothing.
        let steady: Vec<Object> = wanted.iter().map(applied).collect();
        assert_eq!(
            plan(&wanted, &steady, "u1", &pc("pc"), false),
            Plan::default()
        );
        // Another config, another owner or a changed spec: applied again.
        assert_eq!(
            plan(&wanted, &steady, "u1", &pc("other"), false)
                .apply
                .len(),
            4
        );
        assert_eq!(
            plan(&wanted, &steady, "u2", &pc("pc"), false).apply.len(),
            4
        );
        assert_eq!(plan(&wanted, &steady, "u1", &pc("pc"), true).apply.len(), 4);
    }

    #[test]
    fn a_namespaced_collections_member_is_a_namespaced_object_in_its_namespace_using_its_config() {
        use crate::collection::kind::CollectionKind;
        use crate::object::kind::Namespaced;
        use types::kubernetes_m::v1alpha1 as m;
        let c: m::ObservedObjectCollection = serde_json::from_value(json!({
            "apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "ObservedObjectCollection",
            "metadata": {"name": "foo-collection", "namespace": "team-a", "uid": "u1"},
            "spec": {
                "observeObjects": {"apiVersion": "v1", "kind": "ConfigMap", "selector": {}},
                "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "kp"},
            },
        }))
        .unwrap();
        let m = member(&c, &at(Some("team-a"), "cm"));
        let written = body(&m, &owner(), &c);
        assert_eq!(written["apiVersion"], "kubernetes.m.crossplane.io/v1alpha1");
        assert_eq!(written["metadata"]["namespace"], "team-a");
        assert_eq!(
            written["spec"]["providerConfigRef"],
            json!({"kind": "ClusterProviderConfig", "name": "kp"})
        );
        let o: Namespaced = serde_json::from_value(written).unwrap();
        assert_eq!(c.config(), ConfigRef::Cluster("kp".into()));
        assert!(up_to_date(&o, &m, "u1", &c.config()));
        let local = ConfigRef::Local {
            namespace: "team-a".into(),
            name: "kp".into(),
        };
        assert!(!up_to_date(&o, &m, "u1", &local));
    }
}
