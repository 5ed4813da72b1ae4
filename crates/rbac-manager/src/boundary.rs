//! The one permission boundary: what a package revision's or an Extension's
//! roles may grant at all.
//!
//! Every rule the rbac-manager renders passes [`check`] before any role is
//! written: the rules a package asks for (a revision's
//! `status.permissionRequests`, an Extension's
//! `permissions.rules`) must be covered by the allow-list ClusterRole
//! (`--allowed-permissions-clusterrole`), and no rendered rule at all, asked
//! for or derived from the kinds a package installed, owns or depends on,
//! may hold a right on the fixed never-grantable list
//! ([`never_grantable`]), whatever the allow-list says: those rights turn a
//! package's ServiceAccount into anyone it likes (impersonate, token
//! creation, exec into pods, the kubelet's API), let it write its own
//! grants (RBAC writes, escalate, bind, certificate approval and signing),
//! or let it rewrite the cluster's or this control plane's API (admission
//! webhooks, CRDs, the project's own groups). Which kinds may be derived at
//! all is [`crate::kinds`]'s decision.
//!
//! What is refused is collected in [`Refusals`], whose message names each
//! refused item and how to allow it (or that it never can be).

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The most verb/resource/group combinations the requests of one package
/// may name. Real packages ask for a few dozen; the requests are package
/// content, and checking them costs their cross product, so a bound keeps
/// a crafted package from holding a worker.
pub const MAX_ITEMS: usize = 4096;
/// How many items of one kind a message lists: a condition keeps at most
/// 1024 bytes of a message (runtime::conditions::MAX_MESSAGE), so a longer
/// list would only be cut off.
const LISTED: usize = 8;
/// How many characters of one piece of package text a message quotes.
pub const ITEM_CHARS: usize = 120;

/// Verbs that are never granted: each lets the holder act as someone else
/// or grant what it does not hold.
const NEVER_VERBS: [&str; 5] = ["impersonate", "escalate", "bind", "approve", "sign"];
/// Subresources that are never granted: a ServiceAccount's tokens, the
/// kubelet's API, and running commands in (or attaching to) any pod.
const NEVER_RESOURCES: [&str; 6] = [
    "serviceaccounts/token",
    "nodes/proxy",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "pods/ephemeralcontainers",
];
/// The verbs that change something.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
/// Groups no package may write: RBAC (its own grants), admission (webhooks
/// that see and change every request), CRDs (the API itself), certificates
/// (client certificates for any user). The project's own groups
/// ([`types::OWN_API_GROUPS`]) are added in [`never_grantable`].
const WRITE_PROTECTED_GROUPS: [&str; 4] = [
    "rbac.authorization.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "certificates.k8s.io",
];

/// Whether `verb` on `resource` of `group` is never granted, whatever the
/// allow-list says: a wildcard anywhere, anything in the package-identity
/// marker's group ([`types::package_identity`]), a verb of [`NEVER_VERBS`], a
/// resource of [`NEVER_RESOURCES`], or a write to a group of
/// [`WRITE_PROTECTED_GROUPS`] or of this project's own API.
pub fn never_grantable(group: &str, resource: &str, verb: &str) -> bool {
    let verb = verb.to_ascii_lowercase();
    let resource = resource.to_ascii_lowercase();
    let group = group.to_ascii_lowercase();
    [&group, &resource, &verb].iter().any(|s| s.contains('*'))
        // The package-identity marker: holding its other name would make a
        // package identity look like the control plane to the admission
        // policy, and its own name is the rbac-manager's to give.
        || group == types::package_identity::GROUP
        || NEVER_VERBS.contains(&verb.as_str())
        || NEVER_RESOURCES.contains(&resource.as_str())
        || (WRITE_VERBS.contains(&verb.as_str())
            && (WRITE_PROTECTED_GROUPS.contains(&group.as_str())
                || types::OWN_API_GROUPS.contains(&group.as_str())))
}

/// What one reconcile refused, by why.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Items (`<verb> <resource> (group "<group>")`) no allow-list can
    /// make grantable.
    pub never: BTreeSet<String>,
    /// Items the allow-list does not cover.
    pub not_allowed: BTreeSet<String>,
    /// Everything else, each with its own reason and fix (a kind that
    /// cannot be owned, a rule that cannot be read).
    pub other: BTreeSet<String>,
}

impl Refusals {
    /// Whether nothing was refused.
    pub fn is_empty(&self) -> bool {
        self.never.is_empty() && self.not_allowed.is_empty() && self.other.is_empty()
    }

    /// Refuses `item`, which says why itself (and bounds the package text
    /// it quotes).
    pub fn refuse(&mut self, item: impl Into<String>) {
        self.other.insert(item.into());
    }

    /// Adds what `other` refused.
    pub fn merge(&mut self, other: Refusals) {
        self.never.extend(other.never);
        self.not_allowed.extend(other.not_allowed);
        self.other.extend(other.other);
    }

    /// The RBACReady message: each refused item, and how to allow it
    /// (through ClusterRole `allowed_role`) or that it never can be.
    pub fn message(&self, allowed_role: &str) -> String {
        let mut parts: Vec<String> = listed(&self.other, "; ").into_iter().collect();
        if let Some(never) = listed(&self.never, ", ") {
            parts.push(format!(
                "never grantable, whatever the allow-list says: {never}"
            ));
        }
        if let Some(missing) = listed(&self.not_allowed, ", ") {
            parts.push(format!(
                "not in the allow-list: {missing}; add them to ClusterRole {allowed_role} (--allowed-permissions-clusterrole) to allow them"
            ));
        }
        format!("refused: {}", parts.join("; "))
    }
}

/// At most [`LISTED`] of `items` joined by `sep`, saying how many more
/// there are; `None` for none.
fn listed(items: &BTreeSet<String>, sep: &str) -> Option<String> {
    if items.is_empty() {
        return None;
    }
    let mut out = items
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(sep);
    if items.len() > LISTED {
        out.push_str(&format!("{sep}and {} more", items.len() - LISTED));
    }
    Some(out)
}

/// `s` (package text) cut to [`ITEM_CHARS`] characters.
pub fn bounded(s: String) -> String {
    if s.chars().count() <= ITEM_CHARS {
        return s;
    }
    let mut cut: String = s.chars().take(ITEM_CHARS).collect();
    cut.push('…');
    cut
}

fn item(group: &str, resource: &str, verb: &str) -> String {
    bounded(format!("{verb} {resource} (group \"{group}\")"))
}

fn list(field: Option<&Vec<String>>) -> &[String] {
    field.map_or(&[], Vec::as_slice)
}

/// How many verb/resource/group combinations `rule` names.
fn size(rule: &PolicyRule) -> usize {
    list(rule.api_groups.as_ref())
        .len()
        .saturating_mul(list(rule.resources.as_ref()).len())
        .saturating_mul(rule.verbs.len())
}

/// Each verb/resource/group combination of `rule`.
fn items(rule: &PolicyRule) -> impl Iterator<Item = (&str, &str, &str)> {
    list(rule.api_groups.as_ref()).iter().flat_map(move |g| {
        list(rule.resources.as_ref()).iter().flat_map(move |r| {
            rule.verbs
                .iter()
                .map(move |v| (g.as_str(), r.as_str(), v.as_str()))
        })
    })
}

fn covers(allowed: Option<&Vec<String>>, wanted: &str) -> bool {
    list(allowed).iter().any(|a| a == "*" || a == wanted)
}

/// Whether a rule of `allowed` covers `verb` on `resource` of `group`. An
/// allowed rule limited to resourceNames (or naming nonResourceURLs)
/// covers nothing: a request is granted for every name it asks for.
fn allowed_by(allowed: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    allowed.iter().any(|a| {
        a.resource_names.as_ref().is_none_or(Vec::is_empty)
            && a.non_resource_urls.as_ref().is_none_or(Vec::is_empty)
            && covers(a.api_groups.as_ref(), group)
            && covers(a.resources.as_ref(), resource)
            && a.verbs.iter().any(|v| v == "*" || v == verb)
    })
}

/// The boundary: what of `requested` (the rules a package asks for) the
/// allow-list rules `allowed` do not cover or that is never grantable, and
/// what of `rendered` (every rule of the roles about to be written,
/// requested or derived) is never grantable. A requested rule naming
/// nonResourceURLs, or missing apiGroups, resources or verbs, is refused
/// whole; one naming resourceNames is checked as if it named none.
pub fn check(
    requested: &[PolicyRule],
    rendered: &[PolicyRule],
    allowed: &[PolicyRule],
) -> Refusals {
    let mut out = Refusals::default();
    let total = requested
        .iter()
        .map(size)
        .fold(0usize, usize::saturating_add);
    if total > MAX_ITEMS {
        out.refuse(format!(
            "the requested rules name {total} verb/resource/group combinations, more than the {MAX_ITEMS} the rbac-manager checks: ask for fewer"
        ));
        return out;
    }
    for rule in requested {
        if rule
            .non_resource_urls
            .as_ref()
            .is_some_and(|u| !u.is_empty())
            || size(rule) == 0
        {
            let text = serde_json::to_string(rule).unwrap_or_default();
            out.refuse(format!(
                "{} (only apiGroups, resources and verbs can be granted)",
                bounded(text)
            ));
            continue;
        }
        for (g, r, v) in items(rule) {
            if never_grantable(g, r, v) {
                out.never.insert(item(g, r, v));
            } else if !allowed_by(allowed, g, r, v) {
                out.not_allowed.insert(item(g, r, v));
            }
        }
    }
    // Derived rules are bounded by the kinds they come from; the requested
    // ones among them were counted above.
    for rule in rendered {
        for (g, r, v) in items(rule) {
            if never_grantable(g, r, v) {
                out.never.insert(item(g, r, v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let s = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(s(groups)),
            resources: Some(s(resources)),
            verbs: s(verbs),
            ..Default::default()
        }
    }

    #[test]
    fn rights_that_make_a_package_someone_else_are_never_grantable() {
        let cases: &[(&str, (&str, &str, &str), bool)] = &[
            (
                "impersonating service accounts",
                ("", "serviceaccounts", "impersonate"),
                true,
            ),
            ("impersonating groups", ("", "groups", "impersonate"), true),
            (
                "the package-identity marker, under either name",
                ("identity.crossplane-rs.io", "identities", "mark"),
                true,
            ),
            (
                "escalating roles",
                ("rbac.authorization.k8s.io", "clusterroles", "escalate"),
                true,
            ),
            (
                "binding roles",
                ("rbac.authorization.k8s.io", "clusterroles", "bind"),
                true,
            ),
            (
                "approving certificates",
                ("certificates.k8s.io", "signers", "approve"),
                true,
            ),
            (
                "signing certificates",
                ("certificates.k8s.io", "signers", "sign"),
                true,
            ),
            ("any verb", ("", "configmaps", "*"), true),
            ("any resource", ("", "*", "get"), true),
            ("any group", ("*", "configmaps", "get"), true),
            (
                "a subresource of any resource",
                ("", "*/exec", "create"),
                true,
            ),
            (
                "creating tokens",
                ("", "serviceaccounts/token", "create"),
                true,
            ),
            ("the kubelet's API", ("", "nodes/proxy", "get"), true),
            ("exec into pods", ("", "pods/exec", "create"), true),
            ("attaching to pods", ("", "pods/attach", "get"), true),
            ("port-forwarding", ("", "pods/portforward", "create"), true),
            (
                "ephemeral containers",
                ("", "pods/ephemeralcontainers", "patch"),
                true,
            ),
            (
                "writing bindings",
                ("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
                true,
            ),
            (
                "writing webhooks",
                (
                    "admissionregistration.k8s.io",
                    "validatingwebhookconfigurations",
                    "patch",
                ),
                true,
            ),
            (
                "deleting CRDs",
                (
                    "apiextensions.k8s.io",
                    "customresourcedefinitions",
                    "delete",
                ),
                true,
            ),
            (
                "creating certificate requests",
                (
                    "certificates.k8s.io",
                    "certificatesigningrequests",
                    "create",
                ),
                true,
            ),
            (
                "writing the project's own kinds",
                ("pkg.crossplane.io", "providers", "update"),
                true,
            ),
            (
                "deleting many of the project's kinds",
                (
                    "workload.crossplane.io",
                    "kubernetesapplications",
                    "deletecollection",
                ),
                true,
            ),
            (
                "a verb in capitals",
                ("", "serviceaccounts", "Impersonate"),
                true,
            ),
            (
                "reading roles",
                ("rbac.authorization.k8s.io", "clusterroles", "get"),
                false,
            ),
            (
                "reading CRDs",
                ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
                false,
            ),
            ("writing configmaps", ("", "configmaps", "create"), false),
            ("writing secrets", ("", "secrets", "delete"), false),
            ("a package's own kind", ("x.org", "things", "create"), false),
        ];
        for (name, (g, r, v), never) in cases {
            assert_eq!(never_grantable(g, r, v), *never, "{name}");
        }
    }

    #[test]
    fn a_request_outside_the_allow_list_is_refused_verb_by_verb() {
        let allowed = [
            rule(&[""], &["nodes"], &["get", "list"]),
            rule(&["apps"], &["*"], &["*"]),
        ];
        let requested = [
            rule(&[""], &["nodes"], &["get", "delete"]),
            rule(&["apps"], &["deployments"], &["create"]),
        ];
        let r = check(&requested, &requested, &allowed);
        assert_eq!(
            r.not_allowed.iter().collect::<Vec<_>>(),
            ["delete nodes (group \"\")"]
        );
        assert!(r.never.is_empty() && r.other.is_empty());
    }

    #[test]
    fn the_allow_list_cannot_make_a_never_grantable_right_grantable() {
        let allowed = [rule(&["*"], &["*"], &["*"])];
        let requested = [
            rule(&[""], &["serviceaccounts"], &["*"]),
            rule(&[""], &["users", "groups"], &["impersonate"]),
        ];
        let r = check(&requested, &requested, &allowed);
        assert_eq!(
            r.never.iter().collect::<Vec<_>>(),
            [
                "* serviceaccounts (group \"\")",
                "impersonate groups (group \"\")",
                "impersonate users (group \"\")"
            ]
        );
        assert!(r.not_allowed.is_empty());
    }

    #[test]
    fn a_never_grantable_right_is_not_also_listed_as_missing_from_the_allow_list() {
        let requested = [rule(
            &["rbac.authorization.k8s.io"],
            &["clusterroles"],
            &["bind"],
        )];
        let r = check(&requested, &requested, &[]);
        assert_eq!(r.never.len(), 1);
        assert!(r.not_allowed.is_empty());
    }

    #[test]
    fn a_derived_rule_that_is_never_grantable_is_refused_though_nobody_asked_for_it() {
        let derived = [rule(&["x.org"], &["things"], &["*"])];
        let r = check(&[], &derived, &[]);
        assert_eq!(
            r.never.iter().collect::<Vec<_>>(),
            ["* things (group \"x.org\")"]
        );
    }

    #[test]
    fn rules_that_are_not_resource_rules_are_refused_whole() {
        let urls = PolicyRule {
            non_resource_urls: Some(vec!["/metrics".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        };
        let no_verbs = rule(&[""], &["configmaps"], &[]);
        let r = check(&[urls, no_verbs], &[], &[rule(&["*"], &["*"], &["*"])]);
        assert_eq!(r.other.len(), 2);
        assert!(
            r.other
                .iter()
                .all(|m| m.contains("only apiGroups, resources and verbs"))
        );
    }

    #[test]
    fn a_request_limited_to_resource_names_is_checked_like_one_without() {
        let mut named = rule(&[""], &["configmaps"], &["get"]);
        named.resource_names = Some(vec!["one".into()]);
        let allowed = [rule(&[""], &["configmaps"], &["get"])];
        assert!(check(&[named.clone()], &[named], &allowed).is_empty());
    }

    #[test]
    fn an_allowed_rule_limited_to_resource_names_allows_nothing() {
        let mut allowed = rule(&[""], &["configmaps"], &["get"]);
        allowed.resource_names = Some(vec!["one".into()]);
        let requested = [rule(&[""], &["configmaps"], &["get"])];
        assert_eq!(
            check(&requested, &requested, &[allowed]).not_allowed.len(),
            1
        );
    }

    #[test]
    fn requests_naming_too_many_combinations_are_refused_without_expanding_them() {
        let many: Vec<String> = (0..100).map(|i| format!("r{i}")).collect();
        let big = PolicyRule {
            api_groups: Some(many.clone()),
            resources: Some(many.clone()),
            verbs: many,
            ..Default::default()
        };
        let r = check(std::slice::from_ref(&big), &[], &[]);
        assert_eq!(r.other.len(), 1);
        assert!(r.never.is_empty() && r.not_allowed.is_empty());
        assert!(r.message("x").contains("1000000 verb/resource/group"));
    }

    #[test]
    fn the_message_names_each_refusal_and_how_to_allow_it() {
        let mut r = Refusals::default();
        r.refuse("owns Group (v1): a built-in kind cannot be owned");
        r.never
            .insert("impersonate serviceaccounts (group \"\")".into());
        r.not_allowed.insert("delete nodes (group \"\")".into());
        assert_eq!(
            r.message("allowed"),
            "refused: owns Group (v1): a built-in kind cannot be owned; never grantable, whatever the allow-list says: impersonate serviceaccounts (group \"\"); not in the allow-list: delete nodes (group \"\"); add them to ClusterRole allowed (--allowed-permissions-clusterrole) to allow them"
        );
    }

    #[test]
    fn a_long_list_of_refusals_is_cut_and_says_how_many_more() {
        let mut r = Refusals::default();
        for i in 0..20 {
            r.not_allowed.insert(format!("get r{i:02} (group \"\")"));
        }
        let m = r.message("allowed");
        assert!(m.contains("and 12 more"), "{m}");
        assert!(m.len() < 1024, "{m}");
    }
}
