//! `scheduler`: Places KubernetesApplications onto KubernetesClusters.
//!
//! Observe-only for now: it watches its kinds, serves metrics and health, and
//! takes its Lease when asked; its reconcile logic lands in a later change.

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource, observe},
};
use types::compute::v1alpha1::KubernetesCluster;
use types::workload::v1alpha1::KubernetesApplication;

const BINARY: &str = "scheduler";

/// Places KubernetesApplications onto KubernetesClusters.
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
        api_resource::<KubernetesCluster>(),
    ];
    let work = {
        let rt = rt.clone();
        async move {
            tokio::join!(
                observe::<KubernetesApplication>(rt.clone(), "kubernetesapplication"),
                observe::<KubernetesCluster>(rt.clone(), "kubernetescluster"),
            );
        }
    };
    rt.run(&kinds, work).await?;
    Ok(())
}
