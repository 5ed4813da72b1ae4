//! Field paths as Crossplane writes them: `spec.forProvider.manifest.metadata.name`,
//! `data.region`, `spec.containers[0].image`, `metadata.annotations[example.org/key]`.

use serde_json::Value;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// An object key.
    Field(String),
    /// An array index.
    Index(usize),
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

/// Sets `new` at `path`, creating objects on the way; fails when the path
/// runs through something that is not an object (or an array, for indexes).
pub fn set(value: &mut Value, path: &[Segment], new: Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        return Err("empty path".to_owned());
    };
    let mut cur = value;
    for seg in parents {
        cur = match seg {
            Segment::Field(f) => {
                if cur.is_null() {
                    *cur = Value::Object(Default::default());
                }
                let obj = cur
                    .as_object_mut()
                    .ok_or_else(|| format!("{f:?} is under a value that is not an object"))?;
                obj.entry(f.clone()).or_insert(Value::Null)
            }
            Segment::Index(i) => {
                let arr = cur
                    .as_array_mut()
                    .ok_or_else(|| format!("[{i}] is under a value that is not a list"))?;
                arr.get_mut(*i)
                    .ok_or_else(|| format!("index [{i}] is out of range"))?
            }
        };
    }
    match last {
        Segment::Field(f) => {
            if cur.is_null() {
                *cur = Value::Object(Default::default());
            }
            cur.as_object_mut()
                .ok_or_else(|| format!("{f:?} is under a value that is not an object"))?
                .insert(f.clone(), new);
        }
        Segment::Index(i) => {
            let arr = cur
                .as_array_mut()
                .ok_or_else(|| format!("[{i}] is under a value that is not a list"))?;
            *arr.get_mut(*i)
                .ok_or_else(|| format!("index [{i}] is out of range"))? = new;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
            v["spec"]["forProvider"]["manifest"]["metadata"]["name"],
            "kong.v1"
        );
    }

    #[test]
    fn setting_through_a_scalar_is_refused() {
        let mut v = json!({"spec": {"replicas": 1}});
        assert!(set(&mut v, &parse("spec.replicas.x").unwrap(), json!(1)).is_err());
    }
}
