//! What the stacks know of the cluster's CRDs ([`Known`]).

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Resource, ResourceExt};

use super::error::Error;
use crate::crds::Listed;

/// What the package-manager knows of the cluster's CRDs without asking:
/// every CRD's name and kind (all a lookup by kind needs, about a hundred
/// bytes a CRD), and whole (as [`crate::crds::trim`] leaves them) only the CRDs a stack
/// has marked as its own or as one it depends on. Any other CRD is read by
/// name when a decision needs it, so the CRDs Providers install cost the
/// process their names and kinds, not a copy each.
#[derive(Clone)]
pub struct Known {
    inner: Arc<std::sync::RwLock<KnownInner>>,
    ready: tokio::sync::watch::Receiver<bool>,
    api: Api<Listed>,
}

/// name → (kind, resourceVersion), of every CRD.
type Kinds = HashMap<Box<str>, (Box<str>, Box<str>)>;
/// The CRDs a stack marks, by name.
type Marked = HashMap<String, Arc<CustomResourceDefinition>>;

#[derive(Default)]
struct KnownInner {
    kinds: Kinds,
    marked: Marked,
    /// What a relist has read so far; it replaces the two above when done.
    relist: Option<(Kinds, Marked)>,
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
        let (tx, ready) = tokio::sync::watch::channel(false);
        let api = Api::<Listed>::all(client);
        let known = Self {
            inner: Arc::default(),
            ready,
            api: api.clone(),
        };
        let view = known.clone();
        let changes = watcher(api, watcher::Config::default().page_size(100))
            .default_backoff()
            .map_ok(move |event| {
                if view.apply(&event) {
                    tx.send_replace(true);
                }
                event
            })
            .touched_objects()
            .map_ok(Listed::into_crd);
        (known, changes)
    }

    /// Takes in one watch event; true once a (re)list is complete.
    fn apply(&self, event: &kube::runtime::watcher::Event<Listed>) -> bool {
        use kube::runtime::watcher::Event;
        let Ok(mut inner) = self.inner.write() else {
            return false;
        };
        let whole = |c: &Listed| Arc::new(c.clone().into_crd());
        let name = |c: &Listed| c.name_any();
        let entry = |c: &Listed| {
            let rv = c.resource_version().unwrap_or_default();
            (c.kind().into(), rv.into())
        };
        match event {
            Event::Init => inner.relist = Some(Default::default()),
            Event::InitApply(c) => {
                if let Some((kinds, marked)) = inner.relist.as_mut() {
                    kinds.insert(name(c).into(), entry(c));
                    if marked_by_a_stack(c.meta()) {
                        marked.insert(name(c), whole(c));
                    }
                }
            }
            Event::InitDone => {
                if let Some((kinds, marked)) = inner.relist.take() {
                    inner.kinds = kinds;
                    inner.marked = marked;
                }
                return true;
            }
            Event::Apply(c) => {
                inner.kinds.insert(name(c).into(), entry(c));
                if marked_by_a_stack(c.meta()) {
                    inner.marked.insert(name(c), whole(c));
                } else {
                    inner.marked.remove(&name(c));
                }
            }
            Event::Delete(c) => {
                inner.kinds.remove(name(c).as_str());
                inner.marked.remove(&name(c));
            }
        }
        false
    }

    /// Whether the first list is complete (waiting a moment for it).
    pub async fn ready(&self) -> bool {
        let mut ready = self.ready.clone();
        tokio::time::timeout(std::time::Duration::from_millis(20), ready.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The CRD `name`: the kept copy of a CRD a stack marks, else read from
    /// the API server (as [`crate::crds::trim`] leaves it).
    pub async fn get(&self, name: &str) -> Result<Option<Arc<CustomResourceDefinition>>, Error> {
        let kept = self
            .inner
            .read()
            .ok()
            .and_then(|i| i.marked.get(name).cloned());
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
                let found = self.inner.read().ok().and_then(|i| {
                    i.kinds
                        .iter()
                        .find(|(n, (k, _))| in_group(n) && k.as_ref() == kind.as_str())
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

    /// The resourceVersion of the CRD `name` as the watch last saw it
    /// (None before the first list, or when there is no such CRD).
    pub fn resource_version(&self, name: &str) -> Option<String> {
        self.inner
            .read()
            .ok()?
            .kinds
            .get(name)
            .map(|(_, rv)| rv.to_string())
            .filter(|rv| !rv.is_empty())
    }

    /// The kept CRDs that carry `label` (a stack's mark).
    pub fn marked_with(&self, label: &str) -> Vec<String> {
        self.inner
            .read()
            .map(|i| {
                i.marked
                    .values()
                    .filter(|c| {
                        c.metadata
                            .labels
                            .as_ref()
                            .is_some_and(|l| l.contains_key(label))
                    })
                    .filter_map(|c| c.metadata.name.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many CRDs are kept whole and how many are known by name.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        self.inner
            .read()
            .map(|i| (i.marked.len(), i.kinds.len()))
            .unwrap_or_default()
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
    fn view() -> (Known, tokio::sync::watch::Sender<bool>) {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let (tx, ready) = tokio::sync::watch::channel(false);
        let known = Known {
            inner: std::sync::Arc::default(),
            ready,
            api: Api::all(kube::Client::try_from(config).unwrap()),
        };
        (known, tx)
    }

    #[tokio::test]
    async fn the_view_keeps_whole_only_the_crds_a_stack_marks() {
        use kube::runtime::watcher::Event;
        let (known, tx) = view();
        let label = "stack.extensions.crossplane.io/0123456789abcdef";
        let provider = listed("buckets.aws.example.org", "Bucket", json!({}));
        let stack = listed("redises.cache.example.org", "Redis", json!({label: "owns"}));
        assert!(!known.apply(&Event::Init));
        for c in [&provider, &stack] {
            assert!(!known.apply(&Event::InitApply(c.clone())));
        }
        assert!(!known.ready().await, "ready before the list is done");
        assert_eq!(known.counts(), (0, 0), "a relist shows only when done");
        assert!(known.apply(&Event::InitDone));
        tx.send_replace(true);
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
    async fn a_kind_is_found_in_its_own_group_not_in_one_whose_name_ends_like_it() {
        use kube::runtime::watcher::Event;
        let marks = json!({"stack.extensions.crossplane.io/0123456789abcdef": "owns"});
        // Each view's map has an order of its own: either CRD may come first.
        for _ in 0..16 {
            let (known, _tx) = view();
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
