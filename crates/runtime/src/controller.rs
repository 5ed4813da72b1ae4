//! Controllers' plumbing, by concern:
//! - [`harness`]: the binary harness ([`Runtime`]: client, CRD check,
//!   metrics/health server, leader election, shutdown);
//! - [`reporting`]: the [`Reporting`] of each reconcile (rate, deadline,
//!   metrics, log line, Warning event, backoff);
//! - [`cache`]: whether a reflector's cache is complete ([`cache_ready`]);
//! - [`observer`]: the observe-only controller ([`observe`]);
//! - [`queue`]: the order in which due objects take the workers;
//! - [`trim`]: caches that keep only what a controller reads.
//!
//! The reconcile skeleton itself is [`crate::reconciler`].

pub mod cache;
pub mod harness;
pub mod observer;
pub mod queue;
pub mod reporting;
pub mod summaries;
pub mod trim;

pub use cache::{CACHE_NOT_READY_RETRY, cache_ready, wait_cache_ready};
pub use harness::{RunError, Runtime, api_resource};
pub use observer::observe;
pub use reporting::{REASON_TIMED_OUT, Reporting};
