//! The crossplane-rs image: what the Dockerfile builds, without Docker. A
//! Debian base layer ([`crate::debian`]) and one layer with the six binaries
//! in `/usr/local/bin`, run as user 65532; each Deployment picks its binary
//! with `command:`.

use std::{collections::BTreeMap, fs, path::Path};

use crate::{Config, Error, Image, Layer, LayerBuilder, debian::NONROOT};

/// The binaries the image holds, in `/usr/local/bin`: the six controllers.
pub const BINARIES: [&str; 6] = types::CONTROLLERS;

/// The OCI labels, as the Dockerfile's `LABEL` sets them.
pub fn labels() -> BTreeMap<String, String> {
    [
        ("org.opencontainers.image.title", "crossplane-rs"),
        (
            "org.opencontainers.image.description",
            "A Rust implementation of Crossplane's control plane: scheduler, application-controller, resource-controller, object-provider, package-manager, rbac-manager",
        ),
        ("org.opencontainers.image.licenses", "Apache-2.0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// How the project's containers run: as nonroot (65532:65532) in its home,
/// with the CA bundle the base layer assembles.
pub fn config() -> Config {
    Config {
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt".to_owned(),
        ],
        user: Some(format!("{NONROOT}:{NONROOT}")),
        workdir: Some("/home/nonroot".to_owned()),
        labels: labels(),
        ..Config::default()
    }
}

/// The layer of [`BINARIES`], read from `bin_dir` (e.g. `target/release`),
/// each `0755` in `/usr/local/bin`.
pub fn binaries_layer(bin_dir: &Path) -> Result<Layer, Error> {
    let mut layer = LayerBuilder::new();
    for name in BINARIES {
        let path = bin_dir.join(name);
        let bytes = fs::read(&path).map_err(|e| Error::read(&path, e))?;
        layer = layer.file(format!("usr/local/bin/{name}"), 0o755, bytes);
    }
    layer.build()
}

/// The image: `base` (see [`crate::debian::base_layer`]), then the
/// binaries from `bin_dir`.
pub fn image(base: Layer, bin_dir: &Path) -> Result<Image, Error> {
    Ok(Image::new(config())
        .layer(base)
        .layer(binaries_layer(bin_dir)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two ways to build the image (Dockerfile, this crate) label it
    /// alike.
    #[test]
    fn the_labels_are_the_dockerfiles() {
        let dockerfile =
            fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Dockerfile"))
                .unwrap();
        for (key, value) in labels() {
            assert!(
                dockerfile.contains(&format!("{key}=\"{value}\"")),
                "the Dockerfile does not set {key}={value:?}"
            );
        }
        assert!(dockerfile.contains(&format!("USER {NONROOT}:{NONROOT}")));
        for name in BINARIES {
            assert!(dockerfile.contains(name), "{name} is not in the Dockerfile");
        }
    }

    #[test]
    fn the_binaries_land_in_usr_local_bin() {
        let dir = tempfile::tempdir().unwrap();
        for name in BINARIES {
            fs::write(dir.path().join(name), name).unwrap();
        }
        let base = LayerBuilder::new().dir("etc", 0o755).build().unwrap();
        let image = image(base, dir.path()).unwrap();
        assert_eq!(image.layers().len(), 2);
        assert_eq!(
            image.layers()[1].entries(),
            3 + 6,
            "usr/, local/, bin/ and six files"
        );
        assert_eq!(image.config.user.as_deref(), Some("65532:65532"));

        fs::remove_file(dir.path().join("rbac-manager")).unwrap();
        let err = binaries_layer(dir.path()).unwrap_err();
        assert!(err.to_string().contains("rbac-manager"), "{err}");
    }
}
