//! A base layer made of Debian packages, the way distroless/cc-debian12 is
//! made: the packages' files unpacked (`dpkg-deb -x`, no maintainer scripts,
//! no package manager in the image), plus the few files those scripts or a
//! distribution's base would have written.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use crate::{Entry, Error, Layer, LayerBuilder, layer::Content};

/// What a dynamically linked Rust binary needs: glibc, libgcc's unwinder,
/// and the CA certificates for TLS to public endpoints.
pub const BASE_PACKAGES: [&str; 3] = ["libc6", "libgcc-s1", "ca-certificates"];

/// The user and group id images run as when not root ("nonroot" in
/// distroless).
pub const NONROOT: u64 = 65532;

/// Where downloaded packages are kept between builds:
/// `${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}/debs` (outside the
/// repository, beside the upstream binaries `hack/build-binaries.sh` caches).
pub fn default_cache() -> Result<PathBuf, Error> {
    let root = match std::env::var_os("CROSSPLANE_RS_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".cache/crossplane-rs"),
            None => {
                return Err(Error::Debian {
                    what: "choosing a cache directory for Debian packages".into(),
                    detail: "neither CROSSPLANE_RS_CACHE nor HOME is set".into(),
                });
            }
        },
    };
    Ok(root.join("debs"))
}

/// The `.deb` of each package in `cache`, downloading with `apt-get
/// download` (the version apt would install on this machine, for its
/// architecture) those not there yet. When apt does not know a package (no
/// package lists yet) it runs `apt-get update` once and tries again. Returns
/// the files in the order of `packages`.
pub fn download(packages: &[&str], cache: &Path) -> Result<Vec<PathBuf>, Error> {
    fs::create_dir_all(cache).map_err(|e| Error::Debian {
        what: format!("creating {}", cache.display()),
        detail: e.to_string(),
    })?;
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| cached(cache, p).is_none())
        .collect();
    if !missing.is_empty() {
        // Into a fresh directory first: a download that stops half way never
        // leaves a partial .deb where the next build would take it.
        let tmp = tempfile::tempdir_in(cache).map_err(|e| Error::Debian {
            what: format!("creating a directory in {}", cache.display()),
            detail: e.to_string(),
        })?;
        if let Err(first) = apt_get_download(&missing, tmp.path()) {
            apt(&["update"], tmp.path()).map_err(|update| Error::Debian {
                what: format!("apt-get download {}", missing.join(" ")),
                detail: format!("{first}; then apt-get update failed too: {update}"),
            })?;
            apt_get_download(&missing, tmp.path()).map_err(|detail| Error::Debian {
                what: format!("apt-get download {}", missing.join(" ")),
                detail,
            })?;
        }
        for entry in fs::read_dir(tmp.path()).map_err(|e| Error::read(tmp.path(), e))? {
            let entry = entry.map_err(|e| Error::read(tmp.path(), e))?;
            let to = cache.join(entry.file_name());
            fs::rename(entry.path(), &to).map_err(|e| Error::Debian {
                what: format!("moving {} into the cache", to.display()),
                detail: e.to_string(),
            })?;
        }
    }
    packages
        .iter()
        .map(|p| {
            cached(cache, p).ok_or_else(|| Error::Debian {
                what: format!("apt-get download {p}"),
                detail: format!("no {p}_*.deb in {} afterwards", cache.display()),
            })
        })
        .collect()
}

/// `<package>_<version>_<arch>.deb` in `cache`, the newest name if several.
fn cached(cache: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    let mut found: Vec<PathBuf> = fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .collect();
    found.sort();
    found.pop()
}

fn apt_get_download(packages: &[&str], dir: &Path) -> Result<(), String> {
    let mut args = vec!["download"];
    args.extend(packages);
    apt(&args, dir)
}

fn apt(args: &[&str], dir: &Path) -> Result<(), String> {
    let out = Command::new("apt-get")
        .args(args)
        .current_dir(dir)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("cannot run apt-get (a Debian-based machine is needed): {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("W:")).collect();
    Err(format!("{} ({})", lines.join("; ").trim(), out.status))
}

/// The base layer: the files of `debs` (unpacked with `dpkg-deb -x`), and
/// - `/etc/ssl/certs/ca-certificates.crt`, every certificate the
///   ca-certificates package ships, concatenated (what its maintainer script
///   would have written);
/// - `/etc/passwd` and `/etc/group` with root, nobody and nonroot (65532),
///   `/home/nonroot` owned by nonroot, and `/tmp` (mode 1777).
pub fn base_layer(debs: &[PathBuf]) -> Result<Layer, Error> {
    let root = tempfile::tempdir().map_err(|e| Error::Debian {
        what: "creating a directory to unpack packages in".into(),
        detail: e.to_string(),
    })?;
    for deb in debs {
        let out = Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(root.path())
            .output()
            .map_err(|e| Error::Debian {
                what: format!("dpkg-deb -x {}", deb.display()),
                detail: format!("cannot run dpkg-deb: {e}"),
            })?;
        if !out.status.success() {
            return Err(Error::Debian {
                what: format!("dpkg-deb -x {}", deb.display()),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
    }
    let bundle = ca_bundle(&root.path().join("usr/share/ca-certificates"))?;
    let mut layer = LayerBuilder::new()
        .tree(root.path(), "/")?
        .file("etc/passwd", 0o644, PASSWD)
        .file("etc/group", 0o644, GROUP)
        .dir("tmp", 0o1777)
        .entry(Entry {
            path: "home/nonroot".into(),
            mode: 0o700,
            uid: NONROOT,
            gid: NONROOT,
            content: Content::Dir,
        });
    if !bundle.is_empty() {
        layer = layer.file("etc/ssl/certs/ca-certificates.crt", 0o644, bundle);
    }
    layer.build()
}

const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
";

const GROUP: &str = "root:x:0:
nobody:x:65534:
nonroot:x:65532:
";

/// Every `*.crt` under `dir`, sorted by path, concatenated.
fn ca_bundle(dir: &Path) -> Result<Vec<u8>, Error> {
    let mut certs = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(read) = fs::read_dir(&d) else { continue };
        for entry in read {
            let path = entry.map_err(|e| Error::read(&d, e))?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "crt") {
                certs.push(path);
            }
        }
    }
    certs.sort();
    let mut bundle = Vec::new();
    for cert in certs {
        let mut pem = fs::read(&cert).map_err(|e| Error::read(&cert, e))?;
        if !pem.ends_with(b"\n") {
            pem.push(b'\n');
        }
        bundle.extend(pem);
    }
    Ok(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_concatenates_certificates_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("mozilla")).unwrap();
        fs::write(dir.path().join("mozilla/B.crt"), "b").unwrap();
        fs::write(dir.path().join("mozilla/A.crt"), "a\n").unwrap();
        fs::write(dir.path().join("README"), "not a cert").unwrap();
        assert_eq!(ca_bundle(dir.path()).unwrap(), b"a\nb\n");
        assert!(ca_bundle(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn a_cached_package_is_found_by_name_not_by_prefix() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("libc6_2.36-9_amd64.deb"), "").unwrap();
        fs::write(dir.path().join("libc6-dev_2.36-9_amd64.deb"), "").unwrap();
        let found = cached(dir.path(), "libc6").unwrap();
        assert!(found.ends_with("libc6_2.36-9_amd64.deb"));
        assert!(cached(dir.path(), "libgcc-s1").is_none());
    }
}
