//! The create phase's ceiling: a null provider making exactly the writes
//! the create phase makes for N Objects, and nothing else (no reads, no
//! watches, no decisions), with the same clients and the same concurrency:
//!
//! - the user: the Object (server-side apply, as the create phase applies
//!   it, `--concurrency` at a time);
//! - the provider (its 16 workers, each taking an Object as soon as its
//!   apply answered): the finalizer and the ProviderConfig label (the JSON
//!   Patch the provider sends, as its ServiceAccount), the managed
//!   ConfigMap (server-side apply in the remote cluster, as the provider's
//!   remote user, with the Object's own field manager) and the Object's
//!   status once (Synced, Ready, the managed object's reference and the
//!   live object from the apply's answer without managedFields).
//!
//! It runs before the provider starts, with the benchmark's own watches of
//! Objects and of the remote namespace running (as they do in the create
//! phase), on Objects of its own (`null-*`, managing ConfigMaps `null-*` in
//! the same remote namespace), then removes all of it so that it weighs on
//! nothing after. 4 writes per Object.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use benchmarks::scaled_timeout;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client, ResourceExt as _,
    api::{DeleteParams, ListParams, Patch},
};
use runtime::{conditions, finalizers, ssa};
use serde_json::{Value, json};
use types::kubernetes::v1alpha1::{OBJECT_FINALIZER, PROVIDER_CONFIG_LABEL};

use crate::args::{Args, Shape};
use crate::run::{OBJECTS_NS, REMOTE_NS, object, ssa as apply_params};

/// The label the null provider's Objects carry (the provider sets it too).
const CONFIG_LABEL: &str = PROVIDER_CONFIG_LABEL;
/// The provider's finalizer.
const FINALIZER: &str = OBJECT_FINALIZER;
/// The provider's workers (the bench runs it with --concurrency 16).
const WORKERS: usize = 16;

fn null_name(i: usize) -> String {
    format!("null-{i:05}")
}

/// Object `i` of the null provider: the create phase's body.
fn null_object(shape: Shape, i: usize) -> Value {
    object(shape, &null_name(i), json!({"i": i.to_string()}), None)
}

/// The kinds of Object the null provider writes, as the create phase
/// writes them (each shape's typed Object: the status is applied as it).
pub trait Kind:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}
impl<K> Kind for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The clients of the null provider.
pub struct Clients {
    /// The benchmark's own (the create phase applies with it).
    pub user: Client,
    /// The provider's ServiceAccount in the control cluster.
    pub provider: Client,
    /// The provider's user in the remote cluster.
    pub remote: Client,
}

/// The provider's writes for one Object whose apply answered `obj`.
async fn provide<K: Kind>(objects: &Api<K>, remote: &Api<ConfigMap>, obj: K) -> kube::Result<()> {
    let labels = [(CONFIG_LABEL.to_owned(), "bench".to_owned())].into();
    finalizers::add_with_labels(objects, &obj, FINALIZER, &labels).await?;
    let body = serde_json::to_value(&obj).map_err(kube::Error::SerdeError)?;
    let manifest = body
        .pointer("/spec/forProvider/manifest")
        .unwrap_or(&Value::Null);
    let manager = format!("crossplane-rs/object/{}", obj.uid().unwrap_or_default());
    let name = obj.name_any();
    let live = remote
        .patch(&name, &ssa::params(&manager), &Patch::Apply(manifest))
        .await?;
    let mut shown = serde_json::to_value(&live).map_err(kube::Error::SerdeError)?;
    if let Some(meta) = shown.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let mut status = types::kubernetes::v1alpha1::ObjectStatus::default();
    let now = benchmarks::now();
    for c in [conditions::reconcile_success(), conditions::available()] {
        conditions::set(&mut status.conditions, c, &now);
    }
    status.managed_object_ref = Some(types::kubernetes::v1alpha1::ManagedObjectReference {
        api_version: "v1".to_owned(),
        kind: "ConfigMap".to_owned(),
        namespace: Some(REMOTE_NS.to_owned()),
        name,
    });
    status.at_provider = Some(types::kubernetes::v1alpha1::ObjectObservation {
        manifest: Some(shown),
    });
    let status = serde_json::to_value(&status).map_err(kube::Error::SerdeError)?;
    ssa::apply_status(
        objects,
        &obj.name_any(),
        status,
        "crossplane-rs/object-provider",
    )
    .await?;
    Ok(())
}

/// Runs the null provider for `--objects` Objects of `--api` applied
/// `--concurrency` at a time.
pub async fn null_provider(clients: Clients, args: &Args) -> Value {
    use types::{kubernetes as k, kubernetes_m::v1alpha1 as m};
    let (user, provider) = (clients.user.clone(), clients.provider.clone());
    match args.shape {
        Shape::V1alpha1 => {
            let apis = (Api::all(user), Api::all(provider));
            run::<k::v1alpha1::Object>(apis, clients, args).await
        }
        Shape::V1alpha2 => {
            let apis = (Api::all(user), Api::all(provider));
            run::<k::v1alpha2::Object>(apis, clients, args).await
        }
        Shape::Namespaced => {
            let apis = (
                Api::namespaced(user, OBJECTS_NS),
                Api::namespaced(provider, OBJECTS_NS),
            );
            run::<m::Object>(apis, clients, args).await
        }
    }
}

/// The null provider on Objects of kind `K`, written by the user through
/// `user` and by the provider through `objects`.
async fn run<K: Kind>((user, objects): (Api<K>, Api<K>), clients: Clients, args: &Args) -> Value {
    let (n, concurrency, shape) = (args.objects, args.concurrency, args.shape);
    let remote: Api<ConfigMap> = Api::namespaced(clients.remote, REMOTE_NS);
    let errors = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<K>();
    let started = Instant::now();
    let applies = {
        let (user, errors) = (user.clone(), errors.clone());
        async move {
            let params = apply_params("object-bench");
            futures::stream::iter(0..n)
                .for_each_concurrent(concurrency, |i| {
                    let (user, errors, tx, params) =
                        (&user, errors.clone(), tx.clone(), params.clone());
                    async move {
                        match user
                            .patch(&null_name(i), &params, &Patch::Apply(null_object(shape, i)))
                            .await
                        {
                            Ok(obj) => {
                                let _ = tx.send(obj);
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
                .await;
        }
    };
    let written = Arc::new(AtomicUsize::new(0));
    let received =
        futures::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|obj| (obj, rx)) },
        );
    let provider = received.for_each_concurrent(WORKERS, |obj| {
        let (objects, remote, errors, written) =
            (&objects, &remote, errors.clone(), written.clone());
        async move {
            match provide(objects, remote, obj).await {
                Ok(()) => written.fetch_add(1, Ordering::Relaxed),
                Err(_) => errors.fetch_add(1, Ordering::Relaxed),
            };
        }
    });
    futures::join!(applies, provider);
    let duration = started.elapsed();
    let done = written.load(Ordering::Relaxed);
    let cleared = clear(&user, &remote, n).await;
    json!({
        "objects": n,
        "concurrency": concurrency,
        "workers": WORKERS,
        "writes_per_object": 4,
        "done": done,
        "request_errors": errors.load(Ordering::Relaxed),
        "duration_s": duration.as_secs_f64(),
        "objects_per_s": done as f64 / duration.as_secs_f64(),
        "cleared": cleared,
    })
}

/// Removes the null provider's Objects (their finalizers first) and its
/// ConfigMaps, one by one (a deletecollection of thousands of Objects
/// outlasts the API server's request timeout; the namespace also holds the
/// create phase's ConfigMaps); whether all of it went.
async fn clear<K: Kind>(user: &Api<K>, remote: &Api<ConfigMap>, n: usize) -> bool {
    let unfinalized = each(n, |name| async move {
        let p = json!({"metadata": {"finalizers": null}});
        user.patch(&name, &Default::default(), &Patch::Merge(&p))
            .await
            .map(drop)
    })
    .await;
    let undeleted = each(n, |name| async move {
        remote
            .delete(&name, &DeleteParams::default())
            .await
            .map(drop)
    })
    .await;
    let left = each(n, |name| async move {
        user.delete(&name, &DeleteParams::default()).await.map(drop)
    })
    .await;
    if unfinalized + undeleted + left > 0 {
        eprintln!(
            "object-bench: of the null provider's {n}: {unfinalized} Objects kept their finalizer, \
             {undeleted} ConfigMaps and {left} Objects were not deleted"
        );
    }
    let objects = ListParams::default().labels(&format!("{CONFIG_LABEL}=bench"));
    unfinalized + undeleted + left == 0 && gone(user, &objects, n).await
}

/// Runs `request` for each of the null provider's names, 32 at a time;
/// how many failed (a 404 is done).
async fn each<F, Fut>(n: usize, request: F) -> usize
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = kube::Result<()>>,
{
    futures::stream::iter(0..n)
        .map(|i| request(null_name(i)))
        .buffer_unordered(32)
        .filter(|r| {
            let failed = match r {
                Ok(()) => false,
                Err(kube::Error::Api(s)) => s.code != 404,
                Err(_) => true,
            };
            std::future::ready(failed)
        })
        .count()
        .await
}

/// Whether nothing `lp` selects is left, waiting for it.
async fn gone<K>(api: &Api<K>, lp: &ListParams, n: usize) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    benchmarks::wait_until(scaled_timeout(n), || async {
        api.list_metadata(&lp.clone().limit(1))
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await
    .0
}
