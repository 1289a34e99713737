//! The live heap (bytes allocated and not yet freed), counted by the soak's global allocator:
//! mimalloc, wrapped by `cap`'s counter. Beside resident memory ([`crate::rss`]) it tells what
//! the process holds from what the allocator keeps mapped.
//!
//! mimalloc rather than the system's: glibc's `malloc` keeps much of a backlog's freed memory
//! mapped, so resident memory under glibc rises at each backlog's peak and stays though the live
//! heap goes back (docs/performance.md, "Under faults: the soak", has both runs). The allocator
//! is the binary's choice, not the library's: the soak makes the choice an operator would.

use cap::Cap;
use mimalloc::MiMalloc;

#[global_allocator]
static ALLOCATOR: Cap<MiMalloc> = Cap::new(MiMalloc, usize::MAX);

/// Live heap bytes in MiB.
pub fn heap_mib() -> f64 {
    live_bytes() as f64 / (1024.0 * 1024.0)
}

fn live_bytes() -> u64 {
    ALLOCATOR.allocated() as u64
}

/// The highest live heap seen since the last [`HeapPeak::take`], watched every 5 ms by a
/// thread of its own (a peak between two samples is what an allocator may keep mapped).
pub struct HeapPeak(std::sync::Arc<std::sync::atomic::AtomicU64>);

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
