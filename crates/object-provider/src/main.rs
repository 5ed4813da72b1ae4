//! `object-provider`: Manages any Kubernetes manifest in a local or remote cluster through Objects.
//!
//! Observe-only for now: it watches its kinds, serves metrics and health, and
//! takes its Lease when asked; its reconcile logic lands in a later change.

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource, observe},
};
use types::kubernetes::v1alpha1::Object;
use types::kubernetes::v1alpha1::ProviderConfig;
use types::kubernetes::v1alpha1::ProviderConfigUsage;

const BINARY: &str = "object-provider";

/// Manages any Kubernetes manifest in a local or remote cluster through Objects.
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
        api_resource::<Object>(),
        api_resource::<ProviderConfig>(),
        api_resource::<ProviderConfigUsage>(),
    ];
    let work = {
        let rt = rt.clone();
        async move {
            tokio::join!(
                observe::<Object>(rt.clone(), "object"),
                observe::<ProviderConfig>(rt.clone(), "providerconfig"),
                observe::<ProviderConfigUsage>(rt.clone(), "providerconfigusage"),
            );
        }
    };
    rt.run(&kinds, work).await?;
    Ok(())
}
