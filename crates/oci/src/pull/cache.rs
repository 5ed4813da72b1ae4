//! The pull-side cache: a package's `package.yaml` (and a stack's files)
//! by manifest digest, in a directory kept under a size bound (the least
//! recently used go first), so a digest is downloaded once. Only checked
//! packages are written; a cache that cannot be written only costs a pull
//! later.

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    time::SystemTime,
};

use base64::Engine as _;
use serde_json::Value;

use crate::Digest;

/// The first line of a cache file: the layer package.yaml came from.
const CACHE_LAYER_PREFIX: &str = "# layer: ";

/// The package cache: package.yaml (and stacks' files) by digest, in a
/// directory kept under `max` bytes.
#[derive(Clone, Debug)]
pub(crate) struct Cache {
    /// Where the files are (made when first written); layers are
    /// downloaded to temporary files here too.
    pub(crate) dir: PathBuf,
    max: u64,
}

impl Cache {
    /// A cache in `dir`, kept under `max` bytes.
    pub(crate) fn new(dir: PathBuf, max: u64) -> Self {
        Self { dir, max }
    }

    fn package_file(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{}.yaml", digest.hex()))
    }

    fn stack_file(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{}.stack.json", digest.hex()))
    }

    /// An anonymous temporary file in the cache directory (made if
    /// missing): the shipped pod's root filesystem is read-only, and its
    /// cache directory (an emptyDir) the one place it may write.
    pub(crate) fn temp_file(&self) -> std::io::Result<std::fs::File> {
        std::fs::create_dir_all(&self.dir)?;
        tempfile::tempfile_in(&self.dir)
    }

    /// The layer and package.yaml cached for `digest`, marking the file
    /// used (trimming removes the least recently used first).
    pub(crate) fn package(&self, digest: &Digest) -> Option<(String, Vec<u8>)> {
        read_cached(&self.package_file(digest), |bytes| {
            let text = std::str::from_utf8(bytes).ok()?;
            let (first, yaml) = text.split_once('\n')?;
            let layer = first.strip_prefix(CACHE_LAYER_PREFIX)?.trim().to_owned();
            Some((layer, yaml.as_bytes().to_vec()))
        })
    }

    /// The layer and `.registry/` files cached for `digest`, marking the
    /// file used.
    pub(crate) fn stack(&self, digest: &Digest) -> Option<(String, BTreeMap<String, Vec<u8>>)> {
        read_cached(&self.stack_file(digest), |bytes| {
            let json: Value = serde_json::from_slice(bytes).ok()?;
            let layer = json.get("layer")?.as_str()?.to_owned();
            let mut files = BTreeMap::new();
            for (k, v) in json.get("files")?.as_object()? {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str()?)
                    .ok()?;
                files.insert(k.clone(), bytes);
            }
            Some((layer, files))
        })
    }

    /// Writes a checked package.yaml to the cache.
    pub(crate) fn store_package(&self, digest: &Digest, layer: &str, yaml: &[u8]) {
        self.write(
            &self.package_file(digest),
            &[format!("{CACHE_LAYER_PREFIX}{layer}\n").as_bytes(), yaml],
        );
    }

    pub(crate) fn store_stack(
        &self,
        digest: &Digest,
        layer: &str,
        files: &BTreeMap<String, Vec<u8>>,
    ) {
        let encoded: serde_json::Map<String, Value> = files
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
                )
            })
            .collect();
        let json = serde_json::json!({"layer": layer, "files": encoded});
        self.write(&self.stack_file(digest), &[json.to_string().as_bytes()]);
    }

    /// Writes `parts` as the cache file `path` (atomically: a temporary
    /// file renamed) and trims the cache. A cache that cannot be written
    /// only costs a pull later.
    fn write(&self, path: &Path, parts: &[&[u8]]) {
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            let mut tmp = tempfile::Builder::new()
                .prefix(".tmp-")
                .tempfile_in(&self.dir)?;
            for part in parts {
                tmp.write_all(part)?;
            }
            tmp.persist(path).map_err(|e| e.error)?;
            Ok(())
        };
        if write().is_ok() {
            trim(&self.dir, self.max);
        }
    }
}

/// The largest cache file read: a package.yaml or a stack's files (base64)
/// within the default bounds, with room to spare.
const MAX_CACHE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// What `parse` reads from the cache file `path`, marking the file used
/// when it holds something (trimming removes the least recently used
/// first).
fn read_cached<T>(path: &Path, parse: impl FnOnce(&[u8]) -> Option<T>) -> Option<T> {
    if std::fs::metadata(path).ok()?.len() > MAX_CACHE_FILE_BYTES {
        return None;
    }
    let found = parse(&std::fs::read(path).ok()?)?;
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
    Some(found)
}

/// Deletes the least recently modified files of `dir` (not the temporary
/// files of writes under way) until it holds at most `max` bytes.
fn trim(dir: &Path, max: u64) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = read
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with(".tmp"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            m.is_file().then(|| {
                (
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    m.len(),
                    e.path(),
                )
            })
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= max {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    #[test]
    fn the_cache_keeps_the_newest_files_under_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        for (i, name) in ["a.yaml", "b.yaml", "c.yaml", ".tmp-x"].iter().enumerate() {
            std::fs::write(dir.path().join(name), vec![0u8; 100]).unwrap();
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + i as u64);
            std::fs::File::options()
                .write(true)
                .open(dir.path().join(name))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        trim(dir.path(), 250);
        let left = |n: &str| dir.path().join(n).exists();
        assert!(!left("a.yaml"));
        assert!(left("b.yaml") && left("c.yaml"));
        assert!(left(".tmp-x"), "a write under way is not trimmed");
        trim(dir.path(), 0);
        assert!(!left("b.yaml") && !left("c.yaml"));
    }
}
