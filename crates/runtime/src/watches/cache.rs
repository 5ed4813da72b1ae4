//! The cache of one watch: the newest version of each object seen, and
//! tombstones of deleted ones. Pure: no I/O, no clock of its own.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use kube::api::DynamicObject;

use super::target::{Cached, ObjKey};

/// How long a deleted object's tombstone is kept: longer than any answer to
/// one of our writes can be late.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(300);

/// Whether `incoming` may replace what has `cached`: unless both parse as
/// numbers and `incoming` is the smaller. resourceVersions are opaque to
/// clients in principle; every API server in practice uses etcd's revision.
pub(super) fn not_older(incoming: Option<&str>, cached: Option<&str>) -> bool {
    !matches!((incoming, cached), (Some(i), Some(c)) if crate::reconciler::older(i, c))
}

/// What one watch knows about one object (a live one as `strip` keeps it:
/// its body packed).
#[derive(Clone, Debug)]
pub(super) enum Slot {
    Live(Arc<DynamicObject>),
    /// Deleted at this resourceVersion.
    Gone {
        resource_version: Option<String>,
        since: Instant,
    },
}

impl Slot {
    pub(super) fn resource_version(&self) -> Option<&str> {
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
pub(super) struct Cache {
    pub(super) slots: HashMap<ObjKey, Slot>,
    /// Tombstones in the order they were laid, for pruning.
    pub(super) tombstones: VecDeque<(Instant, ObjKey)>,
    /// The list in progress (between `Init` and `InitDone`).
    pub(super) listing: Option<HashMap<ObjKey, Arc<DynamicObject>>>,
    pub(super) synced: bool,
    pub(super) failing: bool,
}

impl Cache {
    pub(super) fn healthy(&self) -> bool {
        self.synced && !self.failing
    }

    pub(super) fn get(&self, key: &ObjKey) -> Cached {
        if !self.healthy() {
            return Cached::Unknown;
        }
        match self.slots.get(key) {
            Some(Slot::Live(o)) => Cached::Present(Arc::new(DynamicObject {
                types: o.types.clone(),
                metadata: o.metadata.clone(),
                data: crate::packed::unpacked(&o.data).into_owned(),
            })),
            Some(Slot::Gone { .. }) | None => Cached::Absent,
        }
    }

    /// Puts `object` unless the cache holds a newer version (or a newer
    /// tombstone). Whether that changed anything: the same resourceVersion
    /// again (the watch event of a write whose answer `written` already put
    /// here) is nothing new, and wakes nobody.
    pub(super) fn put(&mut self, key: ObjKey, object: Arc<DynamicObject>) -> bool {
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
    pub(super) fn remove(
        &mut self,
        key: ObjKey,
        resource_version: Option<String>,
        now: Instant,
    ) -> bool {
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
    pub(super) fn prune(&mut self, now: Instant, ttl: Duration) {
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
    pub(super) fn init(&mut self) {
        self.listing = Some(HashMap::new());
    }

    pub(super) fn init_apply(&mut self, key: ObjKey, object: Arc<DynamicObject>) {
        self.listing
            .get_or_insert_with(HashMap::new)
            .insert(key, object);
    }

    /// The list is complete: it becomes the cache, except where the cache
    /// holds something newer (an object written, or deleted, after the
    /// list's snapshot). An object missing from the list is gone: it gets a
    /// tombstone at the newest resourceVersion the list showed. Returns the
    /// objects that appeared, changed or vanished.
    pub(super) fn init_done(&mut self, now: Instant) -> Vec<ObjKey> {
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
    pub(super) fn live_versions(&self) -> impl Iterator<Item = (ObjKey, Option<String>)> + '_ {
        self.slots.iter().filter_map(|(k, s)| match s {
            Slot::Live(o) => Some((k.clone(), o.metadata.resource_version.clone())),
            Slot::Gone { .. } => None,
        })
    }

    /// The watch failed. Whether it was healthy until now.
    pub(super) fn fail(&mut self) -> bool {
        let was = self.healthy();
        self.failing = true;
        self.listing = None;
        was
    }
}
