//! `object-provider`: manages any Kubernetes manifest in the local or a
//! remote cluster through Objects, with management policies, references and
//! ordered uninstall.

mod conversion;
mod object;
mod policy;
mod providerconfig;

use std::time::Duration;

use clap::Parser;
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
    conversion::serve(&rt, &args.webhook, BINARY).await?;
    let kinds = [api_resource::<Object>(), api_resource::<ProviderConfig>()];
    // Built again each time this replica leads again (fresh caches).
    let build = {
        let rt = rt.clone();
        move || {
            let rt = rt.clone();
            async move {
                let mut configs = providerconfig::watch_configs(&rt);
                let mut objects = object::watch_objects(&rt);
                let changed =
                    std::mem::replace(&mut configs.changed, futures::channel::mpsc::unbounded().1);
                let config_wakes = std::mem::replace(
                    &mut objects.config_wakes,
                    futures::channel::mpsc::unbounded().1,
                );
                let object_store = objects.objects.clone();
                let object_controller = object::controller(
                    &rt,
                    args.deletion_timeout,
                    objects,
                    configs.store.clone(),
                    changed,
                )?;
                let config_controller =
                    providerconfig::controller(&rt, configs, object_store, config_wakes);
                tokio::join!(object_controller, config_controller);
                Ok(())
            }
        }
    };
    rt.run(&kinds, build).await?;
    // Not ready any more: conversions go on while the Service forgets this
    // replica.
    tokio::time::sleep(args.webhook.webhook_drain).await;
    Ok(())
}
