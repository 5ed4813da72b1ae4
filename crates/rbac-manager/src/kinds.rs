//! Which kinds a package is granted rights on because it installed, owns
//! or depends on them: pure decisions from what the API server says about
//! their CRDs.
//!
//! - A revision's installed CRDs ([`installed`]): every kind, except kinds
//!   of a protected group ([`types::is_protected_group`]: Kubernetes' own
//!   and this project's), which are refused (the package-manager refuses to
//!   install them too; this is defence in depth).
//! - An Extension's `customresourcedefinitions` ([`plan`]): a reference to
//!   a protected group is refused (a built-in kind is never "owned", and
//!   `dependsOn` grants read, which for a built-in kind only the allow-list
//!   may grant through `permissions.rules`); a kind no CRD serves yet
//!   waits (neither granted nor refused); `dependsOn` reads the kind of any
//!   other CRD; `owns` grants every verb only on a CRD whose
//!   [`OWNER_ANNOTATION`] names this Extension, which the package-manager
//!   writes only on CRDs it installed for it (a CRD made by hand, by Helm,
//!   or owned by another Extension is refused).
//!
//! What is looked up for an Extension is [`targets`]; how a discovery
//! answer names a kind's plural is [`plural_of`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use types::extensions::v1alpha1::{CrdRef, CrdRefs, OWNER_ANNOTATION};

use crate::{
    boundary::bounded,
    roles::{Kind, kinds_of},
};

/// The most kinds one Extension may name: each costs a discovery request
/// and a CRD read per reconcile, and the list is package content. Real
/// stacks name a handful.
pub const MAX_REFS: usize = 64;

/// How an Extension names a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// `customresourcedefinitions.owns`: every verb.
    Owns,
    /// `customresourcedefinitions.dependsOn`: read.
    DependsOn,
}

impl Relation {
    fn field(self) -> &'static str {
        match self {
            Relation::Owns => "owns",
            Relation::DependsOn => "dependsOn",
        }
    }
}

/// A kind to look up: the API group and version that serve it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// API group (never empty: the core group is protected).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
}

impl Target {
    /// `<group>/<version>`, the discovery path of the kind.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// What the API server says about a [`Target`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// No CRD serves the kind (yet).
    Missing,
    /// The CRD `<plural>.<group>` serves it.
    Crd {
        /// Its plural.
        plural: String,
        /// Its [`OWNER_ANNOTATION`], if any.
        owner: Option<String>,
    },
}

/// What an Extension's CRD references grant.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Kinds it gets every verb on.
    pub owns: Vec<Kind>,
    /// Kinds it may read.
    pub depends_on: Vec<Kind>,
    /// Kinds whose CRD is not served yet (`Kind (apiVersion)`): neither
    /// granted nor refused.
    pub waiting: Vec<String>,
    /// Refused references, each saying why.
    pub refused: Vec<String>,
}

fn describe(r: &CrdRef) -> String {
    bounded(r.to_string())
}

fn dns(s: &str, max: usize, extra: &[char]) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || extra.contains(&c))
}

/// Whose API a protected group is, for a message.
fn whose(group: &str) -> &'static str {
    if types::OWN_API_GROUPS.contains(&group) {
        "a kind of this control plane's own API"
    } else {
        "a built-in kind"
    }
}

/// The kind a reference names, or why it is refused before anything is
/// looked up: a malformed apiVersion or kind, or a protected group.
pub fn target(relation: Relation, r: &CrdRef) -> Result<Target, String> {
    let field = relation.field();
    let (group, version) = r.group_version();
    let kind_ok = !r.kind.is_empty()
        && r.kind.len() <= 63
        && r.kind.chars().all(|c| c.is_ascii_alphanumeric());
    let group_ok = group.is_empty() || dns(group, 253, &['-', '.']);
    if !kind_ok || !group_ok || !dns(version, 63, &['-']) {
        return Err(format!(
            "{field} {}: write the kind's name and its apiVersion as <group>/<version>",
            describe(r)
        ));
    }
    if types::is_protected_group(group) {
        return Err(match relation {
            Relation::Owns => format!("{field} {}: {} cannot be owned", describe(r), whose(group)),
            Relation::DependsOn => format!(
                "{field} {}: {} cannot be depended on (dependsOn grants read; ask for it in spec.permissions.rules, within the allow-list)",
                describe(r),
                whose(group)
            ),
        });
    }
    Ok(Target {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: r.kind.clone(),
    })
}

fn all(refs: &CrdRefs) -> impl Iterator<Item = (Relation, &CrdRef)> {
    refs.owns
        .iter()
        .map(|r| (Relation::Owns, r))
        .chain(refs.depends_on.iter().map(|r| (Relation::DependsOn, r)))
}

fn too_many(refs: &CrdRefs) -> Option<String> {
    let n = refs.owns.len() + refs.depends_on.len();
    (n > MAX_REFS).then(|| {
        format!(
            "spec.customresourcedefinitions names {n} kinds, more than the {MAX_REFS} the rbac-manager looks up"
        )
    })
}

/// The kinds to look up for `refs`, each once: none when there are too
/// many, and none that is refused anyway.
pub fn targets(refs: &CrdRefs) -> Vec<Target> {
    if too_many(refs).is_some() {
        return Vec::new();
    }
    let mut out: Vec<Target> = all(refs)
        .filter_map(|(rel, r)| target(rel, r).ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The plural of `kind` among the resources a group version serves
/// (subresources skipped).
pub fn plural_of(resources: &[APIResource], kind: &str) -> Option<String> {
    resources
        .iter()
        .find(|r| r.kind == kind && !r.name.contains('/'))
        .map(|r| r.name.clone())
}

/// What the references `refs` of Extension `me` (`<namespace>/<name>`)
/// grant, given what was `found` for each [`targets`] entry (a target not
/// in `found` has no CRD).
pub fn plan(me: &str, refs: &CrdRefs, found: &BTreeMap<Target, Found>) -> Plan {
    let mut out = Plan::default();
    if let Some(why) = too_many(refs) {
        out.refused.push(why);
        return out;
    }
    for (relation, r) in all(refs) {
        let t = match target(relation, r) {
            Ok(t) => t,
            Err(why) => {
                out.refused.push(why);
                continue;
            }
        };
        let Some(Found::Crd { plural, owner }) = found.get(&t) else {
            out.waiting.push(describe(r));
            continue;
        };
        let kind = Kind {
            group: t.group.clone(),
            plural: plural.clone(),
        };
        let crd = format!("{plural}.{}", t.group);
        match (relation, owner.as_deref()) {
            (Relation::DependsOn, _) => out.depends_on.push(kind),
            (Relation::Owns, Some(o)) if o == me => out.owns.push(kind),
            (Relation::Owns, Some(o)) => out.refused.push(format!(
                "owns {}: CRD {crd} is owned by Extension {}",
                describe(r),
                bounded(o.to_owned())
            )),
            (Relation::Owns, None) => out.refused.push(format!(
                "owns {}: CRD {crd} was not installed for this Extension (its {OWNER_ANNOTATION} annotation does not name {me}); a stack owns only the CRDs the package-manager installed for it",
                describe(r)
            )),
        }
    }
    for list in [&mut out.owns, &mut out.depends_on] {
        list.sort();
        list.dedup();
    }
    for list in [&mut out.waiting, &mut out.refused] {
        list.sort();
        list.dedup();
    }
    out
}

/// The kinds of the CRDs a revision installed (`<plural>.<group>` names),
/// and the refusal of each in a protected group.
pub fn installed(crd_names: &[String]) -> (Vec<Kind>, Vec<String>) {
    let (protected, kinds): (Vec<Kind>, Vec<Kind>) = kinds_of(crd_names)
        .into_iter()
        .partition(|k| types::is_protected_group(&k.group));
    let refused = protected
        .iter()
        .map(|k| {
            format!(
                "CRD {}: {} is never granted to a package",
                bounded(format!("{}.{}", k.plural, k.group)),
                whose(&k.group)
            )
        })
        .collect();
    (kinds, refused)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    const ME: &str = "ns/redis";

    fn r(kind: &str, api_version: &str) -> CrdRef {
        CrdRef {
            kind: kind.into(),
            api_version: api_version.into(),
        }
    }

    fn refs(owns: &[CrdRef], depends_on: &[CrdRef]) -> CrdRefs {
        CrdRefs {
            owns: owns.to_vec(),
            depends_on: depends_on.to_vec(),
        }
    }

    fn t(group: &str, version: &str, kind: &str) -> Target {
        Target {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    fn crd(plural: &str, owner: Option<&str>) -> Found {
        Found::Crd {
            plural: plural.into(),
            owner: owner.map(str::to_owned),
        }
    }

    fn kind(group: &str, plural: &str) -> Kind {
        Kind {
            group: group.into(),
            plural: plural.into(),
        }
    }

    #[test]
    fn kinds_of_protected_groups_are_refused_before_anything_is_looked_up() {
        let cases: &[(&str, Relation, CrdRef, &str)] = &[
            (
                "owning Group",
                Relation::Owns,
                r("Group", "v1"),
                "owns Group (v1): a built-in kind cannot be owned",
            ),
            (
                "owning User",
                Relation::Owns,
                r("User", "v1"),
                "owns User (v1): a built-in kind cannot be owned",
            ),
            (
                "owning Secret",
                Relation::Owns,
                r("Secret", "v1"),
                "owns Secret (v1): a built-in kind cannot be owned",
            ),
            (
                "owning ServiceAccount",
                Relation::Owns,
                r("ServiceAccount", "v1"),
                "owns ServiceAccount (v1): a built-in kind cannot be owned",
            ),
            (
                "owning ClusterRole",
                Relation::Owns,
                r("ClusterRole", "rbac.authorization.k8s.io/v1"),
                "owns ClusterRole (rbac.authorization.k8s.io/v1): a built-in kind cannot be owned",
            ),
            (
                "owning Deployment",
                Relation::Owns,
                r("Deployment", "apps/v1"),
                "owns Deployment (apps/v1): a built-in kind cannot be owned",
            ),
            (
                "owning the project's Provider",
                Relation::Owns,
                r("Provider", "pkg.crossplane.io/v1"),
                "owns Provider (pkg.crossplane.io/v1): a kind of this control plane's own API cannot be owned",
            ),
            (
                "depending on Secret",
                Relation::DependsOn,
                r("Secret", "v1"),
                "dependsOn Secret (v1): a built-in kind cannot be depended on (dependsOn grants read; ask for it in spec.permissions.rules, within the allow-list)",
            ),
            (
                "a group with a path in it",
                Relation::Owns,
                r("Thing", "x.org/../v1"),
                "owns Thing (x.org/../v1): write the kind's name and its apiVersion as <group>/<version>",
            ),
            (
                "a group without a version",
                Relation::Owns,
                r("RedisCluster", "crossplane.redislabs.com"),
                "owns RedisCluster (crossplane.redislabs.com): write the kind's name and its apiVersion as <group>/<version>",
            ),
            (
                "an empty kind",
                Relation::DependsOn,
                r("", "x.org/v1"),
                "dependsOn  (x.org/v1): write the kind's name and its apiVersion as <group>/<version>",
            ),
        ];
        for (name, rel, cref, want) in cases {
            assert_eq!(target(*rel, cref).unwrap_err(), *want, "{name}");
        }
        assert!(
            targets(&refs(
                &[r("Group", "v1"), r("Provider", "pkg.crossplane.io/v1")],
                &[r("Secret", "v1")]
            ))
            .is_empty()
        );
    }

    #[test]
    fn a_kind_of_another_group_is_looked_up_once_by_group_version_and_kind() {
        let got = targets(&refs(
            &[r("RedisCluster", "cache.example.org/v1alpha1")],
            &[
                r("RedisCluster", "cache.example.org/v1alpha1"),
                r("Database", "db.example.org/v1"),
            ],
        ));
        assert_eq!(
            got,
            [
                t("cache.example.org", "v1alpha1", "RedisCluster"),
                t("db.example.org", "v1", "Database")
            ]
        );
        assert_eq!(got[0].api_version(), "cache.example.org/v1alpha1");
    }

    #[test]
    fn what_an_extension_names_is_granted_waits_or_is_refused() {
        let redis = r("RedisCluster", "cache.example.org/v1alpha1");
        let redis_t = t("cache.example.org", "v1alpha1", "RedisCluster");
        let owned = "owns RedisCluster (cache.example.org/v1alpha1)";
        let cases: &[(&str, Relation, Option<Found>, Plan)] = &[
            (
                "an owned CRD installed for this Extension is granted",
                Relation::Owns,
                Some(crd("redisclusters", Some(ME))),
                Plan {
                    owns: vec![kind("cache.example.org", "redisclusters")],
                    ..Default::default()
                },
            ),
            (
                "an owned CRD another Extension owns is refused",
                Relation::Owns,
                Some(crd("redisclusters", Some("other/redis"))),
                Plan {
                    refused: vec![format!(
                        "{owned}: CRD redisclusters.cache.example.org is owned by Extension other/redis"
                    )],
                    ..Default::default()
                },
            ),
            (
                "an owned CRD nobody installed for a stack is refused",
                Relation::Owns,
                Some(crd("redisclusters", None)),
                Plan {
                    refused: vec![format!(
                        "{owned}: CRD redisclusters.cache.example.org was not installed for this Extension (its extensions.crossplane.io/owner annotation does not name ns/redis); a stack owns only the CRDs the package-manager installed for it"
                    )],
                    ..Default::default()
                },
            ),
            (
                "an owned kind without a CRD waits",
                Relation::Owns,
                None,
                Plan {
                    waiting: vec!["RedisCluster (cache.example.org/v1alpha1)".into()],
                    ..Default::default()
                },
            ),
            (
                "a kind depended on is read whoever owns its CRD",
                Relation::DependsOn,
                Some(crd("redisclusters", Some("other/redis"))),
                Plan {
                    depends_on: vec![kind("cache.example.org", "redisclusters")],
                    ..Default::default()
                },
            ),
            (
                "a kind depended on without a CRD waits",
                Relation::DependsOn,
                Some(Found::Missing),
                Plan {
                    waiting: vec!["RedisCluster (cache.example.org/v1alpha1)".into()],
                    ..Default::default()
                },
            ),
        ];
        for (name, rel, found, want) in cases {
            let refs = match rel {
                Relation::Owns => refs(std::slice::from_ref(&redis), &[]),
                Relation::DependsOn => refs(&[], std::slice::from_ref(&redis)),
            };
            let found: BTreeMap<Target, Found> =
                found.iter().map(|f| (redis_t.clone(), f.clone())).collect();
            assert_eq!(plan(ME, &refs, &found), *want, "{name}");
        }
    }

    #[test]
    fn a_refused_reference_does_not_hide_the_others() {
        let p = plan(
            ME,
            &refs(
                &[r("Group", "v1"), r("Thing", "x.org/v1")],
                &[r("Other", "y.org/v1")],
            ),
            &BTreeMap::from([
                (t("x.org", "v1", "Thing"), crd("things", Some(ME))),
                (t("y.org", "v1", "Other"), crd("others", None)),
            ]),
        );
        assert_eq!(p.owns, [kind("x.org", "things")]);
        assert_eq!(p.depends_on, [kind("y.org", "others")]);
        assert_eq!(
            p.refused,
            ["owns Group (v1): a built-in kind cannot be owned"]
        );
    }

    #[test]
    fn an_extension_naming_too_many_kinds_is_refused_without_lookups() {
        let many: Vec<CrdRef> = (0..=MAX_REFS)
            .map(|i| r(&format!("K{i}"), "x.org/v1"))
            .collect();
        let refs = refs(&many, &[]);
        assert!(targets(&refs).is_empty());
        let p = plan(ME, &refs, &BTreeMap::new());
        assert_eq!(p.refused.len(), 1);
        assert!(p.refused[0].contains("65 kinds"), "{:?}", p.refused);
        assert!(p.owns.is_empty() && p.waiting.is_empty());
    }

    #[test]
    fn the_plural_comes_from_discovery_and_not_from_a_subresource() {
        let res = |name: &str, kind: &str| APIResource {
            name: name.into(),
            kind: kind.into(),
            ..Default::default()
        };
        let served = [
            res("redisclusters/status", "RedisCluster"),
            res("redisclusters", "RedisCluster"),
        ];
        assert_eq!(
            plural_of(&served, "RedisCluster").as_deref(),
            Some("redisclusters")
        );
        assert_eq!(plural_of(&served, "Other"), None);
    }

    #[test]
    fn a_revision_is_granted_the_kinds_it_installed_except_protected_ones() {
        let names: Vec<String> = [
            "things.x.org",
            "providers.pkg.crossplane.io",
            "widgets.apps.k8s.io",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let (kinds, refused) = installed(&names);
        assert_eq!(kinds, [kind("x.org", "things")]);
        assert_eq!(
            refused,
            [
                "CRD widgets.apps.k8s.io: a built-in kind is never granted to a package",
                "CRD providers.pkg.crossplane.io: a kind of this control plane's own API is never granted to a package",
            ]
        );
    }
}
