//! `scheduler`: keeps each KubernetesCluster's Ready condition and places
//! each unscheduled KubernetesApplication onto a Ready cluster that matches
//! its clusterSelector.

mod applications;
mod clusters;
mod placement;
mod selector;

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource},
    remote::RemoteClients,
};
use types::{compute::v1alpha1::KubernetesCluster, workload::v1alpha1::KubernetesApplication};

const BINARY: &str = "scheduler";

/// Places KubernetesApplications onto KubernetesClusters.
#[derive(Debug, Parser)]
#[command(name = BINARY, version, about)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// How often each KubernetesCluster's API server is asked `/version` to
    /// keep its Ready condition true (±10% per cluster). A cluster's
    /// liveness cannot be watched, so this is a probe, not a resync: a
    /// cluster that stops answering becomes not Ready, and no longer gets
    /// new applications, within this time. A shorter --poll-interval
    /// shortens it too.
    #[arg(long, env = "CLUSTER_PROBE_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    cluster_probe_interval: std::time::Duration,
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
    let probe = args.cluster_probe_interval.min(rt.args.poll_interval);
    // Built again each time this replica leads again (fresh caches).
    let build = {
        let rt = rt.clone();
        move || {
            let remote = RemoteClients::new(rt.metrics.clone(), rt.args.allow_insecure_remote_tls);
            let clusters = clusters::controller(&rt, remote, probe);
            let applications = applications::controller(&rt);
            async move {
                tokio::join!(clusters, applications?);
                Ok(())
            }
        }
    };
    rt.run(&kinds, build).await?;
    Ok(())
}
