//! Who reads what: the shared watches of one controller, their readers,
//! and whom a change wakes. Pure bookkeeping over the caches.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use futures::channel::mpsc;
use kube::{Resource, api::DynamicObject, runtime::reflector::ObjectRef};
use prometheus::{IntCounter, IntGauge};
use tokio::task::AbortHandle;

use super::cache::{Cache, TOMBSTONE_TTL, not_older};
use super::target::{Cached, ObjKey, TargetKey, WatchKey};

/// What a watch task reports.
#[derive(Debug)]
pub(super) enum Change {
    Init,
    InitApply(DynamicObject),
    InitDone,
    Apply(DynamicObject),
    Delete(DynamicObject),
    Failed,
}

/// Keeps a watch's task running and counted while the watch is in use.
pub(super) struct WatchGuard {
    pub(super) task: Option<AbortHandle>,
    pub(super) open: IntGauge,
}

impl WatchGuard {
    pub(super) fn new(task: Option<AbortHandle>, open: IntGauge) -> Self {
        open.inc();
        Self { task, open }
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
        self.open.dec();
    }
}

/// One shared watch: its cache and who reads what from it.
pub(super) struct Watch<K: Resource> {
    /// Tells this watch's task from that of an earlier watch of the same key.
    pub(super) id: u64,
    pub(super) cache: Cache,
    pub(super) readers: HashMap<ObjKey, HashSet<ObjectRef<K>>>,
    pub(super) _guard: WatchGuard,
}

impl<K: Resource<DynamicType = ()>> Watch<K> {
    pub(super) fn all_readers(&self) -> Vec<ObjectRef<K>> {
        let all: HashSet<&ObjectRef<K>> = self.readers.values().flatten().collect();
        all.into_iter().cloned().collect()
    }

    pub(super) fn readers_of(&self, key: &ObjKey) -> Vec<ObjectRef<K>> {
        self.readers
            .get(key)
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }
}

pub(super) struct State<K: Resource> {
    pub(super) watches: HashMap<WatchKey, Watch<K>>,
    /// What each dependent reads.
    pub(super) interest: HashMap<ObjectRef<K>, HashSet<TargetKey>>,
    /// Writes in flight, by id.
    pub(super) writing: HashMap<u64, InFlight<K>>,
}

impl<K: Resource> Default for State<K> {
    fn default() -> Self {
        Self {
            watches: HashMap::new(),
            interest: HashMap::new(),
            writing: HashMap::new(),
        }
    }
}

/// A write by `dependent` to the object `key`, sent and not yet answered.
/// A watch event of that object arriving meanwhile (most often the write's
/// own, which can come before its answer) does not wake the writer: its
/// reconcile is still running and goes on with the answer. The newest such
/// event is held, and wakes the writer only if it turns out newer than the
/// answer, or the write failed.
pub(super) struct InFlight<K: Resource> {
    pub(super) key: TargetKey,
    pub(super) dependent: ObjectRef<K>,
    /// The resourceVersion of the newest event held back, if any.
    pub(super) held: Option<Option<String>>,
}

/// The source of write ids.
static NEXT_WRITE_ID: AtomicU64 = AtomicU64::new(1);

/// The source of watch ids.
pub(super) static NEXT_WATCH_ID: AtomicU64 = AtomicU64::new(1);

pub(super) fn key_of(object: &DynamicObject) -> Option<ObjKey> {
    Some((
        object.metadata.namespace.clone(),
        object.metadata.name.clone()?,
    ))
}

/// An object as a watch's cache keeps it: without managedFields, and its
/// body (spec, status, data: everything but the type and metadata) packed
/// ([`crate::packed`]); [`super::cache::Cache::get`] unpacks it.
pub(super) fn strip(mut object: DynamicObject) -> Arc<DynamicObject> {
    object.metadata.managed_fields = None;
    crate::packed::pack(&mut object.data);
    Arc::new(object)
}

impl<K: Resource<DynamicType = ()>> State<K> {
    /// Records that `dependent` reads `key`. When its watch does not exist,
    /// `start` starts it, given the new watch's id.
    pub(super) fn register(
        &mut self,
        dependent: &ObjectRef<K>,
        key: &TargetKey,
        start: impl FnOnce(u64) -> WatchGuard,
    ) {
        let watch = self.watches.entry(key.watch.clone()).or_insert_with(|| {
            let id = NEXT_WATCH_ID.fetch_add(1, Ordering::Relaxed);
            Watch {
                id,
                cache: Cache::default(),
                readers: HashMap::new(),
                _guard: start(id),
            }
        });
        watch
            .readers
            .entry(key.object.clone())
            .or_default()
            .insert(dependent.clone());
        self.interest
            .entry(dependent.clone())
            .or_default()
            .insert(key.clone());
    }

    /// Forgets that `dependent` reads `key`; the watch, if this was its last
    /// reader, is returned (drop it outside the lock: that stops it).
    pub(super) fn unregister(
        &mut self,
        dependent: &ObjectRef<K>,
        key: &TargetKey,
    ) -> Option<Watch<K>> {
        if let Some(keys) = self.interest.get_mut(dependent) {
            keys.remove(key);
            if keys.is_empty() {
                self.interest.remove(dependent);
            }
        }
        let watch = self.watches.get_mut(&key.watch)?;
        if let Some(readers) = watch.readers.get_mut(&key.object) {
            readers.remove(dependent);
            if readers.is_empty() {
                watch.readers.remove(&key.object);
            }
        }
        if watch.readers.is_empty() {
            return self.watches.remove(&key.watch);
        }
        None
    }

    /// `dependent` now reads exactly `read` (which it has registered).
    pub(super) fn commit(
        &mut self,
        dependent: &ObjectRef<K>,
        read: &HashSet<TargetKey>,
    ) -> Vec<Watch<K>> {
        let stale: Vec<TargetKey> = self
            .interest
            .get(dependent)
            .map(|keys| keys.difference(read).cloned().collect())
            .unwrap_or_default();
        stale
            .iter()
            .filter_map(|k| self.unregister(dependent, k))
            .collect()
    }

    /// `dependent` reads nothing any more.
    pub(super) fn release(&mut self, dependent: &ObjectRef<K>) -> Vec<Watch<K>> {
        self.commit(dependent, &HashSet::new())
    }

    pub(super) fn read(&self, key: &TargetKey) -> Cached {
        self.watches
            .get(&key.watch)
            .map_or(Cached::Unknown, |w| w.cache.get(&key.object))
    }

    pub(super) fn written(&mut self, key: &TargetKey, object: DynamicObject) {
        if let Some(watch) = self.watches.get_mut(&key.watch) {
            watch.cache.put(key.object.clone(), strip(object));
        }
    }

    /// `dependent` is about to write `key`: the id to end the write with.
    pub(super) fn begin_write(&mut self, dependent: &ObjectRef<K>, key: &TargetKey) -> u64 {
        let id = NEXT_WRITE_ID.fetch_add(1, Ordering::Relaxed);
        let write = InFlight {
            key: key.clone(),
            dependent: dependent.clone(),
            held: None,
        };
        self.writing.insert(id, write);
        id
    }

    /// The write `id` ended: answered with `answer` (put in the cache), or
    /// failed (`None`). Whom to wake: the writer, if an event held back
    /// while it was in flight is newer than the answer, or the write
    /// failed after one was held.
    pub(super) fn end_write(
        &mut self,
        id: u64,
        answer: Option<DynamicObject>,
    ) -> Vec<ObjectRef<K>> {
        let Some(write) = self.writing.remove(&id) else {
            return Vec::new();
        };
        let newer = match (&write.held, &answer) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(held), Some(a)) => {
                let answered = a.metadata.resource_version.as_deref();
                held.as_deref() != answered && not_older(held.as_deref(), answered)
            }
        };
        if let Some(a) = answer {
            self.written(&write.key, a);
        }
        if newer {
            vec![write.dependent]
        } else {
            Vec::new()
        }
    }

    /// Of `woken`, by a change of `key` at `resource_version`, the writers
    /// of `key` in flight are held back.
    fn hold_writers(
        &mut self,
        key: TargetKey,
        resource_version: Option<String>,
        mut woken: Vec<ObjectRef<K>>,
    ) -> Vec<ObjectRef<K>> {
        for write in self.writing.values_mut().filter(|w| w.key == key) {
            let before = woken.len();
            woken.retain(|d| *d != write.dependent);
            if woken.len() < before {
                write.held = Some(resource_version.clone());
            }
        }
        woken
    }

    /// Applies what watch `id` of `key` reports; returns whom to wake.
    pub(super) fn change(
        &mut self,
        key: &WatchKey,
        id: u64,
        change: Change,
        now: Instant,
    ) -> Vec<ObjectRef<K>> {
        let Some(watch) = self.watches.get_mut(key).filter(|w| w.id == id) else {
            return Vec::new();
        };
        let cache = &mut watch.cache;
        match change {
            Change::Init => cache.init(),
            Change::InitApply(o) => {
                if let Some(k) = key_of(&o) {
                    cache.init_apply(k, strip(o));
                }
            }
            Change::InitDone => {
                // Turning healthy wakes everyone (a reader that asked the
                // server meanwhile may have missed a change); a relist of a
                // healthy watch wakes the readers of what it changed.
                let was_healthy = cache.healthy();
                let changed = cache.init_done(now);
                if !was_healthy {
                    return watch.all_readers();
                }
                let woken: HashSet<ObjectRef<K>> =
                    changed.iter().flat_map(|k| watch.readers_of(k)).collect();
                return woken.into_iter().collect();
            }
            Change::Apply(o) => {
                cache.prune(now, TOMBSTONE_TTL);
                let rv = o.metadata.resource_version.clone();
                if let Some(k) = key_of(&o)
                    && cache.put(k.clone(), strip(o))
                {
                    let woken = watch.readers_of(&k);
                    let key = TargetKey {
                        watch: key.clone(),
                        object: k,
                    };
                    return self.hold_writers(key, rv, woken);
                }
            }
            Change::Delete(o) => {
                cache.prune(now, TOMBSTONE_TTL);
                let rv = o.metadata.resource_version.clone();
                if let Some(k) = key_of(&o)
                    && cache.remove(k.clone(), rv, now)
                {
                    return watch.readers_of(&k);
                }
            }
            Change::Failed => {
                if cache.fail() {
                    return watch.all_readers();
                }
            }
        }
        Vec::new()
    }
}

pub(super) struct Shared<K: Resource> {
    pub(super) controller: &'static str,
    pub(super) state: Mutex<State<K>>,
    pub(super) wake: mpsc::UnboundedSender<ObjectRef<K>>,
    pub(super) open: IntGauge,
    pub(super) wakeups: IntCounter,
    pub(super) failures: IntCounter,
}

impl<K: Resource<DynamicType = ()>> Shared<K> {
    /// Sends each of `dependents` on the wake stream. Called with the state
    /// locked, so a read that sees a change is never ahead of its wake.
    pub(super) fn wake(&self, dependents: Vec<ObjectRef<K>>) {
        for d in dependents {
            self.wakeups.inc();
            // The receiver is gone only when the controller has stopped.
            let _ = self.wake.unbounded_send(d);
        }
    }
}
