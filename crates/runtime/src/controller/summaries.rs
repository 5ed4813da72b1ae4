//! What a controller keeps of each object of a watch when it needs one
//! small fact per object (a state, a version) and not the object: a
//! reflector's store keeps every object whole (an MRD is 800 bytes before
//! its strings), so for thousands of objects it costs megabytes where a
//! name and a fact cost a hundred bytes each. Whoever needs to act when a
//! fact changes is told its name ([`Summaries::changes`]); changes of the
//! object that leave its fact alone tell nothing.

use std::{
    collections::BTreeMap,
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use futures::{
    Stream, TryStreamExt as _,
    channel::mpsc::{UnboundedReceiver, UnboundedSender},
};
use kube::{ResourceExt as _, runtime::watcher};

/// One value per cluster-scoped object, by name (so iterated in name
/// order), as the watch last showed it. Cheap to clone: clones share it.
pub struct Summaries<V> {
    inner: Arc<RwLock<Inner<V>>>,
    /// True once a first list is complete.
    done: Arc<tokio::sync::watch::Sender<bool>>,
}

impl<V> Clone for Summaries<V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            done: Arc::clone(&self.done),
        }
    }
}

struct Inner<V> {
    values: BTreeMap<Box<str>, V>,
    /// What a relist has read so far; it replaces `values` when done.
    relist: Option<BTreeMap<Box<str>, V>>,
    /// Who is told of each value that changed ([`Summaries::changes`]).
    told: Vec<UnboundedSender<Change>>,
}

/// An object whose value changed, appeared, or went (`gone`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Change {
    pub name: String,
    pub gone: bool,
}

impl<V> Inner<V> {
    /// Tells every listener that `name`'s value changed (forgetting those
    /// that stopped listening).
    fn tell(&mut self, name: &str) {
        let change = Change {
            name: name.to_owned(),
            gone: !self.values.contains_key(name),
        };
        self.told
            .retain(|tx| tx.unbounded_send(change.clone()).is_ok());
    }
}

impl<V: Clone + PartialEq + Send + Sync + 'static> Summaries<V> {
    /// Empty, and not ready until a watch's first list is complete.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                values: BTreeMap::new(),
                relist: None,
                told: Vec::new(),
            })),
            done: Arc::new(tokio::sync::watch::Sender::new(false)),
        }
    }

    /// The objects whose value changed from now on, appeared or went (a
    /// relist tells what differs from before it), each once the summaries
    /// have it: whoever one wakes reads summaries at least as new.
    pub fn changes(&self) -> UnboundedReceiver<Change> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        self.inner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .told
            .push(tx);
        rx
    }

    /// `events` as they come, each taken in first with `summary` of its
    /// object: whoever the stream wakes reads summaries at least as new as
    /// the event that woke it.
    pub fn follow<K, S>(
        &self,
        events: S,
        summary: fn(&K) -> V,
    ) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static + use<V, K, S>
    where
        K: kube::Resource + Send + 'static,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let me = self.clone();
        events.map_ok(move |event| {
            me.apply(&event, summary);
            event
        })
    }

    /// Takes in one watch event.
    pub fn apply<K: kube::Resource>(&self, event: &watcher::Event<K>, summary: fn(&K) -> V) {
        use watcher::Event;
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let entry = |o: &K| (Box::<str>::from(o.name_any()), summary(o));
        match event {
            Event::Init => inner.relist = Some(BTreeMap::new()),
            Event::InitApply(o) => {
                if let Some(relist) = inner.relist.as_mut() {
                    let (name, value) = entry(o);
                    relist.insert(name, value);
                }
            }
            Event::InitDone => {
                if let Some(relist) = inner.relist.take() {
                    let before = std::mem::replace(&mut inner.values, relist);
                    if !inner.told.is_empty() {
                        let changed: Vec<Box<str>> = inner
                            .values
                            .iter()
                            .filter(|(n, v)| before.get(*n) != Some(*v))
                            .map(|(n, _)| n.clone())
                            .chain(
                                before
                                    .keys()
                                    .filter(|n| !inner.values.contains_key(*n))
                                    .cloned(),
                            )
                            .collect();
                        for name in changed {
                            inner.tell(&name);
                        }
                    }
                }
                drop(inner);
                self.done.send_replace(true);
            }
            Event::Apply(o) => {
                let (name, value) = entry(o);
                let changed = inner.values.get(&name) != Some(&value);
                inner.values.insert(name.clone(), value);
                if changed {
                    inner.tell(&name);
                }
            }
            Event::Delete(o) => {
                let name = o.name_any();
                if inner.values.remove(name.as_str()).is_some() {
                    inner.tell(&name);
                }
            }
        }
    }

    /// Whether the first list is complete (waiting a moment for it, as
    /// [`super::cache_ready`] does for a store).
    pub async fn ready(&self) -> bool {
        let mut ready = self.done.subscribe();
        tokio::time::timeout(Duration::from_millis(20), ready.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The value of `name`, if the watch has shown it.
    pub fn get(&self, name: &str) -> Option<V> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.values.get(name).cloned()
    }

    /// What `f` makes of every name and value, in name order (under a
    /// read lock: `f` must not wait).
    pub fn read<R>(&self, f: impl FnOnce(&BTreeMap<Box<str>, V>) -> R) -> R {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        f(&inner.values)
    }
}

impl<V: Clone + PartialEq + Send + Sync + 'static> Default for Summaries<V> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Namespace;
    use watcher::Event;

    use super::*;

    fn ns(name: &str, phase: &str) -> Namespace {
        let mut n = Namespace::default();
        n.metadata.name = Some(name.into());
        n.status = Some(k8s_openapi::api::core::v1::NamespaceStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        n
    }

    fn phase(n: &Namespace) -> String {
        n.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    }

    fn all(s: &Summaries<String>) -> Vec<(String, String)> {
        s.read(|m| m.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    #[tokio::test]
    async fn summaries_follow_the_watch_and_a_relist_replaces_them() {
        let s = Summaries::new();
        s.apply(&Event::Init, phase);
        s.apply(&Event::InitApply(ns("b", "Active")), phase);
        s.apply(&Event::InitApply(ns("a", "Terminating")), phase);
        assert!(!s.ready().await, "not ready before the list is done");
        assert!(all(&s).is_empty(), "a list not done yet is not seen");
        s.apply(&Event::InitDone, phase);
        assert!(s.ready().await);
        assert_eq!(
            all(&s),
            vec![
                ("a".into(), "Terminating".into()),
                ("b".into(), "Active".into())
            ],
            "by name"
        );
        s.apply(&Event::Apply(ns("b", "Terminating")), phase);
        assert_eq!(s.get("b").as_deref(), Some("Terminating"));
        s.apply(&Event::Delete(ns("a", "Terminating")), phase);
        assert_eq!(s.get("a"), None);
        // A relist forgets what it no longer lists, and stays ready.
        s.apply(&Event::Init, phase);
        s.apply(&Event::InitApply(ns("c", "Active")), phase);
        s.apply(&Event::InitDone, phase);
        assert_eq!(all(&s), vec![("c".into(), "Active".into())]);
        assert!(s.ready().await);
    }

    #[tokio::test]
    async fn a_changed_value_is_told_and_a_change_that_leaves_it_alone_is_not() {
        use futures::{FutureExt as _, StreamExt as _};
        let s = Summaries::new();
        let mut changes = s.changes();
        let mut told = || {
            let mut names = Vec::new();
            while let Some(Some(c)) = changes.next().now_or_never() {
                names.push(format!("{}{}", c.name, if c.gone { " gone" } else { "" }));
            }
            names
        };
        s.apply(&Event::Init, phase);
        s.apply(&Event::InitApply(ns("a", "Active")), phase);
        s.apply(&Event::InitApply(ns("b", "Active")), phase);
        assert_eq!(
            told(),
            Vec::<String>::new(),
            "nothing before the list is done"
        );
        s.apply(&Event::InitDone, phase);
        assert_eq!(told(), ["a", "b"]);
        // The object changed, its value did not (another field, say).
        s.apply(&Event::Apply(ns("a", "Active")), phase);
        assert_eq!(told(), Vec::<String>::new());
        s.apply(&Event::Apply(ns("a", "Terminating")), phase);
        assert_eq!(told(), ["a"]);
        s.apply(&Event::Delete(ns("a", "Terminating")), phase);
        assert_eq!(told(), ["a gone"]);
        // A relist tells what differs from before it: b changed, c is new,
        // and nothing went.
        s.apply(&Event::Init, phase);
        s.apply(&Event::InitApply(ns("b", "Terminating")), phase);
        s.apply(&Event::InitApply(ns("c", "Active")), phase);
        s.apply(&Event::InitDone, phase);
        assert_eq!(told(), ["b", "c"]);
        // A relist that no longer lists c tells it gone.
        s.apply(&Event::Init, phase);
        s.apply(&Event::InitApply(ns("b", "Terminating")), phase);
        s.apply(&Event::InitDone, phase);
        assert_eq!(told(), ["c gone"]);
    }
}
