//! Searching a registry for the stack that owns a CRD (seed 001: "the
//! registry understands a Stack's CRDs and indexes by them").
//!
//! A registry has no such index of its own, so one is built here: the
//! catalog lists the repositories under the source, each repository's
//! newest version (the highest semver tag, else `latest`) is resolved to a
//! digest, and what that digest owns is read from its layer annotation
//! (`io.crossplane.stack.owns`, written by `xpkg build`), falling back to
//! reading `.registry/resources` for a stack built elsewhere. What a digest
//! owns never changes, so it is kept per digest (the [`MAX_INDEXED`] most
//! recently used digests). A scan of the registry (the catalog, one tag
//! list and one manifest read per repository) is kept per source for
//! [`SCAN_TTL`] (per source and where the ImageConfigs send it): a search that finds nothing, retried every 15 s, asks the
//! registry again only once that has passed, so a stack pushed later is
//! found within about [`SCAN_TTL`] plus one retry. A scan is never reused
//! by a request created after it began: what was pushed before a request
//! is created is found by it.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use oci::{Digest, stack::CrdSelector};
use runtime::{expiring::Expiring, lru::Lru};

use super::Error;
use crate::packages::{FetchError, Packages};

/// A stack found in a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// `source/repository:tag`.
    pub reference: String,
    /// What the tag names.
    pub digest: Digest,
}

/// The largest image whose layers are read to find out whether it is a
/// stack, when its manifest does not say (stacks are a few KB of YAML;
/// anything this big is a runtime image, not a stack).
const MAX_UNANNOTATED_BYTES: u64 = 4 * 1024 * 1024;

/// What a digest owns: `None` for an image that is not a stack.
type Owned = Option<Vec<String>>;

/// The most digests whose owned CRDs are kept. An entry is a digest and a
/// few CRD names (well under 1 KB); 4096 of them cover the newest version
/// of every repository of a large registry, in a few MB at most.
pub const MAX_INDEXED: usize = 4096;

/// How long a scan of a source (its repositories and the digest of each
/// one's newest version) is reused. One minute: a failed by-CRD search,
/// retried every 15 s, rescans at most once a minute instead of four
/// times (each scan is a catalog, a tag list and a manifest per
/// repository), and a stack pushed meanwhile is still found within about
/// 75 s.
pub const SCAN_TTL: Duration = Duration::from_secs(60);

/// The per-digest index.
#[derive(Clone)]
pub struct Index {
    packages: Packages,
    /// What digests own, for at most [`MAX_INDEXED`] digests: the least
    /// recently used is forgotten first (reading it again costs one
    /// manifest).
    owned: Arc<Mutex<Lru<String, Owned>>>,
    /// Per source: each repository's newest version (reference and digest),
    /// and when the scan began.
    scans: Expiring<String, (Timestamp, Arc<Vec<Candidate>>)>,
}

impl Index {
    /// An empty index reading through `packages`.
    pub fn new(packages: Packages) -> Self {
        Self {
            packages,
            owned: Arc::new(Mutex::new(Lru::new(MAX_INDEXED))),
            scans: Expiring::new(SCAN_TTL),
        }
    }

    /// The packages it reads through.
    pub fn packages(&self) -> &Packages {
        &self.packages
    }

    /// The tag to install for `reference`: its own, else the highest semver
    /// tag of its repository (else `latest`).
    pub async fn tagged(&self, reference: &str) -> Result<String, Error> {
        if oci::pull::tag_of(reference).is_some() || reference.contains('@') {
            return Ok(reference.to_owned());
        }
        let tags = self.packages.tags(reference, &[]).await?;
        newest(&tags)
            .map(|t| format!("{}:{t}", oci::xpkg::repository_of(reference)))
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "{reference} has no semver tag (nor latest) to install; name a tag, e.g. {reference}:v0.1.0"
                ))
            })
    }

    /// What the stack at `digest` owns, as `<plural>.<group>/<version>`;
    /// `None` when the image is not a stack.
    async fn owned(&self, reference: &str, digest: &Digest) -> Result<Owned, FetchError> {
        if let Some(hit) = self.lock().get(digest.as_str()) {
            return Ok(hit.clone());
        }
        let info = self.packages.layer_info(reference, digest, &[]).await?;
        let owned = match info.annotations.get(oci::stack::OWNS_ANNOTATION) {
            Some(list) => Some(
                list.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
            None if info.has_base || info.size <= MAX_UNANNOTATED_BYTES => {
                match self.packages.fetch_stack(reference, digest).await {
                    Ok(p) => Some(p.contents.owns()),
                    Err(FetchError::Oci(oci::Error::Invalid { .. })) => None,
                    Err(e) => return Err(e),
                }
            }
            None => None,
        };
        self.lock()
            .insert(digest.as_str().to_owned(), owned.clone());
        Ok(owned)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru<String, Owned>> {
        self.owned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Each repository under `source` at its newest version: reused for
    /// [`SCAN_TTL`], but never by a search for something asked for after
    /// the scan began (`asked`, e.g. a request's creation, whole seconds as
    /// the API server gives them): what is pushed before a request is
    /// created is found by it. A transient failure is not kept (the next
    /// search asks again); a repository whose tags or digest cannot be read
    /// for another reason is left out.
    async fn scan(
        &self,
        source: &str,
        asked: Option<Timestamp>,
    ) -> Result<Arc<Vec<Candidate>>, Error> {
        // Kept per place read (an ImageConfig that moves the source starts
        // afresh), under the names the source gives them.
        let key = format!("{source}={}", self.packages.resolved(source).await.image);
        if let Some((began, hit)) = self.scans.get(&key)
            && asked.is_none_or(|asked| began >= asked + SignedDuration::from_secs(1))
        {
            return Ok(hit);
        }
        let began = Timestamp::now();
        let mut found = Vec::new();
        for repository in self.packages.repositories(source).await? {
            let tags = match self.packages.tags(&repository, &[]).await {
                Ok(t) => t,
                Err(e) if e.is_transient() => return Err(e.into()),
                Err(e) => {
                    tracing::debug!(%repository, error = %e, "skipping a repository whose tags cannot be read");
                    continue;
                }
            };
            let Some(tag) = newest(&tags) else {
                continue;
            };
            let reference = format!("{repository}:{tag}");
            let digest = match self.packages.resolve(&reference, &[]).await {
                Ok(d) => d,
                Err(e) if e.is_transient() => return Err(e.into()),
                Err(e) => {
                    tracing::debug!(%reference, error = %e, "skipping an image that cannot be resolved");
                    continue;
                }
            };
            found.push(Candidate { reference, digest });
        }
        let found = Arc::new(found);
        self.scans.insert(key, (began, found.clone()));
        Ok(found)
    }

    /// The stacks under `source` that own the CRD `selector` names, one per
    /// repository (its newest version), from a scan begun after `asked`
    /// (see [`Index::scan`]).
    pub async fn owners(
        &self,
        source: &str,
        selector: &CrdSelector,
        asked: Option<Timestamp>,
    ) -> Result<Vec<Candidate>, Error> {
        let mut found = Vec::new();
        for candidate in self.scan(source, asked).await?.iter() {
            let (reference, digest) = (&candidate.reference, &candidate.digest);
            let owned = match self.owned(reference, digest).await {
                Ok(o) => o,
                Err(e) if e.is_transient() => return Err(e.into()),
                Err(e) => {
                    tracing::debug!(%reference, error = %e, "skipping an image that cannot be read");
                    None
                }
            };
            let Some(owned) = owned else {
                continue;
            };
            let hit = if selector.plural.is_some() {
                owned
                    .iter()
                    .any(|o| selector.matches_name(o).unwrap_or(false))
            } else {
                // By kind: the CRDs themselves tell (the stack is cached).
                self.packages
                    .fetch_stack(reference, digest)
                    .await
                    .map(|p| p.contents.crds.iter().any(|c| selector.matches(c)))
                    .unwrap_or(false)
            };
            if hit {
                found.push(candidate.clone());
            }
        }
        Ok(found)
    }

    /// The one stack under `source` that owns `selector`'s CRD.
    pub async fn owner(
        &self,
        source: &str,
        selector: &CrdSelector,
        asked: Option<Timestamp>,
    ) -> Result<Candidate, Error> {
        let mut found = self.owners(source, selector, asked).await?;
        match found.len() {
            0 => Err(Error::NotFound(format!(
                "no stack in registry {source} owns CRD {selector} (searched every repository's newest version); push one that does: the registry is searched again every {}s, and it is found then",
                SCAN_TTL.as_secs()
            ))),
            1 => Ok(found.remove(0)),
            _ => Err(Error::Ambiguous(format!(
                "CRD {selector} is owned by more than one stack in registry {source}: {}; ask for one of them by spec.package instead",
                found
                    .iter()
                    .map(|c| c.reference.as_str())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ))),
        }
    }
}

/// The newest tag: the highest semver one, else `latest`.
pub fn newest(tags: &[String]) -> Option<String> {
    let mut semver = oci::xpkg::semver_tags(tags);
    semver.sort();
    semver
        .pop()
        .map(|(_, t)| t)
        .or_else(|| tags.iter().find(|t| *t == "latest").cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_tag_is_the_highest_semver_else_latest() {
        let t = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            newest(&t(&["v0.1.0", "v0.10.0", "v0.2.0", "latest"])).as_deref(),
            Some("v0.10.0")
        );
        assert_eq!(newest(&t(&["latest", "dev"])).as_deref(), Some("latest"));
        assert_eq!(newest(&t(&["dev"])), None);
    }
}
