//! Moving a dependency the package-manager installed to the version a
//! dependent's new package needs: the newest tag every installed dependent
//! accepts ([`choose_move`]), from what each revision records
//! ([`record_versions`]); nothing moves when no tag will do, and each
//! constraint is named.

use std::sync::Arc;

use kube::{Api, ResourceExt as _};
use oci::xpkg;
use types::pkg::v1::{Provider, ProviderRevision, RevisionState};

use super::{
    record::{dependencies_of, recorded_version},
    versions::{Requirement, requirement, version_of},
};
use crate::{labels, packages::Packages};

/// A dependency Provider moved to another version.
#[derive(Debug)]
pub struct Moved {
    /// The dependency's Provider.
    pub provider: String,
    /// The package it installed.
    pub from: String,
    /// The package it installs now.
    pub to: String,
    /// Who needed it and who accepts it.
    pub why: String,
}

/// What one installed dependent requires of a dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    /// Who requires it (`Provider c`, or the package being installed).
    pub who: String,
    /// Its range; `None` when it records none (it then holds the
    /// dependency where it is).
    pub range: Option<String>,
}

/// The newest tag of a dependency installed at `current` that every
/// constraint accepts, or why there is none (each constraint named). A
/// constraint that records no range accepts only `current`. Moving to an
/// older version needs `allow_downgrades`. Pure.
pub fn choose_move(
    repository: &str,
    current: &semver::Version,
    constraints: &[Constraint],
    tags: &[String],
    allow_downgrades: bool,
) -> Result<String, String> {
    let mut ranges = Vec::new();
    for c in constraints {
        let range = match &c.range {
            Some(r) => match requirement(r) {
                Ok(Requirement::Range(range)) => Some(range),
                Ok(Requirement::Digest(_)) | Err(_) => None,
            },
            None => None,
        };
        ranges.push(range);
    }
    let accepted = |v: &semver::Version| {
        ranges
            .iter()
            .all(|r| r.as_ref().map_or(v == current, |r| r.matches(v)))
    };
    let best = xpkg::semver_tags(tags)
        .into_iter()
        .filter(|(v, _)| accepted(v))
        .max_by(|a, b| a.0.cmp(&b.0));
    let named = constraints
        .iter()
        .map(|c| match &c.range {
            Some(r) => format!("{} needs {r}", c.who),
            None => format!("{} records no version (it holds v{current})", c.who),
        })
        .collect::<Vec<_>>()
        .join(", ");
    match best {
        Some((v, _)) if v == *current => Err(format!(
            "dependency {repository} cannot move from v{current}: {named}"
        )),
        Some((v, tag)) if v < *current && !allow_downgrades => Err(format!(
            "dependency {repository} would move down from v{current} to {tag} ({named}); the package-manager moves a dependency down only with --enable-dependency-version-downgrades"
        )),
        Some((_, tag)) => Ok(tag),
        None => Err(format!(
            "no version of dependency {repository} satisfies every dependent: {named} (installed: v{current}; tags: {})",
            if tags.is_empty() {
                "none".to_owned()
            } else {
                tags.join(", ")
            }
        )),
    }
}

/// Moves the dependency Provider `p` (installed by the package-manager) to
/// the newest version that `dep` of revision `r` and every other installed
/// dependent accept: its Provider's package is set to that tag, and its
/// own revisions upgrade it make-before-break. `Ok(Err(why))` when no
/// version will do (nothing moves).
#[allow(clippy::too_many_arguments)]
pub(super) async fn move_dependency(
    api: &Api<Provider>,
    packages: &Packages,
    all: &[Arc<Provider>],
    revisions: &[Arc<ProviderRevision>],
    r: &ProviderRevision,
    p: &Provider,
    dep: &xpkg::Dependency,
    allow_downgrades: bool,
) -> Result<Result<Moved, String>, kube::Error> {
    let repository = xpkg::repository_of(&p.spec.package);
    let Some(current) = version_of(&p.spec.package) else {
        return Ok(Err(format!(
            "dependency {repository}: Provider {} installs no version tag",
            p.name_any()
        )));
    };
    let own = r
        .owner_references()
        .iter()
        .find(|o| o.kind == "Provider")
        .map(|o| o.uid.clone());
    let own_name = r.labels().get(labels::PACKAGE).cloned().unwrap_or_default();
    let mut constraints = vec![Constraint {
        who: format!("Provider {own_name} ({})", r.spec.package),
        range: Some(dep.version.clone()),
    }];
    for q in all
        .iter()
        .filter(|q| q.metadata.deletion_timestamp.is_none() && q.uid() != own && q.uid() != p.uid())
    {
        let newest = revisions
            .iter()
            .filter(|rv| {
                rv.owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == q.uid().as_ref())
            })
            .max_by_key(|rv| {
                (
                    rv.spec.desired_state == RevisionState::Active,
                    rv.spec.revision,
                )
            });
        if let Some(rv) = newest
            && dependencies_of(rv).contains(&repository)
        {
            constraints.push(Constraint {
                who: format!("Provider {}", q.name_any()),
                range: recorded_version(rv, &repository),
            });
        }
    }
    let tags = match packages
        .tags(&repository, &r.spec.package_pull_secrets)
        .await
    {
        Ok(t) => t,
        Err(e) => {
            return Ok(Err(format!(
                "dependency {repository} must move, but its tags cannot be listed: {}",
                runtime::events::error_chain(&e)
            )));
        }
    };
    let tag = match choose_move(&repository, &current, &constraints, &tags, allow_downgrades) {
        Ok(t) => t,
        Err(why) => return Ok(Err(why)),
    };
    let to = format!("{repository}:{tag}");
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": p.resource_version()},
        "spec": {"package": to},
    });
    api.patch(
        &p.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    let accepted = constraints
        .iter()
        .filter_map(|c| Some(format!("{} ({})", c.who, c.range.as_deref()?)))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Ok(Moved {
        provider: p.name_any(),
        from: p.spec.package.clone(),
        to,
        why: format!("accepted by {accepted}"),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{super::record::record_versions, *};

    #[test]
    fn a_dependency_moves_to_the_newest_version_every_dependent_accepts() {
        let tags: Vec<String> = ["v1.0.0", "v1.5.0", "v2.0.0", "v2.1.0", "v3.0.0", "latest"]
            .map(String::from)
            .to_vec();
        let c = |who: &str, range: Option<&str>| Constraint {
            who: who.into(),
            range: range.map(String::from),
        };
        let v1 = semver::Version::new(1, 0, 0);
        let moved = choose_move(
            "reg.io/b",
            &v1,
            &[
                c("Provider a", Some(">=v2.0.0")),
                c("Provider c", Some(">=v1.0.0, <v3.0.0")),
            ],
            &tags,
            false,
        );
        assert_eq!(moved.as_deref(), Ok("v2.1.0"));
        // Pinned: nothing satisfies both, and both are named.
        let no = choose_move(
            "reg.io/b",
            &v1,
            &[
                c("Provider a", Some(">=v2.0.0")),
                c("Provider c", Some("<v2.0.0")),
            ],
            &tags,
            false,
        )
        .unwrap_err();
        assert!(
            no.contains("Provider a needs >=v2.0.0") && no.contains("Provider c needs <v2.0.0"),
            "{no}"
        );
        // A dependent that records no version holds it where it is.
        let held = choose_move(
            "reg.io/b",
            &v1,
            &[c("Provider a", Some(">=v2.0.0")), c("Provider old", None)],
            &tags,
            false,
        )
        .unwrap_err();
        assert!(held.contains("Provider old records no version"), "{held}");
        // Down only when allowed.
        let v2 = semver::Version::new(2, 1, 0);
        let down = [c("Provider a", Some("<v2.0.0"))];
        let refused = choose_move("reg.io/b", &v2, &down, &tags, false).unwrap_err();
        assert!(
            refused.contains("--enable-dependency-version-downgrades"),
            "{refused}"
        );
        assert_eq!(
            choose_move("reg.io/b", &v2, &down, &tags, true).as_deref(),
            Ok("v1.5.0")
        );
    }

    #[test]
    fn versions_are_recorded_by_repository() {
        let deps = [xpkg::Dependency {
            package: "reg.io/org/b:v1".into(),
            version: ">=v1.0.0, <v2.0.0".into(),
            kind: "provider".into(),
        }];
        let record = record_versions(&deps);
        let mut r = ProviderRevision::new("r", Default::default());
        r.metadata.annotations = Some(
            [(labels::DEPENDENCY_VERSIONS.to_owned(), record)]
                .into_iter()
                .collect(),
        );
        assert_eq!(
            recorded_version(&r, "reg.io/org/b").as_deref(),
            Some(">=v1.0.0, <v2.0.0")
        );
        assert_eq!(recorded_version(&r, "reg.io/org/x"), None);
    }
}
