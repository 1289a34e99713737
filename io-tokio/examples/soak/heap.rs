//! The live heap (bytes allocated and not yet freed), counted by the soak's global allocator:
//! mimalloc, wrapped by `cap`'s counter. Beside resident memory ([`crate::rss`]) it tells what
//! the process holds from what the allocator keeps mapped.
//!
//! mimalloc (its v2: v3 kept more resident at each drift), and told to give freed pages back
//! at once ([`PURGE_AT_ONCE`]): glibc's `malloc`, and mimalloc with its defaults, keep much of a
//! backlog's freed memory (a replay after `kill -9` holds up to a million rows) mapped for
//! reuse, so resident memory rises at each backlog's peak and stays though the live heap goes
//! back (docs/performance.md, "Under faults: the soak", has the runs). The allocator is the
//! binary's choice, not the library's: the soak makes the choice an operator would, who sets
//! the same variables in the pod.

use cap::Cap;
use mimalloc::MiMalloc;

#[global_allocator]
static ALLOCATOR: Cap<MiMalloc> = Cap::new(MiMalloc, usize::MAX);

/// mimalloc's options (read from the environment when the process starts) that decommit a
/// page as soon as it is free instead of keeping it for reuse.
pub const PURGE_AT_ONCE: [(&str, &str); 3] = [
    ("MIMALLOC_PURGE_DELAY", "0"),
    ("MIMALLOC_PURGE_DECOMMITS", "1"),
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
];

/// Runs this binary again, with its arguments, where any of [`PURGE_AT_ONCE`] is not set (those
/// set are kept: a run may try others), and returns its exit code; `None` when they are all
/// set, so this process goes on.
pub fn rerun_with_purge() -> Option<std::process::ExitCode> {
    let missing: Vec<_> = PURGE_AT_ONCE
        .iter()
        .filter(|(k, _)| std::env::var_os(k).is_none())
        .copied()
        .collect();
    if missing.is_empty() {
        return None;
    }
    let run = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .envs(missing)
            .status()
    });
    Some(match run {
        Ok(status) => std::process::ExitCode::from(status.code().map_or(2, |c| c as u8)),
        Err(e) => {
            eprintln!("soak: could not run itself again with mimalloc's options: {e}");
            std::process::ExitCode::from(2)
        }
    })
}

/// The allocator's options as this process has them, for the soak's first line.
pub fn settings() -> String {
    PURGE_AT_ONCE
        .iter()
        .map(|(k, _)| format!("{k}={}", std::env::var(k).unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(" ")
}

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
