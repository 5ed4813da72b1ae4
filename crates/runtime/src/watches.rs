//! Shared watches of the objects a controller's objects read, in remote
//! clusters or the control cluster, answering reads from memory and waking
//! exactly the controller objects whose reads changed.
//!
//! A controller object (the *dependent*: an Object, a
//! KubernetesApplicationResource) reads other objects (its *targets*: the
//! object it manages in a remote cluster, a ConfigMap or Secret a reference
//! names) through a [`Session`] per reconcile. Each read registers interest
//! and is answered from the cache of one shared watch per (cluster client,
//! kind, [`Scope`]): a thousand Objects managing ConfigMaps in one cluster
//! share one list and one watch. The watch starts with its first reader and
//! stops when its last reader goes, by [`Watches::release`] or because a
//! successful reconcile ([`Session::commit`]) no longer read it.
//!
//! When a watched object changes (anyone's write, ours included) every
//! dependent that read it, and only those, is sent on the wake stream that
//! [`Watches::new`] returns; hand it to `Controller::reconcile_on`.
//!
//! The cache holds objects without `metadata.managedFields`. It keeps the
//! newest version it saw: a watch event or an object this process just wrote
//! ([`Watches::written`]) replaces the cached one only when its
//! resourceVersion is not older, and a deletion leaves a tombstone (for
//! [`TOMBSTONE_TTL`]) so that a late answer to an earlier write cannot bring
//! the object back.
//!
//! Until a watch's first list completes, and from the moment it fails until
//! it has listed again, reads answer [`Cached::Unknown`]: the caller asks
//! the server itself, which reports a cluster that does not answer. Turning
//! healthy (the first list included) or failing wakes every dependent of
//! the watch. A failed watch is started again, with kube's default watcher
//! backoff between attempts, from a fresh list (as client-go's reflector
//! does), so the cache is whole again when it is trusted again. A watch
//! that only resumed too late (410 Gone) is not failing: kube's watcher
//! lists again, the cache serves meanwhile, and the readers of what the
//! list changed are woken.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    fmt,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt, channel::mpsc};
use kube::{
    Api, Resource,
    api::DynamicObject,
    discovery::ApiResource,
    runtime::{
        reflector::ObjectRef,
        watcher::{self, DefaultBackoff},
    },
};
use prometheus::{IntCounter, IntGauge};
use tokio::task::AbortHandle;

use crate::{metrics::Metrics, remote::RemoteCluster};

/// How long a deleted object's tombstone is kept: longer than any answer to
/// one of our writes can be late.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(300);

/// The longest pause between two attempts of a failing watch, should kube's
/// default backoff ever run out.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// Which objects of a kind one shared watch covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every object of the kind (all namespaces), optionally only those
    /// matching a label selector (e.g. `app=web,tier!=db`). For the target
    /// kinds of managed objects in a remote cluster: one watch per (cluster
    /// client, kind, selector). An object outside the selector reads as
    /// [`Cached::Absent`].
    Kind {
        /// A label selector, in the API's syntax.
        labels: Option<String>,
    },
    /// One object, by namespace and name (`fieldSelector=metadata.name=…`).
    /// For objects a dependent references in the control cluster (a
    /// ConfigMap or Secret a reference reads), where watching the whole kind
    /// would cache far more than needed.
    Object,
}

/// One object a dependent reads.
#[derive(Clone)]
pub struct Target {
    /// The cluster it lives in; watches are shared per [`RemoteCluster::id`].
    pub cluster: RemoteCluster,
    /// Its kind, as discovery resolved it in that cluster.
    pub resource: ApiResource,
    /// Its namespace; `None` for a cluster-scoped kind.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// What the shared watch that serves it covers.
    pub scope: Scope,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("cluster", &self.cluster.name)
            .field("kind", &self.resource.kind)
            .field("apiVersion", &self.resource.api_version)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("scope", &self.scope)
            .finish()
    }
}

impl Target {
    fn watch_key(&self) -> WatchKey {
        WatchKey {
            cluster: self.cluster.id(),
            api_version: self.resource.api_version.clone(),
            plural: self.resource.plural.clone(),
            selector: match &self.scope {
                Scope::Kind { labels } => Selector::Labels(labels.clone()),
                Scope::Object => Selector::Name(self.object_key()),
            },
        }
    }

    fn object_key(&self) -> ObjKey {
        (self.namespace.clone(), self.name.clone())
    }

    fn key(&self) -> TargetKey {
        TargetKey {
            watch: self.watch_key(),
            object: self.object_key(),
        }
    }

    /// The list/watch this target's shared watch makes.
    fn watcher(&self) -> (Api<DynamicObject>, watcher::Config) {
        let client = self.cluster.watch_client.clone();
        match &self.scope {
            Scope::Kind { labels } => {
                let config = match labels {
                    Some(l) => watcher::Config::default().labels(l),
                    None => watcher::Config::default(),
                };
                (Api::all_with(client, &self.resource), config)
            }
            Scope::Object => {
                let api = match &self.namespace {
                    Some(ns) => Api::namespaced_with(client, ns, &self.resource),
                    None => Api::all_with(client, &self.resource),
                };
                let fields = format!("metadata.name={}", escape_selector_value(&self.name));
                (api, watcher::Config::default().fields(&fields))
            }
        }
    }
}

/// Escapes a value for a field selector (`\`, `,` and `=` are special), so
/// a name can only ever select itself.
fn escape_selector_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What the cache knows about a target.
#[derive(Clone, Debug)]
pub enum Cached {
    /// The object, as last seen (without `managedFields`).
    Present(Arc<DynamicObject>),
    /// The watch is healthy and the object does not exist (or is outside
    /// the watch's selector).
    Absent,
    /// The watch has not listed yet, or is failing: ask the server.
    Unknown,
}

/// The identity of one shared watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WatchKey {
    cluster: u64,
    api_version: String,
    plural: String,
    selector: Selector,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Selector {
    Labels(Option<String>),
    Name(ObjKey),
}

/// (namespace, name) of an object in a watch.
type ObjKey = (Option<String>, String);

/// One object in one shared watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TargetKey {
    watch: WatchKey,
    object: ObjKey,
}

// ---------------------------------------------------------------------------
// The cache of one watch (pure: no I/O, no clock of its own).

/// Whether `incoming` may replace what has `cached`: unless both parse as
/// numbers and `incoming` is the smaller. resourceVersions are opaque to
/// clients in principle; every API server in practice uses etcd's revision.
fn not_older(incoming: Option<&str>, cached: Option<&str>) -> bool {
    !matches!((incoming, cached), (Some(i), Some(c)) if crate::reconciler::older(i, c))
}

/// What one watch knows about one object.
#[derive(Clone, Debug)]
enum Slot {
    Live(Arc<DynamicObject>),
    /// Deleted at this resourceVersion.
    Gone {
        resource_version: Option<String>,
        since: Instant,
    },
}

impl Slot {
    fn resource_version(&self) -> Option<&str> {
        match self {
            Slot::Live(o) => o.metadata.resource_version.as_deref(),
            Slot::Gone {
                resource_version, ..
            } => resource_version.as_deref(),
        }
    }
}

/// The objects of one watch and whether they can be trusted.
#[derive(Default)]
struct Cache {
    slots: HashMap<ObjKey, Slot>,
    /// Tombstones in the order they were laid, for pruning.
    tombstones: VecDeque<(Instant, ObjKey)>,
    /// The list in progress (between `Init` and `InitDone`).
    listing: Option<HashMap<ObjKey, Arc<DynamicObject>>>,
    synced: bool,
    failing: bool,
}

impl Cache {
    fn healthy(&self) -> bool {
        self.synced && !self.failing
    }

    fn get(&self, key: &ObjKey) -> Cached {
        if !self.healthy() {
            return Cached::Unknown;
        }
        match self.slots.get(key) {
            Some(Slot::Live(o)) => Cached::Present(o.clone()),
            Some(Slot::Gone { .. }) | None => Cached::Absent,
        }
    }

    /// Puts `object` unless the cache holds a newer version (or a newer
    /// tombstone). Whether that changed anything: the same resourceVersion
    /// again (the watch event of a write whose answer `written` already put
    /// here) is nothing new, and wakes nobody.
    fn put(&mut self, key: ObjKey, object: Arc<DynamicObject>) -> bool {
        let incoming = object.metadata.resource_version.clone();
        let mut same = false;
        if let Some(cached) = self.slots.get(&key) {
            if !not_older(incoming.as_deref(), cached.resource_version()) {
                return false;
            }
            same = matches!(cached, Slot::Live(_))
                && incoming.is_some()
                && incoming.as_deref() == cached.resource_version();
        }
        self.slots.insert(key, Slot::Live(object));
        !same
    }

    /// Lays a tombstone at `resource_version` unless the cache holds a newer
    /// version. Whether it was laid.
    fn remove(&mut self, key: ObjKey, resource_version: Option<String>, now: Instant) -> bool {
        if let Some(cached) = self.slots.get(&key)
            && !not_older(resource_version.as_deref(), cached.resource_version())
        {
            return false;
        }
        self.tombstones.push_back((now, key.clone()));
        self.slots.insert(
            key,
            Slot::Gone {
                resource_version,
                since: now,
            },
        );
        true
    }

    /// Drops tombstones older than `ttl`.
    fn prune(&mut self, now: Instant, ttl: Duration) {
        while let Some((laid, _)) = self.tombstones.front() {
            if now.saturating_duration_since(*laid) < ttl {
                break;
            }
            let Some((laid, key)) = self.tombstones.pop_front() else {
                break;
            };
            // Only if the slot still holds this tombstone.
            if matches!(self.slots.get(&key), Some(Slot::Gone { since, .. }) if *since == laid) {
                self.slots.remove(&key);
            }
        }
    }

    /// A (re)list starts.
    fn init(&mut self) {
        self.listing = Some(HashMap::new());
    }

    fn init_apply(&mut self, key: ObjKey, object: Arc<DynamicObject>) {
        self.listing
            .get_or_insert_with(HashMap::new)
            .insert(key, object);
    }

    /// The list is complete: it becomes the cache, except where the cache
    /// holds something newer (an object written, or deleted, after the
    /// list's snapshot). An object missing from the list is gone: it gets a
    /// tombstone at the newest resourceVersion the list showed. Returns the
    /// objects that appeared, changed or vanished.
    fn init_done(&mut self, now: Instant) -> Vec<ObjKey> {
        let before: HashMap<ObjKey, Option<String>> = self.live_versions().collect();
        let listed = self.listing.take().unwrap_or_default();
        let newest = listed
            .values()
            .filter_map(|o| o.metadata.resource_version.as_deref())
            .filter_map(|v| v.parse::<u64>().ok())
            .max();
        let vanished: Vec<ObjKey> = self
            .slots
            .iter()
            .filter(|(k, s)| matches!(s, Slot::Live(_)) && !listed.contains_key(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in vanished {
            self.slots.remove(&key);
            self.remove(key, newest.map(|v| v.to_string()), now);
        }
        for (key, object) in listed {
            self.put(key, object);
        }
        self.synced = true;
        self.failing = false;
        let after: HashMap<ObjKey, Option<String>> = self.live_versions().collect();
        let mut changed: Vec<ObjKey> = after
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect();
        changed.extend(before.into_keys().filter(|k| !after.contains_key(k)));
        changed
    }

    /// (key, resourceVersion) of every object present.
    fn live_versions(&self) -> impl Iterator<Item = (ObjKey, Option<String>)> + '_ {
        self.slots.iter().filter_map(|(k, s)| match s {
            Slot::Live(o) => Some((k.clone(), o.metadata.resource_version.clone())),
            Slot::Gone { .. } => None,
        })
    }

    /// The watch failed. Whether it was healthy until now.
    fn fail(&mut self) -> bool {
        let was = self.healthy();
        self.failing = true;
        self.listing = None;
        was
    }
}

// ---------------------------------------------------------------------------
// Who reads what (pure bookkeeping over the caches).

/// What a watch task reports.
#[derive(Debug)]
enum Change {
    Init,
    InitApply(DynamicObject),
    InitDone,
    Apply(DynamicObject),
    Delete(DynamicObject),
    Failed,
}

/// Keeps a watch's task running and counted while the watch is in use.
struct WatchGuard {
    task: Option<AbortHandle>,
    open: IntGauge,
}

impl WatchGuard {
    fn new(task: Option<AbortHandle>, open: IntGauge) -> Self {
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
struct Watch<K: Resource> {
    /// Tells this watch's task from that of an earlier watch of the same key.
    id: u64,
    cache: Cache,
    readers: HashMap<ObjKey, HashSet<ObjectRef<K>>>,
    _guard: WatchGuard,
}

impl<K: Resource<DynamicType = ()>> Watch<K> {
    fn all_readers(&self) -> Vec<ObjectRef<K>> {
        let all: HashSet<&ObjectRef<K>> = self.readers.values().flatten().collect();
        all.into_iter().cloned().collect()
    }

    fn readers_of(&self, key: &ObjKey) -> Vec<ObjectRef<K>> {
        self.readers
            .get(key)
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }
}

struct State<K: Resource> {
    watches: HashMap<WatchKey, Watch<K>>,
    /// What each dependent reads.
    interest: HashMap<ObjectRef<K>, HashSet<TargetKey>>,
}

impl<K: Resource> Default for State<K> {
    fn default() -> Self {
        Self {
            watches: HashMap::new(),
            interest: HashMap::new(),
        }
    }
}

/// The source of watch ids.
static NEXT_WATCH_ID: AtomicU64 = AtomicU64::new(1);

fn key_of(object: &DynamicObject) -> Option<ObjKey> {
    Some((
        object.metadata.namespace.clone(),
        object.metadata.name.clone()?,
    ))
}

fn strip(mut object: DynamicObject) -> Arc<DynamicObject> {
    object.metadata.managed_fields = None;
    Arc::new(object)
}

impl<K: Resource<DynamicType = ()>> State<K> {
    /// Records that `dependent` reads `key`. When its watch does not exist,
    /// `start` starts it, given the new watch's id.
    fn register(
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
    fn unregister(&mut self, dependent: &ObjectRef<K>, key: &TargetKey) -> Option<Watch<K>> {
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
    fn commit(&mut self, dependent: &ObjectRef<K>, read: &HashSet<TargetKey>) -> Vec<Watch<K>> {
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
    fn release(&mut self, dependent: &ObjectRef<K>) -> Vec<Watch<K>> {
        self.commit(dependent, &HashSet::new())
    }

    fn read(&self, key: &TargetKey) -> Cached {
        self.watches
            .get(&key.watch)
            .map_or(Cached::Unknown, |w| w.cache.get(&key.object))
    }

    fn written(&mut self, key: &TargetKey, object: DynamicObject) {
        if let Some(watch) = self.watches.get_mut(&key.watch) {
            watch.cache.put(key.object.clone(), strip(object));
        }
    }

    /// Applies what watch `id` of `key` reports; returns whom to wake.
    fn change(
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
                if let Some(k) = key_of(&o)
                    && cache.put(k.clone(), strip(o))
                {
                    return watch.readers_of(&k);
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

// ---------------------------------------------------------------------------
// The public face.

struct Shared<K: Resource> {
    controller: &'static str,
    state: Mutex<State<K>>,
    wake: mpsc::UnboundedSender<ObjectRef<K>>,
    open: IntGauge,
    wakeups: IntCounter,
}

impl<K: Resource<DynamicType = ()>> Shared<K> {
    /// Sends each of `dependents` on the wake stream. Called with the state
    /// locked, so a read that sees a change is never ahead of its wake.
    fn wake(&self, dependents: Vec<ObjectRef<K>>) {
        for d in dependents {
            self.wakeups.inc();
            // The receiver is gone only when the controller has stopped.
            let _ = self.wake.unbounded_send(d);
        }
    }
}

/// The shared watches of one controller, whose objects are of kind `K`.
/// Cheap to clone; clones share the watches. Dropping the last clone stops
/// every watch.
pub struct Watches<K: Resource> {
    shared: Arc<Shared<K>>,
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

/// Runs one shared watch until it is stopped (its task aborted) or its
/// [`Watches`] are dropped.
async fn run<K>(shared: Weak<Shared<K>>, key: WatchKey, id: u64, target: Target)
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let (api, config) = target.watcher();
    let mut backoff = DefaultBackoff::default();
    loop {
        let mut events = std::pin::pin!(watcher::watcher(api.clone(), config.clone()));
        while let Some(event) = events.next().await {
            let change = match event {
                Ok(watcher::Event::Init) => Change::Init,
                Ok(watcher::Event::InitApply(o)) => Change::InitApply(o),
                Ok(watcher::Event::InitDone) => Change::InitDone,
                Ok(watcher::Event::Apply(o)) => Change::Apply(o),
                Ok(watcher::Event::Delete(o)) => Change::Delete(o),
                // The resourceVersion the watch resumed from is too old:
                // the watcher lists again by itself, and the cache stays
                // trusted meanwhile (it is as good as it was a moment ago).
                Err(watcher::Error::WatchError(s)) if s.code == 410 => continue,
                Err(e) => {
                    report(&target, &e);
                    Change::Failed
                }
            };
            let failed = matches!(change, Change::Failed);
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if let Ok(mut state) = shared.state.lock() {
                let woken = state.change(&key, id, change, Instant::now());
                shared.wake(woken);
            }
            if failed {
                break;
            }
        }
        // Start again from a fresh list, after kube's default backoff.
        let delay = backoff.next().unwrap_or(MAX_RETRY_DELAY);
        tokio::time::sleep(delay).await;
    }
}

/// Logs why a watch failed, by kind of failure and HTTP status only: the
/// error's text may quote what the server sent, which for a Secret is
/// secret.
fn report(target: &Target, error: &watcher::Error) {
    let (what, status) = match error {
        watcher::Error::InitialListFailed(e) => ("list failed", api_status(e)),
        watcher::Error::WatchStartFailed(e) => ("watch failed to start", api_status(e)),
        watcher::Error::WatchError(s) => ("watch ended with an error", Some(s.code)),
        watcher::Error::WatchFailed(e) => ("watch stream failed", api_status(e)),
        watcher::Error::NoResourceVersion => ("answer without resourceVersion", None),
    };
    tracing::warn!(
        cluster = %target.cluster.name,
        kind = %target.resource.kind,
        api_version = %target.resource.api_version,
        status = status.map(|s| s.to_string()).unwrap_or_default(),
        "shared watch: {what}; reads go to the server until it has listed again"
    );
}

fn api_status(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl<K: Resource> fmt::Debug for Watches<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watches")
            .field("controller", &self.shared.controller)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use prometheus::IntGauge;

    fn object(ns: &str, name: &str, rv: &str) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                managed_fields: Some(vec![Default::default()]),
                ..Default::default()
            },
            data: serde_json::json!({"data": {"k": rv}}),
        }
    }

    fn key(name: &str) -> ObjKey {
        (Some("ns".into()), name.into())
    }

    fn rv(c: &Cached) -> Option<String> {
        match c {
            Cached::Present(o) => o.metadata.resource_version.clone(),
            _ => None,
        }
    }

    fn synced() -> Cache {
        let mut c = Cache::default();
        c.init();
        c.init_done(Instant::now());
        c
    }

    #[test]
    fn newer_wins_by_resource_version_and_unparsable_versions_take_the_incoming() {
        assert!(not_older(Some("10"), Some("9")));
        assert!(not_older(Some("10"), Some("10")));
        assert!(!not_older(Some("9"), Some("10")));
        assert!(not_older(Some("x"), Some("10")));
        assert!(not_older(Some("9"), Some("y")));
        assert!(not_older(None, Some("10")));

        let mut c = synced();
        assert!(c.put(key("a"), strip(object("ns", "a", "10"))));
        assert!(!c.put(key("a"), strip(object("ns", "a", "9"))));
        assert_eq!(rv(&c.get(&key("a"))).as_deref(), Some("10"));
        // The same version again (our own write, then its watch event) is
        // nothing new: it wakes nobody.
        assert!(!c.put(key("a"), strip(object("ns", "a", "10"))));
        assert!(c.put(key("a"), strip(object("ns", "a", "11"))));
        assert_eq!(rv(&c.get(&key("a"))).as_deref(), Some("11"));
    }

    #[test]
    fn a_deletion_leaves_a_tombstone_that_an_older_write_cannot_pass() {
        let now = Instant::now();
        let mut c = synced();
        c.put(key("a"), strip(object("ns", "a", "10")));
        // A deletion older than what is cached (a write that recreated the
        // object answered first) is ignored.
        assert!(!c.remove(key("a"), Some("9".into()), now));
        assert!(matches!(c.get(&key("a")), Cached::Present(_)));
        assert!(c.remove(key("a"), Some("12".into()), now));
        assert!(matches!(c.get(&key("a")), Cached::Absent));
        // The late answer to a write from before the deletion.
        assert!(!c.put(key("a"), strip(object("ns", "a", "11"))));
        assert!(matches!(c.get(&key("a")), Cached::Absent));
        // Created again.
        assert!(c.put(key("a"), strip(object("ns", "a", "13"))));
        assert_eq!(rv(&c.get(&key("a"))).as_deref(), Some("13"));
    }

    #[test]
    fn tombstones_go_after_their_ttl() {
        let t0 = Instant::now();
        let mut c = synced();
        c.remove(key("a"), Some("5".into()), t0);
        c.remove(key("b"), Some("6".into()), t0 + Duration::from_secs(10));
        c.prune(t0 + Duration::from_secs(5), Duration::from_secs(8));
        assert_eq!(c.slots.len(), 2);
        c.prune(t0 + Duration::from_secs(9), Duration::from_secs(8));
        assert!(!c.slots.contains_key(&key("a")) && c.slots.contains_key(&key("b")));
        // Still absent, but no longer guarded.
        assert!(matches!(c.get(&key("a")), Cached::Absent));
        assert!(c.put(key("a"), strip(object("ns", "a", "1"))));
    }

    #[test]
    fn reads_are_unknown_until_listed_and_while_failing() {
        let now = Instant::now();
        let mut c = Cache::default();
        assert!(matches!(c.get(&key("a")), Cached::Unknown));
        c.init();
        c.init_apply(key("a"), strip(object("ns", "a", "3")));
        assert!(matches!(c.get(&key("a")), Cached::Unknown));
        c.init_done(now);
        assert!(matches!(c.get(&key("a")), Cached::Present(_)));
        assert!(matches!(c.get(&key("b")), Cached::Absent));
        assert!(c.fail());
        assert!(!c.fail(), "already failing");
        assert!(matches!(c.get(&key("a")), Cached::Unknown));
        assert!(matches!(c.get(&key("b")), Cached::Unknown));
    }

    #[test]
    fn a_relist_replaces_the_cache_but_keeps_what_is_newer_than_the_list() {
        let now = Instant::now();
        let mut c = synced();
        c.put(key("kept"), strip(object("ns", "kept", "5")));
        c.put(key("vanished"), strip(object("ns", "vanished", "6")));
        c.put(key("written"), strip(object("ns", "written", "20")));
        c.remove(key("deleted"), Some("21".into()), now);
        c.fail();
        c.init();
        c.init_apply(key("kept"), strip(object("ns", "kept", "7")));
        c.init_apply(key("written"), strip(object("ns", "written", "8")));
        c.init_apply(key("deleted"), strip(object("ns", "deleted", "9")));
        c.init_apply(key("new"), strip(object("ns", "new", "10")));
        c.init_done(now);
        assert_eq!(rv(&c.get(&key("kept"))).as_deref(), Some("7"));
        assert_eq!(rv(&c.get(&key("new"))).as_deref(), Some("10"));
        // Newer than the list: kept.
        assert_eq!(rv(&c.get(&key("written"))).as_deref(), Some("20"));
        assert!(matches!(c.get(&key("deleted")), Cached::Absent));
        // Not in the list: gone, with a tombstone at the list's newest
        // version, so the late answer of an older write does not bring it
        // back, but a newer event does.
        assert!(matches!(c.get(&key("vanished")), Cached::Absent));
        assert!(!c.put(key("vanished"), strip(object("ns", "vanished", "6"))));
        assert!(c.put(key("vanished"), strip(object("ns", "vanished", "11"))));
    }

    // -- interest bookkeeping

    fn dep(name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within("deps")
    }

    fn tkey(cluster: u64, selector: Selector, name: &str) -> TargetKey {
        TargetKey {
            watch: WatchKey {
                cluster,
                api_version: "v1".into(),
                plural: "configmaps".into(),
                selector,
            },
            object: key(name),
        }
    }

    fn all(cluster: u64, name: &str) -> TargetKey {
        tkey(cluster, Selector::Labels(None), name)
    }

    fn gauge() -> IntGauge {
        IntGauge::new("open", "test").unwrap()
    }

    /// Registers, counting watch starts on `open`.
    fn reg(s: &mut State<ConfigMap>, d: &ObjectRef<ConfigMap>, k: &TargetKey, open: &IntGauge) {
        s.register(d, k, |_| WatchGuard::new(None, open.clone()));
    }

    #[test]
    fn dependents_share_one_watch_per_cluster_kind_and_scope() {
        let open = gauge();
        let mut s = State::default();
        for i in 0..50 {
            reg(
                &mut s,
                &dep(&format!("d{i}")),
                &all(1, &format!("cm{i}")),
                &open,
            );
        }
        assert_eq!((s.watches.len(), open.get()), (1, 1));
        // Another selector, another client (a rotated credential), one
        // object by name: each its own watch.
        reg(
            &mut s,
            &dep("d0"),
            &tkey(1, Selector::Labels(Some("a=b".into())), "x"),
            &open,
        );
        reg(&mut s, &dep("d0"), &all(2, "cm0"), &open);
        reg(
            &mut s,
            &dep("d0"),
            &tkey(1, Selector::Name(key("y")), "y"),
            &open,
        );
        assert_eq!((s.watches.len(), open.get()), (4, 4));
    }

    #[test]
    fn a_watch_stops_when_its_last_reader_is_released() {
        let open = gauge();
        let mut s = State::default();
        reg(&mut s, &dep("a"), &all(1, "x"), &open);
        reg(&mut s, &dep("b"), &all(1, "x"), &open);
        reg(&mut s, &dep("b"), &all(1, "y"), &open);
        drop(s.release(&dep("a")));
        assert_eq!(open.get(), 1);
        let stopped = s.release(&dep("b"));
        assert_eq!(stopped.len(), 1);
        drop(stopped);
        assert_eq!(open.get(), 0);
        assert!(s.interest.is_empty() && s.watches.is_empty());
        // Releasing what reads nothing is harmless.
        drop(s.release(&dep("never")));
    }

    #[test]
    fn commit_keeps_only_what_the_reconcile_read() {
        let open = gauge();
        let mut s = State::default();
        let d = dep("d");
        // Reconcile 1 read x (cluster 1) and the old credential's y.
        reg(&mut s, &d, &all(1, "x"), &open);
        reg(&mut s, &d, &all(9, "y"), &open);
        // Reconcile 2 read x and y through the rotated credential.
        reg(&mut s, &d, &all(1, "x"), &open);
        reg(&mut s, &d, &all(2, "y"), &open);
        assert_eq!(open.get(), 3);
        let read: HashSet<TargetKey> = [all(1, "x"), all(2, "y")].into();
        drop(s.commit(&d, &read));
        assert_eq!(open.get(), 2, "the old credential's watch stopped");
        assert_eq!(s.interest[&d], read);
    }

    #[test]
    fn a_session_dropped_without_commit_keeps_the_union() {
        let open = gauge();
        let mut s = State::default();
        let d = dep("d");
        reg(&mut s, &d, &all(1, "x"), &open);
        drop(s.commit(&d, &[all(1, "x")].into()));
        // A failed reconcile read y, not x, and did not commit.
        reg(&mut s, &d, &all(2, "y"), &open);
        assert_eq!(open.get(), 2);
        assert_eq!(s.interest[&d], [all(1, "x"), all(2, "y")].into());
        // Both still wake it.
        let wx = s.watches[&all(1, "x").watch].id;
        s.change(&all(1, "x").watch, wx, Change::Init, Instant::now());
        let woken = s.change(&all(1, "x").watch, wx, Change::InitDone, Instant::now());
        assert_eq!(woken, vec![d.clone()]);
    }

    fn state_with_synced_watch(readers: &[(&str, &str)]) -> (State<ConfigMap>, WatchKey, u64) {
        let open = gauge();
        let mut s = State::default();
        for (d, name) in readers {
            reg(&mut s, &dep(d), &all(1, name), &open);
        }
        let w = all(1, "x").watch;
        let id = s.watches[&w].id;
        s.change(&w, id, Change::Init, Instant::now());
        s.change(&w, id, Change::InitDone, Instant::now());
        (s, w, id)
    }

    fn sorted(mut v: Vec<ObjectRef<ConfigMap>>) -> Vec<String> {
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn a_change_wakes_exactly_the_dependents_that_read_the_object() {
        let (mut s, w, id) = state_with_synced_watch(&[("a", "x"), ("b", "x"), ("c", "y")]);
        let now = Instant::now();
        let woken = s.change(&w, id, Change::Apply(object("ns", "x", "5")), now);
        assert_eq!(sorted(woken), ["a", "b"]);
        let woken = s.change(&w, id, Change::Delete(object("ns", "y", "6")), now);
        assert_eq!(sorted(woken), ["c"]);
        // Nobody reads z; an older event than the cache wakes nobody.
        assert!(
            s.change(&w, id, Change::Apply(object("ns", "z", "7")), now)
                .is_empty()
        );
        assert!(
            s.change(&w, id, Change::Apply(object("ns", "x", "4")), now)
                .is_empty()
        );
        // Events of a stopped watch's task are ignored.
        assert!(
            s.change(&w, id + 1000, Change::Apply(object("ns", "x", "9")), now)
                .is_empty()
        );
        // The cache holds the object without managedFields.
        match s.read(&all(1, "x")) {
            Cached::Present(o) => {
                assert_eq!(o.metadata.resource_version.as_deref(), Some("5"));
                assert!(o.metadata.managed_fields.is_none());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn failing_and_recovering_wake_every_dependent_once() {
        let (mut s, w, id) = state_with_synced_watch(&[("a", "x"), ("b", "y")]);
        let now = Instant::now();
        assert_eq!(sorted(s.change(&w, id, Change::Failed, now)), ["a", "b"]);
        assert!(s.change(&w, id, Change::Failed, now).is_empty());
        assert!(matches!(s.read(&all(1, "x")), Cached::Unknown));
        assert!(s.change(&w, id, Change::Init, now).is_empty());
        assert_eq!(sorted(s.change(&w, id, Change::InitDone, now)), ["a", "b"]);
        assert!(matches!(s.read(&all(1, "x")), Cached::Absent));
    }

    #[test]
    fn a_relist_of_a_healthy_watch_wakes_only_the_readers_of_what_changed() {
        let (mut s, w, id) = state_with_synced_watch(&[
            ("a", "same"),
            ("b", "changed"),
            ("c", "gone"),
            ("d", "new"),
        ]);
        let now = Instant::now();
        for (name, rv) in [("same", "1"), ("changed", "2"), ("gone", "3")] {
            s.change(&w, id, Change::Apply(object("ns", name, rv)), now);
        }
        // The watch resumed too late (410): the watcher lists again while
        // the cache keeps serving.
        assert!(s.change(&w, id, Change::Init, now).is_empty());
        assert!(matches!(s.read(&all(1, "same")), Cached::Present(_)));
        for (name, rv) in [("same", "1"), ("changed", "5"), ("new", "6")] {
            s.change(&w, id, Change::InitApply(object("ns", name, rv)), now);
        }
        let woken = s.change(&w, id, Change::InitDone, now);
        assert_eq!(sorted(woken), ["b", "c", "d"]);
        assert!(matches!(s.read(&all(1, "gone")), Cached::Absent));
    }

    #[test]
    fn written_objects_are_cached_stripped_and_only_when_newer() {
        let (mut s, w, id) = state_with_synced_watch(&[("a", "x")]);
        s.written(&all(1, "x"), object("ns", "x", "10"));
        assert_eq!(rv(&s.read(&all(1, "x"))).as_deref(), Some("10"));
        // The watch event of an earlier change arrives late: ignored.
        s.change(
            &w,
            id,
            Change::Apply(object("ns", "x", "9")),
            Instant::now(),
        );
        assert_eq!(rv(&s.read(&all(1, "x"))).as_deref(), Some("10"));
        s.written(&all(1, "x"), object("ns", "x", "8"));
        assert_eq!(rv(&s.read(&all(1, "x"))).as_deref(), Some("10"));
        // Nothing is cached for a target no watch covers.
        s.written(&all(7, "x"), object("ns", "x", "8"));
        assert!(matches!(s.read(&all(7, "x")), Cached::Unknown));
    }

    #[test]
    fn field_selector_values_are_escaped() {
        assert_eq!(escape_selector_value("a-b.c"), "a-b.c");
        assert_eq!(escape_selector_value(r"a,b=c\d"), r"a\,b\=c\\d");
    }
}

#[cfg(test)]
mod api_tests {
    use super::*;

    use k8s_openapi::api::core::v1::ConfigMap;

    /// A cluster nothing answers for (port 1 is closed).
    fn dead_cluster() -> RemoteCluster {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        RemoteCluster::new(kube::Client::try_from(config).unwrap(), "dead")
    }

    fn target(cluster: &RemoteCluster, name: &str) -> Target {
        Target {
            cluster: cluster.clone(),
            resource: ApiResource::erase::<ConfigMap>(&()),
            namespace: Some("ns".into()),
            name: name.into(),
            scope: Scope::Kind { labels: None },
        }
    }

    #[tokio::test]
    async fn sessions_start_and_stop_watches_and_count_them() {
        let metrics = Metrics::new().unwrap();
        let (watches, _woken) = Watches::<ConfigMap>::new("test", &metrics);
        let open = || metrics.shared_watches.with_label_values(&["test"]).get();
        let cluster = dead_cluster();
        let dep = ObjectRef::new("d").within("deps");
        let mut session = watches.session(dep.clone());
        // Not listed (and never will be): ask the server.
        assert!(matches!(
            session.read(&target(&cluster, "a")),
            Cached::Unknown
        ));
        session.read(&target(&cluster, "b"));
        session.commit();
        assert_eq!((watches.open(), open()), (1, 1));
        // A rotated credential: a new client, a new watch; committing
        // moves the dependent, and the old watch stops.
        let rotated = dead_cluster();
        let mut session = watches.session(dep.clone());
        session.read(&target(&rotated, "a"));
        assert_eq!(open(), 2);
        session.commit();
        assert_eq!(open(), 1);
        watches.release(&dep);
        assert_eq!((watches.open(), open()), (0, 0));
        // Two controllers in one binary share the registry.
        let (_other, _) = Watches::<ConfigMap>::new("other", &metrics);
    }

    #[tokio::test]
    async fn a_poisoned_lock_answers_unknown_and_never_panics() {
        let metrics = Metrics::new().unwrap();
        let (watches, _woken) = Watches::<ConfigMap>::new("test", &metrics);
        let shared = watches.shared.clone();
        let _ = std::thread::spawn(move || {
            let _guard = shared.state.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        let cluster = dead_cluster();
        let dep = ObjectRef::new("d").within("deps");
        let mut session = watches.session(dep.clone());
        assert!(matches!(
            session.read(&target(&cluster, "a")),
            Cached::Unknown
        ));
        session.commit();
        watches.written(
            &target(&cluster, "a"),
            DynamicObject::new("a", &ApiResource::erase::<ConfigMap>(&())),
        );
        watches.release(&dep);
        assert_eq!(watches.open(), 0);
    }
}
