//! KubernetesCluster readiness: Ready is True when the connection Secret
//! exists, holds a valid kubeconfig and the cluster answers; otherwise the
//! message says what is wrong.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        Controller,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use runtime::{
    conditions,
    controller::{Reporting, Runtime},
    events::{ReconcileError, error_chain},
    remote::RemoteClients,
    ssa,
};
use types::compute::v1alpha1::KubernetesCluster;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "kubernetescluster";

/// Why a cluster could not be reconciled (not why it is unready: that is a
/// condition, not an error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the connection Secret failed for a reason other than absence.
    #[error("failed to read connection Secret {0}")]
    ReadSecret(String, #[source] kube::Error),
    /// Writing status failed.
    #[error("failed to write KubernetesCluster status")]
    WriteStatus(#[source] kube::Error),
    /// Serializing status failed.
    #[error("failed to serialize status")]
    Serialize(#[from] serde_json::Error),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::ReadSecret(..) => "CannotReadConnectionSecret",
            Error::WriteStatus(_) => "CannotWriteStatus",
            Error::Serialize(_) => "CannotSerializeStatus",
        }
    }
}

/// Shared by reconciles.
pub struct Ctx {
    rt: Runtime,
    remote: RemoteClients,
    reporting: Reporting,
    /// Every KubernetesCluster, watched: the clients of deleted ones go.
    clusters: Store<KubernetesCluster>,
}

/// Probes one cluster: None when Ready, else what is wrong.
async fn probe(ctx: &Ctx, cluster: &KubernetesCluster) -> Result<Option<String>, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let secret_ref = &cluster.spec.connection_secret_ref;
    let secrets: Api<Secret> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let secret = secrets
        .get_opt(&secret_ref.name)
        .await
        .map_err(|e| Error::ReadSecret(format!("{ns}/{}", secret_ref.name), e))?;
    let name = format!("{ns}/{}", cluster.name_any());
    ctx.remote.retain_owners(|owner| {
        owner
            .split_once('/')
            .is_some_and(|(ns, name)| ctx.clusters.get(&ObjectRef::new(name).within(ns)).is_some())
    });
    let Some(secret) = secret else {
        ctx.remote.release(&name);
        return Ok(Some(format!(
            "connection Secret {ns}/{} not found: create it with a kubeconfig under key {:?}",
            secret_ref.name, secret_ref.key
        )));
    };
    let remote = match ctx.remote.for_secret(&name, &secret, &secret_ref.key) {
        Ok(r) => r,
        Err(e) => return Ok(Some(error_chain(&e))),
    };
    // GET /version within --remote-timeout; a cluster that did not answer
    // is only probed again after a pause (the breaker's half-open probe).
    let label = format!("KubernetesCluster {name}");
    match ctx
        .rt
        .clusters
        .run(&label, remote.client.apiserver_version())
        .await
    {
        Ok(Ok(_)) => Ok(None),
        Ok(Err(e)) => Ok(Some(format!(
            "the cluster does not answer: {}",
            error_chain(&e)
        ))),
        Err(e) => Ok(Some(error_chain(&e))),
    }
}

async fn reconcile(cluster: Arc<KubernetesCluster>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.reporting
        .reconcile(cluster.as_ref(), async {
            let problem = probe(&ctx, &cluster).await?;
            let mut status = cluster.status.clone().unwrap_or_default();
            let was_ready = conditions::get(&status.conditions, conditions::TYPE_READY)
                .map(|c| c.status.clone());
            let cond = match &problem {
                None => conditions::available(),
                Some(msg) => conditions::unavailable(msg.clone()),
            };
            let mut changed = conditions::set(&mut status.conditions, cond, &conditions::now());
            if status.observed_generation != cluster.metadata.generation {
                status.observed_generation = cluster.metadata.generation;
                changed = true;
            }
            if changed {
                let api: Api<KubernetesCluster> = Api::namespaced(
                    ctx.rt.client.clone(),
                    &cluster.namespace().unwrap_or_default(),
                );
                ssa::apply_status(
                    &api,
                    &cluster.name_any(),
                    serde_json::to_value(&status)?,
                    &ctx.rt.field_manager(),
                )
                .await
                .map_err(Error::WriteStatus)?;
                let now_ready = if problem.is_none() { "True" } else { "False" };
                if was_ready.as_deref() != Some(now_ready) {
                    let oref = kube::Resource::object_ref(cluster.as_ref(), &());
                    match &problem {
                        None => {
                            ctx.reporting
                                .events
                                .normal(&oref, "ClusterReady", "the cluster answers".into())
                                .await
                        }
                        Some(msg) => {
                            ctx.reporting
                                .events
                                .warning(&oref, "ClusterNotReady", msg.clone())
                                .await
                        }
                    }
                }
            }
            // Reachability changes without any API event: look again.
            Ok(Action::requeue(ctx.rt.args.poll_interval))
        })
        .await
}

fn error_policy(cluster: Arc<KubernetesCluster>, _error: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.reporting.retry(cluster.as_ref())
}

/// The cluster readiness controller.
pub fn controller(rt: &Runtime, remote: RemoteClients) -> impl Future<Output = ()> + use<> {
    let ctrl = Controller::new(rt.api::<KubernetesCluster>(), watcher::Config::default());
    let by_secret = ctrl.store();
    let secrets = rt.api::<PartialObjectMeta<Secret>>();
    let ctx = Arc::new(Ctx {
        rt: rt.clone(),
        remote,
        reporting: Reporting::new(rt, CONTROLLER),
        clusters: ctrl.store(),
    });
    ctrl.with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown())
        // A created, rotated or deleted connection Secret changes readiness.
        // Secrets are watched by metadata only (names and versions, never
        // data): a change wakes the clusters that name the Secret, and their
        // reconcile reads that one Secret.
        .watches(
            secrets,
            watcher::Config::default(),
            move |secret: PartialObjectMeta<Secret>| {
                let ns = secret.namespace();
                let name = secret.name_any();
                by_secret
                    .state()
                    .into_iter()
                    .filter(|c| c.namespace() == ns && c.spec.connection_secret_ref.name == name)
                    .map(|c| ObjectRef::from_obj(c.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
}
