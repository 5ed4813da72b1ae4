//! The resource controller: submits each scheduled
//! KubernetesApplicationResource's template (and its Secrets) to the remote
//! cluster, copies the remote object's status back, and removes what it
//! created when the resource is deleted.
//!
//! Deletion policy when the remote cluster cannot be reached: if the
//! KubernetesCluster or its connection Secret is gone, the remote objects can
//! never be reached again, so they are orphaned at once with a Warning event.
//! If the cluster exists but does not answer, deletion is retried with
//! backoff for --remote-deletion-timeout (default 5m) after the resource was
//! deleted, then the objects are orphaned with a Warning event. Deletion
//! never hangs forever.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch},
    core::PartialObjectMeta,
    discovery::{ApiResource, Scope},
    runtime::{Controller, controller::Action, reflector::ObjectRef, watcher},
};
use prometheus::Histogram;
use runtime::{
    conditions,
    controller::{Reporting, Runtime},
    events::{ReconcileError, error_chain},
    finalizers,
    limits::NotAnswering,
    remote::{RemoteClients, RemoteCluster, RemoteError, ResolveError},
    ssa,
};
use serde_json::Value;
use types::{
    compute::v1alpha1::KubernetesCluster,
    workload::v1alpha1::{KubernetesApplicationResource, KubernetesApplicationResourceState},
};

use crate::remote_object::{self, Ownership, Target};

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "kubernetesapplicationresource";
/// Finalizer that holds a resource until its remote objects are gone.
pub const FINALIZER: &str = "workload.crossplane.io/resource-controller";
/// How often a deletion in progress looks again at the remote object.
const DELETE_POLL: Duration = Duration::from_secs(2);

/// Why submitting (or removing) a resource failed. Each says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The KubernetesCluster does not exist.
    #[error("KubernetesCluster {0} not found: create it, or fix spec.clusterRef")]
    ClusterNotFound(String),
    /// The cluster's connection Secret does not exist.
    #[error(
        "connection Secret {0} of KubernetesCluster {1} not found: create it with a kubeconfig"
    )]
    SecretNotFound(String, String),
    /// The kubeconfig is unusable.
    #[error("cannot connect to KubernetesCluster {0}")]
    Connect(String, #[source] RemoteError),
    /// Reading from the control cluster failed.
    #[error("failed to read {0} from the control cluster")]
    Read(String, #[source] kube::Error),
    /// The template is unusable.
    #[error("{0}")]
    InvalidTemplate(String),
    /// The remote cluster does not serve the template's kind.
    #[error(
        "cluster {cluster} does not serve kind {kind} in apiVersion {api_version}: install its CRD there first, or fix spec.template"
    )]
    KindNotServed {
        /// Cluster.
        cluster: String,
        /// Kind.
        kind: String,
        /// apiVersion.
        api_version: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// A Secret listed in spec.secrets does not exist locally.
    #[error(
        "Secret {0} listed in spec.secrets not found: create it, or remove it from spec.secrets"
    )]
    LocalSecretNotFound(String),
    /// A remote object exists that is not ours.
    #[error("{0}")]
    Conflict(String),
    /// The remote cluster refused or failed a request.
    #[error("{what} in cluster {cluster} failed: {hint}")]
    Remote {
        /// What was attempted.
        what: String,
        /// Cluster.
        cluster: String,
        /// What to do about it.
        hint: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// Writing local state failed.
    #[error("failed to write {0}")]
    Write(&'static str, #[source] kube::Error),
    /// Serializing status failed.
    #[error("failed to serialize status")]
    Serialize(#[from] serde_json::Error),
    /// The remote cluster did not answer in time (--remote-timeout).
    #[error(transparent)]
    NotAnswering(#[from] NotAnswering),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::ClusterNotFound(_) => "ClusterNotFound",
            Error::SecretNotFound(..) => "ConnectionSecretNotFound",
            Error::Connect(..) => "CannotConnectToCluster",
            Error::Read(..) => "CannotReadLocalObject",
            Error::InvalidTemplate(_) => "InvalidTemplate",
            Error::KindNotServed { .. } => "KindNotServed",
            Error::LocalSecretNotFound(_) => "SecretNotFound",
            Error::Conflict(_) => "RemoteObjectConflict",
            Error::Remote { .. } => "RemoteRequestFailed",
            Error::Write(..) => "CannotWriteStatus",
            Error::Serialize(_) => "CannotSerializeStatus",
            Error::NotAnswering(_) => "ClusterNotAnswering",
        }
    }
}

impl Error {
    /// Whether the remote side can never be reached again (the cluster or
    /// its Secret is gone), as opposed to not answering right now.
    fn cluster_gone(&self) -> bool {
        matches!(self, Error::ClusterNotFound(_) | Error::SecretNotFound(..))
    }
}

/// Shared by reconciles.
pub struct Ctx {
    rt: Runtime,
    reporting: Reporting,
    remote: RemoteClients,
    submit_latency: Histogram,
    /// UIDs whose submit latency was observed. NB: a reconcile can see a
    /// cached object from before its own Submitted status write arrived, so
    /// the previous state alone would count some resources twice.
    observed: std::sync::Mutex<std::collections::HashSet<String>>,
    deletion_timeout: Duration,
}

/// Connects to the resource's cluster through the client cache.
async fn connect(
    ctx: &Ctx,
    res: &KubernetesApplicationResource,
    cluster: &str,
) -> Result<RemoteCluster, Error> {
    let ns = res.namespace().unwrap_or_default();
    let owner = format!("{ns}/{cluster}");
    let clusters: Api<KubernetesCluster> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let Some(kc) = clusters
        .get_opt(cluster)
        .await
        .map_err(|e| Error::Read(format!("KubernetesCluster {owner}"), e))?
    else {
        ctx.remote.release(&owner);
        return Err(Error::ClusterNotFound(owner));
    };
    let secret_ref = &kc.spec.connection_secret_ref;
    let secrets: Api<Secret> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let Some(secret) = secrets
        .get_opt(&secret_ref.name)
        .await
        .map_err(|e| Error::Read(format!("Secret {ns}/{}", secret_ref.name), e))?
    else {
        ctx.remote.release(&owner);
        return Err(Error::SecretNotFound(
            format!("{ns}/{}", secret_ref.name),
            owner,
        ));
    };
    ctx.remote
        .for_secret(&owner, &secret, &secret_ref.key)
        .map_err(|e| Error::Connect(owner, e))
}

/// The cluster a resource is submitted to, as --remote-timeout's messages
/// and circuit breaker name it.
fn cluster_label(res: &KubernetesApplicationResource, cluster: &str) -> String {
    format!(
        "KubernetesCluster {}/{cluster}",
        res.namespace().unwrap_or_default()
    )
}

/// The template's target resolved in the remote cluster.
struct Resolved {
    target: Target,
    namespace: Option<String>,
    api: Api<DynamicObject>,
}

async fn resolve(remote: &RemoteCluster, template: &Value) -> Result<Resolved, Error> {
    let target = remote_object::target(template).map_err(Error::InvalidTemplate)?;
    let (ar, caps): (ApiResource, _) = match remote.resolve(&target.gvk).await {
        Ok(found) => found,
        Err(ResolveError::NotServed(source)) => {
            return Err(Error::KindNotServed {
                cluster: remote.name.clone(),
                kind: target.gvk.kind.clone(),
                api_version: template["apiVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                source,
            });
        }
        Err(ResolveError::Unreachable(source)) => {
            return Err(remote_error(
                format!("discovering kind {}", target.gvk.kind),
                &remote.name,
                source,
            ));
        }
    };
    let namespace = remote_object::namespace_for(&target, caps.scope == Scope::Namespaced);
    let api = match &namespace {
        Some(ns) => Api::namespaced_with(remote.client.clone(), ns, &ar),
        None => Api::all_with(remote.client.clone(), &ar),
    };
    Ok(Resolved {
        target,
        namespace,
        api,
    })
}

fn remote_error(what: String, cluster: &str, source: kube::Error) -> Error {
    let hint = match &source {
        kube::Error::Api(s) if s.code == 404 && s.message.contains("namespaces") => {
            "its namespace does not exist there yet (another resource of the application may create it); retrying".to_owned()
        }
        kube::Error::Api(s) => format!("the cluster refused it ({}): fix spec.template", s.message),
        _ => "the cluster did not answer; retrying".to_owned(),
    };
    Error::Remote {
        what,
        cluster: cluster.to_owned(),
        hint,
        source,
    }
}

/// What a successful submit observed.
struct Submitted {
    remote_status: Option<Value>,
    unhealthy: Option<String>,
}

async fn submit(
    ctx: &Ctx,
    res: &KubernetesApplicationResource,
    cluster: &str,
) -> Result<Submitted, Error> {
    let uid = res.uid().unwrap_or_default();
    let ns = res.namespace().unwrap_or_default();
    let remote = connect(ctx, res, cluster).await?;
    let Resolved {
        target,
        namespace,
        api,
    } = resolve(&remote, &res.spec.template).await?;
    let what = target.describe(namespace.as_deref());
    let field_manager = ctx.rt.field_manager();

    let existing = api
        .get_opt(&target.name)
        .await
        .map_err(|e| remote_error(format!("reading {what}"), &remote.name, e))?;
    if let Some(obj) = &existing {
        let owner = remote_object::ownership(obj.metadata.annotations.as_ref(), &uid);
        if owner != Ownership::Ours {
            return Err(Error::Conflict(remote_object::conflict_message(
                &what,
                &remote.name,
                &owner,
            )));
        }
    }

    // Secrets first: the object may need them as soon as it exists.
    let secret_ns = namespace.clone().unwrap_or_else(|| "default".to_owned());
    let local_secrets: Api<Secret> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let remote_secrets: Api<Secret> = Api::namespaced(remote.client.clone(), &secret_ns);
    for secret_ref in &res.spec.secrets {
        let local = local_secrets
            .get_opt(&secret_ref.name)
            .await
            .map_err(|e| Error::Read(format!("Secret {ns}/{}", secret_ref.name), e))?
            .ok_or_else(|| Error::LocalSecretNotFound(format!("{ns}/{}", secret_ref.name)))?;
        let name = remote_object::secret_name(&res.name_any(), &secret_ref.name);
        let data = serde_json::to_value(local.data.clone().unwrap_or_default())?;
        let body = remote_object::propagated_secret(
            &name,
            &secret_ns,
            &uid,
            local.type_.as_deref(),
            &data,
        );
        let current = remote_secrets.get_opt(&name).await.map_err(|e| {
            remote_error(
                format!("reading Secret {secret_ns}/{name}"),
                &remote.name,
                e,
            )
        })?;
        if let Some(current) = &current {
            let owner = remote_object::ownership(current.metadata.annotations.as_ref(), &uid);
            if owner != Ownership::Ours {
                return Err(Error::Conflict(remote_object::conflict_message(
                    &format!("Secret {secret_ns}/{name}"),
                    &remote.name,
                    &owner,
                )));
            }
            if ssa::unchanged_by(&serde_json::to_value(current)?, &body) {
                continue;
            }
        }
        remote_secrets
            .patch(&name, &ssa::params(&field_manager), &Patch::Apply(&body))
            .await
            .map_err(|e| {
                remote_error(
                    format!("applying Secret {secret_ns}/{name}"),
                    &remote.name,
                    e,
                )
            })?;
    }

    let desired = remote_object::render(&res.spec.template, &uid, namespace.as_deref())
        .map_err(Error::InvalidTemplate)?;
    let live = match existing {
        Some(obj) if ssa::unchanged_by(&serde_json::to_value(&obj)?, &desired) => obj,
        _ => api
            .patch(
                &target.name,
                &ssa::params(&field_manager),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(|e| remote_error(format!("applying {what}"), &remote.name, e))?,
    };
    let remote_status = live.data.get("status").cloned().filter(|s| !s.is_null());
    let unhealthy = remote_object::unhealthy(&target.gvk.kind, remote_status.as_ref());
    Ok(Submitted {
        remote_status,
        unhealthy,
    })
}

async fn reconcile(
    res: Arc<KubernetesApplicationResource>,
    ctx: Arc<Ctx>,
) -> Result<Action, Error> {
    let Some(cluster) = res.spec.cluster_ref.as_ref().map(|c| c.name.clone()) else {
        // Not scheduled: nothing to submit yet.
        return Ok(Action::await_change());
    };
    let deleting = res.metadata.deletion_timestamp.is_some();
    if deleting && !finalizers::has(res.as_ref(), FINALIZER) {
        return Ok(Action::await_change());
    }
    ctx.reporting
        .reconcile(res.as_ref(), async {
            let api: Api<KubernetesApplicationResource> =
                Api::namespaced(ctx.rt.client.clone(), &res.namespace().unwrap_or_default());
            if deleting {
                return cleanup(&ctx, &api, &res, &cluster).await;
            }
            finalizers::add(&api, res.as_ref(), FINALIZER)
                .await
                .map_err(|e| Error::Write("the finalizer", e))?;
            let remote = cluster_label(&res, &cluster);
            match ctx
                .rt
                .clusters
                .call(&remote, submit(&ctx, &res, &cluster))
                .await
            {
                Ok(s) => {
                    let ready = match &s.unhealthy {
                        None => conditions::available(),
                        Some(why) => conditions::unavailable(why.clone()),
                    };
                    let first = res.status.as_ref().and_then(|st| st.state)
                        != Some(KubernetesApplicationResourceState::Submitted)
                        && ctx
                            .observed
                            .lock()
                            .is_ok_and(|mut seen| seen.insert(res.uid().unwrap_or_default()));
                    write_status(
                        &ctx,
                        &api,
                        &res,
                        KubernetesApplicationResourceState::Submitted,
                        conditions::reconcile_success(),
                        ready,
                        Some(s.remote_status),
                    )
                    .await?;
                    if first {
                        if let Some(created) = res.creation_timestamp() {
                            let secs = age_ms(&created) as f64 / 1000.0;
                            ctx.submit_latency.observe(secs.max(0.0));
                        }
                        let oref = kube::Resource::object_ref(res.as_ref(), &());
                        ctx.reporting
                            .events
                            .normal(
                                &oref,
                                "Submitted",
                                format!("submitted to KubernetesCluster {cluster}"),
                            )
                            .await;
                    }
                    // Remote status changes without a local event: poll it.
                    Ok(Action::requeue(ctx.rt.args.poll_interval))
                }
                Err(e) => {
                    let msg = error_chain(&e);
                    write_status(
                        &ctx,
                        &api,
                        &res,
                        KubernetesApplicationResourceState::Failed,
                        conditions::reconcile_error(msg.clone()),
                        conditions::unavailable(msg),
                        None,
                    )
                    .await?;
                    Err(e)
                }
            }
        })
        .await
}

async fn cleanup(
    ctx: &Ctx,
    api: &Api<KubernetesApplicationResource>,
    res: &KubernetesApplicationResource,
    cluster: &str,
) -> Result<Action, Error> {
    let oref = kube::Resource::object_ref(res, &());
    let orphan = |why: String| async move {
        ctx.reporting
            .events
            .warning(
                &oref,
                "RemoteObjectsOrphaned",
                format!("left the remote object and propagated Secrets in place: {why}"),
            )
            .await;
        finalizers::remove(api, res, FINALIZER)
            .await
            .map_err(|e| Error::Write("the finalizer", e))?;
        Ok(Action::await_change())
    };
    // Never counted again once deleting.
    if let Ok(mut seen) = ctx.observed.lock() {
        seen.remove(&res.uid().unwrap_or_default());
    }
    let remote = cluster_label(res, cluster);
    match ctx
        .rt
        .clusters
        .call(&remote, remove_remote(ctx, res, cluster))
        .await
    {
        Ok(true) => {
            finalizers::remove(api, res, FINALIZER)
                .await
                .map_err(|e| Error::Write("the finalizer", e))?;
            Ok(Action::await_change())
        }
        Ok(false) => Ok(Action::requeue(DELETE_POLL)),
        Err(e) if e.cluster_gone() => orphan(error_chain(&e)).await,
        Err(Error::InvalidTemplate(_) | Error::KindNotServed { .. }) => {
            // Nothing of that kind can exist there: nothing to remove.
            finalizers::remove(api, res, FINALIZER)
                .await
                .map_err(|e| Error::Write("the finalizer", e))?;
            Ok(Action::await_change())
        }
        Err(e) => {
            let since = res
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| Duration::from_millis(age_ms(t).max(0) as u64))
                .unwrap_or_default();
            if since >= ctx.deletion_timeout {
                orphan(format!(
                    "the cluster could not be reached for {:?}: {}",
                    ctx.deletion_timeout,
                    error_chain(&e)
                ))
                .await
            } else {
                Err(e)
            }
        }
    }
}

/// Deletes the remote object and the propagated Secrets that are ours.
/// Ok(true) once they are gone.
async fn remove_remote(
    ctx: &Ctx,
    res: &KubernetesApplicationResource,
    cluster: &str,
) -> Result<bool, Error> {
    let uid = res.uid().unwrap_or_default();
    let remote = connect(ctx, res, cluster).await?;
    let Resolved {
        target,
        namespace,
        api,
    } = resolve(&remote, &res.spec.template).await?;
    let what = target.describe(namespace.as_deref());
    let secret_ns = namespace.clone().unwrap_or_else(|| "default".to_owned());
    let remote_secrets: Api<Secret> = Api::namespaced(remote.client.clone(), &secret_ns);
    for secret_ref in &res.spec.secrets {
        let name = remote_object::secret_name(&res.name_any(), &secret_ref.name);
        if let Some(s) = remote_secrets.get_opt(&name).await.map_err(|e| {
            remote_error(
                format!("reading Secret {secret_ns}/{name}"),
                &remote.name,
                e,
            )
        })? && remote_object::ownership(s.metadata.annotations.as_ref(), &uid) == Ownership::Ours
        {
            match remote_secrets
                .delete(&name, &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(remote_error(
                        format!("deleting Secret {secret_ns}/{name}"),
                        &remote.name,
                        e,
                    ));
                }
            }
        }
    }
    let Some(obj) = api
        .get_opt(&target.name)
        .await
        .map_err(|e| remote_error(format!("reading {what}"), &remote.name, e))?
    else {
        return Ok(true);
    };
    if remote_object::ownership(obj.metadata.annotations.as_ref(), &uid) != Ownership::Ours {
        // Not ours: never touched, never deleted.
        return Ok(true);
    }
    if obj.metadata.deletion_timestamp.is_none() {
        match api.delete(&target.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(true),
            Err(e) => return Err(remote_error(format!("deleting {what}"), &remote.name, e)),
        }
    }
    // Gone, or still terminating (a Namespace takes a while): look again.
    Ok(api
        .get_opt(&target.name)
        .await
        .map_err(|e| remote_error(format!("reading {what}"), &remote.name, e))?
        .is_none())
}

#[allow(clippy::too_many_arguments)] // every argument is a distinct part of the status
async fn write_status(
    ctx: &Ctx,
    api: &Api<KubernetesApplicationResource>,
    res: &KubernetesApplicationResource,
    state: KubernetesApplicationResourceState,
    synced: types::common::Condition,
    ready: types::common::Condition,
    remote: Option<Option<Value>>,
) -> Result<(), Error> {
    let mut status = res.status.clone().unwrap_or_default();
    let now = conditions::now();
    let mut changed = conditions::set(&mut status.conditions, synced, &now);
    changed |= conditions::set(&mut status.conditions, ready, &now);
    changed |= status.state != Some(state) || status.observed_generation != res.metadata.generation;
    if let Some(r) = &remote {
        changed |= &status.remote != r;
        status.remote = r.clone();
    }
    if !changed {
        return Ok(());
    }
    status.state = Some(state);
    status.observed_generation = res.metadata.generation;
    // NB: the whole status is applied, so a remote status that disappeared
    // is removed too.
    ssa::apply_status(
        api,
        &res.name_any(),
        serde_json::to_value(&status)?,
        &ctx.rt.field_manager(),
    )
    .await
    .map_err(|e| Error::Write("KubernetesApplicationResource status", e))?;
    Ok(())
}

/// Milliseconds since `t`.
fn age_ms(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond()
}

fn error_policy(res: Arc<KubernetesApplicationResource>, _error: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.reporting.retry(res.as_ref())
}

/// The resource controller; it also watches the Secrets resources propagate.
pub fn controller(
    rt: &Runtime,
    deletion_timeout: Duration,
) -> Result<impl Future<Output = ()> + use<>, prometheus::Error> {
    let submit_latency = Histogram::with_opts(
        prometheus::HistogramOpts::new(
            "crossplane_rs_submit_latency_seconds",
            "Time from a KubernetesApplicationResource's creation to its first Submitted state.",
        )
        .buckets(vec![0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0]),
    )?;
    rt.metrics
        .registry()
        .register(Box::new(submit_latency.clone()))?;
    let ctrl = Controller::new(
        rt.api::<KubernetesApplicationResource>(),
        watcher::Config::default(),
    );
    let store = ctrl.store();
    let secrets = rt.api::<PartialObjectMeta<Secret>>();
    let ctx = Arc::new(Ctx {
        rt: rt.clone(),
        reporting: Reporting::new(rt, CONTROLLER),
        remote: RemoteClients::new(rt.metrics.clone(), rt.args.allow_insecure_remote_tls),
        submit_latency,
        observed: Default::default(),
        deletion_timeout,
    });
    Ok(ctrl
        .with_config(rt.controller_config())
        .graceful_shutdown_on(rt.shutdown())
        // A changed local Secret reaches its remote copies at once. Secrets
        // are watched by metadata only (names and versions, never data): a
        // change wakes the resources that list the Secret, and their
        // reconcile reads it.
        .watches(
            secrets,
            watcher::Config::default(),
            move |secret: PartialObjectMeta<Secret>| {
                let ns = secret.namespace();
                let name = secret.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|r| {
                        r.namespace() == ns && r.spec.secrets.iter().any(|s| s.name == name)
                    })
                    .map(|r| ObjectRef::from_obj(r.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(())))
}
