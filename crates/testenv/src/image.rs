//! One-layer OCI image archives (`ctr images import` reads them) made from a
//! static binary, for the test node: its sandbox ("pause") image and small
//! test programs. Nothing is pulled, nothing needs a Docker daemon.
//!
//! This is the quickest writer that works (an uncompressed layer, digests by
//! `sha256sum`); the project's OCI crate is the place for image writing, and
//! these functions should move onto it once it writes archives.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use serde_json::json;

/// The name containerd's `sandbox_image` gives the pause image on the test
/// node (imported, never pulled).
pub const PAUSE_IMAGE: &str = "localhost/crossplane-rs/pause:testenv";

/// Writes the test node's sandbox image archive into `dir` (from the `pause`
/// program `hack/build-binaries.sh` builds) and returns its path.
pub fn pause_archive(dir: &Path) -> anyhow::Result<PathBuf> {
    let pause = crate::bin_dir()?.join("pause");
    binary_image_archive(dir, PAUSE_IMAGE, &pause)
}

/// Writes an image archive into `dir` whose only file is `binary` at
/// `/<file name>`, run as the entrypoint, and returns the archive's path.
/// `reference` (e.g. `localhost/test/app:1`) is the name `ctr images import`
/// gives it; pods use it with `imagePullPolicy: Never` or `IfNotPresent`.
pub fn binary_image_archive(dir: &Path, reference: &str, binary: &Path) -> anyhow::Result<PathBuf> {
    let name = binary
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no file name", binary.display()))?
        .to_owned();
    let program = fs::read(binary).with_context(|| {
        format!(
            "reading {} (run hack/build-binaries.sh, which builds it)",
            binary.display()
        )
    })?;
    let mut layer = Tar::default();
    for d in ["dev", "etc", "proc", "sys", "tmp", "var", "var/run"] {
        layer.dir(d, if d == "tmp" { 0o1777 } else { 0o755 });
    }
    layer.file("etc/passwd", 0o644, b"root:x:0:0:root:/:/nonexistent\n");
    layer.file(&name, 0o755, &program);
    let layer = layer.finish();

    let work = dir.join(format!(".image-{}", sanitize(reference)));
    fs::create_dir_all(&work)?;
    let layer_digest = sha256(&work, &layer)?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = serde_json::to_vec(&json!({
        "architecture": arch,
        "os": "linux",
        "config": {"Entrypoint": [format!("/{name}")], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    }))?;
    let config_digest = sha256(&work, &config)?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len(),
        }],
    }))?;
    let manifest_digest = sha256(&work, &manifest)?;
    let tag = reference
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .map_or("latest", |(_, t)| t);
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))?;
    let mut archive = Tar::default();
    archive.file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#);
    archive.file("index.json", 0o644, &index);
    archive.dir("blobs", 0o755);
    archive.dir("blobs/sha256", 0o755);
    for (digest, blob) in [
        (&layer_digest, &layer),
        (&config_digest, &config),
        (&manifest_digest, &manifest),
    ] {
        archive.file(&format!("blobs/sha256/{digest}"), 0o644, blob);
    }
    let _ = fs::remove_dir_all(&work);
    let path = dir.join(format!("{}.tar", sanitize(reference)));
    fs::write(&path, archive.finish())?;
    Ok(path)
}

fn sanitize(reference: &str) -> String {
    reference
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The hex SHA-256 of `data` (by `sha256sum`, to add no dependency).
fn sha256(work: &Path, data: &[u8]) -> anyhow::Result<String> {
    let file = work.join("blob");
    fs::write(&file, data)?;
    let out = Command::new("sha256sum")
        .arg(&file)
        .output()
        .context("running sha256sum (coreutils)")?;
    if !out.status.success() {
        bail!("sha256sum failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    match text.split_whitespace().next() {
        Some(hex) if hex.len() == 64 => Ok(hex.to_owned()),
        _ => bail!("sha256sum printed {text:?}"),
    }
}

/// A minimal ustar writer: regular files and directories, owned by root,
/// time 0, so the same input gives the same bytes.
#[derive(Default)]
struct Tar(Vec<u8>);

impl Tar {
    fn dir(&mut self, path: &str, mode: u32) {
        self.entry(&format!("{path}/"), mode, b'5', &[]);
    }

    fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.entry(path, mode, b'0', data);
    }

    fn entry(&mut self, path: &str, mode: u32, kind: u8, data: &[u8]) {
        let mut h = [0u8; 512];
        let name = path.as_bytes();
        // Paths here are short and fixed; ustar's name field holds 100 bytes.
        let n = name.len().min(100);
        h[..n].copy_from_slice(&name[..n]);
        octal(&mut h[100..108], u64::from(mode));
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[124..136], data.len() as u64);
        octal(&mut h[136..148], 0);
        h[148..156].fill(b' ');
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[265..269].copy_from_slice(b"root");
        h[297..301].copy_from_slice(b"root");
        let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
        octal(&mut h[148..155], sum);
        self.0.extend_from_slice(&h);
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.extend(std::iter::repeat_n(0u8, pad));
    }

    fn finish(mut self) -> Vec<u8> {
        self.0.extend(std::iter::repeat_n(0u8, 1024));
        self.0
    }
}

/// Writes `value` as zero-padded octal filling `field` but its last byte (NUL).
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    let bytes = text.as_bytes();
    let start = bytes.len().saturating_sub(width);
    field[..width].copy_from_slice(&bytes[start..]);
    field[width] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_lists_with_gnu_tar() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Tar::default();
        t.dir("etc", 0o755);
        t.file("etc/passwd", 0o644, b"root:x:0:0::/:/x\n");
        let path = dir.path().join("t.tar");
        fs::write(&path, t.finish()).unwrap();
        let out = Command::new("tar").arg("tvf").arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(listing.contains("etc/passwd"), "{listing}");
        assert!(
            listing.contains("-rw-r--r-- root/root        17 1970-01-01 00:00 etc/passwd"),
            "{listing}"
        );
    }
}
