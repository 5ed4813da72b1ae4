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
//! [`Watches::new`] returns; hand it to `Controller::reconcile_on`. A
//! dependent writing the object ([`Watches::writing`]) is not woken by the
//! event of its own write, which may arrive before the write's answer: a
//! reconcile per write saved.
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

mod cache;
mod session;
mod state;
mod target;
mod task;

pub use cache::TOMBSTONE_TTL;
pub use session::{Session, Watches, Writing};
pub use target::{Cached, Scope, Target};

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod tests;
