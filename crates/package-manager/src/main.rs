//! `package-manager`: installs Provider packages: resolves a Provider's
//! package to a digest, makes a ProviderRevision per digest, installs the
//! package's CRDs and runs its runtime (a Deployment per revision, rendered
//! from a DeploymentRuntimeConfig). Installs Stacks (seed 001): an
//! ExtensionRequest's stack package and its dependencies, found by package
//! or by CRD in a registry, and every Extension's controller. ControllerConfigs
//! are only observed here (a revision reads them).
//!
//! `package-manager convert controllerconfig FILE` prints the
//! DeploymentRuntimeConfig equivalent to a deprecated ControllerConfig.

mod convert;
mod crds;
mod deps;
mod health;
mod labels;
mod packages;
mod podsecurity;
mod provider;
mod render;
mod revision;
mod stacks;
mod tls;
mod usage;
mod webhooks;

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
    runtime::WatchStreamExt as _,
};
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource, observe},
};
use types::extensions::v1alpha1::Extension;
use types::extensions::v1alpha1::ExtensionRequest;
use types::pkg::v1::Provider;
use types::pkg::v1::ProviderRevision;
use types::pkg::v1alpha1::ControllerConfig;
use types::pkg::v1beta1::{DeploymentRuntimeConfig, DeploymentRuntimeConfigSpec};

const BINARY: &str = "package-manager";

/// Installs packages: Providers, their revisions, CRDs and runtimes.
#[derive(Debug, Parser)]
#[command(name = BINARY, version, about)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// How package runtimes are run: Deployment (create a Deployment,
    /// ServiceAccount and Service per revision) or External (deliver the
    /// revision's CRDs and leave the runtime to an external controller).
    #[arg(long, env = "PACKAGE_RUNTIME", value_enum, default_value_t = PackageRuntime::Deployment)]
    package_runtime: PackageRuntime,

    /// Honour runtimeConfigRef (DeploymentRuntimeConfig); when false, honour
    /// the deprecated controllerConfigRef (ControllerConfig) instead.
    #[arg(long, env = "ENABLE_RUNTIME_CONFIG", default_value_t = true, action = clap::ArgAction::Set)]
    enable_runtime_config: bool,

    /// A PEM bundle of CA certificates trusted for registries, besides the
    /// system's roots.
    #[arg(long, env = "CA_BUNDLE_PATH")]
    ca_bundle_path: Option<PathBuf>,

    /// Where pulled packages are kept, by digest.
    #[arg(long, env = "PACKAGE_CACHE_DIR", default_value = "/cache/xpkg")]
    package_cache_dir: PathBuf,

    /// The most the package cache may hold, in bytes; the oldest packages
    /// go first.
    #[arg(long, env = "PACKAGE_CACHE_MAX_BYTES", default_value_t = 512 * 1024 * 1024)]
    package_cache_max_bytes: u64,

    /// How often a package with packagePullPolicy Always is resolved again
    /// (a moved tag makes a new revision).
    #[arg(long, env = "PACKAGE_PULL_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    package_pull_interval: Duration,

    /// The registry an ExtensionRequest without spec.source installs from
    /// (host[:port][/path]).
    #[arg(
        long,
        env = "DEFAULT_REGISTRY",
        default_value = "registry.crossplane.io"
    )]
    default_registry: String,

    /// FROM=TO: read packages whose reference starts with FROM (a
    /// host[:port][/path] prefix) from TO instead, e.g.
    /// registry.crossplane.io=registry.internal:5000/mirror. Repeatable;
    /// the longest prefix wins. Applies to Providers and stacks alike; the
    /// CA is --ca-bundle-path's, the credentials --registry-pull-secret's.
    #[arg(long, env = "REGISTRY_REWRITE", value_delimiter = ',')]
    registry_rewrite: Vec<String>,

    /// A kubernetes.io/dockerconfigjson Secret in the package manager's
    /// namespace whose credentials are used for any registry a package's
    /// own pull secrets do not cover (stacks have none of their own).
    #[arg(long, env = "REGISTRY_PULL_SECRET")]
    registry_pull_secret: Option<String>,

    /// Hosts (`host` or `host:port`) that may serve a registry's token
    /// service on another host than the registry's own, and so receive
    /// that registry's credentials to exchange for a token (e.g.
    /// auth.docker.io for Docker Hub). Repeatable. By default credentials
    /// go only to the registry's own host, over https.
    #[arg(long, env = "REGISTRY_TOKEN_REALM_HOSTS", value_delimiter = ',')]
    registry_token_realm_hosts: Vec<String>,

    /// Registries (`host[:port]`) read over plain HTTP, their credentials
    /// sent in the clear. Repeatable; none by default.
    #[arg(long, env = "REGISTRY_PLAIN_HTTP", value_delimiter = ',')]
    registry_plain_http: Vec<String>,

    /// Let a DeploymentRuntimeConfig (or ControllerConfig) make a package
    /// runtime break the Pod Security Standard "restricted" (privileged,
    /// host namespaces, hostPath, added capabilities, root, privilege
    /// escalation, host ports). Off: such a runtime is refused with a
    /// condition naming each field. Stack controllers are always
    /// restricted.
    #[arg(long, env = "ALLOW_UNRESTRICTED_RUNTIMES", default_value_t = false, action = clap::ArgAction::Set)]
    allow_unrestricted_runtimes: bool,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Converts deprecated objects to their replacements.
    Convert {
        #[command(subcommand)]
        what: Convert,
    },
}

#[derive(Debug, Subcommand)]
enum Convert {
    /// Prints the DeploymentRuntimeConfig equivalent to a ControllerConfig
    /// (a YAML or JSON file), and, with --provider, the Provider rewritten
    /// to reference it.
    Controllerconfig {
        /// The ControllerConfig manifest.
        file: PathBuf,
        /// A Provider manifest that references the ControllerConfig.
        #[arg(long)]
        provider: Option<PathBuf>,
    },
}

/// How package runtimes are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PackageRuntime {
    /// Create a Deployment for each package runtime.
    #[value(name = "Deployment")]
    Deployment,
    /// Do nothing; an external controller runs package runtimes.
    #[value(name = "External")]
    External,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::Convert {
        what: Convert::Controllerconfig { file, provider },
    }) = &args.command
    {
        return convert::command(file, provider.as_deref());
    }
    runtime::init_process(args.common.log_format);
    tracing::info!(
        package_runtime = ?args.package_runtime,
        enable_runtime_config = args.enable_runtime_config,
        "package runtime settings"
    );
    let tls = match &args.ca_bundle_path {
        Some(p) => oci::Tls::Ca(
            std::fs::read(p)
                .with_context(|| format!("reading --ca-bundle-path {}", p.display()))?,
        ),
        None => oci::Tls::System,
    };
    let namespace = args.common.leader_election_namespace.clone();
    let fetcher =
        oci::xpkg::Fetcher::new(args.package_cache_dir.clone(), args.package_cache_max_bytes)
            .with_policy(oci::RegistryPolicy {
                realm_hosts: args.registry_token_realm_hosts.clone(),
                plain_http: args.registry_plain_http.clone(),
            });
    let rewrites = packages::Rewrites::parse(&args.registry_rewrite).map_err(anyhow::Error::msg)?;
    let rt = Runtime::new(BINARY, args.common).await?;
    let packages =
        packages::Packages::new(fetcher, tls, Api::namespaced(rt.client.clone(), &namespace))
            .with_registry_settings(rewrites, args.registry_pull_secret.clone());
    let (crds, crd_writer) = kube::runtime::reflector::store::<CustomResourceDefinition>();
    let crd_changes = kube::runtime::watcher(
        Api::<CustomResourceDefinition>::all(rt.client.clone()),
        kube::runtime::watcher::Config::default(),
    )
    .default_backoff()
    .reflect(crd_writer)
    .touched_objects();
    let extensions =
        stacks::extensions::controller(&rt, crds.clone(), crd_changes, rt.args.sync_interval);
    let requests = stacks::requests::controller(
        &rt,
        stacks::index::Index::new(packages.clone()),
        args.default_registry.clone(),
        crds,
        rt.args.sync_interval,
    );
    let kinds = [
        api_resource::<ExtensionRequest>(),
        api_resource::<Extension>(),
        api_resource::<Provider>(),
        api_resource::<ProviderRevision>(),
        api_resource::<DeploymentRuntimeConfig>(),
        api_resource::<ControllerConfig>(),
    ];
    let providers = provider::controller(
        &rt,
        packages.clone(),
        provider::Settings {
            pull_interval: args.package_pull_interval,
            resync: rt.args.sync_interval,
            runtime_bound: args.package_runtime == PackageRuntime::Deployment,
        },
    );
    let revisions = revision::controller(
        &rt,
        packages,
        revision::Settings {
            namespace,
            mode: args.package_runtime,
            enable_runtime_config: args.enable_runtime_config,
            resync: rt.args.sync_interval,
            allow_unrestricted_runtimes: args.allow_unrestricted_runtimes,
        },
    );
    let work = {
        let rt = rt.clone();
        async move {
            if args.package_runtime == PackageRuntime::Deployment {
                default_runtime_config(&rt.client).await;
            }
            tokio::join!(
                providers,
                revisions,
                requests,
                extensions,
                observe::<ControllerConfig>(rt.clone(), "controllerconfig"),
            );
        }
    };
    rt.run(&kinds, work).await?;
    Ok(())
}

/// Creates the `default` DeploymentRuntimeConfig when there is none; one
/// that exists is never changed. An empty spec renders the same runtime as
/// the seed's `default` example.
async fn default_runtime_config(client: &kube::Client) {
    let api = Api::<DeploymentRuntimeConfig>::all(client.clone());
    let config = DeploymentRuntimeConfig {
        metadata: ObjectMeta {
            name: Some(revision::DEFAULT_RUNTIME_CONFIG.to_owned()),
            ..ObjectMeta::default()
        },
        spec: DeploymentRuntimeConfigSpec::default(),
    };
    match api.create(&PostParams::default(), &config).await {
        Ok(_) => tracing::info!("created the default DeploymentRuntimeConfig"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            let error = runtime::events::error_chain(&e);
            tracing::warn!(%error, "cannot create the default DeploymentRuntimeConfig; runtimes that use it wait for it");
        }
    }
}
