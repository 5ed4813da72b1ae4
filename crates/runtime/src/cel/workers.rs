//! The threads evaluations run on: PARALLEL of them, long-lived (a thread
//! spawned per evaluation cost ~140 µs of spawning alone), each with a
//! 64 MiB stack, started on first use.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{Arc, LazyLock, Mutex, PoisonError, mpsc},
};

/// Stack of every thread that parses or evaluates.
pub(super) const STACK: usize = 64 << 20;
/// Evaluations at once.
pub(super) const PARALLEL: usize = 2;

/// One evaluation, as a worker runs it.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The PARALLEL evaluation threads, started on first use; None when they
/// could not be started. A job is sent only with one of EVALUATIONS'
/// permits, held until it ends, so a job never waits for a busy worker
/// for longer than the worker takes to pick it up.
static WORKERS: LazyLock<Option<Mutex<mpsc::Sender<Job>>>> = LazyLock::new(|| {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..PARALLEL {
        let rx = Arc::clone(&rx);
        std::thread::Builder::new()
            .name(format!("cel-evaluate-{i}"))
            .stack_size(STACK)
            .spawn(move || {
                loop {
                    let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(job) = job else { return };
                    // A job catches its own panics; this keeps the worker
                    // should one escape.
                    let _ = catch_unwind(AssertUnwindSafe(job));
                }
            })
            .ok()?;
    }
    Some(Mutex::new(tx))
});

/// Hands `job` to a worker; false when the workers could not be started.
/// Callers hold one of the PARALLEL evaluation permits until the job ends.
pub(super) fn submit(job: Job) -> bool {
    WORKERS.as_ref().is_some_and(|w| {
        w.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job)
            .is_ok()
    })
}
