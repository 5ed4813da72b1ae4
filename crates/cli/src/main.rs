//! `crossplane-rs`, the user's command line. `crossplane-rs trace TYPE/NAME`
//! prints an object and everything it is made of, each with its status and
//! the message that explains it, as `crossplane beta trace` does: a
//! KubernetesApplication, a Provider, an ExtensionRequest or an Object. It
//! reads only what a user bound to `crossplane-view` may read (see
//! deploy/base/rbac-manager/trace-roles.yaml), never a Secret and never a
//! remote cluster; what it may not read is a node saying so.

#[cfg(test)]
mod fake;
mod node;
mod render;
mod source;
mod target;
mod trace;
mod watch;

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The crossplane-rs command line.
#[derive(Debug, Parser)]
#[command(name = "crossplane-rs", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show an object and what it is made of, with the status of each:
    /// kubernetesapplication (kapp), provider, extensionrequest (extreq)
    /// or object.
    Trace(TraceArgs),
}

#[derive(Debug, Args)]
struct TraceArgs {
    /// What to trace: TYPE/NAME or TYPE NAME, e.g. provider/provider-kubernetes.
    #[arg(required = true, num_args = 1..=2, value_name = "TYPE/NAME")]
    what: Vec<String>,
    /// The namespace of a namespaced object (default: the context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// tree, wide (namespaces, details, whole messages) or json.
    #[arg(short = 'o', long, value_enum, default_value = "tree")]
    output: render::Output,
    /// Redraw whenever anything in the tree changes.
    #[arg(short = 'w', long)]
    watch: bool,
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config,
    /// else in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// The namespace Provider runtimes run in (the package-manager's
    /// --runtime-namespace).
    #[arg(
        long,
        env = "CROSSPLANE_RS_SYSTEM_NAMESPACE",
        default_value = types::package_identity::RUNTIME_NAMESPACE
    )]
    system_namespace: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let Command::Trace(args) = Cli::parse().command;
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: TraceArgs) -> anyhow::Result<()> {
    let target = target::parse(&args.what)?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer()
            .await
            .context("no kubeconfig: set KUBECONFIG or --kubeconfig")?,
    };
    let at = trace::Places {
        namespace: args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone()),
        system_namespace: args.system_namespace.clone(),
    };
    let kube = source::Kube::new(kube::Client::try_from(config)?);
    if args.watch {
        return watch::watch(&kube, &target, &at, args.output).await;
    }
    let root = trace::build(&kube, &target, &at).await?;
    print!("{}", render::render(&root, args.output));
    Ok(())
}
