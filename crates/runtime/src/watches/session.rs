//! What a controller holds: the shared watches of its dependents, and one
//! session per reconcile that records what it read.

use std::{
    collections::HashSet,
    fmt,
    sync::{Arc, Mutex},
};

use futures::{Stream, channel::mpsc};
use kube::{Resource, api::DynamicObject, runtime::reflector::ObjectRef};

use super::state::{Shared, WatchGuard};
use super::target::{Cached, Target, TargetKey};
use super::task::run;
use crate::metrics::Metrics;

/// The shared watches of one controller, whose objects are of kind `K`.
/// Cheap to clone; clones share the watches. Dropping the last clone stops
/// every watch.
pub struct Watches<K: Resource> {
    pub(super) shared: Arc<Shared<K>>,
}

impl<K: Resource> Clone for Watches<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K> Watches<K>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    /// No watches yet, for `controller` (its name in metrics). Also returns
    /// the stream of dependents to wake: pass it to
    /// `Controller::reconcile_on`.
    pub fn new(
        controller: &'static str,
        metrics: &Metrics,
    ) -> (Self, impl Stream<Item = ObjectRef<K>> + Send + 'static) {
        let (wake, woken) = mpsc::unbounded();
        let shared = Shared {
            controller,
            state: Mutex::default(),
            wake,
            open: metrics.shared_watches.with_label_values(&[controller]),
            wakeups: metrics.watch_wakeups.with_label_values(&[controller]),
            failures: metrics.watch_failures.with_label_values(&[controller]),
        };
        (
            Self {
                shared: Arc::new(shared),
            },
            woken,
        )
    }

    /// Starts recording what `dependent` reads in one reconcile.
    pub fn session(&self, dependent: ObjectRef<K>) -> Session<K> {
        Session {
            watches: self.clone(),
            dependent,
            read: HashSet::new(),
        }
    }

    /// Stops everything `dependent` watches (it was deleted); a watch with
    /// no reader left stops.
    pub fn release(&self, dependent: &ObjectRef<K>) {
        let stopped = match self.shared.state.lock() {
            Ok(mut state) => state.release(dependent),
            Err(_) => Vec::new(),
        };
        drop(stopped);
    }

    /// Puts an object this process just wrote (an apply's or create's
    /// answer) into the cache, unless the cache already holds a newer
    /// version, so that the next read does not see the object from before
    /// the write (its watch event may arrive later). Does nothing when no
    /// watch covers `target`.
    pub fn written(&self, target: &Target, object: DynamicObject) {
        if let Ok(mut state) = self.shared.state.lock() {
            state.written(&target.key(), object);
        }
    }

    /// Starts a write by `dependent` to `target`: until it ends, a watch
    /// event of `target` does not wake `dependent` (whose reconcile is
    /// running and goes on with the answer), unless the answer turns out
    /// older than the event. End it with [`Writing::written`]; dropped
    /// without (the write failed), it wakes `dependent` if an event was
    /// held back.
    pub fn writing(&self, dependent: &ObjectRef<K>, target: &Target) -> Writing<K> {
        let id = match self.shared.state.lock() {
            Ok(mut state) => Some(state.begin_write(dependent, &target.key())),
            Err(_) => None,
        };
        Writing {
            watches: self.clone(),
            id,
        }
    }

    fn end_write(&self, id: u64, answer: Option<DynamicObject>) {
        if let Ok(mut state) = self.shared.state.lock() {
            let woken = state.end_write(id, answer);
            self.shared.wake(woken);
        }
    }

    /// How many shared watches are open.
    pub fn open(&self) -> usize {
        self.shared.state.lock().map_or(0, |s| s.watches.len())
    }

    fn read(&self, dependent: &ObjectRef<K>, target: &Target, key: &TargetKey) -> Cached {
        // A watch needs a runtime to run on; without one, ask the server.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Cached::Unknown;
        };
        let Ok(mut state) = self.shared.state.lock() else {
            return Cached::Unknown;
        };
        state.register(dependent, key, |id| {
            let task = runtime.spawn(run(
                Arc::downgrade(&self.shared),
                key.watch.clone(),
                id,
                target.clone(),
            ));
            WatchGuard::new(Some(task.abort_handle()), self.shared.open.clone())
        });
        state.read(key)
    }

    fn commit(&self, dependent: &ObjectRef<K>, read: &HashSet<TargetKey>) {
        let stopped = match self.shared.state.lock() {
            Ok(mut state) => state.commit(dependent, read),
            Err(_) => Vec::new(),
        };
        drop(stopped);
    }
}

/// A write in flight (see [`Watches::writing`]).
pub struct Writing<K>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    watches: Watches<K>,
    id: Option<u64>,
}

impl<K> Writing<K>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    /// The write was answered with `object`: it goes into the cache, as
    /// [`Watches::written`] puts it.
    pub fn written(mut self, object: DynamicObject) {
        if let Some(id) = self.id.take() {
            self.watches.end_write(id, Some(object));
        }
    }
}

impl<K> Drop for Writing<K>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.watches.end_write(id, None);
        }
    }
}

/// What one reconcile of one dependent reads.
pub struct Session<K: Resource> {
    watches: Watches<K>,
    dependent: ObjectRef<K>,
    read: HashSet<TargetKey>,
}

impl<K> Session<K>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    /// Registers interest in `target` (starting its shared watch on first
    /// use) and answers from the cache.
    pub fn read(&mut self, target: &Target) -> Cached {
        let key = target.key();
        let answer = self.watches.read(&self.dependent, target, &key);
        self.read.insert(key);
        answer
    }

    /// The reconcile succeeded: what it read is now all the dependent
    /// watches; targets it no longer read are released (their watches stop
    /// when their last reader goes). A session dropped without `commit`
    /// keeps the union of the old and the new interest: a failed reconcile
    /// must not stop the watch that would wake it.
    pub fn commit(self) {
        self.watches.commit(&self.dependent, &self.read);
    }
}

impl<K: Resource> fmt::Debug for Watches<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watches")
            .field("controller", &self.shared.controller)
            .finish_non_exhaustive()
    }
}
