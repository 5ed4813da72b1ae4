//! `object-provider`: manages any Kubernetes manifest in the local or a
//! remote cluster through Objects, with management policies, references and
//! ordered uninstall, and ObservedObjectCollections of observe-only Objects.

mod collection;
mod conversion;
mod object;
mod policy;
mod providerconfig;

use std::time::Duration;

use clap::Parser;
use futures::StreamExt as _;
use kube::runtime::reflector::ObjectRef;
use runtime::{
    CommonArgs,
    controller::{Runtime, api_resource},
};
use types::kubernetes::{v1alpha1::ProviderConfig, v1alpha2::Object};

const BINARY: &str = "object-provider";

/// Manages any Kubernetes manifest in a local or remote cluster through Objects.
#[derive(Debug, Parser)]
#[command(name = BINARY, version, about)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,

    /// How long a deleted Object keeps trying to delete its managed object
    /// from a target that does not answer before it leaves it in place (with
    /// a Warning event) and goes.
    #[arg(long, env = "DELETION_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    deletion_timeout: Duration,

    #[command(flatten)]
    webhook: conversion::WebhookArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    runtime::init_process(args.common.log_format);
    let rt = Runtime::new(BINARY, args.common).await?;
    let drain = conversion::serve(&rt, &args.webhook, BINARY).await?;
    let kinds = [api_resource::<Object>(), api_resource::<ProviderConfig>()];
    let metrics = object::metrics::ObjectMetrics::register(&rt.metrics)?;
    // Built again each time this replica leads again (fresh caches).
    let build = {
        let rt = rt.clone();
        move || {
            let rt = rt.clone();
            let metrics = metrics.clone();
            async move {
                let mut configs = providerconfig::watch_configs(&rt);
                let mut objects = object::watch_objects::<Object>(&rt);
                let changed =
                    std::mem::replace(&mut configs.changed, futures::channel::mpsc::unbounded().1);
                let config_wakes = std::mem::replace(
                    &mut objects.config_wakes,
                    futures::channel::mpsc::unbounded().1,
                )
                .map(|name| kube::runtime::reflector::ObjectRef::new(&name));
                let object_store = objects.objects.clone();
                let reach = object::Reach::new(
                    &rt,
                    object::configs::Configs::Cluster(configs.store.clone()),
                    &object::WORDING,
                );
                // Once their CRD is there (Objects are reconciled meanwhile).
                let collections = {
                    let (rt, reach, objects) = (rt.clone(), reach.clone(), object_store.clone());
                    async move {
                        let kinds = [api_resource::<
                            types::kubernetes::v1alpha1::ObservedObjectCollection,
                        >()];
                        runtime::crds::wait_for(&rt.client, &kinds).await;
                        let name = collection::CONTROLLER;
                        collection::controller::<
                            types::kubernetes::v1alpha1::ObservedObjectCollection,
                        >(&rt, name, reach, objects)
                        .await;
                    }
                };
                let object_controller = object::controller(
                    &rt,
                    object::CONTROLLER,
                    args.deletion_timeout,
                    objects,
                    reach,
                    changed,
                    metrics.clone(),
                );
                let config_controller =
                    providerconfig::controller(&rt, configs, object_store, config_wakes);
                let namespaced = namespaced(&rt, args.deletion_timeout, metrics);
                tokio::join!(
                    object_controller,
                    config_controller,
                    namespaced,
                    collections
                );
                Ok(())
            }
        }
    };
    rt.run(&kinds, build).await?;
    // Not ready any more: conversions go on while the Service forgets this
    // replica, each on a connection of its own, and the last ones finish.
    drain.finish(args.webhook.webhook_drain).await;
    Ok(())
}

/// The namespaced Objects' controller, once their CRDs are there (a
/// cluster without `kubernetes.m.crossplane.io` still has its cluster
/// Objects reconciled meanwhile), and the namespaced collections', once
/// theirs is.
async fn namespaced(
    rt: &Runtime,
    deletion_timeout: Duration,
    metrics: object::metrics::ObjectMetrics,
) {
    use futures::StreamExt as _;
    use object::configs;
    use types::kubernetes_m::v1alpha1 as m;
    let kinds = [
        api_resource::<m::Object>(),
        api_resource::<m::ProviderConfig>(),
        api_resource::<m::ClusterProviderConfig>(),
    ];
    runtime::crds::wait_for(&rt.client, &kinds).await;
    let (local, local_events, local_changed) = configs::watch(rt);
    let (cluster, cluster_events, cluster_changed) = configs::watch(rt);
    let mut objects = object::watch_objects::<object::kind::Namespaced>(rt);
    let object_store = objects.objects.clone();
    // Configs whose users changed, to each kind's controller.
    let (local_wake, local_wakes) = futures::channel::mpsc::unbounded();
    let (cluster_wake, cluster_wakes) = futures::channel::mpsc::unbounded();
    let wakes = std::mem::replace(
        &mut objects.config_wakes,
        futures::channel::mpsc::unbounded().1,
    )
    .for_each(move |key| {
        match configs::parse_key(&key) {
            Some(configs::ConfigRef::Local { namespace, name }) => {
                let _ = local_wake.unbounded_send(ObjectRef::new(&name).within(&namespace));
            }
            Some(configs::ConfigRef::Cluster(name)) => {
                let _ = cluster_wake.unbounded_send(ObjectRef::new(&name));
            }
            _ => {}
        }
        std::future::ready(())
    });
    let reach = object::Reach::new(
        rt,
        configs::Configs::Namespaced {
            local: local.clone(),
            cluster: cluster.clone(),
        },
        &object::NAMESPACED_WORDING,
    );
    let collections = {
        let (reach, objects) = (reach.clone(), object_store.clone());
        async move {
            let kinds = [api_resource::<m::ObservedObjectCollection>()];
            runtime::crds::wait_for(&rt.client, &kinds).await;
            let name = collection::NAMESPACED_CONTROLLER;
            collection::controller::<m::ObservedObjectCollection>(rt, name, reach, objects).await;
        }
    };
    let controller = object::controller(
        rt,
        object::NAMESPACED_CONTROLLER,
        deletion_timeout,
        objects,
        reach,
        futures::stream::select(local_changed, cluster_changed),
        metrics,
    );
    let locals =
        providerconfig::controller_of(rt, local_events, local, object_store.clone(), local_wakes);
    let clusters =
        providerconfig::controller_of(rt, cluster_events, cluster, object_store, cluster_wakes);
    tokio::join!(controller, locals, clusters, wakes, collections);
}
