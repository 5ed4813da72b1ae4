//! Failure modes over time: a remote cluster that stalls does not starve the
//! others, a lost race is not a failure, and --max-reconcile-rate holds.

// Test helpers fail the test loudly, with what went wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod races;
mod stalls;

use e2e::{
    Running, metric_sum,
    stall::{Mode, Stalled},
    wait,
    wait::{EVERY, poll, wait_every},
    workloads::*,
};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch},
};
use serde_json::{Value, json};
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};
use types::{
    compute::v1alpha1::KubernetesCluster,
    kubernetes::v1alpha1::{Object, ProviderConfig},
    workload::v1alpha1::KubernetesApplication,
};

/// Work on the healthy cluster.
const HEALTHY: usize = 20;

/// Waits until `count()` reaches `want`, failing after `timeout` with the
/// last count and `what`.
async fn wait_count<F, Fut>(timeout: Duration, what: &str, want: usize, mut count: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = usize>,
{
    wait(timeout, &format!("{want} {what}"), || {
        let n = count();
        async move {
            let n = n.await;
            (n >= want)
                .then_some(())
                .ok_or(format!("only {n} of {want}"))
        }
    })
    .await;
}

/// Prints a binary's log when the test it lives in fails.
struct DumpLog<'a>(&'a Running);

impl Drop for DumpLog<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- {} log -----\n{}", self.0.name, self.0.log());
        }
    }
}
