//! Building a stack package: the files of a directory's `.registry/`,
//! checked as a puller will read them, into a one-layer image.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use super::{OWNS_ANNOTATION, REGISTRY_DIR, Stack, parse};
use crate::{Config, Error, Image, LayerBuilder, Limits, limits::over, xpkg::BASE_ANNOTATION};

/// The files of `dir/.registry`, by layer path.
pub fn read_dir(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let root = dir.join(REGISTRY_DIR);
    let mut files = BTreeMap::new();
    let mut pending: Vec<PathBuf> = vec![root.clone()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::read(&d, e))? {
            let entry = entry.map_err(|e| Error::read(&d, e))?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::read(&path, e))?;
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                let bound = Limits::default().file_bytes;
                if meta.len() > bound {
                    return Err(Error::invalid(
                        &dir.display().to_string(),
                        "-",
                        over(
                            &format!("{} ({} bytes)", path.display(), meta.len()),
                            "bytes per file read into memory",
                            bound,
                        ),
                    ));
                }
                let rel = path.strip_prefix(dir).map_err(|_| Error::Path {
                    path: path.display().to_string(),
                    reason: "is outside the stack directory",
                })?;
                let rel = rel.to_string_lossy().replace('\\', "/");
                files.insert(
                    rel,
                    std::fs::read(&path).map_err(|e| Error::read(&path, e))?,
                );
            }
        }
    }
    Ok(files)
}

/// Builds a stack package from `dir` (which holds `.registry/`), checked
/// as a puller will read it: one layer, annotated `io.crossplane.xpkg:
/// base` and with the CRDs it owns ([`OWNS_ANNOTATION`]). The same files
/// give the same digest.
pub fn build(dir: &Path) -> Result<(Image, Stack), Error> {
    let files = read_dir(dir)?;
    let stack = parse(&dir.display().to_string(), REGISTRY_DIR, &files, None)?;
    let mut layer = LayerBuilder::new();
    for (path, bytes) in &files {
        layer = layer.file(path.clone(), 0o644, bytes.clone());
    }
    let layer = layer
        .build()?
        .annotate(BASE_ANNOTATION.0, BASE_ANNOTATION.1)
        .annotate(OWNS_ANNOTATION, stack.owns().join(","));
    let image = Image::new(Config {
        os: "linux".to_owned(),
        architecture: "amd64".to_owned(),
        ..Config::default()
    })
    .layer(layer);
    Ok((image, stack))
}
