//! The code's shape, checked: no source file (nor end-to-end test file) is longer than a reader can
//! hold (600 lines before its unit tests), and no two files need each other.
//!
//! "Need" is a reference from one file to an item of another: `use
//! crate::…`, `use super::…`, a path such as `crate::a::b` in code, or a
//! parent naming one of its child modules (`child::x`). Declaring a module
//! and re-exporting (`mod x;`, `pub use …;`) is a module's façade, not a
//! need. A circle (A needs B, B needs A, directly or through others) means
//! neither can be read, tested or moved alone: what both need belongs in a
//! third file that needs neither.

// Test code throughout: a tree that cannot be read is a failed test.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod sources;
use sources::{rust_files, workspace};

const MAX_LINES: usize = 600;

/// Every crate's `src/` directory (the binaries under `src/bin/` are their
/// own roots and checked for length only).
fn source_roots() -> Vec<PathBuf> {
    let root = workspace();
    let mut roots: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    roots.push(root.join("e2e/src"));
    roots.sort();
    roots
}

/// A file's code: the lines before its unit tests.
fn code_of(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .collect()
}

/// The module path a file defines, relative to its crate's root; None for
/// files under `src/bin/` (each its own crate root).
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    Some(parts)
}

/// The code with comments, re-exports and module declarations taken out.
fn references_text(lines: &[&str]) -> String {
    let mut out = String::new();
    for line in lines {
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    // Statements: drop `pub use …;`, `pub(crate) use …;` and `mod x;`.
    let mut kept = String::new();
    for stmt in out.split_inclusive(';') {
        let t = stmt.trim_start();
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub(super) "))
            .or_else(|| t.strip_prefix("pub "))
            .map(|rest| (true, rest))
            .unwrap_or((false, t));
        let facade =
            (t.0 && t.1.starts_with("use ")) || (t.1.starts_with("mod ") && !t.1.contains('{'));
        if !facade {
            kept.push_str(stmt);
        }
    }
    kept
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Paths of a use-tree or path starting at `s` (after its head `crate::`):
/// `a::b`, `a::{b, c::{d, e}}`, `a::*` → one path per leaf.
fn tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        let start = i;
        while i < s.len() && (is_ident(b[i] as char) || b[i] == b'*') {
            i += 1;
        }
        if i > start {
            prefix.push(s[start..i].to_string());
        }
        let group = if s[i..].starts_with("::{") {
            i += 2;
            true
        } else {
            prefix.is_empty() && s[i..].starts_with('{')
        };
        if group {
            i += 1;
            let mut out = Vec::new();
            loop {
                while i < s.len() && (b[i] as char).is_whitespace() {
                    i += 1;
                }
                if i >= s.len() {
                    return (out, i);
                }
                if b[i] == b'}' {
                    return (out, i + 1);
                }
                if b[i] == b',' {
                    i += 1;
                    continue;
                }
                let (inner, used) = tree(&s[i..]);
                for p in inner {
                    let mut full = prefix.clone();
                    full.extend(p);
                    out.push(full);
                }
                // Skip `as name`.
                i += used.max(1);
                while i < s.len() && b[i] != b',' && b[i] != b'}' {
                    i += 1;
                }
            }
        }
        if s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        return (vec![prefix], i);
    }
}

#[derive(Default)]
struct Crate {
    /// module path → file
    modules: BTreeMap<Vec<String>, PathBuf>,
    /// file → files it needs
    needs: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

impl Crate {
    /// The file that defines the longest module prefix of `path`.
    fn resolve(&self, path: &[String]) -> Option<&PathBuf> {
        (0..=path.len())
            .rev()
            .find_map(|n| self.modules.get(&path[..n]))
    }
}

fn load(src: &Path) -> Crate {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut krate = Crate::default();
    for f in &files {
        if let Some(m) = module_of(src, f) {
            krate.modules.insert(m, f.clone());
        }
    }
    for (module, file) in krate.modules.clone() {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = references_text(&code_of(&text));
        let mut needs = BTreeSet::new();
        let mut add = |krate: &Crate, path: Vec<String>| {
            if let Some(t) = krate.resolve(&path)
                && *t != file
            {
                needs.insert(t.clone());
            }
        };
        let bytes = code.as_bytes();
        for (head, base) in [
            ("crate::", Vec::new()),
            ("super::", module.clone()),
            ("self::", module.clone()),
        ] {
            let mut at = 0;
            while let Some(i) = code[at..].find(head) {
                let i = at + i;
                at = i + head.len();
                if i > 0 && (is_ident(bytes[i - 1] as char) || bytes[i - 1] == b':') {
                    continue;
                }
                let mut base = base.clone();
                let mut rest = &code[at..];
                if head == "super::" {
                    base.pop();
                    while let Some(r) = rest.strip_prefix("super::") {
                        base.pop();
                        rest = r;
                    }
                }
                let (paths, _) = tree(rest);
                for p in paths {
                    let mut full = base.clone();
                    full.extend(p);
                    add(&krate, full);
                }
            }
        }
        // A parent naming a child module's items.
        let children: Vec<Vec<String>> = krate
            .modules
            .keys()
            .filter(|k| k.len() == module.len() + 1 && k.starts_with(&module))
            .cloned()
            .collect();
        for child in children {
            let name = format!("{}::", child[child.len() - 1]);
            let mut at = 0;
            while let Some(i) = code[at..].find(&name) {
                let i = at + i;
                at = i + name.len();
                if i > 0 && (is_ident(bytes[i - 1] as char) || bytes[i - 1] == b':') {
                    continue;
                }
                add(&krate, child.clone());
            }
        }
        krate.needs.insert(file, needs);
    }
    krate
}

/// Strongly connected groups of more than one file (Tarjan).
fn circles(krate: &Crate) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        krate: &'a Crate,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.krate.needs.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                group.push(w.clone());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        krate,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in krate.needs.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_source_file_is_longer_than_600_lines_before_its_tests() {
    let mut long = Vec::new();
    let mut files = Vec::new();
    for src in source_roots() {
        rust_files(&src, &mut files);
    }
    assert!(
        files.len() > 50,
        "found the crates' sources: {}",
        files.len()
    );
    // The end-to-end tests too: one binary per area (`e2e/tests/<area>.rs`
    // or `<area>/main.rs`), split into modules by behaviour.
    let before = files.len();
    rust_files(&workspace().join("e2e/tests"), &mut files);
    assert!(files.len() - before > 30, "found the end-to-end tests");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let n = code_of(&text).len();
        if n > MAX_LINES {
            long.push(format!("{}: {n} lines", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "split these by what they do (at most {MAX_LINES} lines before #[cfg(test)]):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_two_source_files_need_each_other() {
    let root = workspace();
    let mut found = Vec::new();
    for src in source_roots() {
        let krate = load(&src);
        for group in circles(&krate) {
            let mut lines = vec![format!(
                "{}:",
                src.strip_prefix(&root).unwrap_or(&src).display()
            )];
            for a in &group {
                for b in &krate.needs[a] {
                    if group.contains(b) {
                        lines.push(format!(
                            "  {} needs {}",
                            a.strip_prefix(&src).unwrap_or(a).display(),
                            b.strip_prefix(&src).unwrap_or(b).display()
                        ));
                    }
                }
            }
            found.push(lines.join("\n"));
        }
    }
    assert!(
        found.is_empty(),
        "these files need each other; move what both need to a file that needs neither:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_check_sees_a_circle() {
    let dir = tempdir();
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use a::A;\n").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "use crate::{b::{self, B}};\npub struct A(B);\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b.rs"),
        "pub struct B;\nfn f() -> super::a::A { todo!() }\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
    )
    .unwrap();
    let krate = load(&src);
    assert_eq!(
        circles(&krate),
        vec![vec![src.join("a.rs"), src.join("b.rs")]]
    );
    // Without b's need of a (tests don't count), no circle.
    std::fs::write(
        src.join("b.rs"),
        "pub struct B;\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
    )
    .unwrap();
    assert!(circles(&load(&src)).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("layout-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
