//! This process's memory: resident (read from `/proc/self/status`, 0 where there is none) and
//! the live heap (bytes allocated and not yet freed), counted by an instrumented global
//! allocator. The two apart tell what the process holds from what the allocator keeps mapped.

use std::alloc::System;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Live heap bytes in MiB: allocated minus freed (a reallocation's growth or shrink is already
/// counted in these two; `bytes_reallocated` repeats it).
#[allow(dead_code)] // the memory example reads resident memory only
pub fn heap_mib() -> f64 {
    live_bytes() as f64 / (1024.0 * 1024.0)
}

fn live_bytes() -> u64 {
    let s = GLOBAL.stats();
    s.bytes_allocated.saturating_sub(s.bytes_deallocated) as u64
}

/// The highest live heap seen since the last [`HeapPeak::take`], watched every 5 ms by a
/// thread of its own (a peak between two samples is what an allocator may keep mapped).
#[allow(dead_code)] // the memory example reads resident memory only
pub struct HeapPeak(std::sync::Arc<std::sync::atomic::AtomicU64>);

#[allow(dead_code)]
impl HeapPeak {
    /// Starts the watching thread.
    pub fn start() -> HeapPeak {
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let watched = peak.clone();
        std::thread::spawn(move || {
            loop {
                watched.fetch_max(live_bytes(), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        HeapPeak(peak)
    }

    /// The peak since the last call, in MiB, and starts a new one.
    pub fn take(&self) -> f64 {
        let now = live_bytes();
        let peak = self.0.swap(now, std::sync::atomic::Ordering::Relaxed);
        peak.max(now) as f64 / (1024.0 * 1024.0)
    }
}

/// `VmRSS` in MiB.
pub fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
