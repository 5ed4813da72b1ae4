//! Packages as the world builds them: upstream's `crossplane` CLI (`crank`,
//! built by hack/build-binaries.sh from the Go module proxy) packs a real
//! upstream provider (crossplane-contrib/provider-kubernetes, built the
//! same way) from its own, unmodified package directory, with its runtime
//! image embedded (`xpkg build --embed-runtime-image-tarball`: the package
//! image is the runtime), and pushes it (`xpkg push`) to the test registry.

use std::{path::PathBuf, process::Command};

/// The provider-kubernetes releases the tests use, oldest first
/// (hack/versions.env, `PROVIDER_KUBERNETES_VERSIONS`).
pub fn provider_kubernetes_versions() -> Vec<String> {
    let env = std::fs::read_to_string(testenv::repo_root().join("hack/versions.env"))
        .expect("hack/versions.env");
    env.lines()
        .find_map(|l| l.strip_prefix("PROVIDER_KUBERNETES_VERSIONS="))
        .expect("PROVIDER_KUBERNETES_VERSIONS in hack/versions.env")
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}

fn bin(name: &str) -> PathBuf {
    testenv::bin_dir()
        .expect("CROSSPLANE_RS_BIN (hack/build-binaries.sh)")
        .join(name)
}

/// The provider's runtime image as its own Dockerfile makes it: the static
/// binary on a base with CA certificates, run as a non-root user. Written
/// as an image archive `crank` can embed.
fn runtime_archive(version: &str, work: &std::path::Path) -> PathBuf {
    let cache = oci::debian::default_cache().expect("the .deb cache");
    let debs =
        oci::debian::download(&oci::debian::BASE_PACKAGES, &cache).expect("the base packages");
    let base = oci::debian::base_layer(&debs).expect("the base layer");
    let program = std::fs::read(bin(&format!("provider-kubernetes-{version}")))
        .unwrap_or_else(|e| panic!("provider-kubernetes {version} is built: {e}"));
    let layer = oci::LayerBuilder::new()
        .file(
            "usr/local/bin/crossplane-kubernetes-provider",
            0o755,
            program,
        )
        .build()
        .unwrap();
    let image = oci::Image::new(oci::Config {
        entrypoint: vec!["/usr/local/bin/crossplane-kubernetes-provider".to_owned()],
        user: Some("65532".to_owned()),
        os: "linux".to_owned(),
        architecture: "amd64".to_owned(),
        ..oci::Config::default()
    })
    .layer(base)
    .layer(layer);
    let path = work.join(format!("provider-kubernetes-{version}-runtime.tar"));
    image
        .write_archive(
            &path,
            &format!("crossplane-contrib/provider-kubernetes:{version}"),
        )
        .expect("the runtime image archive");
    path
}

fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed: {text}");
    text
}

/// Builds provider-kubernetes `version` with upstream's CLI from upstream's
/// package directory (its `crossplane.yaml` and `crds/`, unmodified),
/// embedding its runtime image, and pushes it to `reference` trusting
/// `ca_file`. Returns the path of the built package.
pub fn build_and_push(
    version: &str,
    reference: &str,
    ca_file: &std::path::Path,
    work: &std::path::Path,
) -> PathBuf {
    let root = work.join(format!("provider-kubernetes-{version}"));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    // A copy: crank writes nothing into the package root, but the cached
    // directory is read-only module-cache content.
    let source = bin(&format!("provider-kubernetes-{version}-package"));
    run(
        "copy the upstream package directory",
        Command::new("cp")
            .arg("-rL")
            .arg(source.join("."))
            .arg(&root),
    );
    run(
        "chmod the copy",
        Command::new("chmod").arg("-R").arg("u+w").arg(&root),
    );
    let archive = runtime_archive(version, work);
    crank_build_and_push(&root, &archive, reference, ca_file, work)
}

/// `crossplane xpkg build` of the package directory `root` (its
/// `crossplane.yaml`, `crds/` and optional `examples/`) with the runtime
/// image archive `archive` embedded, then `crossplane xpkg push` to
/// `reference` trusting `ca_file`: a package as upstream's CLI makes it.
/// Returns the path of the built package.
pub fn crank_build_and_push(
    root: &std::path::Path,
    archive: &std::path::Path,
    reference: &str,
    ca_file: &std::path::Path,
    work: &std::path::Path,
) -> PathBuf {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "package".to_owned());
    let package = work.join(format!("{name}.xpkg"));
    let _ = std::fs::remove_file(&package);
    run(
        "crossplane xpkg build",
        Command::new(bin("crank"))
            .args(["xpkg", "build"])
            .arg(format!("--package-root={}", root.display()))
            .arg(format!(
                "--examples-root={}",
                root.join("examples").display()
            ))
            .arg(format!(
                "--embed-runtime-image-tarball={}",
                archive.display()
            ))
            .arg(format!("--package-file={}", package.display()))
            .env("HOME", work),
    );
    run(
        "crossplane xpkg push",
        Command::new(bin("crank"))
            .args(["xpkg", "push"])
            .arg(format!("--package-files={}", package.display()))
            .arg(reference)
            // Go's TLS reads extra roots from here: the test registry's CA.
            .env("SSL_CERT_FILE", ca_file)
            .env("HOME", work),
    );
    package
}
