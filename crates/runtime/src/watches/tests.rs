//! The cache of one watch and the bookkeeping of who reads what.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    api::{DynamicObject, ObjectMeta},
    runtime::reflector::ObjectRef,
};
use prometheus::IntGauge;

use super::cache::*;
use super::state::*;
use super::target::*;

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
    let (mut s, w, id) =
        state_with_synced_watch(&[("a", "same"), ("b", "changed"), ("c", "gone"), ("d", "new")]);
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

#[test]
fn the_event_of_a_writers_own_write_does_not_wake_it_again() {
    let (mut s, w, id) = state_with_synced_watch(&[("a", "x"), ("b", "x")]);
    let now = Instant::now();
    let x = TargetKey {
        watch: w.clone(),
        object: key("x"),
    };
    // The event of a's write comes before its answer: b is woken, a not.
    let write = s.begin_write(&dep("a"), &x);
    let woken = s.change(&w, id, Change::Apply(object("ns", "x", "5")), now);
    assert_eq!(sorted(woken), ["b"]);
    assert!(s.end_write(write, Some(object("ns", "x", "5"))).is_empty());
    assert!(s.writing.is_empty());
    // Someone's later change came first: the writer is woken for it.
    let write = s.begin_write(&dep("a"), &x);
    s.change(&w, id, Change::Apply(object("ns", "x", "7")), now);
    assert_eq!(
        sorted(s.end_write(write, Some(object("ns", "x", "6")))),
        ["a"]
    );
    // A write that failed after an event was held back wakes the writer;
    // one that saw no event wakes nobody.
    let write = s.begin_write(&dep("a"), &x);
    s.change(&w, id, Change::Apply(object("ns", "x", "8")), now);
    assert_eq!(sorted(s.end_write(write, None)), ["a"]);
    let write = s.begin_write(&dep("a"), &x);
    assert!(s.end_write(write, None).is_empty());
    // After the write, its events wake the writer as before.
    assert_eq!(
        sorted(s.change(&w, id, Change::Apply(object("ns", "x", "9")), now)),
        ["a", "b"]
    );
    // A deletion is never held back.
    let write = s.begin_write(&dep("a"), &x);
    let woken = s.change(&w, id, Change::Delete(object("ns", "x", "10")), now);
    assert_eq!(sorted(woken), ["a", "b"]);
    assert!(s.end_write(write, None).is_empty());
}
