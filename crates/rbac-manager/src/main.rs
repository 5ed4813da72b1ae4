//! `rbac-manager`: Grants package service accounts the RBAC their packages need,
//! and no more than the operator allowed.
//!
//! For each ProviderRevision it renders ClusterRoles from the CRDs the
//! revision installed and binds the `system` one to the revision's runtime
//! ServiceAccount ([`revisions`]); an Extension gets a role with its
//! permissions and the kinds it owns or depends on, bound to the
//! ServiceAccount the package-manager made for its controller
//! ([`extensions`]). What a package or an Extension says is data: every
//! rule passes one boundary ([`boundary`]: the allow-list and a fixed
//! never-grantable list), kinds are granted only when their CRDs allow it
//! ([`kinds`]), and roles are bound only to identities the package did not
//! pick ([`subjects`]); [`roles`] renders what passed. Narrowed, runtimes'
//! Secrets and ConfigMaps are granted per named namespace ([`secrets`]).
//!
//! What the controllers share lives apart from them: the watched allow-list
//! ([`allow_list`]), the metrics ([`metrics`]), the reconcile error
//! ([`error`]) and the writer of the RBACReady condition ([`status`]).

mod allow_list;
mod boundary;
mod error;
mod extensions;
mod kinds;
mod metrics;
mod revisions;
mod roles;
mod secrets;
mod status;
mod subjects;

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
    /// its meta, an Extension's permissions.rules); a request it does not
    /// cover is refused and the package gets no role at all. Some rights
    /// are refused whatever it says (impersonate, escalate, bind,
    /// wildcards, tokens, RBAC/admission/CRD writes, the project's own
    /// API groups).
    #[arg(
        long,
        env = "ALLOWED_PERMISSIONS_CLUSTERROLE",
        default_value = "crossplane-rs:allowed-provider-permissions"
    )]
    allowed_permissions_clusterrole: String,

    /// The namespaces where Provider runtimes may read and write Secrets
    /// and ConfigMaps (credentials, connection details), comma-separated.
    /// Unset: every namespace (as upstream Crossplane grants them; its
    /// providers list and watch them across namespaces), the runtimes' own
    /// with other providers' certificates and pull Secrets included. Set:
    /// one RoleBinding in each named namespace only, never the runtimes'.
    #[arg(long, env = "RUNTIME_SECRET_NAMESPACES", value_delimiter = ',')]
    runtime_secret_namespaces: Vec<String>,

    /// The namespace Provider runtimes run in (the package-manager's
    /// --runtime-namespace): their ServiceAccounts are bound, their Leases
    /// granted there, and never Secrets by --runtime-secret-namespaces.
    #[arg(long, env = "RUNTIME_NAMESPACE", default_value = types::package_identity::RUNTIME_NAMESPACE)]
    runtime_namespace: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    runtime::init_process(args.common.log_format);
    let namespace = args.runtime_namespace.clone();
    let allowed = args.allowed_permissions_clusterrole.clone();
    let rt = Runtime::new(BINARY, args.common).await?;
    let kinds = [
        api_resource::<ProviderRevision>(),
        api_resource::<Extension>(),
    ];
    let metrics = metrics::RbacMetrics::new(&rt)?;
    let secret_namespaces: Vec<String> = args
        .runtime_secret_namespaces
        .iter()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    let narrowed = !secret_namespaces.is_empty();
    // Built again each time this replica leads again (fresh caches).
    let build = {
        let rt = rt.clone();
        move || {
            let (allow_list, allow_changes) = allow_list::AllowList::watch(&rt, allowed.clone());
            let extensions = extensions::controller(&rt, allow_list.clone(), metrics.clone());
            let secrets = narrowed.then(|| {
                let scope = secrets::Scope(secret_namespaces.clone(), namespace.clone());
                secrets::controller(&rt, scope)
            });
            let revisions = revisions::controller(
                &rt,
                (namespace.clone(), narrowed),
                (allow_list, allow_changes),
                metrics.clone(),
            );
            async move {
                let secrets = async {
                    if let Some(s) = secrets {
                        s.await;
                    }
                };
                tokio::join!(revisions, extensions, secrets);
                Ok(())
            }
        }
    };
    rt.run(&kinds, build).await?;
    Ok(())
}
