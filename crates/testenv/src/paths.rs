//! Where things are: the repository, the upstream binaries, this
//! workspace's binaries; and fresh names for what tests create.

use std::path::{Path, PathBuf};

/// The root of the repository.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// Where the upstream binaries are: `$CROSSPLANE_RS_BIN`, else
/// `${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}/bin`.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("CROSSPLANE_RS_BIN") {
        return Ok(dir.into());
    }
    let cache = match std::env::var("CROSSPLANE_RS_CACHE") {
        Ok(c) => PathBuf::from(c),
        Err(_) => {
            let home = std::env::var("HOME")
                .map_err(|_| anyhow::anyhow!("neither CROSSPLANE_RS_BIN nor HOME is set"))?;
            PathBuf::from(home).join(".cache/crossplane-rs")
        }
    };
    Ok(cache.join("bin"))
}

/// The path of one of this workspace's binaries (built by `cargo build
/// --bins`, which the README's test command runs first).
pub fn workspace_binary(name: &str) -> PathBuf {
    // Next to the running test: a test binary lives in
    // target/<profile>/deps/, the workspace binaries in target/<profile>/.
    // This holds wherever the target directory was built or copied to; a
    // path fixed at compile time would run another checkout's binaries.
    if let Some(beside) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join(name)))
        .filter(|p| p.exists())
    {
        return beside;
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target"));
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    target.join(profile).join(name)
}

/// A fresh namespace name for a test: `<prefix>-<random>`.
pub fn unique_name(prefix: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{prefix}-{:x}{n:x}",
        (nanos ^ std::process::id()) & 0xffffff
    )
}
