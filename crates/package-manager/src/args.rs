//! The package-manager's flags and subcommands: one `Args`, read once in
//! `main`; [`PackageRuntime`] is the one setting the controllers share.

use std::{path::PathBuf, time::Duration};

use clap::{Parser, Subcommand};
use runtime::CommonArgs;

/// The binary's name: its field manager, its leader-election lease.
pub const BINARY: &str = "package-manager";

/// Installs packages: Providers, their revisions, CRDs and runtimes.
#[derive(Debug, Parser)]
#[command(name = BINARY, version, about)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// The namespace Provider runtimes run in (their Deployments,
    /// ServiceAccounts, Services and certificate Secrets), and where the
    /// pull Secrets of packagePullSecrets and ImageConfigs are read: the
    /// node pulls a runtime's image with them there. It should be one of
    /// its own: the rbac-manager (same setting) grants runtimes their Leases
    /// here, where no controller's Lease is, and, once Secrets are narrowed
    /// with its --runtime-secret-namespaces, no Secret here.
    #[arg(long, env = "RUNTIME_NAMESPACE", default_value = types::package_identity::RUNTIME_NAMESPACE)]
    pub runtime_namespace: String,

    /// How package runtimes are run: Deployment (create a Deployment,
    /// ServiceAccount and Service per revision) or External (deliver the
    /// revision's CRDs and leave the runtime to an external controller).
    #[arg(long, env = "PACKAGE_RUNTIME", value_enum, default_value_t = PackageRuntime::Deployment)]
    pub package_runtime: PackageRuntime,

    /// Honour runtimeConfigRef (DeploymentRuntimeConfig); when false, honour
    /// the deprecated controllerConfigRef (ControllerConfig) instead.
    #[arg(long, env = "ENABLE_RUNTIME_CONFIG", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_runtime_config: bool,

    /// A PEM bundle of CA certificates trusted for registries, besides the
    /// system's roots. (Where packages are read from and with which
    /// credentials is said by ImageConfigs, which take effect without a
    /// restart; trust stays the operator's, as upstream.)
    #[arg(long, env = "CA_BUNDLE_PATH")]
    pub ca_bundle_path: Option<PathBuf>,

    /// Where pulled packages are kept, by digest.
    #[arg(long, env = "PACKAGE_CACHE_DIR", default_value = "/cache/xpkg")]
    pub package_cache_dir: PathBuf,

    /// How many places Provider packages have in memory (read and parsed,
    /// while a Provider or revision reconcile works with one); other
    /// reconciles that need one wait their turn. A place is 40 MiB of
    /// objects (the parse bound): a package not yet cached takes a whole
    /// one, a cached one a share by its size (one of a few small CRDs a
    /// fortieth), so small packages are read side by side. Raise it with
    /// the memory limit.
    #[arg(long, env = "MAX_PACKAGES_IN_MEMORY", default_value_t = 1)]
    pub max_packages_in_memory: usize,

    /// The most the package cache may hold, in bytes; the oldest packages
    /// go first.
    #[arg(long, env = "PACKAGE_CACHE_MAX_BYTES", default_value_t = 512 * 1024 * 1024)]
    pub package_cache_max_bytes: u64,

    /// How often a package with packagePullPolicy Always is resolved again
    /// (a moved tag makes a new revision).
    #[arg(long, env = "PACKAGE_PULL_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    pub package_pull_interval: Duration,

    /// The registry an ExtensionRequest without spec.source installs from
    /// (host[:port][/path]).
    #[arg(
        long,
        env = "DEFAULT_REGISTRY",
        default_value = "registry.crossplane.io"
    )]
    pub default_registry: String,

    /// Hosts (`host` or `host:port`) that may serve a registry's token
    /// service on another host than the registry's own, and so receive
    /// that registry's credentials to exchange for a token (e.g.
    /// auth.docker.io for Docker Hub). Repeatable. By default credentials
    /// go only to the registry's own host, over https.
    #[arg(long, env = "REGISTRY_TOKEN_REALM_HOSTS", value_delimiter = ',')]
    pub registry_token_realm_hosts: Vec<String>,

    /// Registries (`host[:port]`) read over plain HTTP, their credentials
    /// sent in the clear. Repeatable; none by default.
    #[arg(long, env = "REGISTRY_PLAIN_HTTP", value_delimiter = ',')]
    pub registry_plain_http: Vec<String>,

    /// Let a DeploymentRuntimeConfig (or ControllerConfig) make a package
    /// runtime break the Pod Security Standard "restricted" (privileged,
    /// host namespaces, hostPath, added capabilities, root, privilege
    /// escalation, host ports). Off: such a runtime is refused with a
    /// condition naming each field. Stack controllers are always
    /// restricted.
    #[arg(long, env = "ALLOW_UNRESTRICTED_RUNTIMES", default_value_t = false, action = clap::ArgAction::Set)]
    pub allow_unrestricted_runtimes: bool,
    /// Let the package-manager move a dependency it installed to an older
    /// version when that is the newest one every installed dependent
    /// accepts. Off: a dependency only moves up, and a needed move down is
    /// named on the dependent.
    #[arg(long, env = "ENABLE_DEPENDENCY_VERSION_DOWNGRADES", default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_dependency_version_downgrades: bool,

    /// The ConfigMap, in the runtime namespace, whose key
    /// `trusted_root.json` is the Sigstore trusted root keyless cosign
    /// authorities are checked with (`cosign trusted-root create` writes
    /// one; Sigstore's public-good instance publishes theirs). Missing, a
    /// keyless authority verifies nothing and says so.
    #[arg(long, env = "TRUSTED_ROOT", default_value = "sigstore-trusted-root")]
    pub trusted_root: String,

    /// Patterns of the ManagedResourceActivationPolicy "default", created
    /// at start when there is none (never changed afterwards; delete it to
    /// activate nothing by default). Repeat the flag for several patterns;
    /// none (the default) makes no policy: the managed resources of a
    /// package with the SafeStart capability then wait for one.
    #[arg(long = "activation", env = "ACTIVATIONS", value_delimiter = ',')]
    pub activations: Vec<String>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Converts deprecated objects to their replacements.
    Convert {
        #[command(subcommand)]
        what: Convert,
    },
}

#[derive(Debug, Subcommand)]
pub enum Convert {
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
