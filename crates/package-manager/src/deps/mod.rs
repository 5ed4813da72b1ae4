//! Dependencies (a package's `spec.dependsOn`), worked out from the
//! installed packages themselves: each Provider's revisions carry the
//! repositories their package depends on ([`labels::DEPENDENCIES`]), so
//! there is no lock object to keep in step or to poison.
//!
//! That record is a revision's one source of its dependencies (upstream
//! keeps them in its lock): written once from the package when the
//! revision is made ([`record`]), read to install them ([`declared`], which
//! takes from the package only each one's version), to release them and to
//! find cycles ([`dependencies_of`]).
//!
//! A dependency that is not installed is installed as its own Provider, at
//! the highest semver tag of its repository that satisfies the range
//! (tags that are not full semver versions are skipped), or at the digest
//! the dependency names; it inherits the dependent's pull secrets and is
//! labelled [`labels::DEPENDENCY`], so it is removed when no installed
//! package depends on it any more. A Provider the user installed is never
//! removed. Missing, incompatible and cyclic dependencies are reported on
//! the dependent's revision, naming them.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use kube::{
    Api, ResourceExt,
    api::{ObjectMeta, PostParams},
    runtime::reflector::Store,
};
use oci::{Digest, xpkg};
use types::pkg::v1::{Provider, ProviderRevision, ProviderSpec, RevisionState};

use crate::{labels, packages::Packages};

/// What resolving a revision's dependencies found.
#[derive(Debug, Default)]
pub struct Report {
    /// Dependencies the package declares.
    pub found: usize,
    /// Of those, installed (including ones installed just now).
    pub installed: usize,
    /// What is wrong with the others, one clause each.
    pub problems: Vec<String>,
    /// Providers created by this resolution.
    pub created: Vec<String>,
    /// Dependency Providers moved to another version by this resolution:
    /// (Provider, from, to, why).
    pub moved: Vec<Moved>,
}

mod moves;
mod record;
mod versions;
pub use moves::Moved;
use moves::move_dependency;
pub use record::{dependencies_of, record, record_versions};
pub use versions::crossplane_admits;
use versions::{Requirement, requirement, version_of};

/// A Provider name for a dependency's repository: its last path segment.
fn provider_name(repository: &str) -> String {
    crate::packages::object_name(repository, "dependency")
}

/// Installed packages by repository: the Provider and the repositories its
/// newest revision depends on.
fn installed(
    providers: &[Arc<Provider>],
    revisions: &[Arc<ProviderRevision>],
) -> BTreeMap<String, (Arc<Provider>, Vec<String>)> {
    providers
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let uid = p.uid();
            let deps = revisions
                .iter()
                .filter(|r| {
                    r.owner_references()
                        .iter()
                        .any(|o| Some(&o.uid) == uid.as_ref())
                })
                .max_by_key(|r| {
                    (
                        r.spec.desired_state == RevisionState::Active,
                        r.spec.revision,
                    )
                })
                .map(|r| dependencies_of(r))
                .unwrap_or_default();
            (xpkg::repository_of(&p.spec.package), (p.clone(), deps))
        })
        .collect()
}

/// The dependencies to install for revision `r`: those its record names,
/// with the version each has in the package's `depends_on`.
pub fn declared(r: &ProviderRevision, depends_on: &[xpkg::Dependency]) -> Vec<xpkg::Dependency> {
    let recorded = dependencies_of(r);
    depends_on
        .iter()
        .filter(|d| recorded.contains(&xpkg::repository_of(&d.package)))
        .cloned()
        .collect()
}

/// The most dependencies one package may declare.
pub const MAX_DEPENDENCIES: usize = 32;
/// The most levels a chain of dependencies may have below a package
/// nobody depends on (the one the user installed is level 1).
pub const MAX_DEPTH: usize = 8;
/// The most Providers one package nobody depends on may bring in through
/// its dependencies, theirs, and so on.
pub const MAX_TRANSITIVE: usize = 64;

/// Why installing the dependencies of `own` (its edges already in `graph`:
/// repository → the repositories it depends on) would grow a dependency
/// graph past a bound: too many of its own ([`MAX_DEPENDENCIES`]), a chain
/// too deep ([`MAX_DEPTH`], named from the package the user installed), or
/// too many Providers under one such package ([`MAX_TRANSITIVE`]). Pure.
pub fn past_bounds(graph: &BTreeMap<String, Vec<String>>, own: &str) -> Option<String> {
    let declared = graph.get(own).map_or(0, Vec::len);
    if declared > MAX_DEPENDENCIES {
        return Some(format!(
            "the package declares {declared} dependencies (spec.dependsOn), more than the {MAX_DEPENDENCIES} one package may have: none is installed"
        ));
    }
    if declared == 0 {
        return None;
    }
    let chain = longest_chain_to(graph, own);
    if chain.len() >= MAX_DEPTH {
        return Some(format!(
            "its dependencies would be level {} of the chain {} → …, more than the {MAX_DEPTH} levels a chain of dependencies may have below the package that was installed: none is installed",
            chain.len() + 1,
            chain.join(" → ")
        ));
    }
    // Every package on a chain that is too deep says so, up to the one the
    // user installed: each is woken when a dependency of its changes, so
    // the refusal climbs the chain.
    let below = longest_chain_from(graph, own);
    let levels = chain.len() + below.len() - 1;
    if levels > MAX_DEPTH {
        let whole: Vec<&str> = chain
            .iter()
            .chain(below.iter().skip(1))
            .map(String::as_str)
            .collect();
        return Some(format!(
            "its dependency chain {} is {levels} levels deep, more than the {MAX_DEPTH} levels a chain of dependencies may have below the package that was installed: no further dependency is installed",
            whole.join(" → ")
        ));
    }
    for root in roots_above(graph, own) {
        let below = reachable(&root, |p| graph.get(p).into_iter().flatten().collect());
        let n = below.len().saturating_sub(1);
        if n > MAX_TRANSITIVE {
            return Some(format!(
                "with its dependencies, {root} would bring in {n} Providers, more than the {MAX_TRANSITIVE} one installed package may: none is installed"
            ));
        }
    }
    None
}

/// The dependents of `to` in `graph`.
fn dependents<'a>(graph: &'a BTreeMap<String, Vec<String>>, to: &str) -> Vec<&'a String> {
    graph
        .iter()
        .filter(|(_, deps)| deps.iter().any(|d| d == to))
        .map(|(k, _)| k)
        .collect()
}

/// The longest chain of dependents ending in `to`, from a package nobody
/// depends on (`to` last).
fn longest_chain_to(graph: &BTreeMap<String, Vec<String>>, to: &str) -> Vec<String> {
    let mut chain = longest_walk(
        to,
        &|p| dependents(graph, p),
        &mut Vec::new(),
        &mut BTreeMap::new(),
    );
    chain.reverse();
    chain
}

/// The longest chain of dependencies from `from` (`from` first).
fn longest_chain_from(graph: &BTreeMap<String, Vec<String>>, from: &str) -> Vec<String> {
    longest_walk(
        from,
        &|p| graph.get(p).into_iter().flatten().collect(),
        &mut Vec::new(),
        &mut BTreeMap::new(),
    )
}

/// The longest walk from `start` (first) along `next`; a cycle ends a
/// walk (`path` holds the walk so far). Each package's longest walk is
/// worked out once (`memo`), so a lattice of packages that share
/// dependencies costs one visit per edge, not one per chain; a remembered
/// walk that crosses `path` (a cycle) is worked out again.
fn longest_walk<'a>(
    start: &str,
    next: &impl Fn(&str) -> Vec<&'a String>,
    path: &mut Vec<String>,
    memo: &mut BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    if let Some(walk) = memo.get(start)
        && !walk.iter().any(|p| path.contains(p))
    {
        return walk.clone();
    }
    path.push(start.to_owned());
    let mut best = Vec::new();
    for n in next(start) {
        if path.contains(n) {
            continue;
        }
        let walk = longest_walk(n, next, path, memo);
        if walk.len() > best.len() {
            best = walk;
        }
    }
    path.pop();
    best.insert(0, start.to_owned());
    memo.insert(start.to_owned(), best.clone());
    best
}

/// Every package reached from `start` along `next`, `start` included.
fn reachable<'a>(start: &str, next: impl Fn(&str) -> Vec<&'a String>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![start.to_owned()];
    while let Some(p) = stack.pop() {
        if seen.insert(p.clone()) {
            stack.extend(next(&p).into_iter().cloned());
        }
    }
    seen
}

/// The packages nobody depends on from which `to` is reached (`to` itself
/// when nobody depends on it).
fn roots_above(graph: &BTreeMap<String, Vec<String>>, to: &str) -> BTreeSet<String> {
    let mut above = reachable(to, |p| dependents(graph, p));
    above.retain(|p| dependents(graph, p).is_empty());
    above
}

/// A path from `from` back to `to` through the dependency graph, if any.
fn path_back(
    graph: &BTreeMap<String, Vec<String>>,
    from: &str,
    to: &str,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if from == to {
        return Some(vec![to.to_owned()]);
    }
    if !seen.insert(from.to_owned()) {
        return None;
    }
    for next in graph.get(from).into_iter().flatten() {
        if let Some(mut rest) = path_back(graph, next, to, seen) {
            rest.insert(0, from.to_owned());
            return Some(rest);
        }
    }
    None
}

/// Resolves (and installs what is missing of) the dependencies of the
/// active revision `r` whose package declares `deps`.
pub async fn resolve(
    client: &kube::Client,
    packages: &Packages,
    providers: &Store<Provider>,
    revisions: &[Arc<ProviderRevision>],
    r: &ProviderRevision,
    deps: &[xpkg::Dependency],
    allow_downgrades: bool,
) -> Result<Report, kube::Error> {
    let mut report = Report {
        found: deps.len(),
        ..Report::default()
    };
    let all = providers.state();
    let installed = installed(&all, revisions);
    let own = xpkg::repository_of(&r.spec.package);
    let mut graph: BTreeMap<String, Vec<String>> = installed
        .iter()
        .map(|(k, (_, d))| (k.clone(), d.clone()))
        .collect();
    graph.insert(
        own.clone(),
        deps.iter()
            .map(|d| xpkg::repository_of(&d.package))
            .collect(),
    );
    if let Some(why) = past_bounds(&graph, &own) {
        report.problems.push(why);
        return Ok(report);
    }
    let api = Api::<Provider>::all(client.clone());
    for dep in deps {
        let repository = xpkg::repository_of(&dep.package);
        // Only Providers are implemented here: a Configuration or a
        // Function is not installed as one.
        if !matches!(dep.kind.as_str(), "provider" | "") {
            report.problems.push(format!(
                "dependency {repository} is a {kind} package ({kind}: in spec.dependsOn), which this package manager does not install (it installs Providers); install it another way and set skipDependencyResolution, or drop the dependency",
                kind = dep.kind
            ));
            continue;
        }
        if let Some(path) = path_back(&graph, &repository, &own, &mut BTreeSet::new()) {
            report
                .problems
                .push(format!("dependency cycle: {own} → {}", path.join(" → ")));
            continue;
        }
        let req = match requirement(&dep.version) {
            Ok(r) => r,
            Err(e) => {
                report
                    .problems
                    .push(format!("dependency {repository}: {e}"));
                continue;
            }
        };
        if let Some((p, _)) = installed.get(&repository) {
            let ok = match &req {
                Requirement::Digest(d) => p.spec.package.ends_with(&format!("@{d}")),
                Requirement::Range(range) => {
                    version_of(&p.spec.package).is_some_and(|v| range.matches(&v))
                }
            };
            if ok {
                report.installed += 1;
                continue;
            }
            match &req {
                Requirement::Range(_)
                    if p.labels().get(labels::DEPENDENCY).is_some_and(|v| v == "true")
                        && version_of(&p.spec.package).is_some() =>
                {
                    let moved = move_dependency(
                        &api, packages, &all, revisions, r, p, dep, allow_downgrades,
                    )
                    .await?;
                    match moved {
                        Ok(m) => {
                            report.problems.push(format!(
                                "dependency {repository} is moving from {} to {}",
                                m.from, m.to
                            ));
                            report.moved.push(m);
                        }
                        Err(why) => report.problems.push(why),
                    }
                }
                _ => report.problems.push(format!(
                    "dependency {repository} {} is incompatible: Provider {} installs {}{}",
                    dep.version,
                    p.name_any(),
                    p.spec.package,
                    if p.labels().get(labels::DEPENDENCY).is_some_and(|v| v == "true") {
                        ""
                    } else {
                        " (installed by hand: the package-manager moves only the dependencies it installed)"
                    }
                )),
            }
            continue;
        }
        if let Some(why) = held_back(&all, r, &repository) {
            report.problems.push(why);
            continue;
        }
        let package =
            match &req {
                Requirement::Digest(d) => format!("{repository}@{d}"),
                Requirement::Range(range) => {
                    let tags = match packages
                        .tags(&repository, &r.spec.package_pull_secrets)
                        .await
                    {
                        Ok(t) => t,
                        Err(e) => {
                            report.problems.push(format!(
                                "dependency {repository} is missing: cannot list its tags: {}",
                                runtime::events::error_chain(&e)
                            ));
                            continue;
                        }
                    };
                    let best = xpkg::semver_tags(&tags)
                        .into_iter()
                        .filter(|(v, _)| range.matches(v))
                        .max_by(|a, b| a.0.cmp(&b.0));
                    match best {
                        Some((_, tag)) => format!("{repository}:{tag}"),
                        None => {
                            report.problems.push(format!(
                            "dependency {repository} is missing: no tag satisfies {} (tags: {})",
                            dep.version,
                            if tags.is_empty() { "none".to_owned() } else { tags.join(", ") }
                        ));
                            continue;
                        }
                    }
                }
            };
        let mut name = provider_name(&repository);
        if all.iter().any(|p| p.name_any() == name) {
            let d = Digest::of(repository.as_bytes());
            name = format!("{name}-{}", d.hex().get(..6).unwrap_or_default());
        }
        let provider = Provider {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    labels::DEPENDENCY.to_owned(),
                    "true".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            spec: ProviderSpec {
                package,
                package_pull_secrets: r.spec.package_pull_secrets.clone(),
                ..ProviderSpec::default()
            },
            status: None,
        };
        match api.create(&PostParams::default(), &provider).await {
            Ok(_) => report.created.push(name),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        report.installed += 1;
    }
    Ok(report)
}

/// Why a dependency on `repository` is not installed now, though no live
/// Provider installs it: the revision's own Provider is being deleted
/// (what it needs goes with it), or a Provider of that repository is being
/// deleted (installing another beside it would keep a released dependency
/// alive: in a cycle, each would hold the other). Once the deletion is
/// done, the next reconcile installs it if it is still wanted.
fn held_back(all: &[Arc<Provider>], r: &ProviderRevision, repository: &str) -> Option<String> {
    let deleting = |p: &&Arc<Provider>| p.metadata.deletion_timestamp.is_some();
    let own = all.iter().filter(deleting).find(|p| {
        r.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == p.uid().as_ref())
    });
    if let Some(p) = own {
        return Some(format!(
            "dependency {repository} is not installed: Provider {} is being deleted",
            p.name_any()
        ));
    }
    let live = all.iter().any(|p| {
        p.metadata.deletion_timestamp.is_none()
            && xpkg::repository_of(&p.spec.package) == repository
    });
    let gone = all
        .iter()
        .filter(deleting)
        .find(|p| xpkg::repository_of(&p.spec.package) == repository);
    match gone {
        Some(p) if !live => Some(format!(
            "dependency {repository} is being deleted (Provider {}); it is installed again once it is gone, if still needed",
            p.name_any()
        )),
        _ => None,
    }
}

/// Whether any installed package other than `p` depends on `p`'s
/// repository (a dependency Provider with none is removed).
pub fn depended_on(
    p: &Provider,
    providers: &[Arc<Provider>],
    revisions: &[Arc<ProviderRevision>],
) -> bool {
    let repository = xpkg::repository_of(&p.spec.package);
    let uid = p.uid();
    revisions
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| {
            !r.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref())
        })
        .filter(|r| {
            // Revisions of Providers that are going do not hold it.
            r.owner_references().iter().any(|o| {
                providers.iter().any(|q| {
                    Some(&o.uid) == q.uid().as_ref() && q.metadata.deletion_timestamp.is_none()
                })
            })
        })
        .any(|r| dependencies_of(r).contains(&repository))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn graph<S: AsRef<str>>(edges: &[(&str, &[S])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(k, v)| {
                (
                    (*k).to_owned(),
                    v.iter().map(|s| s.as_ref().to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_dependency_graph_is_bounded_in_breadth_depth_and_size() {
        let many: Vec<String> = (0..=MAX_DEPENDENCIES).map(|i| format!("r/d{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let why = past_bounds(&graph(&[("r/a", &many)]), "r/a").unwrap();
        assert!(
            why.contains("33 dependencies") && why.contains("32"),
            "{why}"
        );
        assert!(past_bounds(&graph(&[("r/a", &many[..MAX_DEPENDENCIES])]), "r/a").is_none());
        // A chain root → l1 → … → l7 whose last would add level 9.
        let names: Vec<String> = (0..MAX_DEPTH).map(|i| format!("r/l{i}")).collect();
        let next = "r/next".to_owned();
        let mut edges: Vec<(&str, &[String])> =
            names.windows(2).map(|w| (w[0].as_str(), &w[1..])).collect();
        edges.push((names[MAX_DEPTH - 1].as_str(), std::slice::from_ref(&next)));
        let g = graph(&edges);
        let why = past_bounds(&g, &names[MAX_DEPTH - 1]).unwrap();
        assert!(
            why.contains("level 9")
                && why.starts_with("its dependencies")
                && why.contains("r/l0 → r/l1"),
            "{why}"
        );
        // Every package above it, the installed one too, names the chain.
        for above in &names[..MAX_DEPTH - 1] {
            let why = past_bounds(&g, above).unwrap();
            assert!(
                why.contains("r/l0 → r/l1")
                    && why.contains("r/l7 → r/next")
                    && why.contains("is 9 levels deep"),
                "{above}: {why}"
            );
        }
        // A chain of 8 is within the bound, everywhere on it.
        let mut legal = g.clone();
        legal.remove(&names[MAX_DEPTH - 1]);
        for n in &names[..MAX_DEPTH - 1] {
            assert!(past_bounds(&legal, n).is_none(), "{n}");
        }
        // One root, wide: 3 × 32 Providers below it.
        let mid: Vec<String> = (0..3).map(|i| format!("r/m{i}")).collect();
        let leaves: Vec<Vec<String>> = (0..3)
            .map(|i| {
                (0..MAX_DEPENDENCIES)
                    .map(|j| format!("r/x{i}-{j}"))
                    .collect()
            })
            .collect();
        let mut g = BTreeMap::from([("r/root".to_owned(), mid.clone())]);
        for (m, l) in mid.iter().zip(&leaves) {
            g.insert(m.clone(), l.clone());
        }
        let why = past_bounds(&g, "r/m2").unwrap();
        assert!(why.contains("r/root would bring in 99 Providers"), "{why}");
    }

    #[test]
    fn a_lattice_of_shared_dependencies_is_bounded_like_a_chain() {
        // Nine levels of six packages, each depending on every package of
        // the next level: 6^8 chains (each package's longest walk is worked
        // out once, so this is quick).
        let level = |l: usize| (0..6).map(|i| format!("r/l{l}-{i}")).collect::<Vec<_>>();
        let mut g = BTreeMap::new();
        for l in 0..MAX_DEPTH {
            for p in level(l) {
                g.insert(p, level(l + 1));
            }
        }
        let below = &level(MAX_DEPTH - 1)[0];
        let why = past_bounds(&g, below).unwrap();
        assert!(why.contains("would be level 9"), "{why}");
        let why = past_bounds(&g, "r/l0-0").unwrap();
        assert!(why.contains("is 9 levels deep"), "{why}");
    }

    #[test]
    fn ranges_with_v_prefixes_select_the_highest_full_semver_tag() {
        let Requirement::Range(r) = requirement(">=v1.0.0, <v2.0.0").unwrap() else {
            panic!("a range");
        };
        let tags: Vec<String> = ["v0.9.0", "v1.0.0", "v1.2.0", "v1", "v2.0.0", "latest"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let best = xpkg::semver_tags(&tags)
            .into_iter()
            .filter(|(v, _)| r.matches(v))
            .max_by(|a, b| a.0.cmp(&b.0))
            .unwrap();
        assert_eq!(best.1, "v1.2.0");
    }

    #[test]
    fn crossplane_constraints_are_checked_against_the_implemented_version() {
        assert!(crossplane_admits(">=v1.14.0").is_ok());
        assert!(crossplane_admits(">=v2.0.0").is_ok());
        assert!(crossplane_admits(">=v2.0.0-0").is_ok());
        let no = crossplane_admits("<v1.0.0").unwrap_err();
        assert!(
            no.contains("ignoreCrossplaneConstraints") && no.contains("v2.2.0"),
            "{no}"
        );
        assert!(!no.contains("not implemented"), "{no}");
        let later = crossplane_admits(">=v2.3.0").unwrap_err();
        assert!(later.contains("not implemented"), "{later}");
        assert!(
            crossplane_admits("banana")
                .unwrap_err()
                .contains("not a semver range")
        );
    }

    #[test]
    fn a_digest_is_a_requirement_and_garbage_is_explained() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert!(matches!(requirement(&d), Ok(Requirement::Digest(_))));
        assert!(
            requirement(">=banana")
                .unwrap_err()
                .contains("neither a semver range nor a digest")
        );
    }

    #[test]
    fn versions_come_from_tags_after_the_last_slash() {
        assert_eq!(
            version_of("10.0.0.1:5000/x/b:v1.2.0"),
            Some(semver::Version::new(1, 2, 0))
        );
        assert_eq!(version_of("10.0.0.1:5000/x/b"), None);
        assert_eq!(
            provider_name("10.0.0.1:5000/crossplane-rs/Provider_B"),
            "provider-b"
        );
    }

    #[test]
    fn a_cycle_is_found_with_its_path() {
        let graph = BTreeMap::from([
            ("a".to_owned(), vec!["b".to_owned()]),
            ("b".to_owned(), vec!["c".to_owned()]),
            ("c".to_owned(), vec!["a".to_owned()]),
        ]);
        assert_eq!(
            path_back(&graph, "b", "a", &mut BTreeSet::new()).unwrap(),
            ["b", "c", "a"]
        );
        assert!(path_back(&graph, "b", "z", &mut BTreeSet::new()).is_none());
    }

    fn provider(name: &str, uid: &str, package: &str, deleting: bool) -> Arc<Provider> {
        let mut p = Provider {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            spec: ProviderSpec {
                package: package.into(),
                ..ProviderSpec::default()
            },
            status: None,
        };
        if deleting {
            p.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
            );
        }
        Arc::new(p)
    }

    #[test]
    fn a_dependency_is_not_installed_again_while_it_or_its_dependent_is_being_deleted() {
        let mut r = ProviderRevision::new("d-1", Default::default());
        r.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                uid: "uid-d".into(),
                ..Default::default()
            },
        ]);
        let c = "reg.example/test/c";
        type Case = (&'static str, Vec<Arc<Provider>>, Option<&'static str>);
        let cases: [Case; 4] = [
            (
                "nothing deleting: resolve as usual",
                vec![provider("d", "uid-d", "reg.example/test/d:v1", false)],
                None,
            ),
            (
                "the dependency's Provider is being deleted",
                vec![
                    provider("d", "uid-d", "reg.example/test/d:v1", false),
                    provider("c", "uid-c", "reg.example/test/c:v1", true),
                ],
                Some("is being deleted (Provider c)"),
            ),
            (
                "the revision's own Provider is being deleted",
                vec![provider("d", "uid-d", "reg.example/test/d:v1", true)],
                Some("Provider d is being deleted"),
            ),
            (
                "another live Provider installs the dependency",
                vec![
                    provider("d", "uid-d", "reg.example/test/d:v1", false),
                    provider("c", "uid-c", "reg.example/test/c:v1", true),
                    provider("c2", "uid-c2", "reg.example/test/c:v2", false),
                ],
                None,
            ),
        ];
        for (case, all, want) in cases {
            let got = held_back(&all, &r, c);
            match want {
                None => assert_eq!(got, None, "{case}"),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(w)),
                    "{case}: {got:?}"
                ),
            }
        }
    }
}
