//! Requests counted by cluster and verb, and their answers recorded (see
//! [`Answers`]): the tower layer every client carries, and the bounded set
//! of `cluster` label values.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Instant,
};

use futures::{FutureExt as _, future::BoxFuture};

use http::{Request, Response};
use kube::{Client, Config, client::ClientBuilder};
use prometheus::IntCounterVec;
use tower::{Layer, Service};

use super::{CONTROL_LABEL, OTHER_LABEL, answers::Answers};
use crate::metrics::Metrics;

/// The `cluster` label values given to remote clusters: at most `max`
/// distinct ones, held while a client uses them.
#[derive(Clone)]
pub(super) struct ClusterLabels {
    pub(super) counter: IntCounterVec,
    max: usize,
    /// Label value -> how many live clients count under it.
    pub(super) held: Arc<Mutex<HashMap<String, usize>>>,
}

impl ClusterLabels {
    pub(super) fn new(counter: IntCounterVec, max: usize) -> Self {
        Self {
            counter,
            max,
            held: Arc::default(),
        }
    }

    /// The label for a remote cluster named `name`: its name while fewer
    /// than `max` names are held, else `other`. A remote cluster named like
    /// the fixed labels counts as `other`, so `control` always means the
    /// control cluster.
    pub(super) fn acquire(&self, name: &str) -> Arc<ClusterLabel> {
        let shared = || {
            Arc::new(ClusterLabel {
                value: OTHER_LABEL.to_owned(),
                release: None,
            })
        };
        if name == CONTROL_LABEL || name == OTHER_LABEL {
            return shared();
        }
        let Ok(mut held) = self.held.lock() else {
            return shared();
        };
        if let Some(n) = held.get_mut(name) {
            *n += 1;
        } else if held.len() < self.max {
            held.insert(name.to_owned(), 1);
        } else {
            return shared();
        }
        Arc::new(ClusterLabel {
            value: name.to_owned(),
            release: Some(self.clone()),
        })
    }

    fn release(&self, name: &str) {
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        let Some(n) = held.get_mut(name) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            held.remove(name);
            // No client counts under it any more: its series go, so the
            // number of series stays bounded as clusters come and go.
            for verb in VERBS {
                let _ = self.counter.remove_label_values(&[name, verb]);
            }
        }
    }
}

/// One value of the `cluster` label, held by the clients that count under
/// it.
pub(super) struct ClusterLabel {
    pub(super) value: String,
    release: Option<ClusterLabels>,
}

impl Drop for ClusterLabel {
    fn drop(&mut self) {
        if let Some(labels) = &self.release {
            labels.release(&self.value);
        }
    }
}

/// Builds a client for the control cluster from `config`, its requests
/// counted by verb under the cluster label `control` and its answers
/// recorded in [`Answers::control`].
pub fn counted_client(config: Config, metrics: &Metrics) -> Result<Client, kube::Error> {
    let layer = CountingLayer {
        counter: metrics.api_requests.clone(),
        label: Arc::new(ClusterLabel {
            value: CONTROL_LABEL.to_owned(),
            release: None,
        }),
        answers: Answers::control(),
    };
    Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

/// A tower layer that counts requests by cluster and verb, and records
/// their answers in the cluster's [`Answers`]. The cluster's label value is
/// held as long as a client carrying the layer lives.
#[derive(Clone)]
pub struct CountingLayer {
    pub(super) counter: IntCounterVec,
    pub(super) label: Arc<ClusterLabel>,
    pub(super) answers: Arc<Answers>,
}

impl<S> Layer<S> for CountingLayer {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Counting {
            inner,
            counter: self.counter.clone(),
            label: self.label.clone(),
            answers: self.answers.clone(),
        }
    }
}

/// The service [`CountingLayer`] wraps around a client's stack.
#[derive(Clone)]
pub struct Counting<S> {
    inner: S,
    counter: IntCounterVec,
    label: Arc<ClusterLabel>,
    answers: Arc<Answers>,
}

impl<S, B, R> Service<Request<B>> for Counting<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = Response<Heard<R>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let verb = verb(
            req.method(),
            req.uri().path(),
            req.uri().query().unwrap_or_default(),
        );
        self.counter
            .with_label_values(&[self.label.value.as_str(), verb])
            .inc();
        let asking = self.answers.ask(Instant::now());
        let answers = self.answers.clone();
        // Resolves when the response headers arrive: that is the cluster
        // answering. The body (a list's items, a watch's events) follows,
        // and each of its frames counts as an answer too.
        self.inner
            .call(req)
            .map(move |out| match out {
                Ok(response) => {
                    asking.answered(Instant::now());
                    Ok(response.map(|inner| Heard { inner, answers }))
                }
                Err(e) => {
                    asking.failed(Instant::now());
                    Err(e)
                }
            })
            .boxed()
    }
}

/// A response body whose every frame is recorded as the cluster answering
/// (see [`Answers`]).
pub struct Heard<R> {
    inner: R,
    answers: Arc<Answers>,
}

impl<R> http_body::Body for Heard<R>
where
    R: http_body::Body + Unpin,
{
    type Data = R::Data;
    type Error = R::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &frame {
            self.answers.heard(Instant::now());
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Every value [`verb`] returns.
pub const VERBS: [&str; 8] = [
    "watch", "list", "get", "create", "update", "patch", "delete", "other",
];

/// The Kubernetes verb of a request, from its method and URL.
pub fn verb(method: &http::Method, path: &str, query: &str) -> &'static str {
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if is_collection(path) => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether a resource path names a collection rather than one object:
/// /api/v1/<res>, /api/v1/namespaces/<ns>/<res>, /apis/<g>/<v>/<res>,
/// /apis/<g>/<v>/namespaces/<ns>/<res>; subresources count as objects.
fn is_collection(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.first() {
        Some(&"api") => parts.get(2..),
        Some(&"apis") => parts.get(3..),
        _ => return false,
    };
    matches!(rest, Some([_res] | ["namespaces", _, _res]))
}
