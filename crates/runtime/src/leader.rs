//! Leader election on a coordination.k8s.io/v1 Lease, with a renew deadline.
//!
//! Replicas started with `--leader-elect` compete for the Lease
//! `crossplane-rs-<binary>`; only its holder runs the controllers. Two
//! replicas never act at once, because:
//!
//! - a standby judges the holder's Lease by how long it has itself seen the
//!   Lease stay unchanged, on its own monotonic clock, never by the times
//!   written in the Lease: machines whose clocks disagree cannot cut a lease
//!   short. It takes the Lease over only after seeing no change for the lease
//!   duration;
//! - the leader counts its time from the moment it *sent* its last renewal
//!   that succeeded, which is earlier than any standby can have seen that
//!   renewal;
//! - the leader stops its controllers when no renewal has succeeded within
//!   the renew deadline, which is shorter than the lease duration. A leader
//!   cut off from a slow or unreachable API server has therefore stopped
//!   before a standby may take over. It does not exit (client-go's leader
//!   election makes its users exit): it drops its controllers, their
//!   in-flight reconciles and their caches, stands by in the same process
//!   and campaigns again, so an API server outage costs no restart and no
//!   kubelet back-off;
//! - every write of the Lease carries the resourceVersion it was based on
//!   (optimistic concurrency): of two replicas racing for the Lease, exactly
//!   one wins.
//!
//! On a graceful stop (SIGTERM) the leader first stops its work, then
//! releases the Lease by clearing its holder; a standby sees a free Lease at
//! its next look (within a second) and takes over at once.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use tokio::time::Instant;

use crate::{args::CommonArgs, events::error_chain, metrics::Metrics};

/// Leader-election flags that describe a schedule that could let two
/// replicas lead at once.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LeaderError(String);

/// When the replicas look at and write the Lease; derived from the
/// `--leader-election-*` flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a standby waits, after it last saw the Lease change, before it
    /// takes the Lease over.
    pub lease_duration: Duration,
    /// How long the leader goes on without a successful renewal before it
    /// stops. Always shorter than `lease_duration`.
    pub renew_deadline: Duration,
    /// How often the leader renews the Lease.
    pub renew_period: Duration,
    /// How often a standby looks at the Lease (and a leader retries a failed
    /// renewal).
    pub poll_period: Duration,
    /// How long one read-and-write of the Lease may take before it is
    /// abandoned and tried again.
    pub attempt_timeout: Duration,
}

impl Timing {
    /// The schedule for a lease duration and an optional renew deadline (two
    /// thirds of the lease duration when not given). Refuses schedules that
    /// are not safe: a lease under one second, or a renew deadline longer
    /// than nine tenths of the lease duration (the last tenth at least is the
    /// margin in which a leader that missed its deadline stops).
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Option<Duration>,
    ) -> Result<Self, LeaderError> {
        if lease_duration < Duration::from_secs(1) {
            return Err(LeaderError(format!(
                "--leader-election-lease-duration {lease_duration:?} is too short: Lease durations are whole seconds; use 1s or more (default 10s)"
            )));
        }
        let renew_deadline = renew_deadline.unwrap_or(lease_duration * 2 / 3);
        let longest = lease_duration * 9 / 10;
        if renew_deadline.is_zero() || renew_deadline > longest {
            return Err(LeaderError(format!(
                "--leader-election-renew-deadline {renew_deadline:?} must be more than zero and at most nine tenths of --leader-election-lease-duration ({lease_duration:?}), that is at most {longest:?}, so that a leader that cannot renew stops before a standby may take over; leave it unset for two thirds of the lease duration"
            )));
        }
        let renew_period =
            (renew_deadline / 4).clamp(Duration::from_millis(50), Duration::from_secs(2));
        Ok(Self {
            lease_duration,
            renew_deadline,
            renew_period,
            poll_period: renew_period.min(Duration::from_secs(1)),
            attempt_timeout: renew_deadline / 2,
        })
    }

    /// The lease duration as the Lease records it: whole seconds, rounded up
    /// so that a replica reading it never waits less than this one would.
    pub fn lease_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }

    /// How long a standby that has seen the Lease unchanged must wait before
    /// taking it over: the longer of its own lease duration and the one the
    /// holder recorded (the holder's renew deadline is shorter than the
    /// latter).
    fn takeover_after(&self, recorded_seconds: Option<i32>) -> Duration {
        let recorded = recorded_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or_default();
        self.lease_duration.max(recorded)
    }
}

/// How often a replica waiting for the API server says so.
pub const WAIT_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Says "now" at most once per interval: for a log line repeated while
/// something is awaited.
pub struct Quiet {
    every: Duration,
    last: Option<Instant>,
}

impl Quiet {
    /// Due at once, then once per `every`.
    pub fn new(every: Duration) -> Self {
        Self { every, last: None }
    }

    /// Whether to say it now (and then not again for an interval).
    pub fn due(&mut self) -> bool {
        let now = Instant::now();
        let due = self
            .last
            .is_none_or(|l| now.duration_since(l) >= self.every);
        if due {
            self.last = Some(now);
        }
        due
    }
}

/// The outcome of one attempt to take the Lease.
#[derive(Debug)]
enum Attempt {
    /// This replica holds the Lease now.
    Acquired,
    /// Another replica holds it and has renewed it recently enough.
    HeldBy(String),
    /// Another replica wrote the Lease first; look again.
    Raced,
}

/// The outcome of one renewal.
#[derive(Debug)]
enum Renewal {
    /// The Lease is ours for another lease duration.
    Renewed,
    /// The Lease is not ours any more; why.
    Lost(String),
}

/// One replica's view of and writes to the Lease.
struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    field_manager: String,
    timing: Timing,
    /// The Lease as this replica's last successful write returned it, while
    /// leading; renewals write it back without reading it first.
    ours: Option<Lease>,
    /// The Lease's resourceVersion as last read, and when this replica first
    /// saw that version.
    observed: Option<(String, Instant)>,
}

impl Elector {
    fn post_params(&self) -> PostParams {
        PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        }
    }

    /// The Lease's spec with this replica as holder, renewed now.
    fn held_by_us(&self, previous: LeaseSpec) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let ours_already = previous.holder_identity.as_deref() == Some(self.identity.as_str());
        let transitions = previous.lease_transitions.unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timing.lease_seconds()),
            acquire_time: if ours_already {
                previous.acquire_time.or_else(|| Some(now.clone()))
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours_already {
                transitions
            } else {
                transitions.saturating_add(1)
            }),
            preferred_holder: previous.preferred_holder,
            strategy: previous.strategy,
        }
    }

    /// Reads the Lease and takes it when it is free, expired or already ours;
    /// creates it when it does not exist.
    async fn try_acquire(&mut self) -> Result<Attempt, kube::Error> {
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    lease_transitions: Some(0),
                    ..self.held_by_us(LeaseSpec::default())
                }),
            };
            return match self.api.create(&self.post_params(), &lease).await {
                Ok(lease) => {
                    self.ours = Some(lease);
                    Ok(Attempt::Acquired)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => {
                    Ok(Attempt::Raced)
                }
                Err(e) => Err(e),
            };
        };
        let now = Instant::now();
        let version = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let first_seen = match &self.observed {
            Some((seen, at)) if *seen == version => *at,
            _ => {
                self.observed = Some((version, now));
                now
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        if let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty())
            && holder != self.identity
            && now.duration_since(first_seen)
                < self.timing.takeover_after(spec.lease_duration_seconds)
        {
            return Ok(Attempt::HeldBy(holder.to_owned()));
        }
        // Free, expired (unchanged for a whole lease), or ours from before a
        // restart: take it, on the condition that it is still the version
        // read.
        match self.write_held(current, spec).await {
            Ok(()) => Ok(Attempt::Acquired),
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Attempt::Raced),
            Err(e) => Err(e),
        }
    }

    /// Writes `current` back held by this replica with a new renew time, on
    /// the condition that it is still the version read (its resourceVersion),
    /// and remembers the answer as the Lease this replica holds.
    async fn write_held(&mut self, current: Lease, spec: LeaseSpec) -> Result<(), kube::Error> {
        let mut lease = current;
        lease.spec = Some(self.held_by_us(spec));
        let written = self
            .api
            .replace(&self.name, &self.post_params(), &lease)
            .await?;
        self.ours = Some(written);
        Ok(())
    }

    /// Writes the Lease again with a new renew time, on the condition that
    /// it is unchanged since this replica last wrote (or read) it.
    async fn renew(&mut self) -> Result<Renewal, kube::Error> {
        let current = match self.ours.take() {
            Some(lease) => lease,
            None => match self.api.get_opt(&self.name).await? {
                Some(lease) => lease,
                None => return Ok(Renewal::Lost("the Lease was deleted".to_owned())),
            },
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(Renewal::Lost(format!(
                "the Lease is now held by {}",
                spec.holder_identity
                    .as_deref()
                    .filter(|h| !h.is_empty())
                    .unwrap_or("nobody")
            )));
        }
        match self.write_held(current, spec).await {
            Ok(()) => Ok(Renewal::Renewed),
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                Ok(Renewal::Lost("the Lease was deleted".to_owned()))
            }
            // A conflict (someone else wrote the Lease) is read again on
            // the next attempt: `ours` is empty now.
            Err(e) => Err(e),
        }
    }

    /// Looks at the Lease every poll period until this replica holds it;
    /// returns when the successful attempt was sent.
    async fn acquire(&mut self) -> Instant {
        let mut told: Option<String> = None;
        // An API server that does not answer is said once per interval,
        // not at every look.
        let mut unanswered = Quiet::new(WAIT_LOG_INTERVAL);
        loop {
            let sent = Instant::now();
            match tokio::time::timeout(self.timing.attempt_timeout, self.try_acquire()).await {
                Ok(Ok(Attempt::Acquired)) => return sent,
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    if told.as_deref() != Some(holder.as_str()) {
                        tracing::info!(lease = %self.name, %holder, "another replica leads; standing by");
                        told = Some(holder);
                    }
                }
                Ok(Ok(Attempt::Raced)) => {
                    tracing::debug!(lease = %self.name, "another replica wrote the Lease first");
                }
                Ok(Err(e)) => {
                    if unanswered.due() {
                        tracing::warn!(lease = %self.name, error = %error_chain(&e), every = ?WAIT_LOG_INTERVAL, "cannot read or take the Lease; trying again every poll period");
                    }
                }
                Err(_) => {
                    if unanswered.due() {
                        tracing::warn!(lease = %self.name, timeout = ?self.timing.attempt_timeout, every = ?WAIT_LOG_INTERVAL, "the API server did not answer about the Lease in time; trying again every poll period");
                    }
                }
            }
            tokio::time::sleep_until(sent + self.timing.poll_period).await;
        }
    }

    /// Renews the Lease every renew period while leading, starting from a
    /// successful write sent at `last_ok`. Returns (why) only when this
    /// replica must stop leading: no renewal succeeded within the renew
    /// deadline, or the Lease is someone else's now.
    async fn keep(&mut self, mut last_ok: Instant) -> String {
        let timing = self.timing;
        let mut next = last_ok + timing.renew_period;
        loop {
            let deadline = last_ok + timing.renew_deadline;
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(deadline) => {
                    return format!(
                        "no renewal succeeded within the renew deadline ({:?}; lease duration {:?})",
                        timing.renew_deadline, timing.lease_duration
                    );
                }
                () = tokio::time::sleep_until(next) => {}
            }
            let sent = Instant::now();
            let give_up = (sent + timing.attempt_timeout).min(deadline);
            match tokio::time::timeout_at(give_up, self.renew()).await {
                Ok(Ok(Renewal::Renewed)) => {
                    last_ok = sent;
                    next = sent + timing.renew_period;
                }
                Ok(Ok(Renewal::Lost(why))) => return why,
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.name, error = %error_chain(&e), left = ?deadline.saturating_duration_since(Instant::now()), "cannot renew the Lease; trying again before the renew deadline");
                    next = sent + timing.poll_period;
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, left = ?deadline.saturating_duration_since(Instant::now()), "the API server did not answer a renewal in time; trying again before the renew deadline");
                    // Try again at once, on a fresh request.
                    next = Instant::now();
                }
            }
        }
    }

    /// Gives the Lease up (clears its holder) when this replica holds it, so
    /// that a standby takes over at its next look.
    async fn release(&mut self) -> Result<(), kube::Error> {
        let current = match self.ours.take() {
            Some(lease) => lease,
            None => match self.api.get_opt(&self.name).await? {
                Some(lease) => lease,
                None => return Ok(()),
            },
        };
        let mut spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        let mut lease = current;
        lease.spec = Some(spec);
        self.api
            .replace(&self.name, &self.post_params(), &lease)
            .await
            .map(|_| ())
    }
}

/// How a spell of leading ended.
enum Ended<E> {
    /// Shutdown was asked for, or the work ended by itself (with what it
    /// returned).
    Stopped(Result<(), E>),
    /// This replica must stop leading; why.
    Lost(String),
}

/// Runs the work `build` makes — when --leader-elect is set, only while this
/// replica holds the Lease `crossplane-rs-<binary>`. A replica that stops
/// leading drops that work (its controllers, in-flight reconciles and
/// caches) and stands by again; when it leads again, `build` makes the work
/// afresh, so everything is looked at once more. Returns when `shutdown`
/// resolves (releasing the Lease) or the work ends by itself (with its
/// error, when it could not be built).
pub async fn run<B, W, S, E>(
    client: Client,
    args: &CommonArgs,
    binary: &str,
    metrics: &Metrics,
    mut build: B,
    shutdown: S,
) -> Result<(), E>
where
    B: FnMut() -> W,
    W: Future<Output = Result<(), E>>,
    S: Future<Output = ()>,
    E: From<LeaderError>,
{
    if !args.leader_elect {
        metrics.set_leading(true);
        return tokio::select! {
            ended = build() => ended,
            () = shutdown => Ok(()),
        };
    }
    let timing = Timing::new(
        args.leader_election_lease_duration,
        args.leader_election_renew_deadline,
    )?;
    let name = format!("crossplane-rs-{binary}");
    let namespace = args.leader_election_namespace.clone();
    let lease = format!("{namespace}/{name}");
    let mut elector = Elector {
        api: Api::namespaced(client, &namespace),
        name,
        identity: args.identity(),
        field_manager: format!("crossplane-rs/{binary}"),
        timing,
        ours: None,
        observed: None,
    };
    tokio::pin!(shutdown);
    loop {
        tracing::info!(%lease, identity = %elector.identity, ?timing, "waiting to become leader");
        let acquired = tokio::select! {
            sent = elector.acquire() => sent,
            () = &mut shutdown => return Ok(()),
        };
        tracing::info!(%lease, "became leader");
        metrics.set_leading(true);
        let ended = tokio::select! {
            ended = build() => Ended::Stopped(ended),
            () = &mut shutdown => Ended::Stopped(Ok(())),
            why = elector.keep(acquired) => Ended::Lost(why),
        };
        // The work has been dropped: nothing reconciles any more.
        metrics.set_leading(false);
        metrics.controllers_stopped();
        match ended {
            Ended::Stopped(ended) => {
                elector.release_in_time(&lease).await;
                return ended;
            }
            Ended::Lost(why) => {
                metrics.leader_stand_downs.inc();
                tracing::warn!(%lease, %why, "stopped leading: the controllers are stopped and their caches dropped; standing by and campaigning again (this process does not exit)");
                elector.ours = None;
            }
        }
    }
}

impl Elector {
    /// Gives the Lease up, waiting at most 5 s for the API server.
    async fn release_in_time(&mut self, lease: &str) {
        match tokio::time::timeout(Duration::from_secs(5), self.release()).await {
            Ok(Ok(())) => tracing::info!(%lease, "released the Lease"),
            Ok(Err(e)) => {
                tracing::warn!(%lease, error = %error_chain(&e), "could not release the Lease; a standby takes over when it expires")
            }
            Err(_) => {
                tracing::warn!(%lease, "releasing the Lease timed out; a standby takes over when it expires")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_renew_deadline_is_two_thirds_of_the_lease() {
        let t = Timing::new(Duration::from_secs(15), None).unwrap();
        assert_eq!(t.renew_deadline, Duration::from_secs(10));
        assert_eq!(t.renew_period, Duration::from_secs(2));
        assert_eq!(t.poll_period, Duration::from_secs(1));
        assert!(t.attempt_timeout < t.renew_deadline);
        assert_eq!(t.lease_seconds(), 15);
    }

    #[test]
    fn a_renew_deadline_close_to_or_past_the_lease_is_refused() {
        let lease = Duration::from_secs(10);
        assert!(Timing::new(lease, Some(Duration::from_secs(9))).is_ok());
        for bad in [
            Duration::ZERO,
            Duration::from_millis(9001),
            Duration::from_secs(10),
            Duration::from_secs(30),
        ] {
            let err = Timing::new(lease, Some(bad)).unwrap_err().to_string();
            assert!(
                err.contains("--leader-election-renew-deadline") && err.contains("nine tenths"),
                "{err}"
            );
        }
        let err = Timing::new(Duration::from_millis(500), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1s or more"), "{err}");
    }

    #[test]
    fn the_recorded_lease_rounds_up_and_a_standby_waits_the_longer_duration() {
        let t = Timing::new(Duration::from_millis(2500), None).unwrap();
        assert_eq!(t.lease_seconds(), 3);
        assert_eq!(t.takeover_after(Some(1)), Duration::from_millis(2500));
        assert_eq!(t.takeover_after(Some(20)), Duration::from_secs(20));
        assert_eq!(t.takeover_after(Some(-5)), Duration::from_millis(2500));
        assert_eq!(t.takeover_after(None), Duration::from_millis(2500));
    }

    #[test]
    fn a_repeated_wait_is_said_once_per_interval() {
        let mut quiet = Quiet::new(Duration::from_millis(200));
        assert!(quiet.due());
        assert!(!quiet.due());
        std::thread::sleep(Duration::from_millis(210));
        assert!(quiet.due());
        assert!(!quiet.due());
    }

    #[test]
    fn the_leader_renews_several_times_within_its_deadline() {
        for secs in [1, 2, 5, 10, 15, 60, 3600] {
            let t = Timing::new(Duration::from_secs(secs), None).unwrap();
            assert!(t.renew_period * 3 <= t.renew_deadline, "{t:?}");
            assert!(t.poll_period <= t.renew_period, "{t:?}");
            assert!(t.renew_deadline < t.lease_duration, "{t:?}");
        }
    }
}
