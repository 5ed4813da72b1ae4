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
/// are refreshed first), less what its per-thread caches hold for reuse:
/// jemalloc counts those as allocated, and how much each thread keeps
/// depends on the last burst (several MiB after a busy one), which is not
/// what the binary holds. `None` if the allocator cannot say.
pub fn allocated() -> Option<usize> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().ok()?;
    Some(allocated.saturating_sub(in_thread_caches().unwrap_or(0)))
}

/// What the per-thread caches of every arena hold, from jemalloc's own
/// statistics report (the merged arena's `tcache_bytes` and
/// `tcache_stashed_bytes`; its typed interface has no reader for them).
fn in_thread_caches() -> Option<usize> {
    use tikv_jemalloc_ctl::stats_print::{Options, stats_print};
    let mut report = Vec::new();
    let mut options = Options::default();
    options.json_format = true;
    options.skip_constants = true;
    options.skip_per_arena = true;
    options.skip_bin_size_classes = true;
    options.skip_large_size_classes = true;
    options.skip_mutex_statistics = true;
    stats_print(&mut report, options).ok()?;
    let report: serde_json::Value = serde_json::from_slice(&report).ok()?;
    let merged = report.pointer("/jemalloc/stats.arenas/merged")?;
    let bytes = |name: &str| merged.get(name).and_then(serde_json::Value::as_u64);
    let total = bytes("tcache_bytes")? + bytes("tcache_stashed_bytes").unwrap_or(0);
    usize::try_from(total).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_thread_caches_hold_is_read_and_not_counted_as_live() {
        // Allocate and free many small objects: some stay in this
        // thread's cache.
        let v: Vec<Vec<u8>> = (0..10_000).map(|n| vec![0u8; 16 + n % 512]).collect();
        drop(v);
        let cached = super::in_thread_caches().expect("the merged arena's tcache_bytes");
        assert!(cached > 0, "a thread cache holds freed objects");
        let live = super::allocated().expect("jemalloc's statistics");
        let counted = tikv_jemalloc_ctl::stats::allocated::read().expect("jemalloc's statistics");
        assert!(
            live > 0 && live < counted,
            "live {live} is what jemalloc counts ({counted}) less its thread caches"
        );
    }
}
