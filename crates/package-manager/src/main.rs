//! `package-manager`: installs Provider packages: resolves a Provider's
//! package to a digest, makes a ProviderRevision per digest, installs the
//! package's CRDs and runs its runtime (a Deployment per revision, rendered
//! from a DeploymentRuntimeConfig). Installs Stacks (seed 001): an
//! ExtensionRequest's stack package and its dependencies, found by package
//! or by CRD in a registry, and every Extension's controller. ControllerConfigs
//! are only observed here (a revision reads them).
//!
//! `package-manager convert controllerconfig FILE` prints the
//! DeploymentRuntimeConfig equivalent to a deprecated ControllerConfig.

//!
//! Rooms, as upstream's `internal/controller/pkg`: [`manager`] turns a
//! Provider into revisions, [`revision`] establishes a revision's objects
//! and dependencies, [`runtime`] renders, applies, stops and reads the
//! health of a package runtime (a revision's or a stack Extension's),
//! [`stacks`] installs stacks.

mod args;
mod convert;
mod crds;
mod deps;
mod failure;
mod image_configs;
mod labels;
mod manager;
mod mrds;
mod package_runtime;
mod packages;
mod podsecurity;
mod revision;
mod signatures;
mod stacks;
mod tls;
mod usage;
mod webhooks;

use anyhow::Context as _;
use clap::Parser as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api,
    api::{DeleteParams, ListParams, ObjectMeta, PostParams},
};
use runtime::controller::{Runtime, api_resource, observe};
use types::apiextensions::v1alpha1::{
    ManagedResourceActivationPolicy, ManagedResourceActivationPolicySpec, ManagedResourceDefinition,
};
use types::extensions::v1alpha1::Extension;
use types::extensions::v1alpha1::ExtensionRequest;
use types::pkg::v1::Provider;
use types::pkg::v1::ProviderRevision;
use types::pkg::v1alpha1::ControllerConfig;
use types::pkg::v1beta1::{DeploymentRuntimeConfig, DeploymentRuntimeConfigSpec, ImageConfig};

use args::{Args, BINARY, Command, Convert, PackageRuntime};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::Convert {
        what: Convert::Controllerconfig { file, provider },
    }) = &args.command
    {
        return convert::command(file, provider.as_deref());
    }
    runtime::init_process(args.common.log_format);
    tracing::info!(
        package_runtime = ?args.package_runtime,
        enable_runtime_config = args.enable_runtime_config,
        "package runtime settings"
    );
    let tls = match &args.ca_bundle_path {
        Some(p) => oci::Tls::Ca(
            std::fs::read(p)
                .with_context(|| format!("reading --ca-bundle-path {}", p.display()))?,
        ),
        None => oci::Tls::System,
    };
    let controllers_namespace = args.common.leader_election_namespace.clone();
    // The package cache on disk outlives a spell of leading; the caches of
    // API objects do not.
    let fetcher = std::sync::Arc::new(
        oci::xpkg::Fetcher::new(args.package_cache_dir.clone(), args.package_cache_max_bytes)
            .with_tls(&tls)
            .with_policy(oci::RegistryPolicy {
                realm_hosts: args.registry_token_realm_hosts.clone(),
                plain_http: args.registry_plain_http.clone(),
            }),
    );
    let rt = Runtime::new(BINARY, args.common.clone()).await?;
    let steps = packages::fetch_steps(&rt.metrics)?;
    let kinds = [
        api_resource::<ExtensionRequest>(),
        api_resource::<Extension>(),
        api_resource::<Provider>(),
        api_resource::<ProviderRevision>(),
        api_resource::<DeploymentRuntimeConfig>(),
        api_resource::<ControllerConfig>(),
        api_resource::<ImageConfig>(),
        api_resource::<ManagedResourceDefinition>(),
        api_resource::<ManagedResourceActivationPolicy>(),
    ];
    // Built again each time this replica leads again (fresh caches).
    let build = {
        let rt = rt.clone();
        move || {
            let work = work(
                &rt,
                &args,
                (fetcher.clone(), steps.clone()),
                &controllers_namespace,
            );
            async move {
                work.await;
                Ok(())
            }
        }
    };
    rt.run(&kinds, build).await?;
    Ok(())
}

/// Every controller of the package-manager, with fresh caches: what one
/// spell of leading runs. It first makes the `default`
/// DeploymentRuntimeConfig when there is none and stops runtimes an earlier
/// release left in the controllers' namespace.
fn work(
    rt: &Runtime,
    args: &Args,
    (fetcher, steps): (std::sync::Arc<oci::xpkg::Fetcher>, prometheus::HistogramVec),
    controllers_namespace: &str,
) -> impl Future<Output = ()> + use<> {
    let namespace = args.runtime_namespace.clone();
    let (image_configs, image_configs_watch) =
        image_configs::ImageConfigs::watch(rt.client.clone());
    let packages = packages::Packages::new(
        fetcher,
        Api::namespaced(rt.client.clone(), &namespace),
        image_configs.clone(),
        args.max_packages_in_memory,
        steps,
    );
    // Every CRD's name and kind, and the CRDs stacks mark (stacks::known::Known).
    let (crds, crd_changes) = stacks::known::Known::watch(rt.client.clone());
    let extensions = stacks::extensions::controller(
        rt,
        crds.clone(),
        crd_changes,
        &image_configs,
        rt.args.sync_interval,
    );
    let requests = stacks::requests::controller(
        rt,
        stacks::index::Index::new(packages.clone()),
        args.default_registry.clone(),
        &image_configs,
        crds.clone(),
        rt.args.sync_interval,
    );
    let providers = manager::controller(
        rt,
        packages.clone(),
        &image_configs,
        crds.clone(),
        manager::Settings {
            pull_interval: args.package_pull_interval,
            resync: rt.args.sync_interval,
            runtime_bound: args.package_runtime == PackageRuntime::Deployment,
        },
    );
    // What the MRD controller knows of each MRD's CRD: the revision
    // controller serves the CRDs of the MRDs it makes and says so.
    let served = mrds::Served::default();
    let revisions = revision::controller(
        rt,
        packages,
        &image_configs,
        crds.clone(),
        served.clone(),
        revision::Settings {
            namespace: namespace.clone(),
            mode: args.package_runtime,
            enable_runtime_config: args.enable_runtime_config,
            resync: rt.args.sync_interval,
            allow_unrestricted_runtimes: args.allow_unrestricted_runtimes,
            allow_dependency_downgrades: args.enable_dependency_version_downgrades,
            trusted_root: args.trusted_root.clone(),
        },
    );
    let mrds = mrds::controller(rt, crds.clone(), served);
    let policies = mrds::activation::controller(rt);
    let activations = args.activations.clone();
    let rt = rt.clone();
    let deployment_runtime = args.package_runtime == PackageRuntime::Deployment;
    let controllers_namespace = controllers_namespace.to_owned();
    async move {
        if deployment_runtime {
            default_runtime_config(&rt.client).await;
        }
        stop_runtimes_left_in(&rt.client, &controllers_namespace, &namespace).await;
        default_activation_policy(&rt.client, activations).await;
        tokio::join!(
            providers,
            revisions,
            mrds,
            policies,
            requests,
            extensions,
            image_configs_watch,
            observe::<ControllerConfig>(rt.clone(), "controllerconfig"),
        );
    }
}

/// Runtimes an earlier release ran in the controllers' namespace: their
/// Deployments are removed once at start, so that no provider runs twice
/// (its revision runs it again in the runtimes' namespace). Their
/// ServiceAccount, Service and certificate Secrets are the Provider's and
/// go with it.
async fn stop_runtimes_left_in(client: &kube::Client, namespace: &str, runtimes: &str) {
    if namespace == runtimes {
        return;
    }
    let api = Api::<Deployment>::namespaced(client.clone(), namespace);
    let listed = api
        .list_metadata(&ListParams::default().labels(labels::REVISION))
        .await;
    let left = match listed {
        Ok(l) => l.items,
        Err(e) => {
            let error = runtime::events::error_chain(&e);
            tracing::warn!(%error, namespace, "cannot list runtimes an earlier release left in the controllers' namespace");
            return;
        }
    };
    for d in left.iter().filter(|d| run_by_a_revision(&d.metadata)) {
        let name = d.metadata.name.clone().unwrap_or_default();
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(
                namespace,
                deployment = name,
                runtimes,
                "removed a runtime an earlier release ran in the controllers' namespace; its revision runs it in the runtimes' namespace"
            ),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                let error = runtime::events::error_chain(&e);
                tracing::warn!(%error, namespace, deployment = name, "cannot remove a runtime an earlier release left in the controllers' namespace");
            }
        }
    }
}

/// Whether an object is a ProviderRevision's runtime: controlled by one.
fn run_by_a_revision(meta: &ObjectMeta) -> bool {
    meta.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.kind == "ProviderRevision"
            && o.api_version.starts_with("pkg.crossplane.io/")
    })
}

/// Creates the `default` DeploymentRuntimeConfig when there is none; one
/// that exists is never changed. An empty spec renders the same runtime as
/// the seed's `default` example.
async fn default_runtime_config(client: &kube::Client) {
    let api = Api::<DeploymentRuntimeConfig>::all(client.clone());
    let config = DeploymentRuntimeConfig {
        metadata: ObjectMeta {
            name: Some(revision::DEFAULT_RUNTIME_CONFIG.to_owned()),
            ..ObjectMeta::default()
        },
        spec: DeploymentRuntimeConfigSpec::default(),
    };
    match api.create(&PostParams::default(), &config).await {
        Ok(_) => tracing::info!("created the default DeploymentRuntimeConfig"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            let error = runtime::events::error_chain(&e);
            tracing::warn!(%error, "cannot create the default DeploymentRuntimeConfig; runtimes that use it wait for it");
        }
    }
}

/// Creates the ManagedResourceActivationPolicy `default` with
/// `activations` (`--activation`) when there is none; one that exists is
/// never changed. No flag, no policy.
async fn default_activation_policy(client: &kube::Client, activations: Vec<String>) {
    if activations.is_empty() {
        return;
    }
    let api = Api::<ManagedResourceActivationPolicy>::all(client.clone());
    let policy = ManagedResourceActivationPolicy {
        metadata: ObjectMeta {
            name: Some("default".to_owned()),
            ..ObjectMeta::default()
        },
        spec: ManagedResourceActivationPolicySpec {
            activate: activations,
        },
        status: None,
    };
    match api.create(&PostParams::default(), &policy).await {
        Ok(_) => tracing::info!("created the default ManagedResourceActivationPolicy"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            let error = runtime::events::error_chain(&e);
            tracing::warn!(%error, "cannot create the default ManagedResourceActivationPolicy");
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    #[test]
    fn only_a_deployment_a_provider_revision_controls_is_taken_for_a_left_runtime() {
        let owned = |api_version: &str, kind: &str, controller: Option<bool>| ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: "p-1".into(),
                uid: "u".into(),
                controller,
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        assert!(run_by_a_revision(&owned(
            "pkg.crossplane.io/v1",
            "ProviderRevision",
            Some(true)
        )));
        assert!(!run_by_a_revision(&owned(
            "pkg.crossplane.io/v1",
            "ProviderRevision",
            None
        )));
        assert!(!run_by_a_revision(&owned(
            "pkg.crossplane.io/v1",
            "Provider",
            Some(true)
        )));
        assert!(!run_by_a_revision(&owned(
            "example.org/v1",
            "ProviderRevision",
            Some(true)
        )));
        assert!(!run_by_a_revision(&ObjectMeta::default()));
    }
}
