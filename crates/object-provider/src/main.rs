//! `object-provider`: manages any Kubernetes manifest in the local or a
//! remote cluster through Objects, with management policies, references and
//! ordered uninstall.

mod object;
mod policy;
mod providerconfig;
mod references;

use std::time::Duration;

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource},
};
use types::kubernetes::v1alpha1::{Object, ProviderConfig, ProviderConfigUsage};

const BINARY: &str = "object-provider";

/// Manages any Kubernetes manifest in a local or remote cluster through Objects.
#[derive(Debug, Parser)]
#[command(name = BINARY, version, about)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// How long a deleted Object keeps trying to delete its managed object
    /// from a target that does not answer before it leaves it in place (with
    /// a Warning event) and goes.
    #[arg(long, env = "DELETION_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    deletion_timeout: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    runtime::init_process(args.common.log_format);
    let rt = Runtime::new(BINARY, args.common).await?;
    let kinds = [
        api_resource::<Object>(),
        api_resource::<ProviderConfig>(),
        api_resource::<ProviderConfigUsage>(),
    ];
    let objects = object::controller(&rt, args.deletion_timeout)?;
    let configs = providerconfig::controller(&rt);
    rt.clone()
        .run(&kinds, async move {
            tokio::join!(objects, configs);
        })
        .await?;
    Ok(())
}
