//! `rbac-manager`: Grants package service accounts the RBAC their packages need.
//!
//! For each ProviderRevision it renders ClusterRoles from the CRDs the
//! revision installed and binds the `system` one to the revision's runtime
//! ServiceAccount ([`revisions`]); an Extension gets a role with its
//! permissions and CRDs, bound to its controller's ServiceAccount
//! ([`extensions`]).

mod extensions;
mod revisions;
mod roles;

use clap::Parser;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource},
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

    /// The ClusterRole whose rules bound what a package may ask for its
    /// runtime beyond its own kinds (spec.controller.permissionRequests of
    /// its meta); a request it does not cover is refused and no role of
    /// that revision is created or widened.
    #[arg(
        long,
        env = "ALLOWED_PERMISSIONS_CLUSTERROLE",
        default_value = "crossplane-rs:allowed-provider-permissions"
    )]
    allowed_permissions_clusterrole: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    runtime::init_process(args.common.log_format);
    let namespace = args.common.leader_election_namespace.clone();
    let allowed = args.allowed_permissions_clusterrole.clone();
    let rt = Runtime::new(BINARY, args.common).await?;
    let kinds = [
        api_resource::<ProviderRevision>(),
        api_resource::<Extension>(),
    ];
    let metrics = revisions::RbacMetrics::new(&rt)?;
    let revisions = revisions::controller(&rt, namespace, allowed.clone(), metrics);
    let extensions = extensions::controller(&rt, allowed);
    let work = async move {
        tokio::join!(revisions, extensions);
    };
    rt.run(&kinds, work).await?;
    Ok(())
}
