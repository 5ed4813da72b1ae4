//! Logging set-up.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::args::LogFormat;

/// Installs the global tracing subscriber. `RUST_LOG` overrides the default
/// filter (`info`, with kube's chatty internals at `warn`).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,kube_runtime=warn,kube_client=warn,tower=warn,hyper=warn")
    });
    let registry = tracing_subscriber::registry().with(filter);
    // Ignore the error: tests may install a subscriber more than once.
    let _ = match format {
        LogFormat::Json => registry
            .with(fmt::layer().json().flatten_event(true))
            .try_init(),
        LogFormat::Text => registry.with(fmt::layer()).try_init(),
    };
}
