//! The allocator of every binary (and test) that links this crate: jemalloc,
//! chosen by measurement over glibc's malloc. The controllers hold many
//! small, long-lived JSON trees (their caches) while they allocate and free
//! many more per reconcile; glibc's arenas keep the holes between them, so
//! its resident memory grows well past what is live and does not come back
//! (also with MALLOC_ARENA_MAX=2 or a lower trim threshold), while jemalloc's
//! size classes pack them and its decay returns freed pages to the system
//! after a few seconds. The figures are in the commit that chose it.

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes in live allocations now, as jemalloc counts them (its statistics
/// are refreshed first; what its per-thread caches hold for reuse counts
/// too, a bounded amount); `None` if the allocator cannot say.
pub fn allocated() -> Option<usize> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    tikv_jemalloc_ctl::stats::allocated::read().ok()
}
