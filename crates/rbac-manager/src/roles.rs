//! The roles of a package revision, as a pure function of the CRDs it
//! installed: what its runtime needs (`system`), and what users get through
//! the aggregated `crossplane-edit` / `crossplane-view` roles. Rules are
//! sorted, so the same CRDs always give the same roles (and an unchanged
//! revision applies nothing new).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// Every verb on a kind.
const ALL: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];
/// Reading a kind.
const READ: [&str; 3] = ["get", "list", "watch"];

/// Label of ClusterRoles aggregated into `crossplane-edit`.
pub const AGGREGATE_TO_EDIT: &str = "rbac.crossplane.io/aggregate-to-edit";
/// Label of ClusterRoles aggregated into `crossplane-view`.
pub const AGGREGATE_TO_VIEW: &str = "rbac.crossplane.io/aggregate-to-view";
/// Label of ClusterRoles aggregated into the package-manager's role (it
/// lists a package's custom resources before deleting its CRDs).
pub const AGGREGATE_TO_PACKAGE_MANAGER: &str = "rbac.crossplane-rs.io/aggregate-to-package-manager";

/// A kind a package installed: its API group and plural.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kind {
    /// API group.
    pub group: String,
    /// Plural resource name.
    pub plural: String,
}

/// The kinds of CRDs named `<plural>.<group>`; names without a group are
/// skipped.
pub fn kinds_of(crd_names: &[String]) -> Vec<Kind> {
    let mut kinds: Vec<Kind> = crd_names
        .iter()
        .filter_map(|n| n.split_once('.'))
        .filter(|(p, g)| !p.is_empty() && !g.is_empty())
        .map(|(p, g)| Kind {
            group: g.to_owned(),
            plural: p.to_owned(),
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// One rule per group: the kinds' plurals (and, when `subresources`, their
/// `/status` and `/finalizers`) with `verbs`.
fn kind_rules(kinds: &[Kind], verbs: &[&str], subresources: bool) -> Vec<Value> {
    let mut by_group: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for k in kinds {
        let set = by_group.entry(k.group.as_str()).or_default();
        set.insert(k.plural.clone());
        if subresources {
            set.insert(format!("{}/status", k.plural));
            set.insert(format!("{}/finalizers", k.plural));
        }
    }
    by_group
        .into_iter()
        .map(|(g, resources)| json!({"apiGroups": [g], "resources": resources, "verbs": verbs}))
        .collect()
}

/// What every provider runtime uses besides its own kinds: events, the
/// Secrets and ConfigMaps it reads and writes (credentials, connection
/// details), and Leases for leader election.
fn runtime_rules() -> Vec<Value> {
    vec![
        json!({"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ALL}),
        json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]}),
        json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]}),
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update"]}),
    ]
}

/// The name of a revision's role of `kind` (`system`, `aggregate-to-edit`,
/// `aggregate-to-view`).
pub fn role_name(revision: &str, kind: &str) -> String {
    format!("crossplane:provider:{revision}:{kind}")
}

fn owner(revision: &str, uid: &str) -> Value {
    json!([{
        "apiVersion": "pkg.crossplane.io/v1",
        "kind": "ProviderRevision",
        "name": revision,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

fn cluster_role(
    name: String,
    labels: Value,
    revision: &str,
    uid: &str,
    rules: Vec<Value>,
) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owner(revision, uid)},
        "rules": rules,
    })
}

/// The strings of a rule's field (`apiGroups`, `resources`, `verbs`).
fn strings<'a>(rule: &'a Value, field: &str) -> Vec<&'a str> {
    rule.get(field)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn covers(allowed: &[&str], wanted: &str) -> bool {
    allowed.iter().any(|a| *a == "*" || *a == wanted)
}

/// The parts of `requested` (PolicyRules a package asks for) that no rule
/// of `allowed` (the allow-list ClusterRole's rules) covers, each as
/// `<verb> <resource> (group "<group>")`. Rules naming resourceNames or
/// nonResourceURLs are refused whole unless an allowed rule covers them
/// without resourceNames.
pub fn refused(requested: &[Value], allowed: &[Value]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for rule in requested {
        let groups = strings(rule, "apiGroups");
        let resources = strings(rule, "resources");
        let verbs = strings(rule, "verbs");
        if rule.get("nonResourceURLs").is_some()
            || groups.is_empty()
            || resources.is_empty()
            || verbs.is_empty()
        {
            out.insert(format!(
                "{rule} (only apiGroups, resources and verbs can be granted)"
            ));
            continue;
        }
        for g in &groups {
            for r in &resources {
                for v in &verbs {
                    let ok = allowed.iter().any(|a| {
                        a.get("resourceNames").is_none()
                            && covers(&strings(a, "apiGroups"), g)
                            && covers(&strings(a, "resources"), r)
                            && covers(&strings(a, "verbs"), v)
                    });
                    if !ok {
                        out.insert(format!("{v} {r} (group \"{g}\")"));
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

/// The three ClusterRoles of revision `revision` (uid `uid`) that installed
/// `kinds` and whose package asked for `requested` (already allowed).
pub fn provider_roles(
    revision: &str,
    uid: &str,
    kinds: &[Kind],
    requested: &[Value],
) -> Vec<Value> {
    let mut system = kind_rules(kinds, &ALL, true);
    system.extend(runtime_rules());
    let mut extra: Vec<Value> = requested.to_vec();
    extra.sort_by_key(Value::to_string);
    extra.dedup();
    system.extend(extra);
    vec![
        cluster_role(
            role_name(revision, "system"),
            json!({"pkg.crossplane.io/revision": revision}),
            revision,
            uid,
            system,
        ),
        cluster_role(
            role_name(revision, "aggregate-to-edit"),
            json!({
                "pkg.crossplane.io/revision": revision,
                AGGREGATE_TO_EDIT: "true",
                "rbac.crossplane.io/aggregate-to-admin": "true",
            }),
            revision,
            uid,
            kind_rules(kinds, &ALL, false),
        ),
        cluster_role(
            role_name(revision, "aggregate-to-view"),
            json!({
                "pkg.crossplane.io/revision": revision,
                AGGREGATE_TO_VIEW: "true",
                "rbac.crossplane.io/aggregate-to-browse": "true",
                AGGREGATE_TO_PACKAGE_MANAGER: "true",
            }),
            revision,
            uid,
            kind_rules(kinds, &READ, false),
        ),
    ]
}

/// The name of an Extension's role (and binding).
pub fn extension_role_name(namespace: &str, name: &str) -> String {
    format!("crossplane:extension:{namespace}:{name}:system")
}

/// The `system` ClusterRole of an Extension (seed 001): its
/// `permissions.rules` (already allowed), everything on the kinds it owns
/// and reading the kinds it depends on. Not owned (a namespaced Extension
/// cannot own a cluster-scoped role): labelled, and removed by the
/// Extension's finalizer.
pub fn extension_role(
    namespace: &str,
    name: &str,
    owns: &[Kind],
    depends_on: &[Kind],
    rules: &[Value],
) -> Value {
    let mut all = kind_rules(owns, &["*"], false);
    all.extend(kind_rules(depends_on, &READ, false));
    let mut extra: Vec<Value> = rules.to_vec();
    extra.sort_by_key(Value::to_string);
    extra.dedup();
    all.extend(extra);
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": extension_role_name(namespace, name),
            "labels": {"extensions.crossplane.io/namespace": namespace, "extensions.crossplane.io/name": name},
        },
        "rules": all,
    })
}

/// The binding of an Extension's role to its controller's ServiceAccount.
pub fn extension_binding(namespace: &str, name: &str, service_account: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": extension_role_name(namespace, name),
            "labels": {"extensions.crossplane.io/namespace": namespace, "extensions.crossplane.io/name": name},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": extension_role_name(namespace, name)},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    })
}

/// The binding of a revision's `system` role to its runtime's
/// ServiceAccount.
pub fn system_binding(revision: &str, uid: &str, service_account: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": role_name(revision, "system"),
            "labels": {"pkg.crossplane.io/revision": revision},
            "ownerReferences": owner(revision, uid),
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name(revision, "system")},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn kinds_come_from_crd_names_sorted_and_once() {
        let k = kinds_of(&names(&[
            "objects.kubernetes.crossplane.io",
            "b.x.org",
            "objects.kubernetes.crossplane.io",
            "nogroup",
        ]));
        assert_eq!(
            k,
            [
                Kind {
                    group: "kubernetes.crossplane.io".into(),
                    plural: "objects".into()
                },
                Kind {
                    group: "x.org".into(),
                    plural: "b".into()
                },
            ]
        );
    }

    #[test]
    fn the_system_role_grants_the_runtime_its_kinds_with_status_and_finalizers() {
        let roles = provider_roles(
            "p-1",
            "u",
            &kinds_of(&names(&["things.x.org", "others.x.org"])),
            &[],
        );
        let system = &roles[0];
        assert_eq!(system["metadata"]["name"], "crossplane:provider:p-1:system");
        assert_eq!(
            system["rules"][0],
            json!({"apiGroups": ["x.org"], "resources": ["others", "others/finalizers", "others/status", "things", "things/finalizers", "things/status"], "verbs": ALL})
        );
        assert!(
            system["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["resources"] == json!(["configmaps", "secrets"]))
        );
        assert_eq!(system["metadata"]["ownerReferences"][0]["controller"], true);
    }

    #[test]
    fn users_get_edit_and_view_through_aggregation_and_the_package_manager_may_list() {
        let roles = provider_roles("p-1", "u", &kinds_of(&names(&["things.x.org"])), &[]);
        assert_eq!(roles[1]["metadata"]["labels"][AGGREGATE_TO_EDIT], "true");
        assert_eq!(roles[1]["rules"][0]["verbs"], json!(ALL));
        assert_eq!(roles[2]["metadata"]["labels"][AGGREGATE_TO_VIEW], "true");
        assert_eq!(
            roles[2]["metadata"]["labels"][AGGREGATE_TO_PACKAGE_MANAGER],
            "true"
        );
        assert_eq!(roles[2]["rules"][0]["verbs"], json!(READ));
    }

    #[test]
    fn the_same_crds_in_any_order_give_the_same_roles() {
        let a = provider_roles("p", "u", &kinds_of(&names(&["a.x.org", "b.y.org"])), &[]);
        let b = provider_roles("p", "u", &kinds_of(&names(&["b.y.org", "a.x.org"])), &[]);
        assert_eq!(a, b);
    }

    #[test]
    fn a_request_outside_the_allow_list_is_refused_verb_by_verb() {
        let allowed = [
            json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}),
            json!({"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]}),
        ];
        let requested = [
            json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "delete"]}),
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}),
        ];
        assert_eq!(refused(&requested, &allowed), ["delete nodes (group \"\")"]);
        assert!(
            refused(
                &[json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]})],
                &allowed
            )[0]
            .contains("only apiGroups")
        );
    }

    #[test]
    fn allowed_requests_join_the_system_role_once_and_in_order() {
        let r = json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]});
        let roles = provider_roles("p", "u", &[], &[r.clone(), r.clone()]);
        let rules = roles[0]["rules"].as_array().unwrap();
        assert_eq!(rules.iter().filter(|x| **x == r).count(), 1);
    }

    #[test]
    fn an_extension_gets_everything_on_what_it_owns_and_reads_what_it_depends_on() {
        let owns = [Kind {
            group: "redis.example".into(),
            plural: "redisclusters".into(),
        }];
        let deps = [Kind {
            group: "db.example".into(),
            plural: "databases".into(),
        }];
        let secrets = json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]});
        let role = extension_role("ns", "redis", &owns, &deps, std::slice::from_ref(&secrets));
        assert_eq!(
            role["metadata"]["name"],
            "crossplane:extension:ns:redis:system"
        );
        let rules = role["rules"].as_array().unwrap();
        assert_eq!(
            rules[0],
            json!({"apiGroups": ["redis.example"], "resources": ["redisclusters"], "verbs": ["*"]})
        );
        assert_eq!(rules[1]["verbs"], json!(READ));
        assert_eq!(rules[2], secrets);
        assert!(role["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn the_binding_names_the_runtime_service_account() {
        let b = system_binding("p-1", "u", "sa", "crossplane-system");
        assert_eq!(
            b["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "sa", "namespace": "crossplane-system"})
        );
        assert_eq!(b["roleRef"]["name"], "crossplane:provider:p-1:system");
    }
}
