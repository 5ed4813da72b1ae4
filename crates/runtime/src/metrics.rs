//! The metrics every controller exports, with the same names in every binary.
//! Labels are bounded: controller and kind names, results, error categories,
//! verbs and cluster keys; never object names or error strings.

use std::{
    any::Any,
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use prometheus::{
    Counter, Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder, core::Collector,
};

/// Prefix of every metric name.
pub const PREFIX: &str = "crossplane_rs";

/// Shared metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Reconciles by controller and result: success, error, or conflict (a
    /// guarded write lost a race and the object is looked at again; not an
    /// error).
    pub reconciles: IntCounterVec,
    /// Reconcile duration by controller.
    pub reconcile_duration: HistogramVec,
    /// Reconciles in flight by controller.
    pub in_flight: IntGaugeVec,
    /// Objects known to the controller's cache and waiting or being worked on.
    pub pending: IntGaugeVec,
    /// Objects due for a reconcile that wait for a free worker.
    pub waiting: IntGaugeVec,
    /// Reconcile errors by controller and category.
    pub errors: IntCounterVec,
    /// Objects whose reconciles are failing and retried with backoff, by
    /// controller.
    pub backoff: IntGaugeVec,
    /// Requests to Kubernetes API servers by cluster ("control" for the
    /// control cluster, else the remote cluster's name, at most
    /// [`crate::remote::MAX_CLUSTER_LABELS`] of them, then "other") and verb.
    pub api_requests: IntCounterVec,
    /// 1 while this replica holds its leader-election Lease (or runs
    /// without one). Set through [`Self::set_leading`].
    leader: IntGauge,
    /// Times this replica stopped leading (it could not renew its Lease in
    /// time, or another replica holds it) and went back to standing by.
    pub leader_stand_downs: IntCounter,
    /// Seconds this process has spent not leading (standing by, or waiting
    /// for the API server at start), up to the last scrape.
    not_leading: Counter,
    /// Since when this process has not led, while it does not.
    not_leading_since: Arc<Mutex<Option<Instant>>>,
    /// A controller's own metrics, by name, registered once however often
    /// its controller is built again ([`Self::register`]).
    own: Arc<Mutex<HashMap<String, Box<dyn Any + Send>>>>,
    /// Shared watches open now, by controller (see [`crate::watches`]).
    pub shared_watches: IntGaugeVec,
    /// Controller objects woken because something they read changed (or
    /// its watch failed or recovered), by controller.
    pub watch_wakeups: IntCounterVec,
    /// Shared watches that failed (their caches unknown until they list
    /// again), by controller.
    pub watch_failures: IntCounterVec,
    /// Managed resources' external side observed (from a watch cache or the
    /// server), by controller and cluster (the same `cluster` label as
    /// [`Self::api_requests`] gives that cluster's client). It counts
    /// observations, whatever they cost: a resync answered from a cache
    /// moves it and not the request counter.
    pub remote_observations: IntCounterVec,
    /// Bytes the process holds allocated now (jemalloc's count of live
    /// allocations, read at each scrape): what the process keeps, where
    /// resident memory also counts freed pages not yet returned.
    pub heap_allocated: IntGauge,
}

impl Metrics {
    /// Registers the common metrics with a new registry.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let reconciles = IntCounterVec::new(
            Opts::new(
                format!("{PREFIX}_reconcile_total"),
                "Reconciles by controller and result.",
            ),
            &["controller", "result"],
        )?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                format!("{PREFIX}_reconcile_duration_seconds"),
                "Time spent in one reconcile, by controller.",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["controller"],
        )?;
        let in_flight = IntGaugeVec::new(
            Opts::new(
                format!("{PREFIX}_reconcile_in_flight"),
                "Reconciles running now, by controller.",
            ),
            &["controller"],
        )?;
        let pending = IntGaugeVec::new(
            Opts::new(
                format!("{PREFIX}_objects_pending"),
                "Objects in the controller's cache, by controller.",
            ),
            &["controller"],
        )?;
        let waiting = IntGaugeVec::new(
            Opts::new(
                format!("{PREFIX}_reconcile_waiting"),
                "Objects due for a reconcile that wait for one of the controller's --concurrency workers (taken first come, first served), by controller.",
            ),
            &["controller"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                format!("{PREFIX}_reconcile_errors_total"),
                "Reconcile errors by controller and category.",
            ),
            &["controller", "category"],
        )?;
        let backoff = IntGaugeVec::new(
            Opts::new(
                format!("{PREFIX}_reconcile_backoff_objects"),
                "Objects whose reconciles are failing and retried with backoff, by controller.",
            ),
            &["controller"],
        )?;
        let api_requests = IntCounterVec::new(
            Opts::new(
                format!("{PREFIX}_kube_api_requests_total"),
                "Requests sent to Kubernetes API servers, by cluster (control or a remote cluster's name) and verb.",
            ),
            &["cluster", "verb"],
        )?;
        let leader = IntGauge::new(
            format!("{PREFIX}_leader"),
            "1 while this replica is the leader (or runs without leader election).",
        )?;
        let leader_stand_downs = IntCounter::new(
            format!("{PREFIX}_leader_stand_downs_total"),
            "Times this replica stopped leading (no renewal of its Lease within the renew deadline, or another replica holds it) and went back to standing by in the same process.",
        )?;
        let not_leading = Counter::new(
            format!("{PREFIX}_leader_not_leading_seconds_total"),
            "Seconds this process has spent not leading: standing by, or waiting for the API server.",
        )?;
        let shared_watches = IntGaugeVec::new(
            Opts::new(
                format!("{PREFIX}_shared_watches"),
                "Shared watches of objects that controller objects read, open now, by controller.",
            ),
            &["controller"],
        )?;
        let watch_wakeups = IntCounterVec::new(
            Opts::new(
                format!("{PREFIX}_watch_wakeups_total"),
                "Controller objects woken because an object they read changed, or its watch failed or recovered, by controller.",
            ),
            &["controller"],
        )?;
        let watch_failures = IntCounterVec::new(
            Opts::new(
                format!("{PREFIX}_shared_watch_failures_total"),
                "Shared watches that failed and list again (reads of what they watch go to the server meanwhile), by controller.",
            ),
            &["controller"],
        )?;
        let remote_observations = IntCounterVec::new(
            Opts::new(
                format!("{PREFIX}_remote_observations_total"),
                "Managed resources' external side observed (from a watch cache or the server), by controller and cluster.",
            ),
            &["controller", "cluster"],
        )?;
        let heap_allocated = IntGauge::new(
            format!("{PREFIX}_heap_allocated_bytes"),
            "Bytes held in live allocations now, not counting what the allocator's per-thread caches keep for reuse (read from the allocator at each scrape).",
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(waiting.clone()))?;
        registry.register(Box::new(pending.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(backoff.clone()))?;
        registry.register(Box::new(api_requests.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(leader_stand_downs.clone()))?;
        registry.register(Box::new(not_leading.clone()))?;
        registry.register(Box::new(shared_watches.clone()))?;
        registry.register(Box::new(watch_wakeups.clone()))?;
        registry.register(Box::new(watch_failures.clone()))?;
        registry.register(Box::new(remote_observations.clone()))?;
        registry.register(Box::new(heap_allocated.clone()))?;
        Ok(Self {
            registry,
            reconciles,
            reconcile_duration,
            in_flight,
            waiting,
            pending,
            errors,
            backoff,
            api_requests,
            leader,
            leader_stand_downs,
            not_leading,
            not_leading_since: Arc::new(Mutex::new(Some(Instant::now()))),
            own: Arc::default(),
            shared_watches,
            watch_wakeups,
            watch_failures,
            remote_observations,
            heap_allocated,
        })
    }

    /// The registry, for the runtime's own metrics registered once.
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Registers a controller's own metric (a collector of one metric name)
    /// and returns it; a metric of that name registered before (by an
    /// earlier build of the same controller, before this replica stood down
    /// and led again) is returned instead, so its counts go on.
    pub fn register<C>(&self, collector: C) -> Result<C, prometheus::Error>
    where
        C: Collector + Clone + Send + 'static,
    {
        let name = collector
            .desc()
            .first()
            .map(|d| d.fq_name.clone())
            .unwrap_or_default();
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(earlier) = own.get(&name) {
            return earlier
                .downcast_ref::<C>()
                .cloned()
                .ok_or(prometheus::Error::AlreadyReg);
        }
        self.registry.register(Box::new(collector.clone()))?;
        own.insert(name, Box::new(collector.clone()));
        Ok(collector)
    }

    /// Whether this replica leads now: the `leader` gauge, and the time
    /// spent not leading.
    pub fn set_leading(&self, leading: bool) {
        let mut since = self
            .not_leading_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if let Some(from) = since.take() {
            self.not_leading
                .inc_by(now.saturating_duration_since(from).as_secs_f64());
        }
        *since = (!leading).then_some(now);
        self.leader.set(i64::from(leading));
    }

    /// Whether this replica leads now.
    pub fn leading(&self) -> bool {
        self.leader.get() == 1
    }

    /// After the controllers stopped (this replica stood down): the gauges
    /// that describe their work say none; their next build sets them again.
    /// (Reconciles in flight and shared watches count themselves down as
    /// they are dropped.)
    pub fn controllers_stopped(&self) {
        for gauges in [&self.pending, &self.waiting, &self.backoff] {
            for family in gauges.collect() {
                for m in family.get_metric() {
                    let labels: Vec<&str> = m.get_label().iter().map(|l| l.value()).collect();
                    if let Ok(g) = gauges.get_metric_with_label_values(&labels) {
                        g.set(0);
                    }
                }
            }
        }
    }

    /// Prometheus text exposition of every registered metric.
    pub fn render(&self) -> String {
        // The time not leading so far counts at each scrape.
        let leading = self.leading();
        self.set_leading(leading);
        if let Some(b) = crate::alloc::allocated() {
            self.heap_allocated
                .set(i64::try_from(b).unwrap_or(i64::MAX));
        }
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }

    /// Makes every per-controller series exist at zero, so dashboards and
    /// tests see them before the first reconcile.
    pub fn init_controller(&self, controller: &str) {
        for result in ["success", "error", "conflict"] {
            self.reconciles.with_label_values(&[controller, result]);
        }
        self.reconcile_duration.with_label_values(&[controller]);
        self.in_flight.with_label_values(&[controller]);
        self.waiting.with_label_values(&[controller]);
        self.pending.with_label_values(&[controller]);
        self.backoff.with_label_values(&[controller]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_built_again_counts_on_in_the_metric_it_registered_first() {
        let m = Metrics::new().unwrap();
        let counter = || IntCounter::new("crossplane_rs_test_total", "A test counter.").unwrap();
        let first = m.register(counter()).unwrap();
        first.inc();
        let again = m.register(counter()).unwrap();
        again.inc();
        assert_eq!(first.get(), 2);
        assert!(m.render().contains("crossplane_rs_test_total 2"));
        // Another kind of metric under the same name is refused.
        let gauge = IntGauge::new("crossplane_rs_test_total", "Not a counter.").unwrap();
        assert!(m.register(gauge).is_err());
    }

    #[test]
    fn time_not_leading_counts_until_the_replica_leads_and_stand_downs_zero_the_work_gauges() {
        let m = Metrics::new().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        m.set_leading(true);
        let waited = m.not_leading.get();
        assert!(waited >= 0.02, "{waited}");
        assert!(m.leading());
        std::thread::sleep(std::time::Duration::from_millis(20));
        m.render();
        assert_eq!(m.not_leading.get(), waited, "counted while leading");
        m.pending.with_label_values(&["c"]).set(7);
        m.backoff.with_label_values(&["c"]).set(3);
        m.set_leading(false);
        m.controllers_stopped();
        assert!(!m.leading());
        assert_eq!(m.pending.with_label_values(&["c"]).get(), 0);
        assert_eq!(m.backoff.with_label_values(&["c"]).get(), 0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        m.render();
        assert!(m.not_leading.get() >= waited + 0.02);
    }
}
