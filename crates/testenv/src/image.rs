//! One-layer image archives (`ctr images import` reads them) made from a
//! static binary with crates/oci, for the test node: its sandbox ("pause")
//! image and small test programs. Nothing is pulled, nothing needs a Docker
//! daemon.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The name containerd's `sandbox_image` gives the pause image on the test
/// node (imported, never pulled).
pub const PAUSE_IMAGE: &str = "localhost/crossplane-rs/pause:testenv";

/// Writes the test node's sandbox image archive into `dir` (from the `pause`
/// program `hack/build-binaries.sh` builds) and returns its path.
pub fn pause_archive(dir: &Path) -> anyhow::Result<PathBuf> {
    let pause = crate::paths::bin_dir()?.join("pause");
    binary_image_archive(dir, PAUSE_IMAGE, &pause)
}

/// Writes an image archive into `dir` whose only program is `binary` at
/// `/<file name>`, run as the entrypoint, and returns the archive's path.
/// `reference` (e.g. `localhost/test/app:1`) is the name `ctr images import`
/// gives it; pods use it with `imagePullPolicy: Never` or `IfNotPresent`.
pub fn binary_image_archive(dir: &Path, reference: &str, binary: &Path) -> anyhow::Result<PathBuf> {
    let image = binary_image(binary)?;
    let file: String = reference
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let path = dir.join(format!("{file}.tar"));
    image.write_archive(&path, reference)?;
    Ok(path)
}

/// An image whose only program is `binary` at `/<file name>`, run as the
/// entrypoint (to write as an archive, or to push to a registry).
pub fn binary_image(binary: &Path) -> anyhow::Result<oci::Image> {
    let name = binary
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no file name", binary.display()))?
        .to_owned();
    let program = std::fs::read(binary).with_context(|| {
        format!(
            "reading {} (run hack/build-binaries.sh, which builds it)",
            binary.display()
        )
    })?;
    let mut layer = oci::LayerBuilder::new();
    for d in ["dev", "etc", "proc", "sys", "tmp", "var", "var/run"] {
        layer = layer.dir(d, if d == "tmp" { 0o1777 } else { 0o755 });
    }
    let layer = layer
        .file(
            "etc/passwd",
            0o644,
            b"root:x:0:0:root:/:/nonexistent\n".to_vec(),
        )
        .file(name.as_str(), 0o755, program)
        .build()?;
    Ok(oci::Image::new(oci::Config {
        entrypoint: vec![format!("/{name}")],
        workdir: Some("/".to_owned()),
        ..oci::Config::default()
    })
    .layer(layer))
}
