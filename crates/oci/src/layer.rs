//! Layers: a gzip-compressed tar of files, directories and symlinks, with the
//! two digests an image refers to it by.

use std::{collections::BTreeMap, fmt, fs, io::Write as _, path::Path};

use flate2::{Compression, GzBuilder};
use sha2::{Digest as _, Sha256};

use crate::Error;

/// A content address: `sha256:<64 hex digits>`, as manifests and registries
/// spell it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(String);

impl Digest {
    /// The sha256 digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(format!("sha256:{}", hex::encode(Sha256::digest(bytes))))
    }

    /// A digest as registries spell it, `sha256:` and 64 lowercase hex
    /// digits; anything else is refused (it is often user input).
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix("sha256:")?;
        let ok = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(s.to_owned()))
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The hex part alone (the file name of a blob in an OCI layout).
    pub fn hex(&self) -> &str {
        self.0.strip_prefix("sha256:").unwrap_or(&self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an [`Entry`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// A regular file with these bytes.
    File(Vec<u8>),
    /// A directory.
    Dir,
    /// A symbolic link to this target (kept as written, relative or absolute).
    Symlink(String),
}

/// One path in a layer. Owner and mode are stored as given; the
/// modification time is always the Unix epoch, so that the same entries
/// always make the same layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Where it lives in the image's file system, e.g. `usr/local/bin/x`
    /// (a leading `/` or `./` is dropped; `..` is refused).
    pub path: String,
    /// Permission bits, e.g. `0o755`; setuid, setgid and sticky bits are kept.
    pub mode: u32,
    /// Owning user id.
    pub uid: u64,
    /// Owning group id.
    pub gid: u64,
    /// File bytes, directory or symlink target.
    pub content: Content,
}

/// Collects entries and makes a [`Layer`] of them. Entries may be added in
/// any order: the tar lists them sorted by path, with every parent directory
/// before its children (missing parents are added as `0755` directories owned
/// by root). Adding a path twice keeps the last one.
#[derive(Clone, Debug, Default)]
pub struct LayerBuilder {
    entries: Vec<Entry>,
    level: Option<u32>,
}

impl LayerBuilder {
    /// An empty layer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A regular file owned by root.
    pub fn file(self, path: impl Into<String>, mode: u32, bytes: impl Into<Vec<u8>>) -> Self {
        self.entry(Entry {
            path: path.into(),
            mode,
            uid: 0,
            gid: 0,
            content: Content::File(bytes.into()),
        })
    }

    /// A directory owned by root.
    pub fn dir(self, path: impl Into<String>, mode: u32) -> Self {
        self.entry(Entry {
            path: path.into(),
            mode,
            uid: 0,
            gid: 0,
            content: Content::Dir,
        })
    }

    /// A symbolic link `path` → `target`, owned by root.
    pub fn symlink(self, path: impl Into<String>, target: impl Into<String>) -> Self {
        self.entry(Entry {
            path: path.into(),
            mode: 0o777,
            uid: 0,
            gid: 0,
            content: Content::Symlink(target.into()),
        })
    }

    /// Any entry, with its owner.
    pub fn entry(mut self, entry: Entry) -> Self {
        self.entries.push(entry);
        self
    }

    /// Everything under the directory `src` (read now), placed under `dest`
    /// in the layer (`""` or `/` for the root). Files keep their permission
    /// bits and become owned by root; symlinks are stored as links, never
    /// followed; hard links become copies. Devices, fifos and sockets are
    /// refused.
    pub fn tree(mut self, src: &Path, dest: &str) -> Result<Self, Error> {
        let mut stack = vec![(src.to_path_buf(), dest.trim_end_matches('/').to_owned())];
        while let Some((dir, prefix)) = stack.pop() {
            let read = fs::read_dir(&dir).map_err(|e| Error::read(&dir, e))?;
            for item in read {
                let item = item.map_err(|e| Error::read(&dir, e))?;
                let path = item.path();
                let name = item.file_name().into_string().map_err(|_| Error::Path {
                    path: path.display().to_string(),
                    reason: "the name is not UTF-8",
                })?;
                let inner = format!("{prefix}/{name}");
                let meta = fs::symlink_metadata(&path).map_err(|e| Error::read(&path, e))?;
                let mode = permission_bits(&meta);
                let kind = meta.file_type();
                let content = if kind.is_symlink() {
                    let target = fs::read_link(&path).map_err(|e| Error::read(&path, e))?;
                    Content::Symlink(target.to_str().map(str::to_owned).ok_or_else(|| {
                        Error::Path {
                            path: path.display().to_string(),
                            reason: "the link target is not UTF-8",
                        }
                    })?)
                } else if kind.is_dir() {
                    stack.push((path.clone(), inner.clone()));
                    Content::Dir
                } else if kind.is_file() {
                    Content::File(fs::read(&path).map_err(|e| Error::read(&path, e))?)
                } else {
                    return Err(Error::Path {
                        path: path.display().to_string(),
                        reason: "only files, directories and symlinks can go into a layer",
                    });
                };
                self.entries.push(Entry {
                    path: inner,
                    mode,
                    uid: 0,
                    gid: 0,
                    content,
                });
            }
        }
        Ok(self)
    }

    /// The gzip level, 0 (store) to 9 (smallest); 6 unless set. The level is
    /// part of the layer's digest.
    pub fn compression(mut self, level: u32) -> Self {
        self.level = Some(level.min(9));
        self
    }

    /// Writes the tar, compresses it and digests both.
    pub fn build(self) -> Result<Layer, Error> {
        let entries = normalize(self.entries)?;
        let tar = write_tar(&entries)?;
        let diff_id = Digest::of(&tar);
        // mtime 0 and "unknown" OS in the gzip header: nothing about the
        // machine or the time gets into the blob.
        let level = Compression::new(self.level.unwrap_or(6));
        let mut gz = GzBuilder::new()
            .mtime(0)
            .operating_system(255)
            .write(Vec::with_capacity(tar.len() / 2), level);
        gz.write_all(&tar).map_err(Error::Compress)?;
        let blob = gz.finish().map_err(Error::Compress)?;
        Ok(Layer {
            digest: Digest::of(&blob),
            diff_id,
            uncompressed_size: tar.len() as u64,
            entries: entries.len(),
            blob,
            annotations: BTreeMap::new(),
        })
    }
}

/// A layer ready to go into an image: `application/vnd.oci.image.layer.v1.tar+gzip`.
#[derive(Clone, PartialEq, Eq)]
pub struct Layer {
    blob: Vec<u8>,
    digest: Digest,
    diff_id: Digest,
    uncompressed_size: u64,
    entries: usize,
    annotations: BTreeMap<String, String>,
}

impl fmt::Debug for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layer")
            .field("digest", &self.digest)
            .field("diff_id", &self.diff_id)
            .field("size", &self.blob.len())
            .field("uncompressed_size", &self.uncompressed_size)
            .field("entries", &self.entries)
            .finish()
    }
}

impl Layer {
    /// Adds an annotation to the layer's descriptor in the manifest (a
    /// Crossplane package marks its `package.yaml` layer with
    /// `io.crossplane.xpkg: base`). A layer without annotations has none in
    /// the manifest, so existing digests do not change.
    pub fn annotate(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// The annotations of the layer's descriptor.
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }

    /// The gzip-compressed tar, as pushed and stored.
    pub fn blob(&self) -> &[u8] {
        &self.blob
    }

    /// sha256 of [`Layer::blob`]: how manifests and registries name it.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// sha256 of the uncompressed tar: how the image config names it
    /// (`rootfs.diff_ids`).
    pub fn diff_id(&self) -> &Digest {
        &self.diff_id
    }

    /// Bytes of the compressed blob.
    pub fn size(&self) -> u64 {
        self.blob.len() as u64
    }

    /// Bytes of the tar before compression.
    pub fn uncompressed_size(&self) -> u64 {
        self.uncompressed_size
    }

    /// How many entries (files, directories, links) the tar holds.
    pub fn entries(&self) -> usize {
        self.entries
    }
}

fn permission_bits(meta: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    meta.permissions().mode() & 0o7777
}

/// Cleans every path, drops duplicates (last wins), adds missing parent
/// directories and sorts by path.
fn normalize(entries: Vec<Entry>) -> Result<BTreeMap<String, Entry>, Error> {
    let mut out = BTreeMap::new();
    for mut entry in entries {
        let Some(path) = clean_path(&entry.path)? else {
            // The root itself: its owner and mode are the runtime's.
            if entry.content == Content::Dir {
                continue;
            }
            return Err(Error::Path {
                path: entry.path,
                reason: "only a directory can be the root",
            });
        };
        entry.path = path.clone();
        out.insert(path, entry);
    }
    let mut parents = Vec::new();
    for (path, entry) in &out {
        let mut at = path.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            match out.get(parent) {
                Some(Entry {
                    content: Content::Dir,
                    ..
                }) => {}
                Some(_) => {
                    return Err(Error::Path {
                        path: entry.path.clone(),
                        reason: "a parent of this path is a file or a symlink in the same layer",
                    });
                }
                None => parents.push(parent.to_owned()),
            }
            at = parent;
        }
    }
    for parent in parents {
        out.entry(parent.clone()).or_insert(Entry {
            path: parent,
            mode: 0o755,
            uid: 0,
            gid: 0,
            content: Content::Dir,
        });
    }
    Ok(out)
}

/// `path` without leading `/` or `./`, empty or `.` segments; `None` for the
/// root. Refuses `..`.
fn clean_path(path: &str) -> Result<Option<String>, Error> {
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(Error::Path {
                    path: path.to_owned(),
                    reason: "`..` is not allowed in a layer path",
                });
            }
            p => parts.push(p),
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

fn write_tar(entries: &BTreeMap<String, Entry>) -> Result<Vec<u8>, Error> {
    let mut tar = tar::Builder::new(Vec::new());
    for entry in entries.values() {
        let mut header = tar::Header::new_gnu();
        header.set_mode(entry.mode);
        header.set_uid(entry.uid);
        header.set_gid(entry.gid);
        header.set_mtime(0);
        let result = match &entry.content {
            Content::File(bytes) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                tar.append_data(&mut header, &entry.path, bytes.as_slice())
            }
            Content::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, format!("{}/", entry.path), std::io::empty())
            }
            Content::Symlink(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                tar.append_link(&mut header, &entry.path, target)
            }
        };
        result.map_err(|source| Error::Tar {
            path: entry.path.clone(),
            source,
        })?;
    }
    tar.into_inner().map_err(|source| Error::Tar {
        path: String::new(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// Path, type, mode, bytes and link target of each member.
    type Member = (String, tar::EntryType, u32, Vec<u8>, Option<String>);

    fn untar(layer: &Layer) -> Vec<Member> {
        let mut gz = flate2::read::GzDecoder::new(layer.blob());
        let mut raw = Vec::new();
        gz.read_to_end(&mut raw).unwrap();
        assert_eq!(
            Digest::of(&raw),
            *layer.diff_id(),
            "diff_id is the tar's sha256"
        );
        let mut archive = tar::Archive::new(raw.as_slice());
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                let kind = e.header().entry_type();
                let mode = e.header().mode().unwrap();
                assert_eq!(e.header().mtime().unwrap(), 0, "{path}: fixed mtime");
                let link = e
                    .link_name()
                    .unwrap()
                    .map(|l| l.to_string_lossy().into_owned());
                let mut bytes = Vec::new();
                e.read_to_end(&mut bytes).unwrap();
                (path, kind, mode, bytes, link)
            })
            .collect()
    }

    #[test]
    fn entries_come_out_sorted_with_their_parents_first() {
        let layer = LayerBuilder::new()
            .file("/usr/local/bin/tool", 0o755, b"#!".to_vec())
            .symlink("usr/bin/tool", "../local/bin/tool")
            .dir("tmp", 0o1777)
            .build()
            .unwrap();
        let listed: Vec<_> = untar(&layer)
            .into_iter()
            .map(|(p, k, m, _, l)| (p, k, m, l))
            .collect();
        use tar::EntryType::{Directory as D, Regular as F, Symlink as L};
        assert_eq!(
            listed,
            vec![
                ("tmp/".into(), D, 0o1777, None),
                ("usr/".into(), D, 0o755, None),
                ("usr/bin/".into(), D, 0o755, None),
                (
                    "usr/bin/tool".into(),
                    L,
                    0o777,
                    Some("../local/bin/tool".into())
                ),
                ("usr/local/".into(), D, 0o755, None),
                ("usr/local/bin/".into(), D, 0o755, None),
                ("usr/local/bin/tool".into(), F, 0o755, None),
            ]
        );
        assert_eq!(layer.entries(), 7);
    }

    #[test]
    fn the_same_entries_in_any_order_give_the_same_digests() {
        let a = LayerBuilder::new()
            .file("a/one", 0o644, b"1".to_vec())
            .file("b/two", 0o600, b"2".to_vec())
            .build()
            .unwrap();
        let b = LayerBuilder::new()
            .file("./b/two", 0o600, b"2".to_vec())
            .file("/a/one", 0o644, b"1".to_vec())
            .build()
            .unwrap();
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a.diff_id(), b.diff_id());
        let c = LayerBuilder::new()
            .file("a/one", 0o644, b"1".to_vec())
            .file("b/two", 0o644, b"2".to_vec())
            .build()
            .unwrap();
        assert_ne!(a.diff_id(), c.diff_id(), "the mode is part of the content");
    }

    #[test]
    fn a_path_added_twice_keeps_the_last() {
        let layer = LayerBuilder::new()
            .file("etc/motd", 0o644, b"old".to_vec())
            .file("etc/motd", 0o644, b"new".to_vec())
            .build()
            .unwrap();
        let files = untar(&layer);
        assert_eq!(files.len(), 2);
        assert_eq!(files[1].3, b"new");
    }

    #[test]
    fn bad_paths_are_refused_with_the_reason() {
        let err = LayerBuilder::new()
            .file("../etc/passwd", 0o644, Vec::new())
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("`..`"), "{err}");
        let err = LayerBuilder::new()
            .file("bin", 0o755, Vec::new())
            .file("bin/sh", 0o755, Vec::new())
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("bin/sh"), "{err}");
        let err = LayerBuilder::new()
            .file("/", 0o755, Vec::new())
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("root"), "{err}");
    }

    #[test]
    fn long_paths_and_link_targets_survive() {
        let long = format!("{}/file", "d".repeat(150));
        let target = format!("/{}", "t".repeat(200));
        let layer = LayerBuilder::new()
            .file(long.clone(), 0o644, b"x".to_vec())
            .symlink("link", target.clone())
            .build()
            .unwrap();
        let files = untar(&layer);
        assert!(files.iter().any(|f| f.0 == long && f.3 == b"x"));
        assert!(
            files
                .iter()
                .any(|f| f.0 == "link" && f.4.as_deref() == Some(&*target))
        );
    }

    #[test]
    fn a_directory_tree_keeps_modes_and_links() {
        use std::os::unix::fs::{PermissionsExt as _, symlink};
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("lib/x")).unwrap();
        fs::write(dir.path().join("lib/x/a.so"), b"elf").unwrap();
        fs::set_permissions(
            dir.path().join("lib/x/a.so"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        symlink("x/a.so", dir.path().join("lib/a.so")).unwrap();
        let layer = LayerBuilder::new()
            .tree(dir.path(), "/usr")
            .unwrap()
            .build()
            .unwrap();
        let files = untar(&layer);
        let names: Vec<_> = files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "usr/",
                "usr/lib/",
                "usr/lib/a.so",
                "usr/lib/x/",
                "usr/lib/x/a.so"
            ]
        );
        assert_eq!(files[2].4.as_deref(), Some("x/a.so"));
        assert_eq!((files[4].2, files[4].3.as_slice()), (0o755, &b"elf"[..]));
    }

    #[test]
    fn the_digest_is_sha256_of_the_blob() {
        let layer = LayerBuilder::new()
            .file("f", 0o644, b"x".to_vec())
            .build()
            .unwrap();
        assert_eq!(*layer.digest(), Digest::of(layer.blob()));
        assert_eq!(layer.size(), layer.blob().len() as u64);
        assert!(layer.digest().as_str().starts_with("sha256:"));
        assert_eq!(layer.digest().hex().len(), 64);
    }
}
