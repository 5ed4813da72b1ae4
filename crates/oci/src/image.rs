//! Images: layers plus a config, serialized as the OCI image spec says, and
//! written as an OCI image-layout archive that also carries a `docker save`
//! style `manifest.json`.

use std::{
    collections::BTreeMap,
    io::{BufWriter, Write as _},
    path::Path,
};

use serde::Serialize;

use crate::{Digest, Error, Layer};

/// Media type of an image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of an image config.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// Media type of a gzip-compressed layer.
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// Media type of an image index (`index.json` of an archive).
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The annotation that names an image in an OCI layout's `index.json`.
pub const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";
/// The annotation containerd's importer reads first for an image's name.
pub const CONTAINERD_NAME_ANNOTATION: &str = "io.containerd.image.name";

/// How a container of the image runs, and what it runs on. Empty fields are
/// left out of the config (the runtime's defaults apply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The program and its first arguments; a Pod's `command` replaces it.
    pub entrypoint: Vec<String>,
    /// Arguments after the entrypoint; a Pod's `args` replaces them.
    pub cmd: Vec<String>,
    /// `NAME=value` pairs.
    pub env: Vec<String>,
    /// `uid`, `uid:gid` or a name from the image's `/etc/passwd`.
    pub user: Option<String>,
    /// The working directory (absolute).
    pub workdir: Option<String>,
    /// Labels (`org.opencontainers.image.*` and the like).
    pub labels: BTreeMap<String, String>,
    /// Operating system, as Go spells it: `linux`.
    pub os: String,
    /// CPU architecture, as Go spells it: `amd64`, `arm64`.
    pub architecture: String,
}

impl Default for Config {
    /// Nothing set, for Linux on this machine's architecture.
    fn default() -> Self {
        Self {
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            env: Vec::new(),
            user: None,
            workdir: None,
            labels: BTreeMap::new(),
            os: "linux".to_owned(),
            architecture: host_architecture().to_owned(),
        }
    }
}

/// This machine's architecture in the spelling of images (Go's GOARCH).
pub fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// An image: its layers (bottom first) and config. The same layers and
/// config always give the same manifest digest.
#[derive(Clone, Debug)]
pub struct Image {
    /// How containers of the image run.
    pub config: Config,
    layers: Vec<Layer>,
}

/// The serialized form of an [`Image`]: its config and manifest blobs and
/// their digests.
#[derive(Clone, Debug)]
pub struct Serialized {
    /// The config JSON.
    pub config: Vec<u8>,
    /// sha256 of `config`.
    pub config_digest: Digest,
    /// The manifest JSON.
    pub manifest: Vec<u8>,
    /// sha256 of `manifest`: the image's digest, as in `name@sha256:...`.
    pub digest: Digest,
}

impl Image {
    /// An image with no layers yet.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            layers: Vec::new(),
        }
    }

    /// Adds a layer on top of the ones already there.
    pub fn layer(mut self, layer: Layer) -> Self {
        self.layers.push(layer);
        self
    }

    /// The layers, bottom first.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// Compressed size of all layers and the config: what a pull downloads.
    pub fn size(&self) -> Result<u64, Error> {
        let config = self.serialize()?.config.len() as u64;
        Ok(config + self.layers.iter().map(Layer::size).sum::<u64>())
    }

    /// The config and manifest JSON and their digests.
    pub fn serialize(&self) -> Result<Serialized, Error> {
        let config = serde_json::to_vec(&ConfigFile::new(self)).map_err(Error::Json)?;
        let config_digest = Digest::of(&config);
        let manifest = ManifestFile {
            schema_version: 2,
            media_type: MANIFEST_MEDIA_TYPE,
            config: Descriptor::new(CONFIG_MEDIA_TYPE, &config_digest, config.len() as u64),
            layers: self
                .layers
                .iter()
                .map(|l| Descriptor {
                    annotations: Some(l.annotations()).filter(|a| !a.is_empty()),
                    ..Descriptor::new(LAYER_MEDIA_TYPE, l.digest(), l.size())
                })
                .collect(),
        };
        let manifest = serde_json::to_vec(&manifest).map_err(Error::Json)?;
        Ok(Serialized {
            digest: Digest::of(&manifest),
            config,
            config_digest,
            manifest,
        })
    }

    /// Writes the image as an OCI image-layout tar (`oci-layout`,
    /// `index.json`, `blobs/sha256/...`) that `ctr images import` and `skopeo
    /// copy oci-archive:` read. The same tar also has the `manifest.json` of a
    /// `docker save` archive, pointing at the same blobs
    /// (`[{"Config":"blobs/sha256/<hex>","RepoTags":[...],"Layers":
    /// ["blobs/sha256/<hex>",...]}]`, layers bottom first and still gzipped),
    /// which is what `docker load` (any version) and go-containerregistry's
    /// `tarball.ImageFromPath` read: the crossplane CLI's `xpkg build
    /// --embed-runtime-image-tarball` takes the archive as it is.
    ///
    /// `ref_name` (e.g. `registry.local/pause:3.10`) becomes the name the
    /// image is imported under: it is written both as
    /// `org.opencontainers.image.ref.name` and as `io.containerd.image.name`,
    /// and as the one `RepoTags` entry when it is a name with a tag and no
    /// digest that Docker accepts (otherwise `RepoTags` is empty, so `docker
    /// load` loads the image untagged rather than refusing it). The file is
    /// replaced atomically; the same image and name always give the same
    /// bytes. Returns the manifest digest.
    pub fn write_archive(&self, path: &Path, ref_name: &str) -> Result<Digest, Error> {
        let s = self.serialize()?;
        let blob_path = |d: &Digest| format!("blobs/sha256/{}", d.hex());
        let docker_manifest = [DockerSaveEntry {
            config: blob_path(&s.config_digest),
            repo_tags: docker_repo_tag(ref_name).into_iter().collect(),
            layers: self.layers.iter().map(|l| blob_path(l.digest())).collect(),
        }];
        let docker_manifest = serde_json::to_vec(&docker_manifest).map_err(Error::Json)?;
        let annotations = BTreeMap::from([
            (CONTAINERD_NAME_ANNOTATION, ref_name),
            (REF_NAME_ANNOTATION, ref_name),
        ]);
        let index = IndexFile {
            schema_version: 2,
            media_type: INDEX_MEDIA_TYPE,
            manifests: vec![IndexEntry {
                descriptor: Descriptor::new(
                    MANIFEST_MEDIA_TYPE,
                    &s.digest,
                    s.manifest.len() as u64,
                ),
                platform: Platform {
                    architecture: &self.config.architecture,
                    os: &self.config.os,
                },
                annotations,
            }],
        };
        let index = serde_json::to_vec(&index).map_err(Error::Json)?;

        // Sorted by path, as in a layer; each blob once.
        let mut blobs: BTreeMap<&str, &[u8]> = BTreeMap::new();
        blobs.insert(s.digest.hex(), &s.manifest);
        blobs.insert(s.config_digest.hex(), &s.config);
        for layer in &self.layers {
            blobs.insert(layer.digest().hex(), layer.blob());
        }

        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        let tmp = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))
            .map_err(|e| Error::write(path, e))?;
        let mut tar = tar::Builder::new(BufWriter::new(tmp));
        let io = |e| Error::write(path, e);
        append(&mut tar, "blobs/", 0o755, None).map_err(io)?;
        append(&mut tar, "blobs/sha256/", 0o755, None).map_err(io)?;
        for (hex, bytes) in blobs {
            append(&mut tar, &format!("blobs/sha256/{hex}"), 0o644, Some(bytes)).map_err(io)?;
        }
        append(&mut tar, "index.json", 0o644, Some(&index)).map_err(io)?;
        append(&mut tar, "manifest.json", 0o644, Some(&docker_manifest)).map_err(io)?;
        let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
        append(&mut tar, "oci-layout", 0o644, Some(layout)).map_err(io)?;
        let mut out = tar.into_inner().map_err(io)?;
        out.flush().map_err(io)?;
        let tmp = out.into_inner().map_err(|e| io(e.into_error()))?;
        tmp.persist(path).map_err(|e| io(e.error))?;
        Ok(s.digest)
    }
}

/// `ref_name` when Docker takes it as a tagged name (`[host[:port]/]path:tag`
/// with distribution's grammar: lower-case path, no digest), as `docker
/// load` requires of every `RepoTags` entry.
fn docker_repo_tag(ref_name: &str) -> Option<&str> {
    let parsed = crate::reference::by_grammar(ref_name).ok()?;
    let tagged = parsed.digest().is_none() && crate::reference::tag_of(ref_name).is_some();
    tagged.then_some(ref_name)
}

/// One archive member: a file with `bytes`, or a directory when `None`.
fn append<W: std::io::Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    mode: u32,
    bytes: Option<&[u8]>,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_mode(mode);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    match bytes {
        Some(bytes) => {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(bytes.len() as u64);
            tar.append_data(&mut header, path, bytes)
        }
        None => {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            tar.append_data(&mut header, path, std::io::empty())
        }
    }
}

// The JSON shapes, field order as the specs list them.

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor<'a> {
    media_type: &'a str,
    digest: &'a str,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a BTreeMap<String, String>>,
}

impl<'a> Descriptor<'a> {
    fn new(media_type: &'a str, digest: &'a Digest, size: u64) -> Self {
        Self {
            media_type,
            digest: digest.as_str(),
            size,
            annotations: None,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestFile<'a> {
    schema_version: u32,
    media_type: &'a str,
    config: Descriptor<'a>,
    layers: Vec<Descriptor<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IndexFile<'a> {
    schema_version: u32,
    media_type: &'a str,
    manifests: Vec<IndexEntry<'a>>,
}

#[derive(Serialize)]
struct IndexEntry<'a> {
    #[serde(flatten)]
    descriptor: Descriptor<'a>,
    platform: Platform<'a>,
    annotations: BTreeMap<&'a str, &'a str>,
}

/// One image of a `docker save` archive's `manifest.json`: paths inside
/// the archive.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct DockerSaveEntry<'a> {
    config: String,
    repo_tags: Vec<&'a str>,
    layers: Vec<String>,
}

#[derive(Serialize)]
struct Platform<'a> {
    architecture: &'a str,
    os: &'a str,
}

#[derive(Serialize)]
struct ConfigFile<'a> {
    /// Fixed, so that the digest depends on the content only.
    created: &'a str,
    architecture: &'a str,
    os: &'a str,
    config: RunConfig<'a>,
    rootfs: RootFs<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct RunConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    env: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    entrypoint: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    cmd: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    working_dir: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: &'a BTreeMap<String, String>,
}

#[derive(Serialize)]
struct RootFs<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    diff_ids: Vec<&'a str>,
}

impl<'a> ConfigFile<'a> {
    fn new(image: &'a Image) -> Self {
        let c = &image.config;
        Self {
            created: "1970-01-01T00:00:00Z",
            architecture: &c.architecture,
            os: &c.os,
            config: RunConfig {
                user: c.user.as_deref(),
                env: &c.env,
                entrypoint: &c.entrypoint,
                cmd: &c.cmd,
                working_dir: c.workdir.as_deref(),
                labels: &c.labels,
            },
            rootfs: RootFs {
                kind: "layers",
                diff_ids: image.layers.iter().map(|l| l.diff_id().as_str()).collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LayerBuilder;
    use serde_json::{Value, json};
    use std::{fs, io::Read as _};

    fn image() -> Image {
        let base = LayerBuilder::new()
            .file(
                "etc/passwd",
                0o644,
                b"root:x:0:0::/root:/sbin/nologin\n".to_vec(),
            )
            .build()
            .unwrap();
        let app = LayerBuilder::new()
            .file("usr/local/bin/app", 0o755, b"\x7fELF".to_vec())
            .build()
            .unwrap();
        Image::new(Config {
            entrypoint: vec!["/usr/local/bin/app".into()],
            cmd: vec!["--help".into()],
            env: vec!["PATH=/usr/local/bin:/usr/bin".into()],
            user: Some("65532:65532".into()),
            workdir: Some("/".into()),
            labels: BTreeMap::from([("org.opencontainers.image.title".into(), "app".into())]),
            os: "linux".into(),
            architecture: "amd64".into(),
        })
        .layer(base)
        .layer(app)
    }

    #[test]
    fn the_config_says_how_to_run_and_names_each_layer_by_diff_id() {
        let image = image();
        let s = image.serialize().unwrap();
        let config: Value = serde_json::from_slice(&s.config).unwrap();
        assert_eq!(
            config,
            json!({
                "created": "1970-01-01T00:00:00Z",
                "architecture": "amd64",
                "os": "linux",
                "config": {
                    "User": "65532:65532",
                    "Env": ["PATH=/usr/local/bin:/usr/bin"],
                    "Entrypoint": ["/usr/local/bin/app"],
                    "Cmd": ["--help"],
                    "WorkingDir": "/",
                    "Labels": {"org.opencontainers.image.title": "app"},
                },
                "rootfs": {
                    "type": "layers",
                    "diff_ids": [
                        image.layers()[0].diff_id().as_str(),
                        image.layers()[1].diff_id().as_str(),
                    ],
                },
            })
        );
        assert_eq!(s.config_digest, Digest::of(&s.config));
    }

    #[test]
    fn an_empty_config_leaves_the_run_settings_out() {
        let s = Image::new(Config::default()).serialize().unwrap();
        let config: Value = serde_json::from_slice(&s.config).unwrap();
        assert_eq!(config["config"], json!({}));
        assert_eq!(config["rootfs"]["diff_ids"], json!([]));
        assert_eq!(config["os"], "linux");
    }

    #[test]
    fn the_manifest_names_the_config_and_layers_by_digest_and_size() {
        let image = image();
        let s = image.serialize().unwrap();
        let manifest: Value = serde_json::from_slice(&s.manifest).unwrap();
        let layer = |i: usize| {
            json!({
                "mediaType": LAYER_MEDIA_TYPE,
                "digest": image.layers()[i].digest().as_str(),
                "size": image.layers()[i].size(),
            })
        };
        assert_eq!(
            manifest,
            json!({
                "schemaVersion": 2,
                "mediaType": MANIFEST_MEDIA_TYPE,
                "config": {
                    "mediaType": CONFIG_MEDIA_TYPE,
                    "digest": s.config_digest.as_str(),
                    "size": s.config.len(),
                },
                "layers": [layer(0), layer(1)],
            })
        );
        assert_eq!(s.digest, Digest::of(&s.manifest));
    }

    #[test]
    fn the_same_image_built_twice_has_the_same_digest() {
        assert_eq!(
            image().serialize().unwrap().digest,
            image().serialize().unwrap().digest
        );
        let mut other = image();
        other.config.user = Some("0".into());
        assert_ne!(
            other.serialize().unwrap().digest,
            image().serialize().unwrap().digest
        );
    }

    #[test]
    fn the_archive_is_an_oci_layout_with_every_blob_and_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image.tar");
        let image = image();
        let digest = image.write_archive(&path, "registry.local/app:1").unwrap();
        let s = image.serialize().unwrap();
        assert_eq!(digest, s.digest);

        let bytes = fs::read(&path).unwrap();
        let mut files = BTreeMap::new();
        let mut archive = tar::Archive::new(bytes.as_slice());
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().to_string_lossy().into_owned();
            let mut content = Vec::new();
            entry.read_to_end(&mut content).unwrap();
            files.insert(name, content);
        }
        let blob = |d: &Digest| files[&format!("blobs/sha256/{}", d.hex())].clone();
        assert_eq!(blob(&s.digest), s.manifest);
        assert_eq!(blob(&s.config_digest), s.config);
        for layer in image.layers() {
            assert_eq!(blob(layer.digest()), layer.blob());
        }
        assert_eq!(
            files.len(),
            2 + 4 + 3,
            "2 dirs, 4 blobs, index.json, manifest.json and oci-layout: {:?}",
            files.keys()
        );
        let docker: Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        let path = |d: &Digest| format!("blobs/sha256/{}", d.hex());
        assert_eq!(
            docker,
            json!([{
                "Config": path(&s.config_digest),
                "RepoTags": ["registry.local/app:1"],
                "Layers": [path(image.layers()[0].digest()), path(image.layers()[1].digest())],
            }])
        );
        let layout: Value = serde_json::from_slice(&files["oci-layout"]).unwrap();
        assert_eq!(layout, json!({"imageLayoutVersion": "1.0.0"}));
        let index: Value = serde_json::from_slice(&files["index.json"]).unwrap();
        assert_eq!(
            index,
            json!({
                "schemaVersion": 2,
                "mediaType": INDEX_MEDIA_TYPE,
                "manifests": [{
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": s.digest.as_str(),
                    "size": s.manifest.len(),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": "registry.local/app:1",
                        "org.opencontainers.image.ref.name": "registry.local/app:1",
                    },
                }],
            })
        );

        // Deterministic: a second write gives the same bytes.
        let again = dir.path().join("again.tar");
        image.write_archive(&again, "registry.local/app:1").unwrap();
        assert_eq!(fs::read(&again).unwrap(), bytes);
    }

    #[test]
    fn only_a_name_docker_takes_as_a_tag_is_a_repo_tag() {
        for tagged in [
            "registry.local/app:1",
            "127.0.0.1:5000/a/b-c_d:v1.2.3",
            "localhost/x:latest",
            "app:1",
        ] {
            assert_eq!(docker_repo_tag(tagged), Some(tagged));
        }
        let digest = format!("sha256:{}", "a".repeat(64));
        for untagged in [
            "registry.local/app".to_owned(),
            "localhost:5000/app".to_owned(),
            format!("registry.local/app@{digest}"),
            format!("registry.local/app:1@{digest}"),
            "registry.local/App:1".to_owned(),
            "registry.local/app:-1".to_owned(),
            "registry.local/app:".to_owned(),
            String::new(),
        ] {
            assert_eq!(docker_repo_tag(&untagged), None, "{untagged}");
        }
    }
}
