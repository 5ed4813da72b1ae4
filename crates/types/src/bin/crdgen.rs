//! Writes every CRD to crds/ (one file per CRD), or with --check fails when
//! crds/ differs from what the types generate.

use std::path::PathBuf;

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut check = false;
    let mut dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds"));
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--out" => dir = args.next().context("--out needs a directory")?.into(),
            other => bail!("unknown argument {other}; usage: crdgen [--check] [--out DIR]"),
        }
    }
    let mut stale = Vec::new();
    let mut expected = std::collections::BTreeSet::new();
    let crds = types::crds::all()?;
    let mut files = vec![(
        "kustomization.yaml".to_owned(),
        types::crds::kustomization(&crds),
    )];
    for crd in &crds {
        files.push((types::crds::file_name(crd), types::crds::to_yaml(crd)?));
    }
    for (file, yaml) in files {
        let path = dir.join(file);
        expected.insert(path.clone());
        if check {
            let current = std::fs::read_to_string(&path).unwrap_or_default();
            if current != yaml {
                stale.push(path.display().to_string());
            }
        } else {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if check {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "yaml") && !expected.contains(&path) {
                stale.push(format!("{} (no longer generated)", path.display()));
            }
        }
        if !stale.is_empty() {
            bail!(
                "crds/ is out of date with the types; run `cargo run -p types --bin crdgen` and commit:\n  {}",
                stale.join("\n  ")
            );
        }
    }
    Ok(())
}
