//! Field paths as Crossplane writes them (`spec.forProvider.manifest.metadata.name`,
//! `data.region`, `spec.containers[0].image`, `metadata.annotations[example.org/key]`),
//! and the one way this workspace writes into JSON: checked, returning an
//! error instead of panicking.
//!
//! NB: `serde_json::Value`'s `IndexMut` (`v["a"]["b"] = x`, `&mut v["a"]`)
//! panics when `v` is neither an object nor null, so a user who puts a string
//! where an object is expected would crash the binary. Write with [`set`] or
//! [`set_fields`]; `crates/runtime/tests/no_json_index_writes.rs` fails on any
//! indexing write on JSON in non-test sources.

use serde_json::Value;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// An object key.
    Field(String),
    /// An array index.
    Index(usize),
}

/// The path as text, in the form [`parse`] reads.
pub fn display(path: &[Segment]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Segment::Field(f) if f.contains(['.', '[', ']']) => {
                out.push('[');
                out.push_str(f);
                out.push(']');
            }
            Segment::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Parses a path, or says what is wrong with it.
pub fn parse(path: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    let mut chars = path.chars().peekable();
    let mut field = String::new();
    let bad = |why: &str| Err(format!("invalid field path {path:?}: {why}"));
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                if field.is_empty()
                    && !matches!(
                        out.last(),
                        Some(Segment::Index(_)) | Some(Segment::Field(_))
                    )
                {
                    return bad("empty segment");
                }
                if !field.is_empty() {
                    out.push(Segment::Field(std::mem::take(&mut field)));
                }
                if chars.peek().is_none_or(|n| *n == '.' || *n == '[') {
                    return bad("empty segment");
                }
            }
            '[' => {
                if !field.is_empty() {
                    out.push(Segment::Field(std::mem::take(&mut field)));
                }
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some(']') => break,
                        Some(ch) => inner.push(ch),
                        None => return bad("unclosed ["),
                    }
                }
                let inner = inner.trim_matches(|c| c == '\'' || c == '"');
                if inner.is_empty() {
                    return bad("empty []");
                }
                match inner.parse::<usize>() {
                    Ok(i) => out.push(Segment::Index(i)),
                    Err(_) => out.push(Segment::Field(inner.to_owned())),
                }
            }
            ']' => return bad("unexpected ]"),
            c => field.push(c),
        }
    }
    if !field.is_empty() {
        out.push(Segment::Field(field));
    }
    if out.is_empty() {
        return bad("empty path");
    }
    Ok(out)
}

/// The value at `path`, if present.
pub fn get<'a>(value: &'a Value, path: &[Segment]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, seg| match seg {
        Segment::Field(f) => v.get(f),
        Segment::Index(i) => v.get(i),
    })
}

/// Removes the object field at `path` (a path of object keys), answering
/// what was there. An index, or anything missing on the way, removes
/// nothing.
pub fn remove(value: &mut Value, path: &[Segment]) -> Option<Value> {
    let (Segment::Field(last), parents) = path.split_last()? else {
        return None;
    };
    let mut cur = value;
    for seg in parents {
        cur = match seg {
            Segment::Field(f) => cur.get_mut(f)?,
            Segment::Index(_) => return None,
        };
    }
    cur.as_object_mut()?.remove(last)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The child of `cur` at `seg`, created (as null) when a missing object key;
/// `walked` is the path up to and including `cur`, for the error message.
fn step<'a>(
    cur: &'a mut Value,
    seg: &Segment,
    walked: &[Segment],
) -> Result<&'a mut Value, String> {
    let here = || {
        if walked.is_empty() {
            "the document".to_owned()
        } else {
            display(walked)
        }
    };
    match seg {
        Segment::Field(f) => {
            if cur.is_null() {
                *cur = Value::Object(Default::default());
            }
            let kind = kind_of(cur);
            let obj = cur.as_object_mut().ok_or_else(|| {
                format!(
                    "{} is {kind}, not an object, so it has no field {f:?}",
                    here()
                )
            })?;
            Ok(obj.entry(f.clone()).or_insert(Value::Null))
        }
        Segment::Index(i) => {
            let kind = kind_of(cur);
            let arr = cur.as_array_mut().ok_or_else(|| {
                format!("{} is {kind}, not a list, so it has no item [{i}]", here())
            })?;
            let len = arr.len();
            arr.get_mut(*i)
                .ok_or_else(|| format!("{} has {len} items, so [{i}] is out of range", here()))
        }
    }
}

/// Sets `new` at `path`, creating objects on the way; fails, naming the
/// path, when the path runs through something that is not an object (or a
/// list, for indexes) or past the end of a list. Never panics.
pub fn set(value: &mut Value, path: &[Segment], new: Value) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty path".to_owned());
    }
    let mut cur = value;
    for (n, seg) in path.iter().enumerate() {
        cur = step(cur, seg, &path[..n])?;
    }
    *cur = new;
    Ok(())
}

/// [`set`] for a path of object keys written in code, such as
/// `&["metadata", "annotations", key]`.
pub fn set_fields(value: &mut Value, keys: &[&str], new: Value) -> Result<(), String> {
    let path: Vec<Segment> = keys
        .iter()
        .map(|k| Segment::Field((*k).to_owned()))
        .collect();
    set(value, &path, new)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn dotted_paths_with_indexes_and_bracketed_keys_parse() {
        assert_eq!(
            parse("spec.containers[0].image").unwrap(),
            vec![
                Segment::Field("spec".into()),
                Segment::Field("containers".into()),
                Segment::Index(0),
                Segment::Field("image".into())
            ]
        );
        assert_eq!(
            parse("metadata.annotations[example.org/key]").unwrap(),
            vec![
                Segment::Field("metadata".into()),
                Segment::Field("annotations".into()),
                Segment::Field("example.org/key".into())
            ]
        );
    }

    #[test]
    fn malformed_paths_say_what_is_wrong() {
        assert!(parse("spec..name").unwrap_err().contains("empty segment"));
        assert!(parse("spec.list[0").unwrap_err().contains("unclosed ["));
        assert!(parse("").unwrap_err().contains("empty path"));
        assert!(parse("spec.").unwrap_err().contains("empty segment"));
    }

    #[test]
    fn paths_display_as_they_parse() {
        for p in [
            "spec.containers[0].image",
            "metadata.annotations[example.org/key]",
        ] {
            assert_eq!(display(&parse(p).unwrap()), p);
        }
    }

    #[test]
    fn values_are_read_through_objects_and_lists() {
        let v = json!({"status": {"atProvider": {"manifest": {"status": {"currentCSV": "kong.v1"}}}}, "l": [{"a": 1}]});
        assert_eq!(
            get(
                &v,
                &parse("status.atProvider.manifest.status.currentCSV").unwrap()
            ),
            Some(&json!("kong.v1"))
        );
        assert_eq!(get(&v, &parse("l[0].a").unwrap()), Some(&json!(1)));
        assert_eq!(get(&v, &parse("l[3].a").unwrap()), None);
    }

    #[test]
    fn setting_creates_missing_objects() {
        let mut v =
            json!({"spec": {"forProvider": {"manifest": {"kind": "ClusterServiceVersion"}}}});
        set(
            &mut v,
            &parse("spec.forProvider.manifest.metadata.name").unwrap(),
            json!("kong.v1"),
        )
        .unwrap();
        assert_eq!(
            v.pointer("/spec/forProvider/manifest/metadata/name"),
            Some(&json!("kong.v1"))
        );
    }

    #[test]
    fn setting_through_a_scalar_is_refused_naming_the_path() {
        let mut v = json!({"spec": {"replicas": 1}});
        let err = set(&mut v, &parse("spec.replicas.x").unwrap(), json!(1)).unwrap_err();
        assert_eq!(
            err,
            "spec.replicas is a number, not an object, so it has no field \"x\""
        );
        let mut m = json!({"metadata": "a string"});
        let err = set_fields(&mut m, &["metadata", "name"], json!("n")).unwrap_err();
        assert!(
            err.starts_with("metadata is a string, not an object"),
            "{err}"
        );
        let mut top = json!("scalar");
        assert!(
            set_fields(&mut top, &["a"], json!(1))
                .unwrap_err()
                .starts_with("the document is a string")
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z0-9]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,2}|[0-9]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn field_path() -> impl Strategy<Value = String> {
        prop_oneof![
            // Paths made of the parser's own alphabet, often well-formed.
            "[a-z0-9.\\[\\]'\"]{0,16}",
            // Anything at all.
            any::<String>(),
        ]
    }

    proptest! {
        // Bounded: 2,000 cases run in well under a minute.
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// The guard against crashes on user input: no path, document or
        /// value makes parsing, reading or writing panic, and a write that
        /// succeeds can be read back.
        #[test]
        fn no_path_document_or_value_panics(path in field_path(), doc in json_value(), new in json_value()) {
            if let Ok(p) = parse(&path) {
                let _ = get(&doc, &p);
                let mut written = doc.clone();
                if set(&mut written, &p, new.clone()).is_ok() {
                    prop_assert_eq!(get(&written, &p), Some(&new));
                }
            }
        }

        #[test]
        fn set_fields_never_panics(keys in prop::collection::vec("[a-z]{0,2}", 0..4), doc in json_value(), new in json_value()) {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let mut written = doc;
            let _ = set_fields(&mut written, &keys, new);
        }
    }
}
