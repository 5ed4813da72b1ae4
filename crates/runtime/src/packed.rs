//! Large JSON values kept in a cache as their text.
//!
//! A `serde_json::Value` tree costs far more memory than its text: every
//! object is a map with a node of its own (hundreds of bytes even for two
//! keys), every key and string a heap allocation. A Deployment template of
//! 5 KiB of JSON takes tens of KiB as a tree. A cache that holds thousands
//! of templates (an application's, a resource's) keeps each one packed, as
//! its compact text in a JSON string, and a reconcile unpacks the one it
//! works on.
//!
//! Only values that are objects or lists are packed, and only where the
//! value is always an object (a template, which the CRD's schema says is
//! one; a watched object's body), so a string found there is always a
//! packed one. The text is the value's canonical serialization
//! (keys sorted, no spaces): [`crate::reconciler::value_hash`] of a value
//! and [`hash`] of its packed form agree, so a packed value is compared by
//! hash without being unpacked.

use std::{
    borrow::Cow,
    hash::{Hash as _, Hasher as _},
};

use serde_json::Value;

/// Packs `value` (an object or a list) into its text, in place; anything
/// else is left as it is.
pub fn pack(value: &mut Value) {
    if value.is_object() || value.is_array() {
        *value = Value::String(value.to_string());
    }
}

/// The value `value` holds: itself, or, when packed, the value its text
/// reads as. A string that does not read as JSON is returned as it is.
pub fn unpacked(value: &Value) -> Cow<'_, Value> {
    match value.as_str().map(serde_json::from_str::<Value>) {
        Some(Ok(v)) if v.is_object() || v.is_array() => Cow::Owned(v),
        _ => Cow::Borrowed(value),
    }
}

/// Unpacks `value` in place (see [`unpacked`]).
pub fn unpack(value: &mut Value) {
    if let Cow::Owned(v) = unpacked(value) {
        *value = v;
    }
}

/// Packs `value` whatever it is (a string too, as its JSON text with its
/// quotes), so that [`open`] gives back exactly the value it was: for a
/// field that a cache packs in every object it holds, and whose value may
/// be a string of its own (user input that is wrong), which [`pack`] would
/// leave as it is and [`unpacked`] could take for packed JSON.
pub fn seal(value: &mut Value) {
    *value = Value::String(value.to_string());
}

/// Gives back, in place, the value [`seal`] packed.
pub fn open(value: &mut Value) {
    if let Some(Ok(v)) = value.as_str().map(serde_json::from_str::<Value>) {
        *value = v;
    }
}

/// The hash [`crate::reconciler::value_hash`] gives the value `value`
/// holds, without unpacking it: a string is taken as packed (use it only
/// where the value is never a string of its own).
pub fn hash(value: &Value) -> u64 {
    match value.as_str() {
        Some(text) => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            h.finish()
        }
        None => crate::reconciler::value_hash(value),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_packed_value_unpacks_to_itself_and_hashes_the_same() {
        let original = json!({"kind": "Deployment", "metadata": {"name": "d"},
                              "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}});
        let mut packed = original.clone();
        pack(&mut packed);
        assert!(packed.is_string());
        assert_eq!(unpacked(&packed).as_ref(), &original);
        assert_eq!(hash(&packed), crate::reconciler::value_hash(&original));
        assert_eq!(hash(&original), crate::reconciler::value_hash(&original));
        unpack(&mut packed);
        assert_eq!(packed, original);
    }

    #[test]
    fn only_objects_and_lists_are_packed_and_other_strings_stay_strings() {
        for v in [json!("text"), json!(3), json!(null), json!("{not json")] {
            let mut p = v.clone();
            pack(&mut p);
            assert_eq!(p, v);
            assert_eq!(unpacked(&p).as_ref(), &v);
        }
        // A string whose text is a scalar stays a string.
        assert_eq!(unpacked(&json!("42")).as_ref(), &json!("42"));
    }

    #[test]
    fn sealed_values_open_to_exactly_what_they_were_strings_too() {
        for v in [
            json!({"a": [1, {"b": "c"}]}),
            json!("{\"looks\": \"like json\"}"),
            json!("plain"),
            json!(7),
            json!(null),
            json!([]),
        ] {
            let mut sealed = v.clone();
            seal(&mut sealed);
            assert!(sealed.is_string());
            open(&mut sealed);
            assert_eq!(sealed, v);
        }
    }
}
