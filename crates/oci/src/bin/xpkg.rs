//! `xpkg`: builds, pushes and inspects Crossplane packages without a
//! Docker daemon.
//!
//! ```text
//! xpkg build ./provider-kubernetes -o provider-kubernetes.tar
//! xpkg push ./provider-kubernetes registry.example/crossplane-rs/provider-kubernetes:v0.1.0
//! xpkg inspect registry.example/crossplane-rs/provider-kubernetes:v0.1.0
//! xpkg push ./redis-stack registry.example/redis:v0.1.0   # a dir with .registry/: a stack
//! ```

use std::{
    io::Read as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use oci::{Auth, RegistryPolicy, Tls, stack, xpkg};

/// Build, push and inspect Crossplane packages (package.yaml + crds/) and
/// Stack packages (a directory with .registry/, seed 001).
#[derive(Debug, Parser)]
#[command(name = "xpkg", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Builds a package from DIR and writes it as an OCI archive.
    Build {
        /// A directory with package.yaml (a meta.pkg.crossplane.io/v1
        /// Provider) and crds/*.yaml.
        dir: PathBuf,
        /// Sets the meta's spec.controller.image (the runtime image).
        #[arg(long)]
        runtime_image: Option<String>,
        /// The archive to write.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Builds a package from DIR and pushes it to REFERENCE.
    Push {
        /// The package directory.
        dir: PathBuf,
        /// Where to push: host[:port]/repository:tag.
        reference: String,
        /// Sets the meta's spec.controller.image (the runtime image).
        #[arg(long)]
        runtime_image: Option<String>,
        #[command(flatten)]
        registry: Registry,
    },
    /// Pulls REFERENCE and prints its digest, meta and CRDs.
    Inspect {
        /// host[:port]/repository:tag or @digest.
        reference: String,
        #[command(flatten)]
        registry: Registry,
    },
}

#[derive(Debug, Args)]
struct Registry {
    /// PEM CA certificates to trust besides the system's.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Do not verify the registry's certificate (throwaway registries only).
    #[arg(long, conflicts_with_all = ["ca_file", "plain_http"])]
    insecure: bool,
    /// Plain HTTP (a registry on localhost without TLS).
    #[arg(long)]
    plain_http: bool,
    /// User name for basic authentication; the password is read from
    /// standard input.
    #[arg(long)]
    username: Option<String>,
    /// Read the password from standard input (implied by --username).
    #[arg(long, requires = "username")]
    password_stdin: bool,
    /// A host that may serve the registry's token service on another host
    /// than the registry, and so receive your credentials to exchange for a
    /// token (e.g. auth.docker.io for Docker Hub). Repeatable. Without it,
    /// credentials go only to the registry's own host.
    #[arg(long = "token-host", value_name = "HOST")]
    token_hosts: Vec<String>,
}

impl Registry {
    fn tls(&self) -> anyhow::Result<Tls> {
        Ok(if self.insecure {
            Tls::InsecureSkipVerify
        } else if self.plain_http {
            Tls::PlainHttp
        } else if let Some(f) = &self.ca_file {
            Tls::Ca(std::fs::read(f).with_context(|| format!("reading {}", f.display()))?)
        } else {
            Tls::System
        })
    }

    fn policy(&self) -> RegistryPolicy {
        RegistryPolicy {
            realm_hosts: self.token_hosts.clone(),
            ..RegistryPolicy::default()
        }
    }

    fn auth(&self) -> anyhow::Result<Auth> {
        let Some(username) = &self.username else {
            return Ok(Auth::Anonymous);
        };
        let mut password = String::new();
        std::io::stdin()
            .read_to_string(&mut password)
            .context("reading the password from standard input")?;
        Ok(Auth::Basic {
            username: username.clone(),
            password: password.trim_end_matches(['\n', '\r']).to_owned(),
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Build {
            dir,
            runtime_image,
            output,
        } => {
            let image = build(&dir, runtime_image.as_deref())?;
            let digest = image.write_archive(&output, &name_of(&dir))?;
            eprintln!("wrote {}", output.display());
            println!("{digest}");
        }
        Command::Push {
            dir,
            reference,
            runtime_image,
            registry,
        } => {
            let image = build(&dir, runtime_image.as_deref())?;
            let pushed = image
                .push_within(
                    &reference,
                    &registry.auth()?,
                    &registry.tls()?,
                    &registry.policy(),
                )
                .await?;
            println!("pushed {reference}@{}", pushed.digest);
        }
        Command::Inspect {
            reference,
            registry,
        } => {
            let (auth, tls) = (registry.auth()?, registry.tls()?);
            let cache = tempfile::tempdir()?;
            let fetcher = xpkg::Fetcher::new(cache.path().to_path_buf(), u64::MAX)
                .with_tls(&tls)
                .with_policy(registry.policy());
            let digest = fetcher.resolve(&reference, &auth).await?;
            let info = fetcher.layer_info(&reference, &digest, &auth).await?;
            if info.annotations.contains_key(stack::OWNS_ANNOTATION) {
                let s = fetcher
                    .fetch::<stack::Stack>(&reference, &digest, &auth)
                    .await?;
                print!(
                    "{}",
                    stack::describe(&reference, digest.as_str(), &s.contents)
                );
            } else {
                let package = fetcher
                    .fetch::<xpkg::Contents>(&reference, &digest, &auth)
                    .await?;
                print!("{}", xpkg::describe(&package));
            }
        }
    }
    Ok(())
}

/// A stack when `dir` has `.registry/`, else a Crossplane package.
fn build(dir: &Path, runtime_image: Option<&str>) -> anyhow::Result<oci::Image> {
    if dir.join(stack::REGISTRY_DIR).is_dir() {
        anyhow::ensure!(
            runtime_image.is_none(),
            "--runtime-image is for Crossplane packages; a stack's controller image is in .registry/install.yaml"
        );
        return Ok(stack::build(dir)?.0);
    }
    Ok(xpkg::build(dir, runtime_image)?)
}

/// The name an archive is imported under: the directory's name.
fn name_of(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "package".to_owned())
}
