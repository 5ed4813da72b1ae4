//! The pull-side cache: the files a package format reads from a package
//! layer, or what the format keeps of them once checked (a package's
//! objects as JSON, a stack's `.registry/` files: `Format::kept`), by
//! manifest digest and format, in a directory kept under a size bound (the
//! least recently used go first), so a digest is downloaded once. Only
//! checked packages are written; a cache that cannot be written only costs
//! a pull later.
//!
//! One file format for every package format: a JSON header line (the
//! format version, the layer, each file's path and length), then the
//! files' bytes in that order. A file whose header or length does not
//! match is not read; files of earlier formats are never read under the
//! current names, and are deleted at the next write.

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    time::SystemTime,
};

use serde::{Deserialize, Serialize};

use crate::Digest;

/// The version in every header this code writes and reads.
const FORMAT: u32 = 2;

/// The name every cache file of [`FORMAT`] ends with.
const SUFFIX: &str = ".cache";

/// What the files of one cache entry are.
#[derive(Debug, Deserialize, Serialize)]
struct Header {
    format: u32,
    layer: String,
    /// Each file's path and length, in the order their bytes follow.
    files: Vec<(String, u64)>,
}

/// What a cache entry holds: the layer the files came from, and the files.
pub(crate) type Entry = (String, BTreeMap<String, Vec<u8>>);

/// The package cache: files by digest and format, in a directory kept
/// under `max` bytes.
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

    fn file(&self, format: &str, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{}.{format}{SUFFIX}", digest.hex()))
    }

    /// An anonymous temporary file in the cache directory (made if
    /// missing): the shipped pod's root filesystem is read-only, and its
    /// cache directory (an emptyDir) the one place it may write.
    pub(crate) fn temp_file(&self) -> std::io::Result<std::fs::File> {
        std::fs::create_dir_all(&self.dir)?;
        tempfile::tempfile_in(&self.dir)
    }

    /// How many bytes the entry for `digest` in `format` takes, if there
    /// is one (nothing is read).
    pub(crate) fn size(&self, format: &str, digest: &Digest) -> Option<u64> {
        std::fs::metadata(self.file(format, digest))
            .ok()
            .map(|m| m.len())
    }

    /// The layer and files cached for `digest` in `format`, marking the
    /// file used (trimming removes the least recently used first).
    pub(crate) fn get(&self, format: &str, digest: &Digest) -> Option<Entry> {
        let path = self.file(format, digest);
        if std::fs::metadata(&path).ok()?.len() > MAX_CACHE_FILE_BYTES {
            return None;
        }
        let found = decode(&std::fs::read(&path).ok()?)?;
        if let Ok(f) = std::fs::File::options().append(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(found)
    }

    /// Writes checked files to the cache (atomically: a temporary file
    /// renamed) and trims it.
    pub(crate) fn store(
        &self,
        format: &str,
        digest: &Digest,
        layer: &str,
        files: &BTreeMap<String, Vec<u8>>,
    ) {
        let Some(bytes) = encode(layer, files) else {
            return;
        };
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            let mut tmp = tempfile::Builder::new()
                .prefix(".tmp-")
                .tempfile_in(&self.dir)?;
            tmp.write_all(&bytes)?;
            tmp.persist(self.file(format, digest))
                .map_err(|e| e.error)?;
            Ok(())
        };
        if write().is_ok() {
            trim(&self.dir, self.max);
        }
    }
}

/// The largest cache file read: a package's files within the default
/// bounds, with room to spare.
const MAX_CACHE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// A cache file: the header line, then the files' bytes.
fn encode(layer: &str, files: &BTreeMap<String, Vec<u8>>) -> Option<Vec<u8>> {
    let header = Header {
        format: FORMAT,
        layer: layer.to_owned(),
        files: files
            .iter()
            .map(|(p, b)| (p.clone(), b.len() as u64))
            .collect(),
    };
    let mut out = serde_json::to_vec(&header).ok()?;
    out.push(b'\n');
    for bytes in files.values() {
        out.extend_from_slice(bytes);
    }
    Some(out)
}

/// What a cache file holds, when it is of the current format and whole.
fn decode(bytes: &[u8]) -> Option<Entry> {
    let newline = bytes.iter().position(|b| *b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..newline]).ok()?;
    if header.format != FORMAT {
        return None;
    }
    let mut rest = &bytes[newline + 1..];
    let mut files = BTreeMap::new();
    for (path, len) in header.files {
        let len = usize::try_from(len).ok()?;
        if len > rest.len() {
            return None;
        }
        let (file, after) = rest.split_at(len);
        files.insert(path, file.to_vec());
        rest = after;
    }
    rest.is_empty().then_some((header.layer, files))
}

/// Deletes the files of earlier formats, then the least recently modified
/// files of `dir` (not the temporary files of writes under way) until it
/// holds at most `max` bytes.
fn trim(dir: &Path, max: u64) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    for e in read.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(m) = e.metadata() else { continue };
        if name.starts_with(".tmp") || !m.is_file() {
            continue;
        }
        if !name.ends_with(SUFFIX) {
            let _ = std::fs::remove_file(e.path());
            continue;
        }
        files.push((
            m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            m.len(),
            e.path(),
        ));
    }
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

    fn files(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(p, b)| ((*p).to_owned(), b.to_vec()))
            .collect()
    }

    #[test]
    fn the_cache_keeps_the_newest_files_under_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        for (i, name) in ["a.cache", "b.cache", "c.cache", ".tmp-x"]
            .iter()
            .enumerate()
        {
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
        assert!(!left("a.cache"));
        assert!(left("b.cache") && left("c.cache"));
        assert!(left(".tmp-x"), "a write under way is not trimmed");
        trim(dir.path(), 0);
        assert!(!left("b.cache") && !left("c.cache"));
    }

    #[test]
    fn every_format_is_kept_in_one_file_format_and_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_path_buf(), 1 << 20);
        let digest = Digest::of(b"manifest");
        let package = files(&[("package.yaml", b"kind: Provider\n")]);
        let stack = files(&[
            (".registry/app.yaml", b"title: x\n"),
            (".registry/icon.png", &[0, 10, 255, b'\n']),
            (".registry/empty", b""),
        ]);
        cache.store("package", &digest, "sha256:layer", &package);
        cache.store("stack", &digest, "all layers", &stack);
        assert_eq!(
            cache.get("package", &digest),
            Some(("sha256:layer".to_owned(), package))
        );
        assert_eq!(
            cache.get("stack", &digest),
            Some(("all layers".to_owned(), stack))
        );
        assert_eq!(cache.get("other", &digest), None);
    }

    #[test]
    fn an_entry_of_an_earlier_format_or_cut_short_is_never_read_and_old_files_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_path_buf(), 1 << 20);
        let digest = Digest::of(b"manifest");
        // The files earlier versions wrote: package.yaml after a layer
        // line, a stack's files as base64 JSON.
        let old_package = dir.path().join(format!("{}.yaml", digest.hex()));
        let old_stack = dir.path().join(format!("{}.stack.json", digest.hex()));
        std::fs::write(&old_package, "# layer: sha256:old\nkind: Provider\n").unwrap();
        std::fs::write(&old_stack, r#"{"layer":"x","files":{}}"#).unwrap();
        assert_eq!(cache.get("package", &digest), None);
        assert_eq!(cache.get("stack", &digest), None);
        // A current file cut short, or with bytes past its files, or of
        // another version, is a miss, not a misreading.
        let whole = encode("sha256:layer", &files(&[("package.yaml", b"kind: X\n")])).unwrap();
        let path = cache.file("package", &digest);
        for bad in [
            whole[..whole.len() - 1].to_vec(),
            [whole.as_slice(), b"more"].concat(),
            String::from_utf8(whole.clone())
                .unwrap()
                .replacen("\"format\":2", "\"format\":3", 1)
                .into_bytes(),
        ] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(cache.get("package", &digest), None);
        }
        // The next write drops the earlier format's files.
        cache.store("stack", &digest, "l", &files(&[]));
        assert!(!old_package.exists() && !old_stack.exists());
        assert_eq!(
            cache.get("stack", &digest),
            Some(("l".to_owned(), files(&[])))
        );
    }
}
