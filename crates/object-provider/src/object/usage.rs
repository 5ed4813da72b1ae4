//! Which ProviderConfig an Object uses: the label `kubernetes.crossplane.io/provider-config` that records the
//! use. The ProviderConfig controller counts its users from the Objects'
//! watch cache (by that label and by spec.providerConfigRef), so recording
//! a use costs no request beyond the Object's own finalizer patch.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::{ResourceExt, runtime::watcher};
use runtime::index::Relation;

use super::context::key_of;
use super::kind::ObjectKind;
use super::references;

pub use super::configs::IN_USE;

/// The label naming the ProviderConfig an Object uses.
pub const LABEL: &str = types::kubernetes::v1alpha1::PROVIDER_CONFIG_LABEL;

/// The labels an Object carries (written with its finalizer).
pub fn labels<K: ObjectKind>(obj: &K) -> BTreeMap<String, String> {
    BTreeMap::from([(
        LABEL.to_owned(),
        obj.view().spec.provider_config_ref.name.clone(),
    )])
}

/// The ProviderConfigs an Object counts as a user of: the one its spec names
/// and the one its label still names (until the label follows the spec).
/// Each by its [`ConfigRef::key`](super::configs::ConfigRef::key); the
/// label is followed for a cluster Object's ProviderConfig only (a
/// namespaced Object's configs do not count their users yet).
pub fn configs_of<K: ObjectKind>(obj: &K) -> BTreeSet<String> {
    let of = super::configs::config_of(obj);
    let legacy = matches!(of, super::configs::ConfigRef::Legacy(_));
    let mut configs = BTreeSet::from([of.key()]);
    if legacy {
        configs.extend(obj.labels().get(LABEL).cloned());
    }
    configs
}

/// The Objects using the config `config` (by key), sorted, as "Object
/// name" ("Object namespace/name" for namespaced Objects).
pub fn users<'a, K: ObjectKind>(
    objects: impl IntoIterator<Item = &'a K>,
    config: &str,
) -> Vec<String> {
    let mut users: Vec<String> = objects
        .into_iter()
        .filter(|o| configs_of(*o).contains(config))
        .map(|o| format!("Object {}", key_of(o)))
        .collect();
    users.sort();
    users
}

/// Who to wake when an Object changes, worked out from the Objects' watch
/// events alone: the ProviderConfigs it uses (or used, before its label or
/// spec moved), and the Objects that reference it.
#[derive(Default)]
pub struct Wakes {
    configs: HashMap<String, BTreeSet<String>>,
    /// Referrers (keys) and the Objects they reference (values).
    references: Relation<String>,
}

/// What one Object event wakes.
#[derive(Debug, Default, PartialEq)]
pub struct Woken {
    /// ProviderConfigs whose user count may have changed.
    pub configs: BTreeSet<String>,
    /// Objects that reference the changed Object.
    pub referrers: BTreeSet<String>,
}

impl Wakes {
    /// Takes in one event of the Objects' watch.
    pub fn event<K: ObjectKind>(&mut self, event: &watcher::Event<K>) -> Woken {
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => self.seen(o),
            watcher::Event::Delete(o) => self.gone(o),
            watcher::Event::Init | watcher::Event::InitDone => Woken::default(),
        }
    }

    fn seen<K: ObjectKind>(&mut self, obj: &K) -> Woken {
        let name = key_of(obj);
        let configs = configs_of(obj);
        let previous = self.configs.insert(name.clone(), configs.clone());
        let mut woken = Woken {
            referrers: self.referrers_of(&name),
            ..Woken::default()
        };
        if previous.as_ref() != Some(&configs) {
            woken.configs = configs
                .union(&previous.unwrap_or_default())
                .cloned()
                .collect();
        }
        let targets: BTreeSet<String> = references::object_targets(obj).collect();
        self.references.set(name, targets);
        woken
    }

    fn gone<K: ObjectKind>(&mut self, obj: &K) -> Woken {
        let name = key_of(obj);
        let mut configs = self.configs.remove(&name).unwrap_or_default();
        configs.extend(configs_of(obj));
        self.references.set(name.clone(), BTreeSet::new());
        Woken {
            configs,
            referrers: self.referrers_of(&name),
        }
    }

    fn referrers_of(&self, name: &str) -> BTreeSet<String> {
        self.references.keys_of(name).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use types::kubernetes::v1alpha2::Object;

    fn object(name: &str, config: &str, label: Option<&str>, refs: &[&str]) -> Object {
        let references: Vec<_> = refs
            .iter()
            .map(|r| json!({"dependsOn": {"apiVersion": "kubernetes.crossplane.io/v1alpha1", "kind": "Object", "name": r}}))
            .collect();
        let mut o: Object = serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
            "metadata": {"name": name},
            "spec": {"providerConfigRef": {"name": config}, "references": references,
                     "forProvider": {"manifest": {}}},
        }))
        .unwrap();
        if let Some(l) = label {
            o.labels_mut().insert(LABEL.to_owned(), l.to_owned());
        }
        o
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_config_counts_objects_by_spec_and_by_label_until_the_label_follows() {
        let objs = [
            object("a", "pc1", Some("pc1"), &[]),
            object("b", "pc2", Some("pc1"), &[]),
            object("c", "pc2", None, &[]),
        ];
        assert_eq!(users(&objs, "pc1"), ["Object a", "Object b"]);
        assert_eq!(users(&objs, "pc2"), ["Object b", "Object c"]);
        assert!(users(&objs, "pc3").is_empty());
    }

    #[test]
    fn moving_to_another_config_wakes_both_and_a_status_change_wakes_neither() {
        let mut wakes = Wakes::default();
        let first = wakes.event(&watcher::Event::Apply(object("a", "pc1", None, &[])));
        assert_eq!(first.configs, set(&["pc1"]));
        let again = wakes.event(&watcher::Event::Apply(object("a", "pc1", None, &[])));
        assert!(again.configs.is_empty());
        let moved = wakes.event(&watcher::Event::Apply(object("a", "pc2", Some("pc1"), &[])));
        assert_eq!(moved.configs, set(&["pc1", "pc2"]));
        let followed = wakes.event(&watcher::Event::Apply(object("a", "pc2", Some("pc2"), &[])));
        assert_eq!(followed.configs, set(&["pc1", "pc2"]));
        let gone = wakes.event(&watcher::Event::Delete(object(
            "a",
            "pc2",
            Some("pc2"),
            &[],
        )));
        assert_eq!(gone.configs, set(&["pc2"]));
    }

    #[test]
    fn a_changed_object_wakes_exactly_its_referrers() {
        let mut wakes = Wakes::default();
        wakes.event(&watcher::Event::Apply(object("kong", "pc", None, &["csv"])));
        wakes.event(&watcher::Event::Apply(object("other", "pc", None, &[])));
        let csv = wakes.event(&watcher::Event::Apply(object("csv", "pc", None, &[])));
        assert_eq!(csv.referrers, set(&["kong"]));
        let other = wakes.event(&watcher::Event::Apply(object("other", "pc", None, &[])));
        assert!(other.referrers.is_empty());
        // The reference is removed: csv no longer wakes kong.
        wakes.event(&watcher::Event::Apply(object("kong", "pc", None, &[])));
        let csv = wakes.event(&watcher::Event::Apply(object("csv", "pc", None, &[])));
        assert!(csv.referrers.is_empty());
    }
}
