//! How a resource writes its remote object (`spec.writeStrategy`) and what
//! deleting it does there (`spec.deletionPolicy`): pure decisions, checked
//! before anything is written.
//!
//! Ignored fields are set when the object is created and then left to other
//! managers. Server-side apply removes a field its manager stops applying
//! unless another manager owns it too, so the created object's ignored
//! fields are also applied, once, by a second manager of this controller
//! ([`initial_manager`]): they stay as created until someone else takes
//! them, and this controller's own manager never applies them again.

use runtime::{
    fieldpath::{self, Segment},
    managed::Allowed,
};
use serde_json::{Map, Value};
use types::workload::v1alpha1::{
    ANNOTATION_RESOURCE_UID, DeletionPolicy, Delivery, KubernetesApplicationResource,
    WriteStrategyType,
};

/// Paths a template cannot leave to others: they say which object it is.
const IDENTITY: [&str; 4] = ["apiVersion", "kind", "metadata.name", "metadata.namespace"];

/// A resource's write strategy and deletion policy, checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Strategy {
    /// How the object is written.
    pub write: WriteStrategyType,
    /// The ignored fields, parsed, with their text.
    ignored: Vec<(Vec<Segment>, String)>,
    /// What deleting the resource does.
    pub deletion: DeletionPolicy,
}

/// The field manager that applies a created object's ignored fields once.
pub fn initial_manager(ours: &str) -> String {
    format!("{ours}-initial")
}

impl Strategy {
    /// The strategy `res` asks for, or which field to fix.
    pub fn of(res: &KubernetesApplicationResource) -> Result<Self, String> {
        let asked = res.spec.write_strategy.clone().unwrap_or_default();
        let mut ignored = Vec::new();
        for (i, text) in asked.ignore_fields.iter().enumerate() {
            let at = format!("spec.writeStrategy.ignoreFields[{i}] ({text})");
            let path = fieldpath::parse(text.trim_start_matches('.'))
                .map_err(|e| format!("{at} is not a field path: {e}"))?;
            if path.iter().any(|s| matches!(s, Segment::Index(_))) {
                return Err(format!(
                    "{at} names a list item: ignore the whole list by its path instead"
                ));
            }
            let shown = fieldpath::display(&path);
            let annotation = fieldpath::display(&[
                Segment::Field("metadata".into()),
                Segment::Field("annotations".into()),
                Segment::Field(ANNOTATION_RESOURCE_UID.into()),
            ]);
            if IDENTITY.contains(&shown.as_str())
                || shown == "metadata"
                || shown == "metadata.annotations"
                || shown == annotation
            {
                return Err(format!(
                    "{at} says which object this is (or that it is this resource's): it cannot be left to others"
                ));
            }
            ignored.push((path, shown));
        }
        Ok(Self {
            write: asked.type_,
            ignored,
            deletion: res.spec.deletion_policy.unwrap_or_default(),
        })
    }

    /// What deleting `res` needs of its strategy, even one that cannot be
    /// followed (a bad ignoreFields path must not leave the object behind).
    pub fn for_deletion(res: &KubernetesApplicationResource) -> Self {
        Self::of(res).unwrap_or_else(|_| Self {
            write: res
                .spec
                .write_strategy
                .as_ref()
                .map(|w| w.type_)
                .unwrap_or_default(),
            ignored: Vec::new(),
            deletion: res.spec.deletion_policy.unwrap_or_default(),
        })
    }

    /// What the lifecycle may do.
    pub fn allowed(&self) -> Allowed {
        match self.write {
            WriteStrategyType::ServerSideApply => Allowed::ALL,
            WriteStrategyType::CreateOnly => Allowed {
                update: false,
                ..Allowed::ALL
            },
            WriteStrategyType::ReadOnly => Allowed {
                create: false,
                update: false,
                delete: false,
            },
        }
    }

    /// Whether the object is only observed: it need not be this resource's,
    /// and nothing (no propagated Secret either) is written.
    pub fn read_only(&self) -> bool {
        self.write == WriteStrategyType::ReadOnly
    }

    /// Whether deleting the resource leaves the object in place.
    pub fn orphans(&self) -> bool {
        self.deletion == DeletionPolicy::Orphan
    }

    /// The object this controller's manager applies: `full` without the
    /// ignored fields.
    pub fn applied(&self, full: &Value) -> Value {
        let mut out = full.clone();
        for (path, _) in &self.ignored {
            fieldpath::remove(&mut out, path);
        }
        out
    }

    /// What [`initial_manager`] applies: the identity of `full` (the
    /// rendered template) and the ignored fields as `values` has them (the
    /// template when the object is created, the live object before it is
    /// applied again); None when `values` has none of them.
    pub fn initial(&self, full: &Value, values: &Value) -> Option<Value> {
        let mut out = Value::Object(Map::new());
        let mut any = false;
        for (path, _) in &self.ignored {
            if let Some(v) = fieldpath::get(values, path) {
                any |= fieldpath::set(&mut out, path, v.clone()).is_ok();
            }
        }
        if !any {
            return None;
        }
        for id in IDENTITY {
            let path = fieldpath::parse(id).ok()?;
            if let Some(v) = fieldpath::get(full, &path) {
                fieldpath::set(&mut out, &path, v.clone()).ok()?;
            }
        }
        Some(out)
    }

    /// What status says, when not the default.
    pub fn delivery(&self) -> Option<Delivery> {
        (*self != Self::default()).then(|| Delivery {
            write_strategy: self.write,
            ignored_fields: self.ignored.iter().map(|(_, t)| t.clone()).collect(),
            deletion_policy: self.deletion,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;
    use types::workload::v1alpha1::{KubernetesApplicationResourceSpec, WriteStrategy};

    use super::*;

    fn res(ignore: &[&str], type_: WriteStrategyType) -> KubernetesApplicationResource {
        KubernetesApplicationResource::new(
            "r",
            KubernetesApplicationResourceSpec {
                write_strategy: Some(WriteStrategy {
                    type_,
                    ignore_fields: ignore.iter().map(|s| s.to_string()).collect(),
                }),
                ..Default::default()
            },
        )
    }

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "ns",
                            "annotations": {"example.org/x": "1", "b": "2"}},
               "spec": {"replicas": 3, "selector": {}}})
    }

    #[test]
    fn ignored_fields_are_applied_once_by_the_initial_manager_only() {
        let s = Strategy::of(&res(
            &[
                "spec.replicas",
                ".metadata.annotations[example.org/x]",
                "spec.paused",
            ],
            WriteStrategyType::ServerSideApply,
        ))
        .unwrap();
        let applied = s.applied(&deployment());
        assert_eq!(applied.pointer("/spec/replicas"), None);
        assert_eq!(applied.pointer("/spec/selector"), Some(&json!({})));
        assert_eq!(
            applied.pointer("/metadata/annotations/b"),
            Some(&json!("2"))
        );
        assert!(
            applied
                .pointer("/metadata/annotations/example.org~1x")
                .is_none()
        );
        let initial = s.initial(&deployment(), &deployment()).unwrap();
        assert_eq!(
            initial,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "namespace": "ns",
                                "annotations": {"example.org/x": "1"}},
                   "spec": {"replicas": 3}})
        );
        assert_eq!(s.allowed(), Allowed::ALL);
        let d = s.delivery().unwrap();
        assert_eq!(
            d.ignored_fields,
            vec![
                "spec.replicas",
                "metadata.annotations[example.org/x]",
                "spec.paused"
            ]
        );
    }

    #[test]
    fn the_default_strategy_is_not_reported_and_applies_everything() {
        let s = Strategy::of(&res(&[], WriteStrategyType::ServerSideApply)).unwrap();
        assert_eq!(s.delivery(), None);
        assert_eq!(s.applied(&deployment()), deployment());
        assert_eq!(s.initial(&deployment(), &deployment()), None);
    }

    #[test]
    fn read_only_and_create_only_allow_what_they_say() {
        let ro = Strategy::of(&res(&[], WriteStrategyType::ReadOnly)).unwrap();
        assert!(ro.read_only());
        assert_eq!(
            ro.allowed(),
            Allowed {
                create: false,
                update: false,
                delete: false
            }
        );
        let co = Strategy::of(&res(&[], WriteStrategyType::CreateOnly)).unwrap();
        assert!(co.allowed().create && !co.allowed().update && co.allowed().delete);
    }

    #[test]
    fn identity_and_list_items_cannot_be_ignored() {
        for (path, says) in [
            ("metadata.name", "says which object"),
            ("kind", "says which object"),
            (
                "metadata.annotations[kubernetesapplicationresource.workload.crossplane.io/uid]",
                "says which object",
            ),
            ("spec.containers[0].image", "list item"),
            ("spec..x", "not a field path"),
        ] {
            let e = Strategy::of(&res(&[path], WriteStrategyType::ServerSideApply)).unwrap_err();
            assert!(e.contains(says), "{path}: {e}");
            assert!(e.contains("spec.writeStrategy.ignoreFields[0]"), "{e}");
        }
    }
}
