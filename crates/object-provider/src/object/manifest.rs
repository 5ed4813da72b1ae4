//! The managed object's manifest as it is applied, and the live object as
//! status shows it: pure functions of what was read.

use kube::{ResourceExt, api::DynamicObject, discovery::ApiResource};
use runtime::fieldpath;
use serde_json::{Value, json};
use types::{
    common::ANNOTATION_EXTERNAL_NAME,
    kubernetes::{
        v1alpha1::{ManagedObjectReference, ObjectObservation},
        v1alpha2::ObjectStatus,
    },
};

use super::errors::Error;
use super::kind::ObjectKind;
use crate::policy;

/// Where the manifest is in an Object.
const MANIFEST: [&str; 3] = ["spec", "forProvider", "manifest"];

/// Where a reference's toFieldPath (a path in the manifest, e.g.
/// `data.color`) is in the Object: `spec.forProvider.manifest.data.color`.
pub fn path_in_manifest(to: &str) -> Result<Vec<fieldpath::Segment>, String> {
    let relative = fieldpath::parse(to)?;
    Ok(MANIFEST
        .iter()
        .map(|f| fieldpath::Segment::Field((*f).to_owned()))
        .chain(relative)
        .collect())
}

/// The manifest to apply: resolved, named (external-name, else the Object's
/// name), with type metadata checked. A reference's toFieldPath may have put
/// anything anywhere in the manifest, so every step is checked and a wrong
/// shape is named, never assumed.
pub fn desired<K: ObjectKind>(obj: &K, resolved: &Value) -> Result<Value, Error> {
    let mut manifest = resolved
        .pointer("/spec/forProvider/manifest")
        .cloned()
        .unwrap_or(Value::Null);
    check_shape(&manifest)?;
    let unnamed = manifest
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if unnamed {
        let name = obj
            .annotations()
            .get(ANNOTATION_EXTERNAL_NAME)
            .cloned()
            .unwrap_or_else(|| obj.name_any());
        fieldpath::set_fields(&mut manifest, &["metadata", "name"], json!(name)).map_err(|e| {
            Error::InvalidManifest(format!("invalid spec.forProvider.manifest: {e}"))
        })?;
    }
    if let Some(m) = manifest.as_object_mut() {
        m.remove("status");
    }
    policy::fold_string_data(&mut manifest);
    Ok(manifest)
}

fn check_shape(manifest: &Value) -> Result<(), Error> {
    let bad = |m: &str| Err(Error::InvalidManifest(m.to_owned()));
    let empty = |key: &str| {
        manifest
            .get(key)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    };
    if !manifest.is_object() {
        return bad(
            "spec.forProvider.manifest is not an object: set it to the managed object's manifest (apiVersion, kind, metadata, ...)",
        );
    }
    if empty("apiVersion") {
        return bad(
            "spec.forProvider.manifest has no apiVersion: set the apiVersion of the managed object (e.g. v1)",
        );
    }
    if empty("kind") {
        return bad(
            "spec.forProvider.manifest has no kind: set the kind of the managed object (e.g. ConfigMap)",
        );
    }
    if manifest
        .get("metadata")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return bad(
            "spec.forProvider.manifest.metadata is not an object: it must hold the managed object's metadata (name, namespace, labels); fix the manifest, or the reference whose toFieldPath writes metadata",
        );
    }
    Ok(())
}

/// A string field of the manifest ("" when unset).
pub fn text(manifest: &Value, pointer: &str) -> String {
    manifest
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The field manager of one Object: each Object owns its own fields.
pub fn field_manager<K: ObjectKind>(obj: &K) -> String {
    format!("crossplane-rs/object/{}", obj.uid().unwrap_or_default())
}

/// An object as JSON, with the apiVersion and kind of `resource` when the
/// object came without them (items of a list or watch often do).
pub fn as_value(obj: &DynamicObject, resource: &ApiResource) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        for (key, value) in [
            ("apiVersion", &resource.api_version),
            ("kind", &resource.kind),
        ] {
            if m.get(key).is_none_or(Value::is_null) {
                m.insert(key.to_owned(), json!(value));
            }
        }
    }
    v
}

/// Where `live` (an object read from or applied to the target) lives.
pub fn identity(live: &Value) -> Option<ManagedObjectReference> {
    let text = |p: &str| live.pointer(p).and_then(Value::as_str).map(str::to_owned);
    Some(ManagedObjectReference {
        api_version: text("/apiVersion")?,
        kind: text("/kind")?,
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name")?,
    })
}

/// Shows `live` in `status`: where it lives and what it holds (without
/// managedFields, with values read from Secrets redacted).
pub fn observe_into(status: &mut ObjectStatus, live: &Value, secrets: &policy::Redactions) {
    if let Some(id) = identity(live) {
        status.managed_object_ref = Some(id);
    }
    let mut shown = policy::for_status(live);
    secrets.value(&mut shown);
    status.at_provider = Some(ObjectObservation {
        manifest: Some(shown),
    });
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use types::kubernetes::v1alpha2::Object;

    fn object() -> Object {
        serde_json::from_value(json!({
            "apiVersion": "kubernetes.crossplane.io/v1alpha2", "kind": "Object",
            "metadata": {"name": "obj"},
            "spec": {"forProvider": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns"}}}},
        }))
        .unwrap()
    }

    #[test]
    fn a_string_written_over_the_manifest_metadata_is_refused_naming_the_path() {
        let obj = object();
        let mut doc = serde_json::to_value(&obj).unwrap();
        let path = path_in_manifest("metadata").unwrap();
        fieldpath::set(&mut doc, &path, json!("a-string")).unwrap();
        let err = desired(&obj, &doc).unwrap_err().to_string();
        assert!(
            err.contains("spec.forProvider.manifest.metadata is not an object"),
            "{err}"
        );
    }

    #[test]
    fn a_to_field_path_is_in_the_manifest() {
        for (to, absolute) in [
            ("data.color", "spec.forProvider.manifest.data.color"),
            ("metadata.name", "spec.forProvider.manifest.metadata.name"),
            (
                "metadata.annotations[example.org/key]",
                "spec.forProvider.manifest.metadata.annotations[example.org/key]",
            ),
            (
                "spec.containers[0].image",
                "spec.forProvider.manifest.spec.containers[0].image",
            ),
        ] {
            assert_eq!(
                path_in_manifest(to).unwrap(),
                fieldpath::parse(absolute).unwrap(),
                "{to}"
            );
        }
        for bad in ["", "spec..name", "data[x"] {
            assert!(path_in_manifest(bad).is_err(), "{bad:?}");
        }
        let obj = object();
        let mut doc = serde_json::to_value(&obj).unwrap();
        fieldpath::set(
            &mut doc,
            &path_in_manifest("data.color").unwrap(),
            json!("blue"),
        )
        .unwrap();
        let m = desired(&obj, &doc).unwrap();
        assert_eq!(m.pointer("/data/color"), Some(&json!("blue")));
    }

    #[test]
    fn the_manifest_is_named_after_the_object_by_default_and_the_external_name_wins() {
        let mut obj = object();
        let doc = serde_json::to_value(&obj).unwrap();
        let m = desired(&obj, &doc).unwrap();
        assert_eq!(m.pointer("/metadata/name"), Some(&json!("obj")));
        obj.annotations_mut().insert(
            ANNOTATION_EXTERNAL_NAME.to_owned(),
            "called-this".to_owned(),
        );
        let m = desired(&obj, &doc).unwrap();
        assert_eq!(m.pointer("/metadata/name"), Some(&json!("called-this")));
    }

    #[test]
    fn a_manifest_without_kind_or_api_version_says_which() {
        let obj = object();
        for (key, needle) in [("kind", "no kind"), ("apiVersion", "no apiVersion")] {
            let mut doc = serde_json::to_value(&obj).unwrap();
            doc["spec"]["forProvider"]["manifest"]
                .as_object_mut()
                .unwrap()
                .remove(key);
            let err = desired(&obj, &doc).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn cached_objects_get_their_type_back_and_status_drops_managed_fields() {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let obj: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "managedFields": [{"manager": "x"}]},
            "data": {"a": "b"},
        }))
        .unwrap();
        let v = as_value(&obj, &resource);
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "ConfigMap");
        let mut status = ObjectStatus::default();
        observe_into(&mut status, &v, &policy::Redactions::default());
        let shown = status.at_provider.unwrap().manifest.unwrap();
        assert!(shown.pointer("/metadata/managedFields").is_none());
        assert_eq!(status.managed_object_ref.unwrap().name, "c");
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(
                    "apiVersion|kind|metadata|name|namespace|[a-z]",
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// Whatever a reference writes wherever in the manifest, working out
        /// the manifest answers Ok or an error; it never panics.
        #[test]
        fn no_value_written_by_a_reference_crashes_the_provider(
            to in prop_oneof![
                "(metadata|name|namespace|apiVersion|kind|data|status|[a-z])(\\.(metadata|name|namespace|apiVersion|kind|data|[a-z])){0,3}",
                "[a-z]{1,3}(\\[[0-2]\\])?(\\.[a-z]{1,3}(\\[[0-2]\\])?){0,3}",
            ],
            value in json_value(),
        ) {
            let obj = object();
            let mut doc = serde_json::to_value(&obj).unwrap();
            if let Ok(path) = path_in_manifest(&to) && fieldpath::set(&mut doc, &path, value).is_ok() {
                let _ = desired(&obj, &doc);
            }
        }
    }
}
