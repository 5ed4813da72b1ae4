//! The front door tells the truth: every relative link and every repository
//! path the README and the guides name exists, none names a path on
//! someone's machine, and neither they nor the sources cite issue numbers
//! (the tracker is not in the repository; say what and why instead).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files a reader of the repository is pointed at.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs = vec![root.join("README.md")];
    for dir in ["docs", "examples", "examples/seeds", "deploy"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "md") {
                docs.push(p);
            }
        }
    }
    docs
}

/// The targets of `[text](target)` links in `text`.
fn links(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(&rest[..end]);
            rest = &rest[end..];
        }
    }
    out
}

/// The anchors of a Markdown file's headings, as GitHub makes them.
fn anchors(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim().to_lowercase();
        out.push(
            title
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect(),
        );
    }
    out
}

/// Words in backticks that name a file or directory of the repository.
fn repo_paths(text: &str) -> Vec<&str> {
    const TOP: [&str; 9] = [
        "crates/",
        "docs/",
        "deploy/",
        "e2e/",
        "examples/",
        "hack/",
        "bench/",
        "crds/",
        "benchmarks/",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|code| code.split_whitespace())
        .map(|w| w.trim_end_matches([',', '.', ';', ':', ')']))
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        // Patterns (`base/<binary>/`, `*.json`) name no one file.
        .filter(|w| !w.contains(['<', '*', '{', '…', '$']))
        .collect()
}

#[test]
fn every_link_and_path_the_docs_name_exists() {
    let root = root();
    let mut missing = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let dir = doc.parent().unwrap();
        let name = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                doc.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                missing.push(format!("{name}: link {target}"));
            } else if !anchor.is_empty() && !anchors(&file).iter().any(|a| a == anchor) {
                missing.push(format!("{name}: link {target} (no such heading)"));
            }
        }
        for path in repo_paths(&text) {
            if !root.join(path).exists() {
                missing.push(format!("{name}: path {path}"));
            }
        }
        for outside in ["/home/", "/root/", "/work/", "/Users/"] {
            if text.contains(outside) {
                missing.push(format!(
                    "{name}: names a path outside the repository ({outside}…)"
                ));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Whether `line` cites an issue of the tracker by number ("issue 22",
/// "issue #8"), which the repository does not hold.
fn cites_an_issue(line: &str) -> bool {
    let lower = line.to_lowercase();
    lower.match_indices("issue ").any(|(i, m)| {
        lower[i + m.len()..]
            .trim_start_matches('#')
            .starts_with(|c: char| c.is_ascii_digit())
    })
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.ends_with("target") {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs" || x == "sh") {
            out.push(p);
        }
    }
}

#[test]
fn no_doc_or_source_cites_an_issue_number() {
    let root = root();
    let mut files = documents();
    for dir in ["crates", "e2e", "hack"] {
        sources(&root.join(dir), &mut files);
    }
    let this = Path::new(file!()).file_name().unwrap_or_default();
    let mut cited = Vec::new();
    for f in files.iter().filter(|f| f.file_name() != Some(this)) {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if cites_an_issue(line) {
                let name = f.strip_prefix(&root).unwrap_or(f).display().to_string();
                cited.push(format!("{name}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(cited.is_empty(), "{}", cited.join("\n"));
}

#[test]
fn the_checks_see_what_they_look_for() {
    assert_eq!(
        links("see [a](docs/a.md#x) and [b](https://x)"),
        ["docs/a.md#x", "https://x"]
    );
    assert_eq!(
        repo_paths("run `hack/run.sh --x`, not `deploy/base/<binary>/` nor `ls`"),
        ["hack/run.sh"]
    );
    let dir = std::env::temp_dir().join(format!("docs-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a.md");
    std::fs::write(
        &file,
        "# Timeouts and slow clusters\n```\n# not a heading\n```\n",
    )
    .unwrap();
    assert_eq!(anchors(&file), ["timeouts-and-slow-clusters"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(cites_an_issue("// fixed in issue 22"));
    assert!(cites_an_issue("see Issue #8."));
    assert!(!cites_an_issue("an issue with 3 parts"));
}
