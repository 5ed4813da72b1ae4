//! `rbac-manager`: Grants package service accounts the RBAC their packages need.
//!
//! Observe-only for now: it watches its kinds, serves metrics and health, and
//! takes its Lease when asked; its reconcile logic lands in a later change.

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource, observe},
};
use types::extensions::v1alpha1::Extension;
use types::pkg::v1::ProviderRevision;

const BINARY: &str = "rbac-manager";

/// Grants package service accounts the RBAC their packages need.
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
        api_resource::<ProviderRevision>(),
        api_resource::<Extension>(),
    ];
    let work = {
        let rt = rt.clone();
        async move {
            tokio::join!(
                observe::<ProviderRevision>(rt.clone(), "providerrevision"),
                observe::<Extension>(rt.clone(), "extension"),
            );
        }
    };
    rt.run(&kinds, work).await?;
    Ok(())
}
