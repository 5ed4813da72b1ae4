//! What the stacks know of the cluster's CRDs ([`Known`]).

use std::{
    collections::HashMap,
    sync::{Arc, PoisonError, RwLock},
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Resource, ResourceExt};
use runtime::controller::summaries::{Change, Summaries};

use super::error::Error;
use crate::crds::Listed;

/// What the package-manager knows of the cluster's CRDs without asking:
/// every CRD's name, kind, version and whether it is established ([`Fact`]:
/// all a lookup by kind or a wait for a CRD needs, under two hundred bytes a
/// CRD), and whole (as [`crate::crds::trim`] leaves them) only the CRDs a
/// stack has marked as its own or as one it depends on. Any other CRD is
/// read by name when a decision needs it, so the CRDs Providers install
/// cost the process their names and facts, not a copy each.
#[derive(Clone)]
pub struct Known {
    facts: Summaries<Fact>,
    marked: Arc<RwLock<Marks>>,
    api: Api<Listed>,
}

/// What is known of every CRD without reading it.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Fact {
    kind: Box<str>,
    /// [`crate::mrds::body::version`]: what of the CRD is not its status.
    version: Box<str>,
    established: bool,
    /// Served by the MRD of its name ([`crate::mrds::body::served_by_mrd`]).
    by_mrd: bool,
    /// Referenced by a ProviderRevision (one installed it, or still
    /// shares it with the MRD that took it over).
    by_revision: bool,
    /// Being deleted.
    going: bool,
    /// The version its objects are listed at ([`Listed::listed_at`]).
    listed_at: Box<str>,
}

/// The fact of `crd`.
fn fact(crd: &Listed) -> Fact {
    Fact {
        kind: crd.kind().into(),
        version: crate::mrds::body::version(crd).unwrap_or_default().into(),
        established: crd.established(),
        by_mrd: crate::mrds::body::served_by_mrd(crd.meta()),
        by_revision: crd
            .owner_references()
            .iter()
            .any(|o| o.kind == "ProviderRevision"),
        going: crd.meta().deletion_timestamp.is_some(),
        listed_at: crd.listed_at().unwrap_or_default().into(),
    }
}

/// A CRD's version (what of it is not its status, as
/// [`crate::mrds::body::version`] says it), whether it is established and
/// whether the MRD of its name serves it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct State {
    pub version: String,
    pub established: bool,
    pub by_mrd: bool,
}

impl State {
    /// The CRD's uid (the first part of its version).
    pub fn uid(&self) -> Option<String> {
        self.version
            .split_once('/')
            .map(|(uid, _)| uid.to_owned())
            .filter(|uid| !uid.is_empty())
    }
}

/// The CRDs a stack marks, by name.
type Marked = HashMap<String, Arc<CustomResourceDefinition>>;

#[derive(Default)]
struct Marks {
    marked: Marked,
    /// What a relist has read so far; it replaces `marked` when done.
    relist: Option<Marked>,
}

/// Whether a stack marks this CRD (a stack's label or its owner annotation).
fn marked_by_a_stack(meta: &kube::api::ObjectMeta) -> bool {
    meta.labels.as_ref().is_some_and(super::ownership::marked)
        || meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(super::ownership::OWNER_ANNOTATION))
}

impl Known {
    /// Watches every CRD of the cluster (a page of 100 at a time, without
    /// their schemas): the view, and the stream of CRDs that changed (each
    /// as [`crate::crds::trim`] leaves it, for waking what waits on them; nothing of it
    /// is kept).
    pub fn watch(
        client: kube::Client,
    ) -> (
        Self,
        impl futures::Stream<Item = Result<CustomResourceDefinition, kube::runtime::watcher::Error>>
        + Send
        + 'static,
    ) {
        use futures::TryStreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let api = Api::<Listed>::all(client);
        let known = Self {
            facts: Summaries::new(),
            marked: Arc::default(),
            api: api.clone(),
        };
        let view = known.clone();
        // The marked CRDs are taken in before the facts: once the facts
        // say the first list is done, both are.
        let events = watcher(api, watcher::Config::default().page_size(100))
            .default_backoff()
            .map_ok(move |event| {
                view.mark(&event);
                event
            });
        let changes = known
            .facts
            .follow(events, fact)
            .touched_objects()
            .map_ok(Listed::into_crd);
        (known, changes)
    }

    /// Takes in one watch event (by hand, in tests).
    #[cfg(test)]
    fn apply(&self, event: &kube::runtime::watcher::Event<Listed>) {
        self.mark(event);
        self.facts.apply(event, fact);
    }

    /// Keeps or forgets the CRD of one watch event as a stack marks it.
    fn mark(&self, event: &kube::runtime::watcher::Event<Listed>) {
        use kube::runtime::watcher::Event;
        let mut marks = self.marked.write().unwrap_or_else(PoisonError::into_inner);
        let whole = |c: &Listed| Arc::new(c.clone().into_crd());
        match event {
            Event::Init => marks.relist = Some(Marked::new()),
            Event::InitApply(c) => {
                if let Some(marked) = marks.relist.as_mut()
                    && marked_by_a_stack(c.meta())
                {
                    marked.insert(c.name_any(), whole(c));
                }
            }
            Event::InitDone => {
                if let Some(marked) = marks.relist.take() {
                    marks.marked = marked;
                }
            }
            Event::Apply(c) => {
                if marked_by_a_stack(c.meta()) {
                    marks.marked.insert(c.name_any(), whole(c));
                } else {
                    marks.marked.remove(&c.name_any());
                }
            }
            Event::Delete(c) => {
                marks.marked.remove(&c.name_any());
            }
        }
    }

    /// Whether the first list is complete (waiting a moment for it).
    pub async fn ready(&self) -> bool {
        self.facts.ready().await
    }

    /// The CRD `name`: the kept copy of a CRD a stack marks, else read from
    /// the API server (as [`crate::crds::trim`] leaves it).
    pub async fn get(&self, name: &str) -> Result<Option<Arc<CustomResourceDefinition>>, Error> {
        let kept = self
            .marked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .marked
            .get(name)
            .cloned();
        if kept.is_some() {
            return Ok(kept);
        }
        Ok(self
            .api
            .get_opt(name)
            .await
            .map_err(|e| Error::request("read a CRD", e))?
            .map(|c| Arc::new(c.into_crd())))
    }

    /// The installed CRD `selector` names (by name, or by group and kind).
    pub async fn installed(
        &self,
        selector: &oci::stack::CrdSelector,
    ) -> Result<Option<Arc<CustomResourceDefinition>>, Error> {
        let name = match (&selector.plural, &selector.kind) {
            (Some(plural), _) => format!("{plural}.{}", selector.group),
            (None, Some(kind)) => {
                // A CRD's name is `<plural>.<group>`, and a plural has no
                // dot: a name with more before the group is another group's.
                let suffix = format!(".{}", selector.group);
                let in_group = |n: &str| n.strip_suffix(&suffix).is_some_and(|p| !p.contains('.'));
                let found = self.facts.read(|facts| {
                    facts
                        .iter()
                        .find(|(n, f)| in_group(n) && f.kind.as_ref() == kind.as_str())
                        .map(|(n, _)| n.to_string())
                });
                match found {
                    Some(n) => n,
                    None => return Ok(None),
                }
            }
            (None, None) => return Ok(None),
        };
        let Some(crd) = self.get(&name).await? else {
            return Ok(None);
        };
        Ok(selector
            .matches_parts(
                &crd.spec.group,
                &crd.spec.names.plural,
                &crd.spec.names.kind,
                crd.spec.versions.iter().map(|v| v.name.as_str()),
            )
            .then_some(crd))
    }

    /// Whether the CRD `name` is its MRD's alone, as the watch last saw
    /// it: served by the MRD and referenced by no revision.
    pub fn mrds_alone(&self, name: &str) -> bool {
        self.facts
            .read(|all| all.get(name).is_some_and(|f| f.by_mrd && !f.by_revision))
    }

    /// Where the objects of the CRD `name` are listed, as the watch last
    /// saw it (None when it has not seen the CRD, or it serves no version).
    pub fn api_resource(&self, name: &str) -> Option<kube::api::ApiResource> {
        let (plural, group) = name.split_once('.')?;
        self.facts.read(|all| {
            let f = all.get(name).filter(|f| !f.listed_at.is_empty())?;
            let gvk = kube::api::GroupVersionKind::gvk(group, &f.listed_at, &f.kind);
            Some(kube::api::ApiResource::from_gvk_with_plural(&gvk, plural))
        })
    }

    /// Whether the CRD `name` is being deleted, as the watch last saw it.
    pub fn going(&self, name: &str) -> bool {
        self.facts
            .read(|all| all.get(name).is_some_and(|f| f.going))
    }

    /// The CRD `name` as the watch last saw it: its version and whether it
    /// is established (None before the first list, or when there is no
    /// such CRD).
    pub fn state(&self, name: &str) -> Option<State> {
        self.facts
            .get(name)
            .filter(|f| !f.version.is_empty())
            .map(|f| State {
                version: f.version.into(),
                established: f.established,
                by_mrd: f.by_mrd,
            })
    }

    /// The CRDs whose version or Established condition changed, or that
    /// were made or deleted, each once the view has it: whoever is woken by
    /// one reads a view at least as new as the change. A status write that
    /// changes neither tells nothing.
    pub fn changes(&self) -> futures::channel::mpsc::UnboundedReceiver<Change> {
        self.facts.changes()
    }

    /// The kept CRDs that carry `label` (a stack's mark).
    pub fn marked_with(&self, label: &str) -> Vec<String> {
        self.marked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .marked
            .values()
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(label))
            })
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    }

    /// How many CRDs are kept whole and how many are known by name.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let marked = self
            .marked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .marked
            .len();
        (marked, self.facts.read(|f| f.len()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn listed(name: &str, kind: &str, labels: serde_json::Value) -> Listed {
        let (plural, group) = name.split_once('.').unwrap();
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"group": group, "scope": "Cluster",
                "names": {"kind": kind, "plural": plural},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]},
        }))
        .unwrap()
    }

    /// A view fed by hand, whose API server address answers nothing.
    fn view() -> Known {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        Known {
            facts: Summaries::new(),
            marked: Arc::default(),
            api: Api::all(kube::Client::try_from(config).unwrap()),
        }
    }

    #[tokio::test]
    async fn the_view_keeps_whole_only_the_crds_a_stack_marks() {
        use kube::runtime::watcher::Event;
        let known = view();
        let label = "stack.extensions.crossplane.io/0123456789abcdef";
        let provider = listed("buckets.aws.example.org", "Bucket", json!({}));
        let stack = listed("redises.cache.example.org", "Redis", json!({label: "owns"}));
        known.apply(&Event::Init);
        for c in [&provider, &stack] {
            known.apply(&Event::InitApply(c.clone()));
        }
        assert!(!known.ready().await, "ready before the list is done");
        assert_eq!(known.counts(), (0, 0), "a relist shows only when done");
        known.apply(&Event::InitDone);
        assert!(known.ready().await);
        assert_eq!(known.counts(), (1, 2));
        assert_eq!(known.marked_with(label), vec!["redises.cache.example.org"]);
        // Found by kind from what is kept, without asking the API server
        // (nothing listens at its address).
        let by_kind = oci::stack::CrdSelector::of_kind("Redis", "cache.example.org/v1");
        let found = known.installed(&by_kind).await.unwrap().unwrap();
        assert_eq!(
            found.metadata.name.as_deref(),
            Some("redises.cache.example.org")
        );
        assert!(
            found.spec.versions[0].schema.is_none(),
            "kept without its schema"
        );
        // A CRD that loses its marks is no longer kept; one deleted is gone.
        known.apply(&Event::Apply(listed(
            "redises.cache.example.org",
            "Redis",
            json!({}),
        )));
        assert_eq!(known.counts(), (0, 2));
        known.apply(&Event::Apply(listed(
            "buckets.aws.example.org",
            "Bucket",
            json!({label: "dependsOn"}),
        )));
        assert_eq!(known.counts(), (1, 2));
        known.apply(&Event::Delete(provider));
        assert_eq!(known.counts(), (0, 1));
        // A kind nobody installed is not installed, without a request.
        let missing = oci::stack::CrdSelector::of_kind("Queue", "mq.example.org/v1");
        assert!(known.installed(&missing).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn where_a_kind_is_listed_and_whether_its_crd_goes_come_from_the_view() {
        use kube::runtime::watcher::Event;
        let known = view();
        known.apply(&Event::Init);
        known.apply(&Event::InitDone);
        assert!(
            known.api_resource("buckets.aws.example.org").is_none(),
            "not seen: read"
        );
        let mut two: serde_json::Value = json!({
            "metadata": {"name": "buckets.aws.example.org"},
            "spec": {"group": "aws.example.org", "scope": "Cluster",
                "names": {"kind": "Bucket", "plural": "buckets"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": false},
                             {"name": "v1", "served": true, "storage": true}]},
        });
        known.apply(&Event::Apply(serde_json::from_value(two.clone()).unwrap()));
        let ar = known.api_resource("buckets.aws.example.org").unwrap();
        assert_eq!(
            (
                ar.api_version.as_str(),
                ar.kind.as_str(),
                ar.plural.as_str()
            ),
            ("aws.example.org/v1", "Bucket", "buckets"),
            "listed at the storage version"
        );
        assert!(!known.going("buckets.aws.example.org"));
        two["metadata"]["deletionTimestamp"] = json!("2026-12-03T21:50:50Z");
        known.apply(&Event::Apply(serde_json::from_value(two).unwrap()));
        assert!(known.going("buckets.aws.example.org"), "being deleted");
    }

    /// A CRD at `rv` and `generation`, Established or not.
    fn at(rv: &str, generation: i64, established: bool) -> Listed {
        let c = json!({
            "metadata": {"name": "buckets.aws.example.org", "uid": "u1",
                "resourceVersion": rv, "generation": generation},
            "spec": {"group": "aws.example.org", "scope": "Cluster",
                "names": {"kind": "Bucket", "plural": "buckets"},
                "versions": [{"name": "v1", "served": true, "storage": true}]},
            "status": {"conditions": [
                {"type": "Established", "status": if established { "True" } else { "False" }},
            ]},
        });
        serde_json::from_value(c).unwrap()
    }

    #[tokio::test]
    async fn a_status_write_alone_tells_nothing_and_establishing_tells() {
        use futures::{FutureExt as _, StreamExt as _};
        use kube::runtime::watcher::Event;
        let known = view();
        let mut changes = known.changes();
        let mut told = || {
            let mut names = Vec::new();
            while let Some(Some(c)) = changes.next().now_or_never() {
                names.push(format!("{}{}", c.name, if c.gone { " gone" } else { "" }));
            }
            names
        };
        let name = "buckets.aws.example.org";
        known.apply(&Event::Init);
        known.apply(&Event::InitApply(at("1", 1, false)));
        known.apply(&Event::InitDone);
        assert_eq!(told(), vec![name], "a CRD the first list found");
        let pending = known.state(name).unwrap();
        assert!(!pending.established);
        // Another status write (NamesAccepted, say): the same version, the
        // same Established, nothing told.
        known.apply(&Event::Apply(at("2", 1, false)));
        assert_eq!(told(), Vec::<String>::new());
        assert_eq!(known.state(name).unwrap(), pending);
        // Established: told, and the same version.
        known.apply(&Event::Apply(at("3", 1, true)));
        assert_eq!(told(), vec![name]);
        let served = known.state(name).unwrap();
        assert!(served.established);
        assert_eq!(served.version, pending.version);
        // A spec change is a new version.
        known.apply(&Event::Apply(at("4", 2, true)));
        assert_eq!(told(), vec![name]);
        assert_ne!(known.state(name).unwrap().version, pending.version);
        // A relist that finds it gone tells it, as a deletion does.
        known.apply(&Event::Init);
        known.apply(&Event::InitDone);
        assert_eq!(told(), vec![format!("{name} gone")]);
        assert_eq!(known.state(name), None);
    }

    #[tokio::test]
    async fn a_kind_is_found_in_its_own_group_not_in_one_whose_name_ends_like_it() {
        use kube::runtime::watcher::Event;
        let marks = json!({"stack.extensions.crossplane.io/0123456789abcdef": "owns"});
        // Each view's map has an order of its own: either CRD may come first.
        for _ in 0..16 {
            let known = view();
            known.apply(&Event::Init);
            for name in [
                "redises.other.cache.example.org",
                "redises.cache.example.org",
            ] {
                known.apply(&Event::InitApply(listed(name, "Redis", marks.clone())));
            }
            known.apply(&Event::InitDone);
            let by_kind = oci::stack::CrdSelector::of_kind("Redis", "cache.example.org/v1");
            let found = known.installed(&by_kind).await.unwrap().unwrap();
            assert_eq!(found.spec.group, "cache.example.org");
        }
    }
}
