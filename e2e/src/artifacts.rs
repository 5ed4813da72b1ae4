//! What the package tests build and push: package directories, images of
//! this workspace's binaries, `xpkg push`. Nothing here knows which
//! registry or installation a test uses; callers pass it.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// A workspace binary alone on the project's base layer, pushed to
/// `registry` as `repository`; returns the name the node pulls it by (the
/// registry's address: testenv's certs.d maps it).
pub fn push_binary_image(
    registry: &testenv::registry::Registry,
    binary: &str,
    repository: &str,
) -> String {
    let cache = oci::debian::default_cache().expect("the .deb cache");
    let debs =
        oci::debian::download(&oci::debian::BASE_PACKAGES, &cache).expect("the base packages");
    let base = oci::debian::base_layer(&debs).expect("the base layer");
    let program = std::fs::read(testenv::workspace_binary(binary))
        .unwrap_or_else(|e| panic!("{binary} is built: {e}"));
    let path = format!("usr/local/bin/{binary}");
    let layer = oci::LayerBuilder::new()
        .file(path.clone(), 0o755, program)
        .build()
        .unwrap();
    let image = oci::Image::new(oci::Config {
        entrypoint: vec![format!("/{path}")],
        ..oci::project::config()
    })
    .layer(base)
    .layer(layer);
    push_image(
        registry,
        &format!("{}/{repository}", registry.address),
        &image,
    );
    format!("{}/{repository}", registry.address)
}

/// Pushes `image` to `reference` (in `registry`, trusting its CA,
/// anonymously); returns the digest.
pub fn push_image(
    registry: &testenv::registry::Registry,
    reference: &str,
    image: &oci::Image,
) -> String {
    let pushed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(image.push(
            reference,
            &oci::Auth::Anonymous,
            &oci::Tls::Ca(registry.ca_pem.clone()),
        ))
        .unwrap_or_else(|e| panic!("push {reference}: {e}"));
    pushed.digest.as_str().to_owned()
}

/// Pushes an image of `layer` alone, annotated as the package's base layer,
/// to `reference` in `registry`; returns the digest.
pub fn push_base_layer(
    registry: &testenv::registry::Registry,
    reference: &str,
    layer: oci::Layer,
) -> String {
    let image =
        oci::Image::new(oci::Config::default()).layer(layer.annotate("io.crossplane.xpkg", "base"));
    push_image(registry, reference, &image)
}

/// The CRD files of a package directory, as [`package_dir_in`] takes them.
pub fn crds_of(crds: &[(String, String)]) -> Vec<(&str, String)> {
    crds.iter().map(|(f, t)| (f.as_str(), t.clone())).collect()
}

/// A Provider package directory under `work`: its meta (version
/// `version`, `spec_extra` lines under spec) and CRD files.
pub fn package_dir_in(
    work: &Path,
    name: &str,
    version: &str,
    crds: &[(&str, String)],
    spec_extra: &str,
) -> PathBuf {
    let dir = work.join(testenv::unique_name(&format!("{name}-{version}")));
    std::fs::create_dir_all(dir.join("crds")).unwrap();
    std::fs::write(
        dir.join("package.yaml"),
        format!(
            "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: {name}\n  annotations:\n    meta.crossplane.io/version: {version}\nspec:\n  crossplane:\n    version: \">=v1.14.0\"\n{spec_extra}"
        ),
    )
    .unwrap();
    for (file, text) in crds {
        std::fs::write(dir.join("crds").join(file), text).unwrap();
    }
    dir
}

/// `xpkg push DIR REF`, trusting the registry CA in `ca_file`, with the
/// runtime image and credentials given; returns the pushed digest.
pub fn xpkg_push_trusting(
    ca_file: &Path,
    dir: &Path,
    reference: &str,
    runtime_image: Option<&str>,
    credentials: Option<(&str, &str)>,
) -> String {
    use std::io::Write as _;
    let mut cmd = Command::new(testenv::workspace_binary("xpkg"));
    cmd.arg("push")
        .arg(dir)
        .arg(reference)
        .arg("--ca-file")
        .arg(ca_file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(i) = runtime_image {
        cmd.args(["--runtime-image", i]);
    }
    if let Some((user, _)) = credentials {
        cmd.args(["--username", user]);
    }
    let mut child = cmd.spawn().expect("run xpkg");
    if let (Some(mut stdin), Some((_, password))) = (child.stdin.take(), credentials) {
        stdin.write_all(password.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().expect("run xpkg");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "xpkg push {reference}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .trim()
        .rsplit_once('@')
        .map(|(_, d)| d.to_owned())
        .unwrap_or_else(|| panic!("xpkg push printed no digest: {stdout}"))
}
