//! Caches that keep only what a controller reads. A reflector's store holds
//! every object it watches for as long as the process runs, so whatever a
//! controller never reads is dropped before it is stored: always
//! `metadata.managedFields` (often as large as the rest of the object), and
//! whatever else the controller's own trim function says.
//!
//! A trim function must leave every field that any reader of that store
//! reads, including the status a reconcile starts its status write from.

use std::{fmt::Debug, hash::Hash};

use kube::{
    Api, Resource,
    runtime::{Controller, WatchStreamExt, reflector, utils::PredicateConfig, watcher},
};
use serde::de::DeserializeOwned;

/// Drops what no controller reads from any cached object:
/// `metadata.managedFields`.
pub fn managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Keeps everything but `metadata.managedFields`.
pub fn nothing_else<K>(_: &mut K) {}

/// A controller of `K` whose own store keeps each object as `trim` leaves
/// it, without managedFields. Otherwise as `Controller::new(api, config)`:
/// the same watch, the same triggers.
pub fn controller<K>(api: Api<K>, config: watcher::Config, trim: fn(&mut K)) -> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync + Unpin,
{
    let (store, events) = reflected(api, config, trim);
    let events = events.applied_objects();
    Controller::for_stream(events, store)
}

/// A controller of `K` as [`controller`], for a `K` whose status only
/// this controller writes: a change of its status alone (the watch event
/// of the controller's own status write) wakes nobody, since the reconcile
/// it would start finds nothing to do. What does wake it: a new object,
/// a new generation (its spec), its deletion, its finalizers, labels or
/// annotations ([`spec_or_metadata`]). The store still takes every event,
/// so a reconcile reads the status as written.
pub fn controller_of_own_status<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync + Unpin,
{
    let (store, events) = reflected(api, config, trim);
    let events = events
        .applied_objects()
        .predicate_filter(spec_or_metadata, PredicateConfig::default());
    Controller::for_stream(events, store)
}

/// What of an object, besides its status, a controller acts on, as one
/// hash: its generation (bumped by a change of its spec, and by its
/// deletion), whether it is being deleted, its finalizers, labels and
/// annotations. `None` (always woken) for an object without a generation.
pub fn spec_or_metadata<K: Resource>(obj: &K) -> Option<u64> {
    use std::hash::Hasher as _;
    let meta = obj.meta();
    let generation = meta.generation?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        generation,
        meta.deletion_timestamp.is_some(),
        &meta.finalizers,
        &meta.labels,
        &meta.annotations,
    )
        .hash(&mut h);
    Some(h.finish())
}

/// A cache of `K` as `trim` leaves it (without managedFields) and the
/// events of the watch that fills it: each event reaches the stream after
/// it reached the store, so whoever the stream wakes reads a store at least
/// as new as the change that woke it. The watch retries with the default
/// backoff.
pub fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> (
    reflector::Store<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let events = watch(api, config, trim).default_backoff().reflect(writer);
    (store, events)
}

/// A watch of `K` whose objects come out as `trim` leaves them, without
/// managedFields.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, config).modify(move |obj| {
        managed_fields(obj);
        trim(obj);
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_change_of_the_status_alone_is_not_a_change() {
        use types::workload::v1alpha1::KubernetesApplicationResource as Res;
        let res: Res = serde_json::from_value(json!({
            "apiVersion": "workload.crossplane.io/v1alpha1",
            "kind": "KubernetesApplicationResource",
            "metadata": {"name": "r", "namespace": "ns", "generation": 1,
                         "finalizers": ["f"], "labels": {"a": "b"},
                         "annotations": {"c": "d"}, "resourceVersion": "1"},
            "spec": {"template": {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "c"}}},
        }))
        .unwrap();
        let base = spec_or_metadata(&res);
        assert!(base.is_some());
        let mut status = res.clone();
        status.metadata.resource_version = Some("2".into());
        status.status = serde_json::from_value(json!({"state": "Submitted"})).unwrap();
        assert_eq!(spec_or_metadata(&status), base, "a status write");
        let changed: [fn(&mut Res); 5] = [
            |r| r.metadata.generation = Some(2),
            |r| {
                r.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ))
            },
            |r| r.metadata.finalizers = None,
            |r| r.metadata.labels = None,
            |r| {
                r.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert("crossplane.io/paused".into(), "true".into());
            },
        ];
        for (i, change) in changed.iter().enumerate() {
            let mut r = res.clone();
            change(&mut r);
            assert_ne!(spec_or_metadata(&r), base, "change {i}");
        }
        let mut no_generation = res.clone();
        no_generation.metadata.generation = None;
        assert_eq!(spec_or_metadata(&no_generation), None);
    }

    #[test]
    fn managed_fields_are_dropped_and_nothing_else() {
        let mut cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "labels": {"a": "b"},
                         "managedFields": [{"manager": "m", "operation": "Apply",
                                            "fieldsV1": {"f:data": {"f:k": {}}}}]},
            "data": {"k": "v"},
        }))
        .unwrap();
        let mut want = cm.clone();
        want.metadata.managed_fields = None;
        managed_fields(&mut cm);
        nothing_else(&mut cm);
        assert_eq!(cm, want);
        assert!(
            cm.data
                .is_some_and(|d| d.get("k").is_some_and(|v| v == "v"))
        );
    }
}
