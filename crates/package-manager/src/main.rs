//! `package-manager`: Installs packages: ExtensionRequests, Extensions, Providers and their runtimes.
//!
//! Observe-only for now: it watches its kinds, serves metrics and health, and
//! takes its Lease when asked; its reconcile logic lands in a later change.

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource, observe},
};
use types::extensions::v1alpha1::Extension;
use types::extensions::v1alpha1::ExtensionRequest;
use types::pkg::v1::Provider;
use types::pkg::v1::ProviderRevision;
use types::pkg::v1alpha1::ControllerConfig;
use types::pkg::v1beta1::DeploymentRuntimeConfig;

const BINARY: &str = "package-manager";

/// Installs packages: ExtensionRequests, Extensions, Providers and their runtimes.
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
}

/// How package runtimes are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PackageRuntime {
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
    runtime::init_process(args.common.log_format);
    let (package_runtime, enable_runtime_config) =
        (args.package_runtime, args.enable_runtime_config);
    tracing::info!(
        ?package_runtime,
        enable_runtime_config,
        "package runtime settings"
    );
    let rt = Runtime::new(BINARY, args.common).await?;
    let kinds = [
        api_resource::<ExtensionRequest>(),
        api_resource::<Extension>(),
        api_resource::<Provider>(),
        api_resource::<ProviderRevision>(),
        api_resource::<DeploymentRuntimeConfig>(),
        api_resource::<ControllerConfig>(),
    ];
    let work = {
        let rt = rt.clone();
        async move {
            tokio::join!(
                observe::<ExtensionRequest>(rt.clone(), "extensionrequest"),
                observe::<Extension>(rt.clone(), "extension"),
                observe::<Provider>(rt.clone(), "provider"),
                observe::<ProviderRevision>(rt.clone(), "providerrevision"),
                observe::<DeploymentRuntimeConfig>(rt.clone(), "deploymentruntimeconfig"),
                observe::<ControllerConfig>(rt.clone(), "controllerconfig"),
            );
        }
    };
    rt.run(&kinds, work).await?;
    Ok(())
}
