//! KubernetesCluster readiness: Ready is True when the connection Secret
//! exists, holds a valid kubeconfig and the cluster answers; otherwise the
//! message says what is wrong.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use runtime::{
    conditions,
    controller::{Runtime, trim},
    events::{ReconcileError, error_chain},
    limits,
    reconciler::{
        self, CONTROL_REQUEST_FAILED, Cleanup, ControlError, Draft, Reconciler, Skeleton, jittered,
    },
    remote::RemoteClients,
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
    /// Another request to the control cluster failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::ReadSecret(..) => "CannotReadConnectionSecret",
            Error::Control(_) => CONTROL_REQUEST_FAILED,
        }
    }
}

/// Probes one cluster: None when Ready, else what is wrong.
async fn probe(
    ctx: &KubernetesClusters,
    cluster: &KubernetesCluster,
) -> Result<Option<String>, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let secret_ref = &cluster.spec.connection_secret_ref;
    let secrets: Api<Secret> = Api::namespaced(ctx.sk.client().clone(), &ns);
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
        .limits
        .run(&label, &remote, remote.client.apiserver_version())
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

/// The readiness controller's reconciler.
pub struct KubernetesClusters {
    sk: Skeleton,
    remote: RemoteClients,
    /// Deadlines and breakers for the clusters probed (--remote-timeout).
    limits: limits::Clusters,
    /// Every KubernetesCluster, watched: the clients of deleted ones go.
    clusters: Store<KubernetesCluster>,
    /// How often a cluster is probed again (--poll-interval).
    poll: std::time::Duration,
}

impl Reconciler for KubernetesClusters {
    type Object = KubernetesCluster;
    type Error = Error;

    fn skeleton(&self) -> &Skeleton {
        &self.sk
    }

    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    async fn apply(
        &self,
        cluster: &Arc<KubernetesCluster>,
        status: &mut Draft<KubernetesCluster>,
    ) -> Result<Action, Error> {
        let ready = match probe(self, cluster).await? {
            None => conditions::available(),
            Some(msg) => conditions::unavailable(msg),
        };
        conditions::set(&mut status.conditions, ready, &conditions::now());
        status.observed_generation = cluster.metadata.generation;
        // Reachability changes without any API event: look again.
        Ok(Action::requeue(jittered(self.poll, cluster.as_ref())))
    }

    async fn cleanup(
        &self,
        _cluster: &Arc<KubernetesCluster>,
        _status: &mut Draft<KubernetesCluster>,
    ) -> Result<Cleanup, Error> {
        // Probing makes nothing to remove.
        Ok(Cleanup::Done)
    }

    /// Announces a change of readiness.
    async fn written(&self, cluster: &KubernetesCluster, status: &Draft<KubernetesCluster>) {
        let ready = |conds: &[types::common::Condition]| {
            conditions::get(conds, conditions::TYPE_READY).cloned()
        };
        let was = cluster.status.as_ref().and_then(|s| ready(&s.conditions));
        let Some(now) = ready(&status.conditions) else {
            return;
        };
        if was.is_some_and(|w| w.status == now.status) {
            return;
        }
        let oref = kube::Resource::object_ref(cluster, &());
        let events = &self.sk.reporting.events;
        if now.status == "True" {
            let note = "the cluster answers".to_owned();
            events.normal(&oref, "ClusterReady", note).await;
        } else {
            let note = now.message.unwrap_or_default();
            events.warning(&oref, "ClusterNotReady", note).await;
        }
    }

    /// A deleted cluster's client goes.
    fn forget(&self, cluster: &KubernetesCluster) {
        let name = format!(
            "{}/{}",
            cluster.namespace().unwrap_or_default(),
            cluster.name_any()
        );
        self.remote.release(&name);
    }
}

/// The cluster readiness controller.
pub fn controller(
    rt: &Runtime,
    remote: RemoteClients,
    probe_interval: std::time::Duration,
) -> impl Future<Output = ()> + use<> {
    let ctrl = trim::controller(
        rt.api::<KubernetesCluster>(),
        watcher::Config::default(),
        trim::nothing_else,
    );
    let by_secret = ctrl.store();
    let secrets = rt.api::<PartialObjectMeta<Secret>>();
    let readiness = Arc::new(KubernetesClusters {
        sk: Skeleton::new(rt, CONTROLLER),
        remote,
        limits: rt.clusters.clone(),
        clusters: ctrl.store(),
        poll: probe_interval,
    });
    let ctrl = ctrl
        .with_config(rt.controller_config())
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
        );
    reconciler::run(ctrl, readiness)
}
