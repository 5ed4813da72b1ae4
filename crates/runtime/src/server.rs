//! The one HTTP server of a binary: /metrics, /healthz, /readyz.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Readiness flag shared between the controllers and the server.
#[derive(Clone, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
    /// What else the binary waits for before it is ready ([`Hold`]s).
    holds: Arc<AtomicUsize>,
}

/// Keeps a binary not ready until dropped (a webhook that is not serving
/// yet: a Service must not send the API server to it).
#[derive(Debug)]
pub struct Hold(Arc<AtomicUsize>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Health {
    /// Marks the binary ready (its controllers are running).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether the binary is ready: marked so, and nothing holds it.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && self.holds.load(Ordering::Acquire) == 0
    }

    /// Holds the binary not ready until the [`Hold`] is dropped.
    pub fn hold(&self) -> Hold {
        self.holds.fetch_add(1, Ordering::AcqRel);
        Hold(self.holds.clone())
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Health,
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    health: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        state.metrics.render(),
    )
}

/// Ready once the API server answered, the CRDs are installed and a webhook
/// the binary serves is up (see [`Health::hold`]), leading
/// or standing by: a standby is a correctly working replica (a rolling
/// update waits for the new pod to be Ready while the old one still leads).
/// The body says which; `crossplane_rs_leader` says it to Prometheus.
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match (state.health.is_ready(), state.metrics.leading()) {
        (true, true) => (StatusCode::OK, "ok: leading"),
        (true, false) => (
            StatusCode::OK,
            "ok: not leading (standing by for the Lease: another replica leads, or the API server does not answer)",
        ),
        (false, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: waiting for the API server, this binary's CRDs and, where it serves one, its webhook",
        ),
    }
}
