//! The loop every controller runs in: the kube-rs controller says which
//! objects are due, a [`Queue`] gives them the workers in turn.

use std::{fmt::Debug, sync::Arc};

use futures::{StreamExt, stream::FuturesUnordered};
use kube::{
    Resource,
    runtime::{Controller, controller::Action, reflector::ObjectRef},
};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::controller::{
    Reporting,
    queue::{Queue, requeue_after},
};

/// Runs `controller` with `reconcile` until it stops: failed objects are
/// retried after `reporting`'s backoff, and failures of the controller
/// machinery are logged. `reconcile` reports each result through
/// [`Reporting::reconcile`]. [`run`] drives the skeleton with it; a
/// controller whose kind has no status for the skeleton to write (the
/// observe-only one, [`crate::controller::observe`]) uses it directly.
///
/// The kube-rs controller only says which objects are due (its watches,
/// mappings and debounce); they take turns for the controller's
/// --concurrency workers in the order they became due, each at most once
/// and never twice at once, through a [`Queue`] that also holds every
/// requeue until it is due. A reconcile starts from the object as the cache
/// shows it when its turn comes, runs as its own task (the binary's cores
/// share the work), and a panic in it is a failure retried with backoff.
pub async fn drive<K, C, E, F, Fut>(
    controller: Controller<K>,
    ctx: Arc<C>,
    reporting: Reporting,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    C: Send + Sync + 'static,
    E: std::error::Error + Send + 'static,
    F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let name = reporting.controller;
    let store = controller.store();
    let (due, mut triggers) = futures::channel::mpsc::unbounded::<ObjectRef<K>>();
    let dues = controller
        .run(
            move |obj, _| {
                // Only said: the queue takes it from here.
                let _ = due.unbounded_send(ObjectRef::from_obj(obj.as_ref()));
                futures::future::ready(Ok::<_, std::convert::Infallible>(Action::await_change()))
            },
            |_, never, _| match *never {},
            Arc::new(()),
        )
        .for_each(|result| {
            if let Err(e) = result {
                machinery_failed(name, e);
            }
            futures::future::ready(())
        });
    let work = async move {
        let workers = match reporting.concurrency {
            0 => usize::MAX,
            n => usize::from(n),
        };
        let waiting = reporting.metrics.waiting.with_label_values(&[name]);
        let mut queue = Queue::default();
        let mut running = FuturesUnordered::new();
        let mut open = true;
        loop {
            while running.len() < workers {
                let Some(key) = queue.take() else { break };
                let Some(obj) = store.get(&key) else {
                    tracing::debug!(controller = name, object = %key, "object gone before its reconcile");
                    queue.done(&key, None, Instant::now());
                    continue;
                };
                let task = Aborting(tokio::spawn(reconcile(obj.clone(), ctx.clone())));
                running.push(async move { (key, obj, task.await) });
            }
            waiting.set(i64::try_from(queue.waiting()).unwrap_or(i64::MAX));
            if !open && running.is_empty() {
                break;
            }
            let requeue = queue.next_requeue();
            tokio::select! {
                trigger = triggers.next(), if open => match trigger {
                    Some(key) => queue.due(key),
                    // The controller stopped (shutdown): what runs ends,
                    // nothing new starts.
                    None => {
                        open = false;
                        queue.close();
                    }
                },
                Some((key, obj, ended)) = running.next(), if !running.is_empty() => {
                    let action = match ended {
                        Ok(Ok(action)) => action,
                        Ok(Err(_)) => reporting.retry(obj.as_ref()),
                        Err(e) => {
                            tracing::error!(controller = name, object = %key, error = %e, "a reconcile panicked; retrying with backoff");
                            reporting.retry(obj.as_ref())
                        }
                    };
                    queue.done(&key, requeue_after(&action), Instant::now());
                }
                () = sleep_until_some(requeue), if open && requeue.is_some() => {
                    queue.expire(Instant::now());
                }
            }
        }
        waiting.set(0);
    };
    tokio::join!(dues, work);
}

/// A reconcile's task, stopped when nobody waits for it any more (this
/// replica lost its leadership, or stopped): no reconcile outlives its
/// controller.
struct Aborting<T>(tokio::task::JoinHandle<T>);

impl<T> Future for Aborting<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// Logs a failure of kube-rs's controller (its watches, its store); the
/// reconciles' own failures are reported by [`Reporting::reconcile`].
fn machinery_failed(
    name: &str,
    e: kube::runtime::controller::Error<std::convert::Infallible, kube::runtime::watcher::Error>,
) {
    match e {
        // Its reconcile only hands the object to the queue.
        kube::runtime::controller::Error::ReconcilerFailed(never, _) => match never {},
        // An object deleted while queued: nothing to do.
        kube::runtime::controller::Error::ObjectNotFound(obj) => {
            tracing::debug!(controller = name, object = %obj, "object gone before its reconcile");
        }
        other => {
            let error = crate::events::error_chain(&other);
            tracing::warn!(controller = name, %error, "controller machinery failed; retrying");
        }
    }
}
