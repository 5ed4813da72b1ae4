//! `resource-controller`: submits each scheduled
//! KubernetesApplicationResource's templated object and Secrets to its remote
//! cluster and reports the remote object's status.

mod controller;
mod remote_object;

use std::time::Duration;

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource},
};
use types::workload::v1alpha1::KubernetesApplicationResource;

const BINARY: &str = "resource-controller";

/// Submits KubernetesApplicationResources to their remote clusters.
#[derive(Debug, Parser)]
#[command(name = BINARY, version, about)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// How long a deleted resource keeps trying to remove its remote objects
    /// from a cluster that does not answer before it leaves them in place
    /// (with a Warning event) and goes.
    #[arg(long, env = "REMOTE_DELETION_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    remote_deletion_timeout: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    runtime::init_process(args.common.log_format);
    let rt = Runtime::new(BINARY, args.common).await?;
    let kinds = [api_resource::<KubernetesApplicationResource>()];
    let controller = controller::controller(&rt, args.remote_deletion_timeout)?;
    rt.run(&kinds, controller).await?;
    Ok(())
}
