//! The one wait of the e2e tests: poll a check until it gives a value or
//! the time is up. A check says what it saw when it is not there yet
//! (`Err(observation)`), or only that it is not (`None`); a timeout names
//! what was awaited and the last observation, so a failure in CI shows
//! where things stood. [`wait`] is for async tests, [`wait_blocking`] for
//! the kubectl-based ones; both are [`poll`] and [`poll_blocking`], which
//! return the timeout instead of failing (for benchmarks, which measure it).

use std::{
    fmt::Display,
    future::Future,
    time::{Duration, Instant},
};

/// How often a wait looks again: often enough that a benchmark's timings
/// are not dominated by it, rarely enough not to load the API servers.
pub const EVERY: Duration = Duration::from_millis(250);

/// What one look of a check found: the value, or not yet (with what was
/// seen instead, when the check can say).
pub trait Look {
    /// What the wait returns.
    type Value;
    /// The value, or what was seen instead (None: nothing to say).
    fn look(self) -> Result<Self::Value, Option<String>>;
}

impl<T> Look for Option<T> {
    type Value = T;
    fn look(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Look for Result<T, E> {
    type Value = T;
    fn look(self) -> Result<T, Option<String>> {
        self.map_err(|seen| Some(seen.to_string()))
    }
}

impl Look for bool {
    type Value = ();
    fn look(self) -> Result<(), Option<String>> {
        self.then_some(()).ok_or(None)
    }
}

/// A wait that ran out of time.
#[derive(Debug)]
pub struct TimedOut {
    /// What was awaited.
    pub what: String,
    /// How long it waited (at least the timeout).
    pub waited: Duration,
    /// The last thing the check saw, if it said.
    pub last: Option<String>,
}

impl TimedOut {
    /// The failure message, with `state` (say, the objects involved)
    /// when there is more to show than the check's last look.
    pub fn message(&self, state: Option<String>) -> String {
        let mut m = format!(
            "timed out after {:?} waiting for {}",
            self.waited, self.what
        );
        if let Some(last) = &self.last {
            m.push_str(&format!("; last seen: {last}"));
        }
        if let Some(state) = state {
            m.push_str(&format!("; it stood at: {state}"));
        }
        m
    }
}

/// Looks with `check` every `every` until it gives a value, or `timeout`
/// passed; the value and how long it took.
pub async fn poll<L, F, Fut>(
    timeout: Duration,
    every: Duration,
    what: &str,
    mut check: F,
) -> Result<(L::Value, Duration), TimedOut>
where
    L: Look,
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
{
    let started = Instant::now();
    loop {
        let last = match check().await.look() {
            Ok(v) => return Ok((v, started.elapsed())),
            Err(seen) => seen,
        };
        if started.elapsed() >= timeout {
            return Err(TimedOut {
                what: what.to_owned(),
                waited: started.elapsed(),
                last,
            });
        }
        tokio::time::sleep(every).await;
    }
}

/// [`poll`] for checks that block (kubectl), on the calling thread.
pub fn poll_blocking<L: Look>(
    timeout: Duration,
    every: Duration,
    what: &str,
    mut check: impl FnMut() -> L,
) -> Result<(L::Value, Duration), TimedOut> {
    let started = Instant::now();
    loop {
        let last = match check().look() {
            Ok(v) => return Ok((v, started.elapsed())),
            Err(seen) => seen,
        };
        if started.elapsed() >= timeout {
            return Err(TimedOut {
                what: what.to_owned(),
                waited: started.elapsed(),
                last,
            });
        }
        std::thread::sleep(every);
    }
}

/// Waits until `check` gives a value, failing the test after `timeout`
/// with `what` and the check's last observation.
pub async fn wait<L, F, Fut>(timeout: Duration, what: &str, check: F) -> L::Value
where
    L: Look,
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
{
    wait_every(timeout, EVERY, what, check).await
}

/// [`wait`] looking every `every` rather than every [`EVERY`]: for a
/// check that also samples something all along (each look is a check).
pub async fn wait_every<L, F, Fut>(
    timeout: Duration,
    every: Duration,
    what: &str,
    check: F,
) -> L::Value
where
    L: Look,
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
{
    match poll(timeout, every, what, check).await {
        Ok((v, _)) => v,
        Err(out) => panic!("{}", out.message(None)),
    }
}

/// Like [`wait`], and a timeout also says what `explain` finds then (the
/// object's status, say).
pub async fn wait_explained<L, F, Fut, E, EFut>(
    timeout: Duration,
    what: &str,
    check: F,
    explain: E,
) -> L::Value
where
    L: Look,
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
    E: FnOnce() -> EFut,
    EFut: Future<Output = String>,
{
    match poll(timeout, EVERY, what, check).await {
        Ok((v, _)) => v,
        Err(out) => panic!("{}", out.message(Some(explain().await))),
    }
}

/// [`wait`] for checks that block (kubectl); `explain` says what stood
/// where at the timeout (pass `|| String::new()` when the check's last
/// look says enough).
pub fn wait_blocking<L: Look>(
    timeout: Duration,
    what: &str,
    check: impl FnMut() -> L,
    explain: impl FnOnce() -> String,
) -> L::Value {
    match poll_blocking(timeout, EVERY, what, check) {
        Ok((v, _)) => v,
        Err(out) => {
            let state = explain();
            panic!("{}", out.message((!state.is_empty()).then_some(state)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_names_what_was_awaited_and_the_last_look() {
        let out = poll_blocking(Duration::ZERO, EVERY, "the pod Ready", || {
            Err::<(), _>("phase Pending")
        })
        .unwrap_err();
        let m = out.message(Some("pod/x Pending".into()));
        assert!(m.contains("waiting for the pod Ready"), "{m}");
        assert!(m.contains("last seen: phase Pending"), "{m}");
        assert!(m.contains("it stood at: pod/x Pending"), "{m}");
    }

    #[test]
    fn a_check_that_gives_a_value_returns_it() {
        let mut n = 0;
        let (v, _) = poll_blocking(
            Duration::from_secs(5),
            Duration::ZERO,
            "three looks",
            || {
                n += 1;
                (n == 3).then_some(n)
            },
        )
        .unwrap();
        assert_eq!(v, 3);
    }
}
