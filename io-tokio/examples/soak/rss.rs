//! This process's resident memory, read from `/proc/self/status` (0 where there is none).
//! Shared by the soak and the memory example.

/// `VmRSS` in MiB.
pub fn rss_mib() -> f64 {
    status_mib("VmRSS:")
}

/// `RssAnon` in MiB: the anonymous part of [`rss_mib`] (the heap, stacks, the allocator's
/// retained pages). The rest is `RssFile`: the binary's code and data as far as they have
/// been touched, which grows as code paths first run (a drift, an outage) and is no leak.
pub fn rss_anon_mib() -> f64 {
    status_mib("RssAnon:")
}

fn status_mib(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(key)).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
