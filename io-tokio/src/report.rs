//! What the sink reports while running and when closed.

use std::fmt;
use std::time::Duration;

use zerobus_sink::{Metrics, Watermarks};

/// Progress so far, or the summary at close.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Report {
    /// Since the sink started.
    pub elapsed: Duration,
    /// Rows confirmed durable.
    pub rows: u64,
    /// Batches confirmed durable.
    pub batches: u64,
    /// Batches handed back undelivered.
    pub failed_batches: u64,
    /// Streams open now.
    pub open_streams: usize,
    /// Submitted, delivered and failed counts.
    pub watermarks: Watermarks,
    /// The core's counters: coalesce ratio, pending depth, connections, rotations, failures.
    pub metrics: Metrics,
}

impl Report {
    /// Durable rows per second.
    #[must_use]
    pub fn rows_per_sec(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Reconnections: connections opened beyond the first of each stream.
    #[must_use]
    pub fn rebuilds(&self, slots: u64) -> u64 {
        self.metrics.connections_opened.saturating_sub(slots)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.metrics;
        write!(
            f,
            "{} rows durable in {} batches ({:.0} rows/s), {} failed; coalesce mean {:.1} (max {}); \
             max pending {}; {} streams open, {} opened, {} failed, {} rotations",
            self.rows,
            self.batches,
            self.rows_per_sec(),
            self.failed_batches,
            m.coalesce.mean().unwrap_or(0.0),
            m.coalesce.max().unwrap_or(0),
            m.max_pending,
            self.open_streams,
            m.connections_opened,
            m.connections_failed,
            m.rotations,
        )
    }
}
