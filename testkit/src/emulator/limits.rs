//! The service's documented per-stream limits (PROTOCOL.md E), enforced by the emulator as an
//! option ([`EmulatorConfig::stream_limits`](super::EmulatorConfig::stream_limits)), so that a
//! benchmark against it reflects the service rather than a loopback with no ceiling.
//!
//! Throughput: a stream's acks are held until its cumulative rows and bytes fit the rate over
//! the time since READY (no burst beyond that). Unacked rows: the emulator stops reading a
//! stream's messages while that many rows are read and not yet acked, so HTTP/2 flow control
//! pushes back on the client, as a service that buffers a bounded amount would.

use std::time::Duration;

/// Per-stream limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamLimits {
    /// Bytes per second (the messages' encoded size on the wire).
    pub bytes_per_sec: u64,
    /// Rows (records) per second.
    pub rows_per_sec: u64,
    /// Rows read and not yet acked, at most (`None`: the docs give no figure).
    pub max_unacked_rows: Option<u64>,
}

impl StreamLimits {
    /// The limits page (docs.databricks.com/aws/en/ingestion/zerobus-limits): 100 MB/s and
    /// 15,000 records/s per stream; no unacked figure is documented.
    #[must_use]
    pub const fn documented() -> StreamLimits {
        StreamLimits {
            bytes_per_sec: 100_000_000,
            rows_per_sec: 15_000,
            max_unacked_rows: None,
        }
    }

    /// The newer quotas page: 100 MB/s and 100,000 records/s per stream (adjustable).
    #[must_use]
    pub const fn quotas() -> StreamLimits {
        StreamLimits {
            rows_per_sec: 100_000,
            ..StreamLimits::documented()
        }
    }

    /// These limits with at most `rows` read and not yet acked per stream.
    #[must_use]
    pub const fn max_unacked_rows(self, rows: u64) -> StreamLimits {
        StreamLimits {
            max_unacked_rows: Some(rows),
            ..self
        }
    }

    /// These limits with `rows_per_sec`.
    #[must_use]
    pub const fn rows_per_sec(self, rows_per_sec: u64) -> StreamLimits {
        StreamLimits {
            rows_per_sec,
            ..self
        }
    }

    /// How long an ack of `rows` and `bytes` in all (since READY) must wait, `elapsed` after
    /// READY, to keep within both rates.
    #[must_use]
    pub fn hold(&self, rows: u64, bytes: u64, elapsed: Duration) -> Duration {
        let at = |amount: u64, per_sec: u64| {
            Duration::from_secs_f64(amount as f64 / per_sec.max(1) as f64)
        };
        at(rows, self.rows_per_sec)
            .max(at(bytes, self.bytes_per_sec))
            .saturating_sub(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_waits_for_the_slower_of_the_two_rates() {
        let l = StreamLimits::documented();
        // 30,000 rows are 2 s at 15,000 rows/s; 1 MB is 10 ms at 100 MB/s.
        assert_eq!(
            l.hold(30_000, 1_000_000, Duration::ZERO),
            Duration::from_secs(2)
        );
        assert_eq!(
            l.hold(30_000, 1_000_000, Duration::from_millis(500)),
            Duration::from_millis(1500)
        );
        // 1 GB is 10 s at 100 MB/s, whatever the rows.
        assert_eq!(
            l.hold(10, 1_000_000_000, Duration::from_secs(4)),
            Duration::from_secs(6)
        );
        assert_eq!(l.hold(15_000, 0, Duration::from_secs(2)), Duration::ZERO);
        assert_eq!(
            StreamLimits::quotas().hold(100_000, 0, Duration::ZERO),
            Duration::from_secs(1)
        );
    }
}
