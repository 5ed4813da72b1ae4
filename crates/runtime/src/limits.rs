//! Limits that keep one slow thing from holding up everything else.
//!
//! - [`Clusters`]: a deadline on the work a reconcile does against one remote
//!   cluster, and a circuit breaker per cluster. A cluster that does not
//!   answer within the deadline (nothing comes back to any of this binary's
//!   requests to it: slow work while it answers is not counted against it)
//!   is not contacted again until a single probe
//!   (the next reconcile that needs it after a pause) finds it answering;
//!   meanwhile every other reconcile that needs it fails at once with a
//!   message saying so. A stalled cluster therefore holds at most one worker
//!   (the probe) instead of every worker of the controller.
//! - [`RateLimit`]: a token bucket for `--max-reconcile-rate`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use prometheus::IntGauge;

use crate::remote::{Answers, RemoteCluster};

/// First pause before a cluster that did not answer is probed again.
pub const PROBE_BASE: Duration = Duration::from_secs(5);
/// Longest pause between probes of a cluster that keeps not answering: a
/// cluster that comes back is used again within this time.
pub const PROBE_CAP: Duration = Duration::from_secs(60);
/// How long a cluster that did not answer is remembered once nothing asks
/// for it any more (its probe would have been due this long ago).
pub const FORGET_AFTER: Duration = Duration::from_secs(600);

/// How late a deadline check may come (at least; a tenth of the deadline
/// when that is more) and still say that the cluster did not answer.
const LATE_ALLOWANCE_FLOOR: Duration = Duration::from_millis(10);

/// Work against a cluster was cut short at the deadline, or not started
/// because the cluster did not answer recently. The message is the same
/// for both and from one attempt to the next, so a condition that shows it
/// is not rewritten (and its object not woken) on every retry.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{cluster} did not answer ({why}); it is only probed, one request at a time, until it answers again"
)]
pub struct NotAnswering {
    /// The cluster, as the caller names it (e.g. "KubernetesCluster ns/name").
    pub cluster: String,
    /// What the attempt that opened the breaker saw.
    pub why: String,
    /// Whether this attempt was not started (the breaker was open).
    pub skipped: bool,
}

struct Breaker {
    /// Probes in a row that did not answer (1 after the first failure).
    failures: u32,
    /// When the next attempt (the probe) may go.
    retry_at: Instant,
    /// A probe is under way: every other attempt waits for its outcome.
    probing: bool,
    /// What the last failed attempt saw, for messages.
    why: String,
}

/// The pause before probe number `failures + 1`: PROBE_BASE doubled per
/// failed probe, capped at PROBE_CAP.
pub fn probe_delay(failures: u32) -> Duration {
    crate::backoff::doubling(PROBE_BASE, PROBE_CAP, failures)
}

/// Deadlines and circuit breakers for remote clusters, shared by every
/// controller of a binary; cheap to clone.
#[derive(Clone)]
pub struct Clusters {
    timeout: Duration,
    breakers: Arc<Mutex<HashMap<String, Breaker>>>,
    not_answering: IntGauge,
}

impl Clusters {
    /// Limits with a `timeout` per unit of remote work, exporting how many
    /// clusters are not answering as `crossplane_rs_remote_clusters_not_answering`.
    pub fn new(timeout: Duration, registry: &prometheus::Registry) -> prometheus::Result<Self> {
        let not_answering = IntGauge::new(
            format!("{}_remote_clusters_not_answering", crate::metrics::PREFIX),
            "Remote clusters that did not answer within --remote-timeout and are only probed until they answer again.",
        )?;
        registry.register(Box::new(not_answering.clone()))?;
        Ok(Self {
            timeout,
            breakers: Arc::default(),
            not_answering,
        })
    }

    /// The deadline on one unit of remote work.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `work` against `cluster` (a name for messages and the breaker's
    /// key, e.g. "KubernetesCluster ns/name"), reached through `remote`.
    ///
    /// The deadline is one of liveness: when it passes, the work is cut
    /// short with [`NotAnswering`] only if the cluster itself is silent (a
    /// request to it has waited `timeout` with nothing at all coming back,
    /// see [`Answers::silent_for`]). Work that is slow while the cluster
    /// answers (this binary's requests queued behind each other, waits on
    /// its own watches, a busy machine, an API server queueing requests
    /// under load) keeps going, and the breaker stays closed: each request
    /// is bounded by the client's read timeout and the whole reconcile by
    /// --reconcile-timeout, so no second, tighter bound cuts work that is
    /// progressing (cutting it would only throw its requests away and send
    /// them again to a server that is already busy).
    ///
    /// Err([`NotAnswering`]) also when the cluster's breaker is open and
    /// this attempt is not its probe, and when the work fails after half
    /// the deadline or more with nothing from the cluster meanwhile and a
    /// request to it failing unanswered (a connect timeout): that opens the
    /// breaker too.
    /// Any other outcome means the cluster answered and closes it.
    pub async fn run<T, E>(
        &self,
        cluster: &str,
        remote: &RemoteCluster,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<Result<T, E>, NotAnswering> {
        self.run_answered_by(cluster, remote.answers(), work).await
    }

    async fn run_answered_by<T, E>(
        &self,
        cluster: &str,
        answers: &Answers,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<Result<T, E>, NotAnswering> {
        let mut attempt = self.admit(cluster, Instant::now())?;
        let start = Instant::now();
        let mut check = start + self.timeout;
        // Whether the last look saw the deadline's silence.
        let mut looked = false;
        let allowance = (self.timeout / 10).max(LATE_ALLOWANCE_FLOOR);
        let mut work = std::pin::pin!(work);
        let result = loop {
            if let Ok(result) = tokio::time::timeout_at(check.into(), &mut work).await {
                break result;
            }
            let now = Instant::now();
            let silent = answers.silent_for(now);
            // A check that comes late means this binary itself stalled (its
            // threads not scheduled on a busy node, a CPU-starved pod), and
            // even on time, answers already read from the network may wait
            // behind other tasks of this binary to be seen: the silence
            // measured can hold this binary's own delay. So the verdict
            // takes two looks: the first that sees the deadline's silence
            // looks again shortly after, and only a second look, on time,
            // that still sees it says the cluster did not answer.
            let late = now.saturating_duration_since(check);
            if silent >= self.timeout && looked && late <= allowance {
                let why = format!(
                    "nothing came back within {}",
                    humantime::format_duration(self.timeout)
                );
                attempt.finish(Some(why.clone()), now);
                return Err(NotAnswering {
                    cluster: cluster.to_owned(),
                    why,
                    skipped: false,
                });
            }
            looked = silent >= self.timeout;
            check = if looked {
                tracing::debug!(
                    cluster,
                    late = %humantime::format_duration(late),
                    "the deadline's silence seen; looking again before saying the cluster did not answer"
                );
                now + allowance
            } else {
                // The earliest the cluster can have been silent for the
                // whole deadline.
                now + (self.timeout - silent)
            };
        };
        // A failure after half the deadline with nothing from the cluster
        // meanwhile and one of its requests failing unanswered: a connect
        // timeout, the cluster not answering, said as such (the same
        // message as the attempts the open breaker skips, so the object's
        // condition does not flap between two). A slow failure while the
        // cluster answers is the work's.
        if result.is_err()
            && start.elapsed() >= self.timeout / 2
            && answers.failed_since(start)
            && !answers.answered_since(start)
        {
            let why = format!(
                "a request failed after {} or more with nothing coming back",
                humantime::format_duration(self.timeout / 2)
            );
            attempt.finish(Some(why.clone()), Instant::now());
            return Err(NotAnswering {
                cluster: cluster.to_owned(),
                why,
                skipped: false,
            });
        }
        attempt.finish(None, Instant::now());
        Ok(result)
    }

    /// [`Clusters::run`] for work whose error type can say that the
    /// cluster did not answer.
    pub async fn call<T, E>(
        &self,
        cluster: &str,
        remote: &RemoteCluster,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E>
    where
        E: From<NotAnswering>,
    {
        self.run(cluster, remote, work)
            .await
            .unwrap_or_else(|e| Err(e.into()))
    }

    fn admit(&self, cluster: &str, now: Instant) -> Result<Attempt, NotAnswering> {
        let mut probe = false;
        if let Ok(mut breakers) = self.breakers.lock() {
            // A cluster nobody asked about for a while (deleted, or its
            // objects moved away) is forgotten, so the map cannot grow for
            // ever.
            breakers.retain(|_, b| {
                b.probing || now.saturating_duration_since(b.retry_at) < FORGET_AFTER
            });
            self.update_gauge(&breakers);
            if let Some(b) = breakers.get_mut(cluster) {
                if b.probing || now < b.retry_at {
                    return Err(NotAnswering {
                        cluster: cluster.to_owned(),
                        why: b.why.clone(),
                        skipped: true,
                    });
                }
                b.probing = true;
                probe = true;
            }
        }
        Ok(Attempt {
            clusters: self.clone(),
            cluster: cluster.to_owned(),
            probe,
            done: false,
        })
    }

    fn update_gauge(&self, breakers: &HashMap<String, Breaker>) {
        self.not_answering.set(breakers.len() as i64);
    }
}

/// One admitted attempt; records its outcome in the breaker. Dropped
/// unfinished (its reconcile was cancelled), a probe lets the next attempt
/// probe instead.
struct Attempt {
    clusters: Clusters,
    cluster: String,
    probe: bool,
    done: bool,
}

impl Attempt {
    /// Records the outcome: `Some(why)` when the cluster did not answer.
    fn finish(&mut self, failed: Option<String>, now: Instant) {
        self.done = true;
        let Ok(mut breakers) = self.clusters.breakers.lock() else {
            return;
        };
        match failed {
            None => {
                breakers.remove(&self.cluster);
            }
            Some(why) => {
                let b = breakers
                    .entry(self.cluster.clone())
                    .or_insert_with(|| Breaker {
                        failures: 0,
                        retry_at: now,
                        probing: false,
                        why: String::new(),
                    });
                // Attempts already under way when the breaker opened count
                // once, with the one that opened it: only a failed probe
                // lengthens the pause.
                if self.probe || b.failures == 0 {
                    b.failures = b.failures.saturating_add(1);
                    b.retry_at = now + probe_delay(b.failures);
                }
                if self.probe {
                    b.probing = false;
                }
                b.why = why;
            }
        }
        self.clusters.update_gauge(&breakers);
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.done || !self.probe {
            return;
        }
        if let Ok(mut breakers) = self.clusters.breakers.lock()
            && let Some(b) = breakers.get_mut(&self.cluster)
        {
            b.probing = false;
        }
    }
}

/// A token bucket: at most `rate` acquisitions per second on average, with
/// bursts of up to `rate` (one second's worth). Cheap to clone (clones share
/// the bucket).
#[derive(Clone)]
pub struct RateLimit {
    bucket: Option<Arc<Mutex<Bucket>>>,
}

struct Bucket {
    /// Time between two tokens.
    interval: Duration,
    /// How far ahead of now the schedule may run: the burst.
    tolerance: Duration,
    /// When the next token is due if none is saved up.
    next: Instant,
}

impl Bucket {
    /// Takes a token and says how long to wait for it (zero when one was
    /// saved up).
    fn reserve(&mut self, now: Instant) -> Duration {
        let due = self.next.max(now);
        let wait = due
            .saturating_duration_since(now)
            .saturating_sub(self.tolerance);
        self.next = due + self.interval;
        wait
    }
}

impl RateLimit {
    /// At most `rate` per second; 0 means no limit.
    pub fn per_second(rate: u32) -> Self {
        if rate == 0 {
            return Self { bucket: None };
        }
        let interval = Duration::from_secs(1) / rate;
        Self {
            bucket: Some(Arc::new(Mutex::new(Bucket {
                interval,
                tolerance: interval.saturating_mul(rate - 1),
                next: Instant::now(),
            }))),
        }
    }

    /// Waits until a token is free and takes it.
    pub async fn acquire(&self) {
        let wait = match &self.bucket {
            Some(b) => b
                .lock()
                .map(|mut b| b.reserve(Instant::now()))
                .unwrap_or_default(),
            None => Duration::ZERO,
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clusters(timeout: Duration) -> Clusters {
        Clusters::new(timeout, &prometheus::Registry::new()).unwrap()
    }

    #[test]
    fn probes_back_off_from_five_seconds_to_a_minute() {
        assert_eq!(probe_delay(1), Duration::from_secs(5));
        assert_eq!(probe_delay(2), Duration::from_secs(10));
        assert_eq!(probe_delay(5), Duration::from_secs(60));
        assert_eq!(probe_delay(u32::MAX), PROBE_CAP);
    }

    /// A cluster with a request waiting on it that never comes back.
    fn silent() -> (Arc<Answers>, impl Sized) {
        let answers = Arc::new(Answers::default());
        let stuck = answers.ask(Instant::now());
        (answers, stuck)
    }

    /// A cluster that answers a request every few milliseconds until the
    /// returned task is aborted.
    fn answering() -> (Arc<Answers>, tokio::task::JoinHandle<()>) {
        let answers = Arc::new(Answers::default());
        let a = answers.clone();
        let task = tokio::spawn(async move {
            loop {
                let asking = a.ask(Instant::now());
                tokio::time::sleep(Duration::from_millis(3)).await;
                asking.answered(Instant::now());
            }
        });
        (answers, task)
    }

    #[tokio::test]
    async fn work_that_hits_the_deadline_says_the_cluster_did_not_answer() {
        let c = clusters(Duration::from_millis(50));
        let (answers, _stuck) = silent();
        let out = c
            .run_answered_by("KubernetesCluster a/b", &answers, async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<(), ()>(())
            })
            .await;
        let msg = out.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.starts_with(
                "KubernetesCluster a/b did not answer (nothing came back within 50ms);"
            ),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn after_a_timeout_other_attempts_fail_at_once_without_running() {
        let c = clusters(Duration::from_millis(20));
        let (answers, _stuck) = silent();
        let first = c
            .run_answered_by("x", &answers, std::future::pending::<Result<(), ()>>())
            .await
            .err()
            .map(|e| e.to_string());
        let ran = std::sync::atomic::AtomicBool::new(false);
        let out = c
            .run_answered_by("x", &answers, async {
                ran.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<(), ()>(())
            })
            .await;
        assert!(matches!(&out, Err(NotAnswering { skipped: true, .. })));
        // Same words as the attempt that timed out: a condition showing it
        // is not rewritten on every retry.
        assert_eq!(out.err().map(|e| e.to_string()), first);
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        // Other clusters are not affected.
        assert!(matches!(
            c.run_answered_by("y", &answers, async { Ok::<(), ()>(()) })
                .await,
            Ok(Ok(()))
        ));
        assert_eq!(c.not_answering.get(), 1);
    }

    #[tokio::test]
    async fn slow_work_against_a_cluster_that_answers_goes_on_and_does_not_open_the_breaker() {
        let c = clusters(Duration::from_millis(20));
        let (answers, task) = answering();
        // Ten times the deadline, the cluster answering meanwhile (queued
        // behind this binary's own requests, an API server queueing a
        // burst): the work finishes.
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, ()>("done")
        };
        let out = c.run_answered_by("x", &answers, slow()).await;
        assert!(matches!(out, Ok(Ok("done"))), "{out:?}");
        // A failure after waiting past the deadline is the work's own, too.
        let out = c
            .run_answered_by("x", &answers, async {
                tokio::time::sleep(Duration::from_millis(30)).await;
                Err::<(), _>("conflict")
            })
            .await;
        assert!(matches!(out, Ok(Err("conflict"))));
        task.abort();
        // Nothing asked of the cluster (the work waits inside this binary,
        // e.g. on its own watch): as long, and the same.
        let idle = Arc::new(Answers::default());
        let out = c.run_answered_by("x", &idle, slow()).await;
        assert!(matches!(out, Ok(Ok("done"))), "{out:?}");
        assert!(c.breakers.lock().unwrap().is_empty());
        assert_eq!(c.not_answering.get(), 0);
    }

    #[tokio::test]
    async fn a_stall_of_this_binary_is_not_the_cluster_not_answering() {
        let c = clusters(Duration::from_millis(40));
        let (answers, task) = answering();
        // The cluster is being asked (and answering) when the stall begins.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let started = Instant::now();
        let out = c
            .run_answered_by("x", &answers, async {
                // This binary's only thread stalls for three deadlines (a
                // starved pod): nothing it is sent is read meanwhile, so
                // the deadline check comes late and sees a long silence.
                std::thread::sleep(Duration::from_millis(120));
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, ()>("done")
            })
            .await;
        assert!(matches!(out, Ok(Ok("done"))), "{out:?}");
        assert!(started.elapsed() >= Duration::from_millis(140));
        assert_eq!(c.not_answering.get(), 0);
        // A cluster that is silent for real still fails the check once it
        // comes on time.
        task.abort();
        let (silent, _stuck) = silent();
        let out = c
            .run_answered_by("x", &silent, async {
                std::thread::sleep(Duration::from_millis(120));
                std::future::pending::<Result<(), ()>>().await
            })
            .await;
        assert!(
            matches!(out, Err(NotAnswering { skipped: false, .. })),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn a_cluster_that_falls_silent_during_slow_work_opens_the_breaker() {
        let c = clusters(Duration::from_millis(40));
        let (answers, task) = answering();
        let started = Instant::now();
        let out = c
            .run_answered_by("x", &answers, async {
                tokio::time::sleep(Duration::from_millis(60)).await;
                // From here on nothing comes back.
                task.abort();
                let _stuck = answers.ask(Instant::now());
                std::future::pending::<Result<(), ()>>().await
            })
            .await;
        assert!(matches!(out, Err(NotAnswering { .. })), "{out:?}");
        // Cut when the silence (from the last answer, at about 60 ms), not
        // the work, reached the deadline.
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(90), "{took:?}");
        assert!(took < Duration::from_millis(160), "{took:?}");
        assert_eq!(c.not_answering.get(), 1);
    }

    #[test]
    fn once_the_pause_is_over_one_probe_goes_and_the_rest_wait_for_it() {
        let c = clusters(Duration::from_secs(10));
        let t0 = Instant::now();
        c.admit("x", t0)
            .unwrap()
            .finish(Some("no answer".into()), t0);
        assert!(c.admit("x", t0 + Duration::from_secs(1)).is_err());
        let later = t0 + PROBE_BASE;
        let mut probe = c.admit("x", later).unwrap();
        assert!(c.admit("x", later).is_err(), "a second probe went");
        // The probe answers: the cluster is used again by everyone.
        probe.finish(None, later);
        assert!(c.admit("x", later).is_ok());
        assert_eq!(c.not_answering.get(), 0);
    }

    #[test]
    fn a_failed_probe_doubles_the_pause_and_attempts_in_flight_count_once() {
        let c = clusters(Duration::from_secs(10));
        let t0 = Instant::now();
        let mut a = c.admit("x", t0).unwrap();
        let mut b = c.admit("x", t0).unwrap();
        a.finish(Some("no answer".into()), t0);
        b.finish(Some("no answer".into()), t0);
        let probe_at = t0 + PROBE_BASE;
        c.admit("x", probe_at)
            .unwrap()
            .finish(Some("no answer".into()), probe_at);
        assert!(c.admit("x", probe_at + PROBE_BASE).is_err());
        assert!(c.admit("x", probe_at + probe_delay(2)).is_ok());
    }

    #[test]
    fn a_cluster_nobody_asks_about_is_forgotten() {
        let c = clusters(Duration::from_secs(10));
        let t0 = Instant::now();
        c.admit("gone", t0)
            .unwrap()
            .finish(Some("no answer".into()), t0);
        assert_eq!(c.not_answering.get(), 1);
        let much_later = t0 + PROBE_BASE + FORGET_AFTER;
        drop(c.admit("other", much_later).unwrap());
        assert_eq!(c.not_answering.get(), 0);
        assert!(c.breakers.lock().unwrap().is_empty());
    }

    #[test]
    fn a_cancelled_probe_lets_the_next_attempt_probe() {
        let c = clusters(Duration::from_secs(10));
        let t0 = Instant::now();
        c.admit("x", t0)
            .unwrap()
            .finish(Some("no answer".into()), t0);
        let later = t0 + PROBE_BASE;
        drop(c.admit("x", later).unwrap());
        assert!(c.admit("x", later).is_ok());
    }

    #[tokio::test]
    async fn a_slow_unanswered_failure_opens_the_breaker_and_says_the_cluster_did_not_answer() {
        let c = clusters(Duration::from_millis(40));
        let answers = Arc::new(Answers::default());
        let out = c
            .run_answered_by("x", &answers, async {
                let connecting = answers.ask(Instant::now());
                tokio::time::sleep(Duration::from_millis(25)).await;
                connecting.failed(Instant::now());
                Err::<(), &str>("connect timed out")
            })
            .await;
        assert!(
            matches!(&out, Err(e) if e.why.contains("nothing coming back")),
            "{out:?}"
        );
        assert!(
            c.run_answered_by("x", &answers, async { Ok::<(), ()>(()) })
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_quick_failure_is_an_answer() {
        let c = clusters(Duration::from_secs(10));
        let answers = Arc::new(Answers::default());
        let _ = c
            .run_answered_by("x", &answers, async {
                answers.ask(Instant::now()).failed(Instant::now());
                Err::<(), _>("connection refused")
            })
            .await;
        assert!(
            c.run_answered_by("x", &answers, async { Ok::<(), ()>(()) })
                .await
                .is_ok()
        );
    }

    #[test]
    fn the_bucket_gives_a_burst_of_rate_then_one_token_per_interval() {
        let limit = RateLimit::per_second(5);
        let bucket = limit.bucket.as_ref().unwrap();
        let mut b = bucket.lock().unwrap();
        let t0 = b.next;
        for _ in 0..5 {
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
        assert_eq!(b.reserve(t0), Duration::from_millis(200));
        assert_eq!(b.reserve(t0), Duration::from_millis(400));
        // Idle for two seconds: a full burst is saved up again, no more.
        let t2 = t0 + Duration::from_secs(3);
        for _ in 0..5 {
            assert_eq!(b.reserve(t2), Duration::ZERO);
        }
        assert_eq!(b.reserve(t2), Duration::from_millis(200));
    }

    #[test]
    fn in_any_window_at_most_rate_times_seconds_plus_the_burst_pass() {
        let limit = RateLimit::per_second(10);
        let bucket = limit.bucket.as_ref().unwrap();
        let mut b = bucket.lock().unwrap();
        let t0 = b.next;
        // 100 reconciles asked for at once are spread over nine seconds.
        let granted: Vec<Duration> = (0..100).map(|_| b.reserve(t0)).collect();
        for secs in 1..10u32 {
            let window = Duration::from_secs(u64::from(secs));
            let n = granted.iter().filter(|w| **w < window).count();
            assert!(n <= 10 * secs as usize + 10, "{n} in {secs}s");
        }
        assert_eq!(granted.iter().max(), Some(&Duration::from_millis(9000)));
    }

    #[tokio::test]
    async fn a_zero_rate_is_unlimited() {
        let limit = RateLimit::per_second(0);
        for _ in 0..1000 {
            limit.acquire().await;
        }
    }
}
