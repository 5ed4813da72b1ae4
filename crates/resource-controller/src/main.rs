//! `resource-controller`: Submits KubernetesApplicationResources to their remote clusters.
//!
//! Observe-only for now: it watches its kinds, serves metrics and health, and
//! takes its Lease when asked; its reconcile logic lands in a later change.

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource, observe},
};
use types::workload::v1alpha1::KubernetesApplicationResource;

const BINARY: &str = "resource-controller";

/// Submits KubernetesApplicationResources to their remote clusters.
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
    let kinds = [api_resource::<KubernetesApplicationResource>()];
    let work = {
        let rt = rt.clone();
        async move {
            tokio::join!(observe::<KubernetesApplicationResource>(
                rt.clone(),
                "kubernetesapplicationresource"
            ),);
        }
    };
    rt.run(&kinds, work).await?;
    Ok(())
}
