//! `oci-image`: builds the crossplane-rs image (a Debian base layer and the
//! six binaries) without a Docker daemon and pushes it to a registry, or
//! writes it as an OCI archive. `hack/image.sh` runs it after building the
//! release binaries. With `--binary NAME` it builds an image of that one
//! binary instead (the same base layer; the binary is the entrypoint), e.g.
//! a Provider package's runtime image; `--env NAME=VALUE` sets the image's
//! environment (what a container that sets none runs with).

use std::{path::PathBuf, time::Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use oci::{Auth, Tls, debian, project};

/// Build the crossplane-rs image from the release binaries and push it.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Where to push, `host[:port]/repository:tag`, e.g.
    /// `127.0.0.1:5000/crossplane-rs:dev`. Also the name written into
    /// `--archive`.
    #[arg(env = "OCI_IMAGE_REFERENCE")]
    reference: String,

    /// The directory holding the six binaries (scheduler,
    /// application-controller, resource-controller, object-provider,
    /// package-manager, rbac-manager).
    #[arg(long, env = "OCI_IMAGE_BIN_DIR", default_value = "target/release")]
    bin_dir: PathBuf,

    /// Build an image of this one binary from --bin-dir (any workspace
    /// binary, e.g. object-provider), at /usr/local/bin/NAME and run as the
    /// image's entrypoint, instead of the six-binary image.
    #[arg(long, env = "OCI_IMAGE_BINARY", value_name = "NAME")]
    binary: Option<String>,

    /// `NAME=VALUE` added to the image's environment. Repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,

    /// Where downloaded Debian packages (libc6, libgcc-s1, ca-certificates)
    /// are kept between builds. Default:
    /// `${CROSSPLANE_RS_CACHE:-$HOME/.cache/crossplane-rs}/debs`.
    #[arg(long, env = "OCI_IMAGE_DEB_CACHE")]
    deb_cache: Option<PathBuf>,

    /// Also write the image to this file as an OCI image-layout tar (for
    /// `ctr images import`, `skopeo copy oci-archive:`, `docker load`).
    #[arg(long, env = "OCI_IMAGE_ARCHIVE")]
    archive: Option<PathBuf>,

    /// Build (and write `--archive`) without pushing.
    #[arg(long, env = "OCI_IMAGE_NO_PUSH", default_value_t = false)]
    no_push: bool,

    /// A PEM file of CA certificates to trust for the registry, besides the
    /// system's (a registry with a private CA).
    #[arg(long, env = "OCI_IMAGE_CA_FILE", conflicts_with_all = ["insecure", "plain_http"])]
    ca_file: Option<PathBuf>,

    /// Do not verify the registry's TLS certificate. Throwaway registries
    /// only: anyone on the path can read and change what is pushed.
    #[arg(
        long,
        env = "OCI_IMAGE_INSECURE",
        default_value_t = false,
        conflicts_with = "plain_http"
    )]
    insecure: bool,

    /// Talk plain HTTP to the registry (a registry on localhost without TLS).
    #[arg(long, env = "OCI_IMAGE_PLAIN_HTTP", default_value_t = false)]
    plain_http: bool,

    /// User name for the registry's basic authentication.
    #[arg(long, env = "OCI_IMAGE_USERNAME", requires = "password")]
    username: Option<String>,

    /// Password (or token) for the registry's basic authentication. Prefer
    /// the environment variable: a flag shows in the process list.
    #[arg(
        long,
        env = "OCI_IMAGE_PASSWORD",
        hide_env_values = true,
        requires = "username"
    )]
    password: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.no_push && args.archive.is_none() {
        bail!("--no-push without --archive would build the image and throw it away");
    }
    let started = Instant::now();
    let cache = match &args.deb_cache {
        Some(dir) => dir.clone(),
        None => debian::default_cache()?,
    };
    let debs = debian::download(&debian::BASE_PACKAGES, &cache)?;
    let base = debian::base_layer(&debs)?;
    for e in &args.env {
        if e.split_once('=').is_none_or(|(name, _)| name.is_empty()) {
            bail!("--env {e:?}: write NAME=VALUE");
        }
    }
    let built = match &args.binary {
        Some(name) => one_binary(base, &args.bin_dir, name, &args.env),
        None => project::image(base, &args.bin_dir)
            .map(|mut image| {
                image.config.env.extend(args.env.iter().cloned());
                image
            })
            .map_err(anyhow::Error::from),
    };
    let image = built.with_context(|| {
        format!(
            "building the image from {} (build the release binaries first: cargo build --release --bins)",
            args.bin_dir.display()
        )
    })?;
    let serialized = image.serialize()?;
    eprintln!(
        "oci-image: built {} in {:.1}s: {} layers, {:.1} MiB compressed ({:.1} MiB unpacked)",
        serialized.digest,
        started.elapsed().as_secs_f64(),
        image.layers().len(),
        mib(image.size()?),
        mib(image.layers().iter().map(|l| l.uncompressed_size()).sum()),
    );
    if let Some(path) = &args.archive {
        image.write_archive(path, &args.reference)?;
        eprintln!("oci-image: wrote {}", path.display());
    }
    if !args.no_push {
        let auth = match (args.username, args.password) {
            (Some(username), Some(password)) => Auth::Basic { username, password },
            _ => Auth::Anonymous,
        };
        let tls = if args.plain_http {
            Tls::PlainHttp
        } else if args.insecure {
            Tls::InsecureSkipVerify
        } else if let Some(path) = &args.ca_file {
            Tls::Ca(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        } else {
            Tls::System
        };
        let push_started = Instant::now();
        let pushed = image.push(&args.reference, &auth, &tls).await?;
        eprintln!(
            "oci-image: pushed {} in {:.1}s ({} blobs, {:.1} MiB uploaded; {} already there)",
            args.reference,
            push_started.elapsed().as_secs_f64(),
            pushed.uploaded,
            mib(pushed.bytes),
            pushed.skipped,
        );
    }
    // The one line scripts read.
    println!("{}@{}", args.reference, serialized.digest);
    Ok(())
}

/// The image of binary `name` from `bin_dir` alone on `base`: the
/// project's configuration (nonroot, CA bundle), `name` as the entrypoint.
fn one_binary(
    base: oci::Layer,
    bin_dir: &std::path::Path,
    name: &str,
    env: &[String],
) -> anyhow::Result<oci::Image> {
    let file = bin_dir.join(name);
    let program = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let path = format!("usr/local/bin/{name}");
    let layer = oci::LayerBuilder::new()
        .file(path.clone(), 0o755, program)
        .build()?;
    let mut config = project::config();
    config.entrypoint = vec![format!("/{path}")];
    config.env.extend(env.iter().cloned());
    config
        .labels
        .insert("org.opencontainers.image.title".to_owned(), name.to_owned());
    Ok(oci::Image::new(config).layer(base).layer(layer))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
