//! References: resolving spec.references against the control cluster (in
//! order, each read through a shared watch of the object it names, so a
//! change to it wakes the Object; a Secret, which the provider may not
//! watch, with a GET), the finalizer a referenced Object carries
//! for each referrer, and cycle detection.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use runtime::reconciler::Reconciler as _;
use runtime::{
    fieldpath, finalizers,
    managed::{self, KindError},
    watches::{Cached, Scope, Session, Target},
};
use serde_json::Value;
use types::kubernetes::v1alpha2::{DependsOn, Reference};

use super::configs::{config_of, reads_confined_to};
use super::context::{Objects, key_of, ref_of};
use super::errors::Error;
use super::manifest;
use crate::policy;

use super::holds::{REFERRED_BY, is_referrer_finalizer};
use super::kind::ObjectKind;

/// The finalizer a referenced Object carries while `referrer` exists. A
/// finalizer's name part is at most 63 characters; longer names are cut and
/// suffixed with a hash so they stay unique.
pub fn finalizer_for(referrer: &str) -> String {
    let name: String = referrer
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.len() <= 63 {
        return format!("{REFERRED_BY}{name}");
    }
    let hash = name.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    format!("{REFERRED_BY}{}-{hash:016x}", &name[..46])
}

/// The object a reference names: patchesFrom's when it is set (it wins
/// over dependsOn, as upstream), else dependsOn's.
fn referenced(r: &Reference) -> Option<&DependsOn> {
    match (&r.patches_from, &r.depends_on) {
        (Some(p), _) => Some(&p.object),
        (None, d) => d.as_ref(),
    }
}

/// Whether `api_version` and `kind` name an Object of `group`, of any
/// version (a reference written against v1alpha1 names the same Objects).
fn is_object(group: &str, api_version: &str, kind: &str) -> bool {
    kind == "Object" && api_version.split_once('/').is_some_and(|(g, _)| g == group)
}

/// The key ([`super::context::key_of`]) of the Object a reference points
/// at, if it points at an Object of the referrer's kind (only those are
/// ordered by finalizers and part of cycles): `group` is the referrer's,
/// `namespace` the referrer's (a namespaced Object's reference names its
/// own namespace unless it says another).
pub fn object_target(group: &str, namespace: Option<&str>, r: &Reference) -> Option<String> {
    let d = referenced(r)?;
    if !is_object(group, &d.api_version, &d.kind) {
        return None;
    }
    Some(match namespace {
        Some(own) => format!("{}/{}", d.namespace.as_deref().unwrap_or(own), d.name),
        None => d.name.clone(),
    })
}

/// The keys of the Objects `obj` references.
pub fn object_targets<K: ObjectKind>(obj: &K) -> impl Iterator<Item = String> + '_ {
    let namespace = obj.meta().namespace.as_deref();
    obj.view()
        .spec
        .references
        .iter()
        .filter_map(move |r| object_target(&K::group(&()), namespace, r))
}

/// A cycle through `start` in the graph of Object references, as the path
/// `start → … → start`.
pub fn cycle_through(start: &str, edges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn walk(
        node: &str,
        start: &str,
        edges: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges.get(node).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(next, start, edges, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_owned()];
    let mut seen = BTreeSet::new();
    walk(start, start, edges, &mut path, &mut seen).then_some(path)
}

/// What resolving an Object's references found.
pub struct Resolved {
    /// The Object as JSON, every patchesFrom value written in its manifest
    /// at the reference's toFieldPath.
    pub doc: Value,
    /// The Objects it references (held by referrer finalizers).
    pub referenced: Vec<String>,
}

/// The referenced object, its fieldPath (parsed), and where its value goes.
struct Paths<'a> {
    field_path: &'a str,
    from: Vec<fieldpath::Segment>,
    to: &'a str,
    to_path: Vec<fieldpath::Segment>,
}

/// What one reference names.
struct Named<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
    field_path: Option<&'a str>,
}

impl Named<'_> {
    fn what(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

fn named<'a>(index: usize, r: &'a Reference, own: Option<&'a str>) -> Result<Named<'a>, Error> {
    let Some(d) = referenced(r) else {
        return Err(Error::InvalidReference(
            index,
            "set dependsOn or patchesFrom".to_owned(),
        ));
    };
    Ok(Named {
        api_version: &d.api_version,
        kind: &d.kind,
        name: &d.name,
        namespace: d.namespace.as_deref().or(own),
        field_path: r.patches_from.as_ref().map(|p| p.field_path.as_str()),
    })
}

/// The paths of a patchesFrom reference, checked first: a malformed one is
/// the user's to fix, whatever the referenced object holds (and whether or
/// not it may be read). toFieldPath is in the manifest, and is
/// patchesFrom.fieldPath when unset.
fn paths<'a>(index: usize, r: &'a Reference, n: &Named<'a>) -> Result<Option<Paths<'a>>, Error> {
    let Some(field_path) = n.field_path else {
        return Ok(None);
    };
    let from = fieldpath::parse(field_path)
        .map_err(|e| Error::InvalidReference(index, format!("patchesFrom.fieldPath: {e}")))?;
    let to = r.to_field_path.as_deref().unwrap_or(field_path);
    let to_path = manifest::path_in_manifest(to)
        .map_err(|e| Error::InvalidReference(index, format!("invalid toFieldPath: {e}")))?;
    Ok(Some(Paths {
        field_path,
        from,
        to,
        to_path,
    }))
}

/// The edges of the reference graph reachable from `obj`: each Object's
/// referenced Objects, looked up by name in the cache. Only what a cycle
/// through `obj` could pass is read, so the cost follows the references,
/// not the number of Objects.
fn edges<K: ObjectKind>(ctx: &Objects<K>, obj: &K) -> BTreeMap<String, Vec<String>> {
    reachable(obj, |key| ctx.objects.get(&ref_of(key)))
}

/// The edges reachable from `obj`, reading each referenced Object with
/// `get` (`None`: not there, no edges).
fn reachable<K: ObjectKind, O: std::ops::Deref<Target = K>>(
    obj: &K,
    get: impl Fn(&str) -> Option<O>,
) -> BTreeMap<String, Vec<String>> {
    let targets = |o: &K| -> Vec<String> { object_targets(o).collect() };
    let mut edges = BTreeMap::new();
    let mut todo = targets(obj);
    edges.insert(key_of(obj), todo.clone());
    while let Some(name) = todo.pop() {
        if edges.contains_key(&name) {
            continue;
        }
        let next = get(&name).map(|o| targets(&o)).unwrap_or_default();
        todo.extend(next.iter().cloned());
        edges.insert(name, next);
    }
    edges
}

/// Resolves spec.references in order against the control cluster. When
/// `installing`, a referenced Object must also be Ready; a deletion only
/// needs the values to find what it created. Values read from a Secret
/// (other than its metadata) are added to `secrets`.
pub async fn resolve<K: ObjectKind>(
    ctx: &Objects<K>,
    obj: &K,
    installing: bool,
    session: &mut Session<K>,
    secrets: &mut policy::Redactions,
) -> Result<Resolved, Error> {
    let mut doc = serde_json::to_value(obj.view())?;
    let mut referenced = Vec::new();
    // Cycles first: waiting on a cycle would wait forever.
    if let Some(cycle) = cycle_through(&key_of(obj), &edges(ctx, obj)) {
        return Err(Error::Cycle(cycle.join(" → ")));
    }
    let own = obj.meta().namespace.as_deref();
    let confined = reads_confined_to(obj, ctx.reach.configs.get(&config_of(obj)).as_ref());
    let group = K::group(&());
    for (index, r) in obj.view().spec.references.iter().enumerate() {
        let n = named(index, r, own)?;
        let paths = paths(index, r, &n)?;
        let not_ready = |why: String| Error::ReferenceNotReady {
            index,
            what: n.what(),
            why,
        };
        let target = object_target(&group, own, r);
        if let Some(ns) = &confined
            && n.namespace != Some(ns.as_str())
        {
            return Err(outside(index, ns, &n));
        }
        let source = match &target {
            Some(key) => referenced_object(ctx, key, installing).map_err(not_ready)?,
            None => read_source(ctx, index, &n, confined.as_deref(), session)
                .await?
                .ok_or_else(|| not_ready("it does not exist".to_owned()))?,
        };
        if let Some(key) = target {
            referenced.push(key);
        }
        if let Some(p) = paths {
            let value = fieldpath::get(&source, &p.from)
                .filter(|v| !v.is_null())
                .cloned()
                .ok_or_else(|| not_ready(format!("{} is not set yet", p.field_path)))?;
            if is_secret(n.api_version, n.kind) && !p.field_path.starts_with("metadata") {
                secrets.add(&value);
            }
            fieldpath::set(&mut doc, &p.to_path, value).map_err(|e| {
                Error::InvalidReference(index, format!("invalid toFieldPath {:?}: {e}", p.to))
            })?;
        }
    }
    Ok(Resolved { doc, referenced })
}

/// A reference of a confined Object that names something outside its
/// namespace.
fn outside(index: usize, namespace: &str, n: &Named<'_>) -> Error {
    Error::OutsideNamespace(
        format!("spec.references[{index}]"),
        namespace.to_owned(),
        n.what(),
    )
}

/// A referenced Object (by key), from the Objects' watch cache. An Object
/// is there for its dependents once it is Ready: this is what orders an
/// install.
fn referenced_object<K: ObjectKind>(
    ctx: &Objects<K>,
    key: &str,
    installing: bool,
) -> Result<Value, String> {
    let Some(o) = ctx.objects.get(&ref_of(key)) else {
        return Err("it does not exist".to_owned());
    };
    let ready = o.view().status.as_ref().is_some_and(|s| {
        runtime::conditions::is_true(&s.conditions, runtime::conditions::TYPE_READY)
    });
    if installing && !ready {
        return Err("that Object is not Ready yet".to_owned());
    }
    serde_json::to_value(super::cached::opened(o.as_ref()).view()).map_err(|e| e.to_string())
}

/// Reads what a reference names in the control cluster, through a shared
/// watch of that one object; for an Object `confined` to a namespace, only
/// a namespaced object of that namespace.
async fn read_source<K: ObjectKind>(
    ctx: &Objects<K>,
    index: usize,
    n: &Named<'_>,
    confined: Option<&str>,
    session: &mut Session<K>,
) -> Result<Option<Value>, Error> {
    let located = managed::locate(
        &ctx.reach.local,
        "the control cluster",
        n.api_version,
        n.kind,
        n.namespace,
        "spec.references",
    )
    .await;
    let located = match located {
        Ok(l) => l,
        Err(KindError::NotServed { .. }) => {
            return Err(Error::ReferenceNotReady {
                index,
                what: n.what(),
                why: format!("kind {} is not served by the control cluster", n.kind),
            });
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(ns) = confined
        && located.namespace.as_deref() != Some(ns)
    {
        return Err(outside(index, ns, n));
    }
    let target = Target {
        cluster: ctx.reach.local.clone(),
        resource: located.resource,
        namespace: located.namespace,
        name: n.name.to_owned(),
        scope: Scope::Object,
    };
    let found = if is_secret(n.api_version, n.kind) {
        // Never watched: the provider may not list or watch Secrets. A
        // change to this one reaches the managed object at the next resync
        // (--poll-interval) or any other wake of the Object.
        managed::read_cached(Cached::Unknown, &target).await
    } else {
        managed::read_through(session, &target).await
    };
    let found = found.map_err(|e| Error::control(format!("read {}", n.what()), e))?;
    Ok(found
        .object
        .map(|o| manifest::as_value(&o, &target.resource)))
}

/// Whether a reference names a Secret.
fn is_secret(api_version: &str, kind: &str) -> bool {
    api_version == "v1" && kind == "Secret"
}

/// Puts this Object's referrer finalizer on each Object it references (no
/// request when they carry it already).
pub async fn hold<K: ObjectKind>(
    ctx: &Objects<K>,
    obj: &K,
    referenced: &[String],
) -> Result<(), Error> {
    let finalizer = finalizer_for(&key_of(obj));
    for key in referenced {
        let Some(target) = ctx.objects.get(&ref_of(key)) else {
            continue;
        };
        finalizers::add(&ctx.api(target.as_ref()), target.as_ref(), &finalizer)
            .await
            .map_err(|e| Error::control(format!("add a finalizer to Object {key}"), e))?;
    }
    Ok(())
}

/// Removes this Object's referrer finalizer from every Object it no longer
/// references (all of them when `keep` is None, i.e. when it is deleted): a
/// reference removed from the spec must not hold its former target for ever.
pub async fn release<K: ObjectKind>(
    ctx: &Objects<K>,
    obj: &K,
    keep: Option<&BTreeSet<String>>,
) -> Result<(), Error> {
    let finalizer = finalizer_for(&key_of(obj));
    let holders: Vec<_> = ctx
        .holds
        .carrying(&finalizer)
        .iter()
        .filter_map(|r| ctx.objects.get(r))
        .filter(|o| finalizers::has(o.as_ref(), &finalizer))
        .filter(|o| keep.is_none_or(|k| !k.contains(&key_of(o.as_ref()))))
        .collect();
    for holder in holders {
        finalizers::remove(&ctx.api(holder.as_ref()), holder.as_ref(), &finalizer)
            .await
            .map_err(|e| {
                Error::control(
                    format!("remove a finalizer from Object {}", key_of(holder.as_ref())),
                    e,
                )
            })?;
    }
    Ok(())
}

/// Whether an Object carries referrer finalizers (its referrers still need
/// it).
pub fn held<K: ObjectKind>(obj: &K) -> bool {
    obj.finalizers().iter().any(|f| is_referrer_finalizer(f))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use types::kubernetes::v1alpha2::Object;

    fn graph(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(a, bs)| {
                (
                    (*a).to_owned(),
                    bs.iter().map(|b| (*b).to_owned()).collect(),
                )
            })
            .collect()
    }

    /// An Object named `name` that depends on the Objects `on`.
    fn object(name: &str, on: &[&str]) -> Object {
        let refs: Vec<Value> = on
            .iter()
            .map(|n| serde_json::json!({"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": n}}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
            "metadata": {"name": name},
            "spec": {"forProvider": {"manifest": {}}, "references": refs},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn only_the_objects_a_reference_reaches_are_read() {
        let cache: BTreeMap<String, Object> = [
            object("a", &["b"]),
            object("b", &["c"]),
            object("c", &["a"]),
            object("x", &["a"]),
            object("y", &[]),
        ]
        .into_iter()
        .map(|o| (o.name_any(), o))
        .collect();
        let read = std::cell::RefCell::new(Vec::new());
        let get = |n: &str| {
            read.borrow_mut().push(n.to_owned());
            cache.get(n).cloned().map(Box::new)
        };
        // "a" as it is being reconciled now: it no longer references "b".
        let edges = reachable(&object("a", &["y"]), get);
        assert_eq!(read.borrow().as_slice(), ["y"]);
        assert_eq!(cycle_through("a", &edges), None);
        read.borrow_mut().clear();
        let edges = reachable(&object("a", &["b"]), get);
        assert_eq!(read.borrow().as_slice(), ["b", "c"]);
        assert_eq!(cycle_through("a", &edges).unwrap(), ["a", "b", "c", "a"]);
    }

    fn reference(r: Value) -> Reference {
        serde_json::from_value(r).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_object_of_either_version_is_an_object_target() {
        let cases = [
            (json!({"dependsOn": {"name": "a"}}), Some("a")),
            (
                json!({"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": "a"}}),
                Some("a"),
            ),
            (
                json!({"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object", "name": "a"}}),
                Some("a"),
            ),
            (
                json!({"patchesFrom": {"apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object", "name": "a", "fieldPath": "status.atProvider.manifest.data.x"}}),
                Some("a"),
            ),
            (
                json!({"dependsOn": {"apiVersion": "example.org/v1", "kind": "Object", "name": "a"}}),
                None,
            ),
            (
                json!({"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "ProviderConfig", "name": "a"}}),
                None,
            ),
            (
                json!({"patchesFrom": {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "namespace": "ns", "fieldPath": "data.x"}}),
                None,
            ),
            // patchesFrom wins over dependsOn, as upstream.
            (
                json!({"dependsOn": {"name": "b"}, "patchesFrom": {"name": "a", "fieldPath": "metadata.uid"}}),
                Some("a"),
            ),
            (json!({}), None),
        ];
        let group = "kubernetes.crossplane.io";
        for (r, target) in cases {
            let got = object_target(group, None, &reference(r.clone()));
            assert_eq!(got.as_deref(), target, "{r}");
        }
    }

    #[test]
    fn a_namespaced_objects_reference_names_an_object_of_its_group_in_its_namespace_by_default() {
        let m = "kubernetes.m.crossplane.io";
        let own = Some("team-a");
        let by = |r: Value| object_target(m, own, &reference(r));
        let default = json!({"dependsOn": {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object", "name": "a"}});
        assert_eq!(by(default).as_deref(), Some("team-a/a"));
        let elsewhere = json!({"dependsOn": {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object", "name": "a", "namespace": "team-b"}});
        assert_eq!(by(elsewhere).as_deref(), Some("team-b/a"));
        // A cluster Object is not one of the namespaced controller's.
        let cluster = json!({"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object", "name": "a"}});
        assert_eq!(by(cluster), None);
        let r = reference(
            json!({"patchesFrom": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "fieldPath": "data.x"}}),
        );
        let n = named(0, &r, own).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(n.namespace, Some("team-a"));
    }

    #[test]
    fn a_reference_names_what_it_reads_and_where_the_value_goes_in_the_manifest() {
        let r = reference(json!({}));
        let err = named(3, &r, None).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("reference 3: set dependsOn or patchesFrom")
        );
        let paths_of = |r: &Reference| -> Result<Option<String>, String> {
            let n = named(0, r, None).map_err(|e| e.to_string())?;
            let p = paths(0, r, &n).map_err(|e| e.to_string())?;
            Ok(p.map(|p| fieldpath::display(&p.to_path)))
        };
        let from = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "ns", "fieldPath": "data.color"});
        let defaulted = reference(json!({"patchesFrom": from}));
        assert_eq!(
            paths_of(&defaulted),
            Ok(Some("spec.forProvider.manifest.data.color".to_owned()))
        );
        let named_to = reference(
            json!({"patchesFrom": from, "toFieldPath": "metadata.labels[example.org/color]"}),
        );
        assert_eq!(
            paths_of(&named_to),
            Ok(Some(
                "spec.forProvider.manifest.metadata.labels[example.org/color]".to_owned()
            ))
        );
        let bad = reference(json!({"patchesFrom": from, "toFieldPath": "spec..name"}));
        let err = paths_of(&bad).unwrap_err();
        assert!(err.starts_with("reference 0: invalid toFieldPath"), "{err}");
        let depends = reference(json!({"dependsOn": {"name": "a"}, "toFieldPath": "spec..name"}));
        assert_eq!(paths_of(&depends), Ok(None));
    }

    #[test]
    fn a_chain_has_no_cycle() {
        let g = graph(&[("kong", &["csv"]), ("csv", &["sub"])]);
        assert_eq!(cycle_through("kong", &g), None);
    }

    #[test]
    fn a_two_object_cycle_is_found_with_its_path() {
        let g = graph(&[("a", &["b"]), ("b", &["a"])]);
        assert_eq!(cycle_through("a", &g).unwrap(), ["a", "b", "a"]);
    }

    #[test]
    fn a_cycle_elsewhere_does_not_implicate_an_object_outside_it() {
        let g = graph(&[("x", &["a"]), ("a", &["b"]), ("b", &["a"])]);
        assert_eq!(cycle_through("x", &g), None);
        assert!(cycle_through("a", &g).is_some());
    }

    #[test]
    fn finalizers_are_named_after_the_referrer_and_stay_valid() {
        assert_eq!(
            finalizer_for("kong"),
            "referred-by.kubernetes.crossplane.io/kong"
        );
        let long = "x".repeat(200);
        let f = finalizer_for(&long);
        assert!(f.len() - REFERRED_BY.len() <= 63, "{f}");
        assert_ne!(finalizer_for(&format!("{long}a")), f);
    }
}
