//! Server-side apply helpers: one field manager per binary, forced apply so
//! that a controller owns the fields it sets, status through its subresource;
//! and [`Applier`], which applies what a controller wants only when it
//! changed.

use std::{
    hash::{Hash as _, Hasher as _},
    time::Duration,
};

use kube::{
    Api, Resource,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::expiring::Expiring;

/// How long an [`Applier`] remembers what it applied. Past it, the next
/// reconcile applies again once: a safety net for drift no watch shows.
pub const APPLIED_TTL: Duration = Duration::from_secs(3600);

/// Applies the objects a controller makes only when the wanted objects
/// changed or the live one is missing: the counterpart, for the objects a
/// controller applies, of the reconciler's `StatusWriter` for its status.
///
/// It remembers, per key (the object the controller works on, or one object
/// it applies), a hash of what it last applied. A reconcile that wants the
/// same again, while the live object is there, sends nothing. What was
/// applied is remembered only once the apply succeeded, so a failed apply is
/// tried again.
#[derive(Clone)]
pub struct Applier {
    field_manager: String,
    applied: Expiring<String, u64>,
}

impl Applier {
    /// An applier applying with `field_manager`.
    pub fn new(field_manager: impl Into<String>) -> Self {
        Self {
            field_manager: field_manager.into(),
            applied: Expiring::new(APPLIED_TTL),
        }
    }

    /// The field manager it applies with.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// Whether `wanted` must be applied under `key`: nothing was applied
    /// there lately, what was differs, or the live object is missing.
    pub fn needs_apply<T: Serialize>(&self, key: &str, wanted: &T, live: bool) -> bool {
        !live || self.applied.get(&key.to_owned()) != Some(hash_of(wanted))
    }

    /// Runs `apply` (which applies what `wanted` describes, one object or
    /// several) when [`Applier::needs_apply`] says so, and remembers
    /// `wanted` once it succeeded. `Ok(true)` when it ran.
    pub async fn apply_with<T, F, Fut, E>(
        &self,
        key: &str,
        wanted: &T,
        live: bool,
        apply: F,
    ) -> Result<bool, E>
    where
        T: Serialize,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        let hash = hash_of(wanted);
        if live && self.applied.get(&key.to_owned()) == Some(hash) {
            return Ok(false);
        }
        apply().await?;
        self.applied.insert(key.to_owned(), hash);
        Ok(true)
    }

    /// Applies `object` as the object `name` through `api`, unless it is
    /// what was last applied under `key` and the live object is there.
    /// `Ok(Some(answer))` when it was written.
    pub async fn apply<K, T>(
        &self,
        api: &Api<K>,
        key: &str,
        name: &str,
        object: &T,
        live: bool,
    ) -> kube::Result<Option<K>>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
        T: Serialize + std::fmt::Debug,
    {
        let mut answer = None;
        self.apply_with(key, object, live, || async {
            answer = Some(apply(api, name, object, &self.field_manager).await?);
            Ok::<_, kube::Error>(())
        })
        .await?;
        Ok(answer)
    }

    /// Whether anything was applied under `key` lately.
    pub fn remembers(&self, key: &str) -> bool {
        self.applied.get(&key.to_owned()).is_some()
    }

    /// Forgets what was applied under `key` (the objects were deleted, or
    /// the owner is gone): the next apply writes.
    pub fn forget(&self, key: &str) {
        self.applied.remove(&key.to_owned());
    }
}

/// A hash of what an apply would send, to tell whether it changed without
/// keeping it.
fn hash_of<T: Serialize>(wanted: &T) -> u64 {
    let text = serde_json::to_string(wanted).unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Whether every field `desired` sets already has that value in `live` (so
/// applying `desired` would change nothing it controls). Lists compare item
/// by item; a null in `desired` is satisfied by an absent field.
pub fn unchanged_by(live: &serde_json::Value, desired: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (desired, live) {
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, v)| {
            h.get(k).is_some_and(|hv| unchanged_by(hv, v)) || (v.is_null() && !h.contains_key(k))
        }),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(wv, hv)| unchanged_by(hv, wv))
        }
        (w, h) => w == h,
    }
}

/// [`unchanged_by`] for a typed live object, e.g. one from a cache.
pub fn unchanged<K: Serialize>(live: &K, desired: &serde_json::Value) -> bool {
    serde_json::to_value(live).is_ok_and(|live| unchanged_by(&live, desired))
}

/// The part of `object` that `manager` owns through server-side apply: the
/// object cut down to the fields its `Apply` entry in `metadata.managedFields`
/// lists, with the values the API server stored (normalised: a quantity
/// `0.5` reads `500m`). None when the manager owns nothing there.
///
/// This is how a controller tells real drift from normalisation: keep what
/// this returns for the answer to its own apply, and compare it with what it
/// returns for the live object later. A field another manager changed has
/// either changed value or moved to that manager (so it drops out of ours);
/// either way the two differ. A field the API server only normalised is the
/// same in both.
pub fn owned_by(object: &serde_json::Value, manager: &str) -> Option<serde_json::Value> {
    let fields = object
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| {
            e.get("manager").and_then(|m| m.as_str()) == Some(manager)
                && e.get("operation").and_then(|o| o.as_str()) == Some("Apply")
                && e.get("subresource")
                    .and_then(|s| s.as_str())
                    .is_none_or(str::is_empty)
        })?
        .get("fieldsV1")?
        .as_object()?;
    if fields.is_empty() {
        // Owns nothing (project would take an empty set for a leaf).
        return Some(serde_json::Value::Object(Default::default()));
    }
    Some(project(object, fields))
}

/// Whether `manager` owns (through server-side apply) a field of `live`'s
/// objects that `desired` no longer has: applying `desired` would remove
/// it, so `live` is not what `desired` makes even when [`unchanged`] says
/// every desired field is there (a label taken out of a set of common
/// labels). Only object keys are compared, never values or list items, so
/// the API server's normalisation cannot make it true.
pub fn drops_owned<K: Serialize>(live: &K, desired: &serde_json::Value, manager: &str) -> bool {
    serde_json::to_value(live).is_ok_and(|live| drops_owned_by(&live, desired, manager))
}

/// [`drops_owned`] for a live object already in JSON.
fn drops_owned_by(live: &serde_json::Value, desired: &serde_json::Value, manager: &str) -> bool {
    fn missing(owned: &serde_json::Value, desired: &serde_json::Value) -> bool {
        match (owned, desired) {
            (serde_json::Value::Object(o), serde_json::Value::Object(d)) => o
                .iter()
                .any(|(k, v)| d.get(k).is_none_or(|dv| missing(v, dv))),
            _ => false,
        }
    }
    owned_by(live, manager).is_some_and(|mut owned| {
        // status is never part of an apply.
        if let Some(o) = owned.as_object_mut() {
            o.remove("status");
        }
        missing(&owned, desired)
    })
}

/// Whether applying `desired` as `manager` would leave `live` as it is:
/// every desired field is there ([`unchanged`]) and nothing `manager`
/// applied before would go ([`drops_owned`]). The live object is read into
/// JSON once.
pub fn applied<K: Serialize>(live: &K, desired: &serde_json::Value, manager: &str) -> bool {
    serde_json::to_value(live)
        .is_ok_and(|live| unchanged_by(&live, desired) && !drops_owned_by(&live, desired, manager))
}

/// `value` cut down to `fields` (a fieldsV1 set: `f:<name>` for object
/// fields, `k:<json keys>` for list items by key, `v:<json>` for set items,
/// `i:<n>` for items by position, `.` for the field itself).
fn project(
    value: &serde_json::Value,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    use serde_json::Value;
    let children: Vec<(&String, &Value)> = fields.iter().filter(|(k, _)| *k != ".").collect();
    let sub = |v: &Value, set: &Value| match set.as_object() {
        Some(set) => project(v, set),
        None => v.clone(),
    };
    if children.is_empty() {
        // A leaf, or a field owned as a whole.
        return value.clone();
    }
    match value {
        Value::Object(map) => Value::Object(
            children
                .iter()
                .filter_map(|(k, set)| {
                    let name = k.strip_prefix("f:")?;
                    map.get(name).map(|v| (name.to_owned(), sub(v, set)))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .filter_map(|(n, item)| {
                    children.iter().find_map(|(k, set)| {
                        let matches = if let Some(keys) = k.strip_prefix("k:") {
                            serde_json::from_str::<serde_json::Map<String, Value>>(keys).is_ok_and(
                                |keys| keys.iter().all(|(key, want)| item.get(key) == Some(want)),
                            )
                        } else if let Some(v) = k.strip_prefix("v:") {
                            serde_json::from_str::<Value>(v).is_ok_and(|v| &v == item)
                        } else if let Some(i) = k.strip_prefix("i:") {
                            i.parse::<usize>() == Ok(n)
                        } else {
                            false
                        };
                        matches.then(|| sub(item, set))
                    })
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Apply parameters for a field manager (forced: the controller is the
/// authority for the fields it sets).
pub fn params(field_manager: &str) -> PatchParams {
    PatchParams::apply(field_manager).force()
}

/// Applies `object` (a full or partial object with apiVersion and kind) to
/// the object called `name`.
pub async fn apply<K, T>(
    api: &Api<K>,
    name: &str,
    object: &T,
    field_manager: &str,
) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    T: Serialize + std::fmt::Debug,
{
    api.patch(name, &params(field_manager), &Patch::Apply(object))
        .await
}

/// Applies the status subresource of the object called `name`. `status` is
/// the object's `status` value; apiVersion and kind are added here.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: serde_json::Value,
    field_manager: &str,
) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    patch_status(api, name, None, status, field_manager).await
}

/// Applies the status subresource only if the object is still at
/// `resource_version`: a 409 means someone else changed it first and the
/// caller must look again (used where a decision must never be overwritten,
/// such as a scheduling decision).
pub async fn apply_status_at<K>(
    api: &Api<K>,
    name: &str,
    resource_version: &str,
    status: serde_json::Value,
    field_manager: &str,
) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    patch_status(api, name, Some(resource_version), status, field_manager).await
}

async fn patch_status<K>(
    api: &Api<K>,
    name: &str,
    resource_version: Option<&str>,
    status: serde_json::Value,
    field_manager: &str,
) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut body = serde_json::Map::new();
    body.insert("apiVersion".to_owned(), K::api_version(&()).into());
    body.insert("kind".to_owned(), K::kind(&()).into());
    body.insert("status".to_owned(), status);
    if let Some(rv) = resource_version {
        body.insert(
            "metadata".to_owned(),
            serde_json::json!({"resourceVersion": rv}),
        );
    }
    api.patch_status(name, &params(field_manager), &Patch::Apply(&body))
        .await
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde_json::json;

    use super::{Applier, drops_owned, owned_by, unchanged_by};

    /// Runs `Applier::apply_with` for `wanted`, counting the applies.
    async fn run(
        a: &Applier,
        key: &str,
        wanted: &serde_json::Value,
        live: bool,
        fail: bool,
        applies: &Cell<u32>,
    ) -> Result<bool, &'static str> {
        a.apply_with(key, wanted, live, || async {
            applies.set(applies.get() + 1);
            if fail { Err("refused") } else { Ok(()) }
        })
        .await
    }

    #[tokio::test]
    async fn the_same_wanted_objects_are_applied_once_while_the_live_one_is_there() {
        let a = Applier::new("me");
        let applies = Cell::new(0);
        let want = json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}});
        assert_eq!(run(&a, "r", &want, false, false, &applies).await, Ok(true));
        assert_eq!(run(&a, "r", &want, true, false, &applies).await, Ok(false));
        assert_eq!(run(&a, "r", &want, true, false, &applies).await, Ok(false));
        assert_eq!(applies.get(), 1);
        assert!(!a.needs_apply("r", &want, true));
    }

    #[tokio::test]
    async fn a_changed_wanted_object_is_applied_again() {
        let a = Applier::new("me");
        let applies = Cell::new(0);
        run(
            &a,
            "r",
            &json!({"spec": {"replicas": 1}}),
            true,
            false,
            &applies,
        )
        .await
        .unwrap();
        let changed = json!({"spec": {"replicas": 2}});
        assert!(a.needs_apply("r", &changed, true));
        assert_eq!(
            run(&a, "r", &changed, true, false, &applies).await,
            Ok(true)
        );
        assert_eq!(applies.get(), 2);
    }

    #[tokio::test]
    async fn a_missing_live_object_is_applied_again_though_nothing_changed() {
        let a = Applier::new("me");
        let applies = Cell::new(0);
        let want = json!({"spec": {}});
        run(&a, "r", &want, true, false, &applies).await.unwrap();
        assert_eq!(run(&a, "r", &want, false, false, &applies).await, Ok(true));
        assert_eq!(applies.get(), 2);
    }

    #[tokio::test]
    async fn a_failed_apply_is_not_remembered_and_is_tried_again() {
        let a = Applier::new("me");
        let applies = Cell::new(0);
        let want = json!({"spec": {}});
        assert_eq!(
            run(&a, "r", &want, true, true, &applies).await,
            Err("refused")
        );
        assert!(!a.remembers("r"));
        assert_eq!(run(&a, "r", &want, true, false, &applies).await, Ok(true));
        assert_eq!(applies.get(), 2);
    }

    #[tokio::test]
    async fn keys_are_remembered_apart_and_forgotten_on_request() {
        let a = Applier::new("me");
        let applies = Cell::new(0);
        let want = json!({"spec": {}});
        run(&a, "one", &want, true, false, &applies).await.unwrap();
        assert!(a.remembers("one") && !a.remembers("two"));
        assert_eq!(run(&a, "two", &want, true, false, &applies).await, Ok(true));
        a.forget("one");
        assert!(!a.remembers("one"));
        assert_eq!(run(&a, "one", &want, true, false, &applies).await, Ok(true));
        assert_eq!(applies.get(), 3);
    }

    #[test]
    fn a_label_this_manager_applied_and_no_longer_wants_needs_an_apply() {
        let live = json!({"metadata": {"name": "a", "labels": {"team": "a", "tier": "gold", "theirs": "x"},
            "managedFields": [
                {"manager": "me", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}, "f:tier": {}}}, "f:spec": {"f:versions": {}}}},
                {"manager": "other", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:theirs": {}}}}},
            ]},
            "spec": {"versions": [{"name": "v1"}]}});
        let keep = json!({"metadata": {"name": "a", "labels": {"team": "a", "tier": "gold"}}, "spec": {"versions": [{"name": "v1"}]}});
        let dropped = json!({"metadata": {"name": "a", "labels": {"team": "a"}}, "spec": {"versions": [{"name": "v1"}]}});
        assert!(
            unchanged_by(&live, &dropped),
            "every desired field is there"
        );
        assert!(drops_owned(&live, &dropped, "me"), "but tier would go");
        assert!(!drops_owned(&live, &keep, "me"));
        // Another manager's label is not ours to drop.
        assert!(!drops_owned(&live, &keep, "nobody"));
    }

    #[test]
    fn a_live_object_with_every_desired_field_needs_no_apply() {
        let want = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80}]}});
        let live = json!({"metadata": {"name": "a", "uid": "z", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80, "protocol": "TCP"}]}, "status": {}});
        assert!(unchanged_by(&live, &want));
    }

    #[test]
    fn a_changed_desired_field_needs_an_apply() {
        let want = json!({"metadata": {"labels": {"x": "1"}}, "data": {"k": "v"}});
        assert!(!unchanged_by(
            &json!({"metadata": {"labels": {"x": "2"}}, "data": {"k": "v"}}),
            &want
        ));
        assert!(!unchanged_by(
            &json!({"metadata": {"labels": {"x": "1"}}}),
            &want
        ));
    }

    #[test]
    fn lists_compare_item_by_item() {
        let want = json!({"l": [{"a": 1}, {"a": 2}]});
        assert!(!unchanged_by(&json!({"l": [{"a": 1}]}), &want));
        assert!(!unchanged_by(&json!({"l": [{"a": 2}, {"a": 1}]}), &want));
    }

    fn with_fields(object: serde_json::Value, fields: serde_json::Value) -> serde_json::Value {
        let mut o = object;
        if let Some(meta) = o.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.insert(
                "managedFields".to_owned(),
                json!([
                    {"manager": "other", "operation": "Update", "fieldsV1": {"f:data": {"f:theirs": {}}}},
                    {"manager": "me", "operation": "Apply", "fieldsV1": fields},
                ]),
            );
        }
        o
    }

    #[test]
    fn what_a_manager_owns_is_cut_out_with_the_stored_values() {
        let fields = json!({
            "f:data": {"f:k": {}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:resources": {"f:requests": {"f:cpu": {}}}}}},
            "f:metadata": {"f:labels": {"f:a": {}}},
        });
        let live = with_fields(
            json!({
                "metadata": {"name": "x", "labels": {"a": "1", "b": "2"}},
                "data": {"k": "v", "theirs": "t"},
                "spec": {"containers": [
                    {"name": "sidecar", "image": "s"},
                    {"name": "app", "image": "i", "resources": {"requests": {"cpu": "500m"}}},
                ]},
            }),
            fields,
        );
        assert_eq!(
            owned_by(&live, "me").unwrap(),
            json!({
                "metadata": {"labels": {"a": "1"}},
                "data": {"k": "v"},
                "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]},
            })
        );
        assert_eq!(owned_by(&live, "nobody"), None);
    }

    #[test]
    fn a_field_taken_over_by_another_manager_drops_out() {
        let mine = with_fields(
            json!({"metadata": {}, "data": {"k": "v"}}),
            json!({"f:data": {"f:k": {}}}),
        );
        let taken = with_fields(json!({"metadata": {}, "data": {"k": "edited"}}), json!({}));
        assert_ne!(owned_by(&mine, "me"), owned_by(&taken, "me"));
    }
}
