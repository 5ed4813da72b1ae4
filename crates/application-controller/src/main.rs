//! `application-controller`: turns each scheduled KubernetesApplication into
//! one KubernetesApplicationResource per template and reports the
//! application's state.

mod controller;
mod desired;

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource},
};
use types::workload::v1alpha1::{KubernetesApplication, KubernetesApplicationResource};

const BINARY: &str = "application-controller";

/// Turns scheduled KubernetesApplications into KubernetesApplicationResources.
#[derive(Debug, Parser)]
#[command(name = BINARY, version, about)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    runtime::init_process(args.common.log_format);
    let rt = Runtime::new(BINARY, args.common).await?;
    let kinds = [
        api_resource::<KubernetesApplication>(),
        api_resource::<KubernetesApplicationResource>(),
    ];
    let controller = controller::controller(&rt);
    rt.run(&kinds, controller).await?;
    Ok(())
}
