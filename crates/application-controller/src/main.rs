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

    /// How many KubernetesApplicationResources may wait for the
    /// resource-controller (created, not yet submitted or failed) before the
    /// resources of an application that has none yet are held back: the
    /// application stays Scheduled, Ready=False with reason
    /// WaitingForResourceController, until fewer wait. Resources made long
    /// before the resource-controller can take them only load the control
    /// API server while it submits others. 0 holds nothing back.
    #[arg(long, env = "MAX_WAITING_RESOURCES", default_value_t = controller::BACKLOG)]
    max_waiting_resources: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    runtime::init_process(args.common.log_format);
    let max_waiting = args.max_waiting_resources;
    let rt = Runtime::new(BINARY, args.common).await?;
    let kinds = [
        api_resource::<KubernetesApplication>(),
        api_resource::<KubernetesApplicationResource>(),
    ];
    // Built again each time this replica leads again (fresh caches).
    let build = {
        let rt = rt.clone();
        move || {
            let controller = controller::controller(&rt, max_waiting);
            async move {
                controller.await;
                Ok(())
            }
        }
    };
    rt.run(&kinds, build).await?;
    Ok(())
}
