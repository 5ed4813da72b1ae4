//! The roles the rbac-manager renders, as pure functions of what they
//! grant: a package revision's three ClusterRoles (what its runtime needs,
//! `system`, and what users get through the aggregated `crossplane-edit` /
//! `crossplane-view` roles), an Extension's one, and their bindings. Rules
//! are sorted, so the same input always gives the same roles (and an
//! unchanged revision applies nothing new).
//!
//! Rendering decides nothing: which kinds may be rendered is
//! [`crate::kinds`]'s decision, which rules may be granted
//! [`crate::boundary`]'s, and whom a role is bound to [`crate::subjects`]'s.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::rbac::v1::{
        ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use types::extensions::v1alpha1::{ROLE_NAME_LABEL, ROLE_NAMESPACE_LABEL};

/// Every verb a provider runtime has on its own kinds.
const ALL: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];
/// Every verb an Extension's controller has on the kinds it owns: spelled
/// out, because `*` is never granted (it would also cover verbs that do
/// not exist yet).
const OWNER: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
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
/// The label of a revision's roles and binding.
const REVISION_LABEL: &str = types::pkg::contract::labels::REVISION;
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// A kind a package installed, owns or depends on: its API group and
/// plural.
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

fn strings<'a>(s: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    s.into_iter().map(str::to_owned).collect()
}

/// A rule of `verbs` on `resources` of `group`.
fn rule(group: &str, resources: Vec<String>, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources),
        verbs: strings(verbs.iter().copied()),
        ..Default::default()
    }
}

/// One rule per group: the kinds' plurals (and, when `subresources`, their
/// `/status` and `/finalizers`) with `verbs`.
fn kind_rules(kinds: &[Kind], verbs: &[&str], subresources: bool) -> Vec<PolicyRule> {
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
        .map(|(g, resources)| rule(g, resources.into_iter().collect(), verbs))
        .collect()
}

/// What every provider runtime uses besides its own kinds, cluster-wide:
/// events, and (unless the operator narrowed them to named namespaces,
/// [`crate::secrets`]) the Secrets and ConfigMaps it reads and writes
/// (credentials, connection details; upstream's providers list and watch
/// them across namespaces through their caches). Its leader-election
/// Leases only in its own namespace ([`leader_election_binding`]).
fn runtime_rules(secrets_cluster_wide: bool) -> Vec<PolicyRule> {
    let write_events = ["create", "patch", "update"];
    let mut rules = vec![
        rule("", strings(["events"]), &write_events),
        rule("events.k8s.io", strings(["events"]), &write_events),
    ];
    if secrets_cluster_wide {
        rules.insert(0, rule("", strings(["configmaps", "secrets"]), &ALL));
    }
    rules
}

/// The ClusterRole `deploy/` ships that grants a runtime Secrets and
/// ConfigMaps; the rbac-manager binds it in each namespace runtimes may
/// use them in ([`crate::secrets`]).
pub const SECRETS_ROLE: &str = "crossplane-rs:package-runtime:secrets";

/// A RoleBinding `crossplane:provider:<revision>:<kind>` in `namespace`,
/// controlled by the revision `(name, uid)`, of ClusterRole `role` to
/// ServiceAccount `(name, namespace)`.
fn revision_role_binding(
    (revision, uid): (&str, &str),
    kind: &str,
    role: &str,
    (service_account, sa_namespace): (&str, &str),
    namespace: &str,
) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(role_name(revision, kind)),
            namespace: Some(namespace.to_owned()),
            labels: labels(&[(REVISION_LABEL, revision)]),
            owner_references: Some(owner(revision, uid)),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: "ClusterRole".to_owned(),
            name: role.to_owned(),
        },
        subjects: subject(service_account, sa_namespace),
    }
}

/// The rule that marks its holder as a package identity
/// ([`types::package_identity`]): the admission policy `deploy/` ships
/// holds such identities to what no RBAC rule can say (no token Secrets,
/// no writes to the controllers' objects). It is the rbac-manager's, not
/// the package's: a package can never ask for anything in its group
/// ([`crate::boundary::never_grantable`]).
pub fn identity_marker() -> PolicyRule {
    use types::package_identity::{GROUP, PACKAGE, RESOURCE, VERB};
    PolicyRule {
        resource_names: Some(strings([PACKAGE])),
        ..rule(GROUP, strings([RESOURCE]), &[VERB])
    }
}

/// The ClusterRole `deploy/` ships that grants a runtime its Leases; the
/// rbac-manager binds it in the runtime's namespace only
/// ([`leader_election_binding`]).
pub const LEADER_ELECTION_ROLE: &str = "crossplane-rs:package-runtime:leader-election";

/// `rules`, sorted and each once.
fn sorted(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let key = |r: &PolicyRule| {
        (
            r.api_groups.clone(),
            r.resources.clone(),
            r.verbs.clone(),
            r.resource_names.clone(),
            r.non_resource_urls.clone(),
        )
    };
    let mut out = rules.to_vec();
    out.sort_by_key(key);
    out.dedup();
    out
}

/// The name of a revision's role of `kind` (`system`, `aggregate-to-edit`,
/// `aggregate-to-view`).
pub fn role_name(revision: &str, kind: &str) -> String {
    format!("crossplane:provider:{revision}:{kind}")
}

/// The names of all of a revision's roles.
pub fn role_names(revision: &str) -> [String; 3] {
    ["system", "aggregate-to-edit", "aggregate-to-view"].map(|k| role_name(revision, k))
}

fn owner(revision: &str, uid: &str) -> Vec<OwnerReference> {
    vec![OwnerReference {
        api_version: "pkg.crossplane.io/v1".to_owned(),
        kind: "ProviderRevision".to_owned(),
        name: revision.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

/// What a revision's roles are made for: its name and UID, the labels and
/// annotations its Provider puts on everything (`spec.commonLabels`,
/// `spec.commonAnnotations`), and the capabilities its package declares.
#[derive(Clone, Copy)]
pub struct Revision<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    pub common_labels: &'a BTreeMap<String, String>,
    pub common_annotations: &'a BTreeMap<String, String>,
    /// The package's `spec.capabilities`: `SafeStart` grants reading CRDs.
    pub safe_start: bool,
    /// Whether the runtime's Secrets and ConfigMaps are granted
    /// cluster-wide (no `--runtime-secret-namespaces`); else only where
    /// [`crate::secrets`] binds them.
    pub secrets_cluster_wide: bool,
}

fn revision_role(
    name: String,
    extra_labels: &[(&str, &str)],
    revision: &Revision<'_>,
    rules: Vec<PolicyRule>,
) -> ClusterRole {
    let mut all = vec![(REVISION_LABEL, revision.name)];
    all.extend_from_slice(extra_labels);
    let mut labels = labels(&all).unwrap_or_default();
    for (k, v) in revision.common_labels {
        labels.entry(k.clone()).or_insert_with(|| v.clone());
    }
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            annotations: Some(revision.common_annotations.clone()).filter(|a| !a.is_empty()),
            owner_references: Some(owner(revision.name, revision.uid)),
            ..Default::default()
        },
        rules: Some(rules),
        ..Default::default()
    }
}

/// The three ClusterRoles of revision `revision` (uid `uid`) that installed
/// `kinds` and whose package asked for `requested` (both already within the
/// boundary).
pub fn provider_roles(
    revision: &Revision<'_>,
    kinds: &[Kind],
    requested: &[PolicyRule],
) -> Vec<ClusterRole> {
    let mut system = kind_rules(kinds, &ALL, true);
    system.extend(runtime_rules(revision.secrets_cluster_wide));
    if revision.safe_start {
        // A provider that starts its controllers as their CRDs appear
        // watches CRDs.
        system.push(rule(
            "apiextensions.k8s.io",
            strings(["customresourcedefinitions"]),
            &READ,
        ));
    }
    system.extend(sorted(requested));
    system.push(identity_marker());
    let name = revision.name;
    vec![
        revision_role(role_name(name, "system"), &[], revision, system),
        revision_role(
            role_name(name, "aggregate-to-edit"),
            &[
                (AGGREGATE_TO_EDIT, "true"),
                ("rbac.crossplane.io/aggregate-to-admin", "true"),
            ],
            revision,
            kind_rules(kinds, &ALL, false),
        ),
        revision_role(
            role_name(name, "aggregate-to-view"),
            &[
                (AGGREGATE_TO_VIEW, "true"),
                ("rbac.crossplane.io/aggregate-to-browse", "true"),
                (AGGREGATE_TO_PACKAGE_MANAGER, "true"),
            ],
            revision,
            kind_rules(kinds, &READ, false),
        ),
    ]
}

/// The name of an Extension's role (and binding).
pub fn extension_role_name(namespace: &str, name: &str) -> String {
    format!("crossplane:extension:{namespace}:{name}:system")
}

/// The name of the ClusterRoleBinding that marks an Extension's controller
/// as a package identity.
pub fn extension_identity_name(namespace: &str, name: &str) -> String {
    format!("crossplane:extension:{namespace}:{name}:identity")
}

fn extension_meta(
    object_name: String,
    namespace: Option<&str>,
    extension: (&str, &str, &str),
) -> ObjectMeta {
    let (ns, name, uid) = extension;
    ObjectMeta {
        name: Some(object_name),
        namespace: namespace.map(str::to_owned),
        labels: labels(&[(ROLE_NAMESPACE_LABEL, ns), (ROLE_NAME_LABEL, name)]),
        // Only a namespaced object can be owned by the namespaced
        // Extension; the cluster-scoped binding goes by its finalizer.
        owner_references: namespace.map(|_| {
            vec![OwnerReference {
                api_version: "extensions.crossplane.io/v1alpha1".to_owned(),
                kind: "Extension".to_owned(),
                name: name.to_owned(),
                uid: uid.to_owned(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]
        }),
        ..Default::default()
    }
}

/// Reading `kinds`: what an Extension's `dependsOn` asks for, which passes
/// the allow-list like its `permissions.rules`.
pub fn read_rules(kinds: &[Kind]) -> Vec<PolicyRule> {
    kind_rules(kinds, &READ, false)
}

/// The `system` Role of an Extension (seed 001), in its namespace: its
/// `permissions.rules`, every verb on the kinds it owns (with `/status` and
/// `/finalizers`) and reading the kinds it depends on, all already within
/// the boundary. An Extension is namespaced, and so are its rights: a rule
/// on a cluster-scoped kind (`namespaces`, say) reaches only the
/// Extension's own namespace. Controlled by the Extension `(namespace,
/// name, uid)`.
pub fn extension_role(
    extension: (&str, &str, &str),
    owns: &[Kind],
    depends_on: &[Kind],
    rules: &[PolicyRule],
) -> Role {
    let (ns, name, _) = extension;
    let mut all = kind_rules(owns, &OWNER, true);
    all.extend(kind_rules(depends_on, &READ, false));
    all.extend(sorted(rules));
    Role {
        metadata: extension_meta(extension_role_name(ns, name), Some(ns), extension),
        rules: Some(all),
    }
}

fn subject(service_account: &str, namespace: &str) -> Option<Vec<Subject>> {
    Some(vec![Subject {
        kind: "ServiceAccount".to_owned(),
        name: service_account.to_owned(),
        namespace: Some(namespace.to_owned()),
        ..Default::default()
    }])
}

/// The binding of an Extension's Role to its controller's ServiceAccount
/// (one [`crate::subjects::extension`] accepted), in the Extension's
/// namespace.
pub fn extension_binding(extension: (&str, &str, &str), service_account: &str) -> RoleBinding {
    let (ns, name, _) = extension;
    let role = extension_role_name(ns, name);
    RoleBinding {
        metadata: extension_meta(role.clone(), Some(ns), extension),
        role_ref: RoleRef {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: "Role".to_owned(),
            name: role,
        },
        subjects: subject(service_account, ns),
    }
}

/// The binding of the package-identity marker
/// ([`types::package_identity::CLUSTER_ROLE`]) to an Extension's
/// controller: cluster-wide, since the admission policy asks about the
/// identity wherever it acts.
pub fn extension_identity(
    extension: (&str, &str, &str),
    service_account: &str,
) -> ClusterRoleBinding {
    let (ns, name, _) = extension;
    binding(
        extension_meta(extension_identity_name(ns, name), None, extension),
        types::package_identity::CLUSTER_ROLE.to_owned(),
        service_account,
        ns,
    )
}

fn binding(
    metadata: ObjectMeta,
    role: String,
    service_account: &str,
    namespace: &str,
) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata,
        role_ref: RoleRef {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: "ClusterRole".to_owned(),
            name: role,
        },
        subjects: subject(service_account, namespace),
    }
}

/// The binding of a revision's `system` role to its runtime's
/// ServiceAccount (one [`crate::subjects::revision`] accepted).
pub fn system_binding(
    revision: &str,
    uid: &str,
    service_account: &str,
    namespace: &str,
) -> ClusterRoleBinding {
    let name = role_name(revision, "system");
    binding(
        ObjectMeta {
            name: Some(name.clone()),
            labels: labels(&[(REVISION_LABEL, revision)]),
            owner_references: Some(owner(revision, uid)),
            ..Default::default()
        },
        name,
        service_account,
        namespace,
    )
}

/// The binding of [`LEADER_ELECTION_ROLE`] to a revision's runtime
/// ServiceAccount in `namespace`, the runtime's own: its Leases there and
/// nowhere else (the admission policy keeps the controllers' Leases of
/// that namespace out of its reach).
pub fn leader_election_binding(
    revision: &str,
    uid: &str,
    service_account: &str,
    namespace: &str,
) -> RoleBinding {
    revision_role_binding(
        (revision, uid),
        "leader-election",
        LEADER_ELECTION_ROLE,
        (service_account, namespace),
        namespace,
    )
}

/// Every rule of `roles` but the identity marker (the rbac-manager's own),
/// for the boundary's last look.
pub fn rules_of(roles: &[ClusterRole]) -> Vec<PolicyRule> {
    let marker = identity_marker();
    roles
        .iter()
        .flat_map(|r| r.rules.iter().flatten().cloned())
        .filter(|r| *r != marker)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::{Value, json};

    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    fn v<T: serde::Serialize>(x: &T) -> Value {
        serde_json::to_value(x).unwrap()
    }

    static EMPTY: BTreeMap<String, String> = BTreeMap::new();

    fn rev(name: &str) -> Revision<'_> {
        Revision {
            name,
            uid: "u",
            common_labels: &EMPTY,
            common_annotations: &EMPTY,
            safe_start: false,
            secrets_cluster_wide: true,
        }
    }

    #[test]
    fn common_labels_and_safe_start_reach_the_roles() {
        let labels = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
        let annotations = BTreeMap::from([("note".to_owned(), "b".to_owned())]);
        let r = Revision {
            common_labels: &labels,
            common_annotations: &annotations,
            safe_start: true,
            ..rev("p")
        };
        let roles: Vec<Value> = provider_roles(&r, &[], &[]).iter().map(v).collect();
        for role in &roles {
            assert_eq!(role["metadata"]["labels"]["team"], "a");
            assert_eq!(role["metadata"]["annotations"]["note"], "b");
        }
        assert!(roles[0]["rules"].as_array().unwrap().iter().any(|r| r
            == &json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": READ})));
        let plain: Vec<Value> = provider_roles(&rev("p"), &[], &[]).iter().map(v).collect();
        assert!(!plain[0].to_string().contains("customresourcedefinitions"));
    }

    fn kind(group: &str, plural: &str) -> Kind {
        Kind {
            group: group.into(),
            plural: plural.into(),
        }
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
                kind("kubernetes.crossplane.io", "objects"),
                kind("x.org", "b")
            ]
        );
    }

    #[test]
    fn the_system_role_grants_the_runtime_its_kinds_with_status_and_finalizers() {
        let roles = provider_roles(
            &rev("p-1"),
            &kinds_of(&names(&["things.x.org", "others.x.org"])),
            &[],
        );
        let system = v(&roles[0]);
        assert_eq!(system["kind"], "ClusterRole");
        assert_eq!(system["metadata"]["name"], "crossplane:provider:p-1:system");
        assert_eq!(
            system["rules"][0],
            json!({"apiGroups": ["x.org"], "resources": ["others", "others/finalizers", "others/status", "things", "things/finalizers", "things/status"], "verbs": ALL})
        );
        // Secrets and ConfigMaps cluster-wide unless narrowed (then
        // crate::secrets binds them per namespace).
        assert_eq!(
            system["rules"][1]["resources"],
            json!(["configmaps", "secrets"])
        );
        let narrow = Revision {
            secrets_cluster_wide: false,
            ..rev("p-1")
        };
        let narrowed = v(&provider_roles(&narrow, &[], &[])[0]);
        assert!(
            !narrowed["rules"].to_string().contains("secrets"),
            "{narrowed}"
        );
        assert_eq!(system["metadata"]["ownerReferences"][0]["controller"], true);
    }

    #[test]
    fn users_get_edit_and_view_through_aggregation_and_the_package_manager_may_list() {
        let roles: Vec<Value> =
            provider_roles(&rev("p-1"), &kinds_of(&names(&["things.x.org"])), &[])
                .iter()
                .map(v)
                .collect();
        assert_eq!(roles[1]["metadata"]["labels"][AGGREGATE_TO_EDIT], "true");
        assert_eq!(roles[1]["rules"][0]["verbs"], json!(ALL));
        assert_eq!(roles[2]["metadata"]["labels"][AGGREGATE_TO_VIEW], "true");
        assert_eq!(
            roles[2]["metadata"]["labels"][AGGREGATE_TO_PACKAGE_MANAGER],
            "true"
        );
        assert_eq!(roles[2]["rules"][0]["verbs"], json!(READ));
        assert_eq!(
            role_names("p-1").to_vec(),
            roles
                .iter()
                .map(|r| r["metadata"]["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_same_crds_in_any_order_give_the_same_roles() {
        let a = provider_roles(&rev("p"), &kinds_of(&names(&["a.x.org", "b.y.org"])), &[]);
        let b = provider_roles(&rev("p"), &kinds_of(&names(&["b.y.org", "a.x.org"])), &[]);
        assert_eq!(a, b);
    }

    #[test]
    fn allowed_requests_join_the_system_role_once_and_in_order() {
        let r = rule("", names(&["nodes"]), &["get"]);
        let roles = provider_roles(&rev("p"), &[], &[r.clone(), r.clone()]);
        let rules = roles[0].rules.as_ref().unwrap();
        assert_eq!(rules.iter().filter(|x| **x == r).count(), 1);
    }

    #[test]
    fn an_extension_gets_every_verb_on_what_it_owns_and_reads_what_it_depends_on() {
        let owns = [kind("redis.example", "redisclusters")];
        let deps = [kind("db.example", "databases")];
        let secrets = rule("", names(&["secrets"]), &["get"]);
        let role = v(&extension_role(
            ("ns", "redis", "u"),
            &owns,
            &deps,
            std::slice::from_ref(&secrets),
        ));
        assert_eq!(
            role["metadata"]["name"],
            "crossplane:extension:ns:redis:system"
        );
        let rules = role["rules"].as_array().unwrap();
        assert_eq!(
            rules[0],
            json!({"apiGroups": ["redis.example"], "resources": ["redisclusters", "redisclusters/finalizers", "redisclusters/status"], "verbs": OWNER})
        );
        assert_eq!(rules[1]["verbs"], json!(READ));
        assert_eq!(rules[2], v(&secrets));
        assert_eq!(role["kind"], "Role");
        assert_eq!(role["metadata"]["namespace"], "ns");
        assert_eq!(role["metadata"]["ownerReferences"][0]["uid"], "u");
    }

    #[test]
    fn the_binding_names_the_runtime_service_account() {
        let b = v(&system_binding("p-1", "u", "sa", "crossplane-system"));
        assert_eq!(b["kind"], "ClusterRoleBinding");
        assert_eq!(
            b["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "sa", "namespace": "crossplane-system"})
        );
        assert_eq!(b["roleRef"]["name"], "crossplane:provider:p-1:system");
    }

    #[test]
    fn an_extensions_rights_are_bound_in_its_namespace_and_only_its_mark_cluster_wide() {
        let b = v(&extension_binding(("ns", "redis", "u"), "redis-controller"));
        assert_eq!(b["kind"], "RoleBinding");
        assert_eq!(b["metadata"]["namespace"], "ns");
        assert_eq!(
            b["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "redis-controller", "namespace": "ns"})
        );
        assert_eq!(
            b["roleRef"],
            json!({"apiGroup": RBAC_GROUP, "kind": "Role", "name": "crossplane:extension:ns:redis:system"})
        );
        let mark = v(&extension_identity(
            ("ns", "redis", "u"),
            "redis-controller",
        ));
        assert_eq!(mark["kind"], "ClusterRoleBinding");
        assert_eq!(
            mark["roleRef"]["name"],
            types::package_identity::CLUSTER_ROLE
        );
        assert_eq!(mark["subjects"], b["subjects"]);
        assert!(mark["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn a_runtime_holds_the_identity_mark_and_its_leases_only_in_its_namespace() {
        let roles = provider_roles(&rev("p-1"), &[], &[]);
        let rules = roles[0].rules.as_ref().unwrap();
        assert!(rules.contains(&identity_marker()));
        assert!(
            !rules
                .iter()
                .any(|r| r.resources.iter().flatten().any(|x| x == "leases")),
            "{rules:?}"
        );
        // The marker is the rbac-manager's: the boundary never sees it.
        assert!(!rules_of(&roles).contains(&identity_marker()));
        let b = v(&leader_election_binding(
            "p-1",
            "u",
            "sa",
            "crossplane-system",
        ));
        assert_eq!(b["kind"], "RoleBinding");
        assert_eq!(b["metadata"]["namespace"], "crossplane-system");
        assert_eq!(b["roleRef"]["name"], LEADER_ELECTION_ROLE);
        assert_eq!(
            b["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "sa", "namespace": "crossplane-system"})
        );
    }
}
