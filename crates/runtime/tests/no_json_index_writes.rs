//! The workspace guard against crashing on user JSON: no non-test source
//! writes into a `serde_json::Value` by indexing (`v["a"]["b"] = x`,
//! `&mut v["a"]`, `v["a"].as_object_mut()`), because `IndexMut` panics when
//! the value is a string, a number or a list. Write with
//! `runtime::fieldpath::set` / `set_fields` (which return an error) or build
//! the object with `serde_json::Map::insert`.
//!
//! NB: clippy has no lint for this: `disallowed_methods` does not see the
//! `IndexMut` behind `[]` (operator sugar is not a method call), and
//! `indexing_slicing` would also flag every harmless read (`v["a"]` reads
//! return null, never panic). So this test scans the sources. It recognises
//! JSON indexing by its keys: a string literal or an UPPER_CASE constant
//! (`HashMap` and `BTreeMap` have no `IndexMut`, so such a key on the left of
//! a write can only be JSON). A write through a variable key alone
//! (`v[key] = x`) is beyond a text scan; the field-path property tests in
//! `runtime::fieldpath` cover the writer itself.

// A test fails loudly, with what it found.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// The source with comments removed and string and char literals emptied
/// (`"…"` becomes `""`), so that neither can look like code; line breaks
/// are kept so positions map to the same lines.
fn code_only(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // Raw string r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            out.push_str("\"\"");
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                if b[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            out.push_str("\"\"");
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if b.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\'') or a lifetime ('a).
            let is_char = matches!(
                (next, b.get(i + 2)),
                (Some('\\'), _) | (Some(_), Some('\''))
            );
            if is_char {
                let mut j = i + 1;
                if b[j] == '\\' {
                    j += 1;
                }
                j += 1;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                out.push_str("' '");
                i = j + 1;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Blanks every item marked `#[cfg(test)]` (a `mod tests { … }`, a
/// function, a `use`), keeping line breaks.
fn without_test_items(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= out.len() {
        if out[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        // The item ends at the first `;` before any `{`, or at the brace
        // that closes the first `{`.
        let mut j = i + marker.len();
        let mut depth = 0usize;
        while j < out.len() {
            match out[j] {
                ';' if depth == 0 => break,
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let len = out.len();
        for c in out.iter_mut().take((j + 1).min(len)).skip(i) {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = j + 1;
    }
    out.into_iter().collect()
}

/// The 1-based lines of `code` that write into JSON by indexing.
fn index_writes(code: &str) -> Vec<usize> {
    let b: Vec<char> = code.chars().collect();
    let line_of = |pos: usize| b[..pos].iter().filter(|c| **c == '\n').count() + 1;
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // An index starts a chain when it follows an expression.
        let follows_expr = b[i] == '['
            && b[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || matches!(p, '_' | ')' | '?'));
        if !follows_expr {
            i += 1;
            continue;
        }
        let start = i;
        let mut json_key = false;
        let mut end = i;
        // The chain: `[…][…]…`.
        while b.get(end) == Some(&'[') {
            let mut depth = 0;
            let mut k = end;
            while k < b.len() {
                match b[k] {
                    '[' => depth += 1,
                    ']' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                k += 1;
            }
            let key: String = b[end + 1..k.min(b.len())].iter().collect();
            let key = key.trim();
            json_key |= key == "\"\""
                || (key.len() > 1
                    && key
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && key.chars().any(|c| c.is_ascii_uppercase()));
            end = k + 1;
        }
        i = end;
        if !json_key {
            continue;
        }
        let rest: String = b[end.min(b.len())..].iter().take(40).collect();
        let rest = rest.trim_start();
        let assigns = {
            let ops = ["=", "+=", "-=", "*=", "/=", "%=", "|=", "&=", "^="];
            ops.iter()
                .any(|op| rest.starts_with(op) && !rest[op.len()..].starts_with(['=', '>']))
        };
        let mutates = [
            ".as_object_mut(",
            ".as_array_mut(",
            ".take(",
            ".get_mut(",
            ".pointer_mut(",
        ]
        .iter()
        .any(|m| rest.starts_with(m));
        // `&mut base[…]`: walk back over the base expression.
        let mut s = start;
        while s > 0 && (b[s - 1].is_alphanumeric() || matches!(b[s - 1], '_' | '.' | ':')) {
            s -= 1;
        }
        let before: String = b[s.saturating_sub(8)..s].iter().collect();
        let borrows_mut = before.trim_end().ends_with("&mut");
        if assigns || mutates || borrows_mut {
            found.push(line_of(start));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_writes_into_json_by_indexing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    // Every crate's non-test sources (src/, without #[cfg(test)] items or
    // tests.rs files).
    // Integration tests (tests/) and the e2e crate are test code.
    for krate in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let src = krate.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut offences = Vec::new();
    for file in &files {
        // A module's unit tests kept in a file of their own
        // (`#[cfg(test)] mod tests;` beside `<module>/tests.rs`).
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for line in index_writes(&without_test_items(&code_only(&text))) {
            let shown = file.strip_prefix(&root).unwrap_or(file);
            let source = text.lines().nth(line - 1).unwrap_or_default().trim();
            offences.push(format!("{}:{line}: {source}", shown.display()));
        }
    }
    assert!(
        offences.is_empty(),
        "indexing writes into JSON panic on user input (a string where an object is expected); \
         use runtime::fieldpath::set / set_fields or serde_json::Map::insert instead:\n{}",
        offences.join("\n")
    );
}

/// The scanner itself: each way of writing by index is found, reads and
/// other brackets are not.
#[test]
fn the_scan_finds_every_form_of_indexing_write() {
    let cases = [
        (r#"manifest["metadata"]["name"] = json!(name);"#, true),
        (r#"v["a"] = 1;"#, true),
        (r#"v["a"] += 1;"#, true),
        (
            "metadata[\"annotations\"][ANNOTATION_RESOURCE_UID] =\n    json!(uid);",
            true,
        ),
        (r#"let m = &mut obj["metadata"];"#, true),
        (
            r#"if let Some(m) = manifest["metadata"].as_object_mut() {}"#,
            true,
        ),
        (r#"self.doc["spec"]["x"] = y;"#, true),
        (r#"let x = v["a"]["b"].as_str();"#, false),
        (r#"if v["kind"] == "Secret" {}"#, false),
        (r#"let f = |c: &Value| c["status"] != "True";"#, false),
        ("let a = [1, 2]; a[0] = 3; let t: [u8; 2] = [0; 2];", false),
        (r#"for s in ["True", "False"] {}"#, false),
        (r#"// v["a"] = 1 in a comment"#, false),
        (r#"let s = "v[\"a\"] = 1 in a string";"#, false),
        ("let s = r#\"v[\"a\"] = 1\"#;", false),
        (
            "#[cfg(test)]\nmod tests {\n    fn f() { v[\"a\"] = 1; }\n}",
            false,
        ),
        (r#"match v["a"] { _ => {} }"#, false),
    ];
    for (src, expected) in cases {
        let found = !index_writes(&without_test_items(&code_only(src))).is_empty();
        assert_eq!(found, expected, "{src}");
    }
    // Lines are counted in the original source.
    let src = "fn f() {\n    let s = \"two\nlines\";\n    v[\"a\"] = 1;\n}";
    assert_eq!(index_writes(&without_test_items(&code_only(src))), vec![4]);
}
