//! The service's documented per-stream limits (PROTOCOL.md E), enforced by the emulator as an
//! option ([`EmulatorConfig::stream_limits`](super::EmulatorConfig::stream_limits)), so that a
//! benchmark against it reflects the service rather than a loopback with no ceiling.
//!
//! Throughput: a stream's acks are held to both rates by a token bucket ([`Pace`]) that holds
//! at most [`StreamLimits::burst`] of credit: a stream that sat idle may then go faster only
//! for that long. (A first version gave credit for all the time since READY, so a client whose
//! streams waited longer before a benchmark's timer started was let through faster.)
//!
//! The bound on unacked rows is a setting of its own
//! ([`EmulatorConfig::max_unacked_rows`](super::EmulatorConfig::max_unacked_rows)): the service
//! buffers a bounded amount whether or not a stream runs at its rate limits.

use std::time::Duration;

/// Per-stream limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamLimits {
    /// Bytes per second (the messages' encoded size on the wire).
    pub bytes_per_sec: u64,
    /// Rows (records) per second.
    pub rows_per_sec: u64,
    /// The most credit an idle stream keeps (the docs give no figure; 100 ms, an ack group's
    /// worth).
    pub burst: Duration,
}

impl StreamLimits {
    /// The limits page (docs.databricks.com/aws/en/ingestion/zerobus-limits): 100 MB/s and
    /// 15,000 records/s per stream; no unacked figure is documented.
    #[must_use]
    pub const fn documented() -> StreamLimits {
        StreamLimits {
            bytes_per_sec: 100_000_000,
            rows_per_sec: 15_000,
            burst: Duration::from_millis(100),
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

    /// These limits with `rows_per_sec`.
    #[must_use]
    pub const fn rows_per_sec(self, rows_per_sec: u64) -> StreamLimits {
        StreamLimits {
            rows_per_sec,
            ..self
        }
    }

    /// These limits with at most `burst` of credit.
    #[must_use]
    pub const fn burst(self, burst: Duration) -> StreamLimits {
        StreamLimits { burst, ..self }
    }

    /// The time `rows` and `bytes` take at the slower of the two rates.
    fn cost(&self, rows: u64, bytes: u64) -> Duration {
        let at = |amount: u64, per_sec: u64| {
            Duration::from_secs_f64(amount as f64 / per_sec.max(1) as f64)
        };
        at(rows, self.rows_per_sec).max(at(bytes, self.bytes_per_sec))
    }
}

/// One stream's pace under [`StreamLimits`]: a token bucket, kept as the time (since READY) by
/// which everything acked so far is paid for at the rates.
#[derive(Debug, Clone)]
pub struct Pace {
    limits: StreamLimits,
    paid_by: Duration,
}

impl Pace {
    /// A stream made READY now.
    #[must_use]
    pub fn new(limits: StreamLimits) -> Pace {
        Pace {
            limits,
            paid_by: Duration::ZERO,
        }
    }

    /// How long an ack of `rows` and `bytes` more must wait, `elapsed` after READY. Credit
    /// for idle time is kept up to the burst.
    pub fn hold(&mut self, rows: u64, bytes: u64, elapsed: Duration) -> Duration {
        let from = self.paid_by.max(elapsed.saturating_sub(self.limits.burst));
        self.paid_by = from + self.limits.cost(rows, bytes);
        self.paid_by.saturating_sub(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_waits_for_the_slower_of_the_two_rates() {
        let l = StreamLimits::documented().burst(Duration::ZERO);
        // 30,000 rows are 2 s at 15,000 rows/s; 1 MB is 10 ms at 100 MB/s.
        assert_eq!(
            Pace::new(l).hold(30_000, 1_000_000, Duration::ZERO),
            Duration::from_secs(2)
        );
        // 1 GB is 10 s at 100 MB/s, whatever the rows.
        assert_eq!(
            Pace::new(l).hold(10, 1_000_000_000, Duration::ZERO),
            Duration::from_secs(10)
        );
        assert_eq!(
            Pace::new(StreamLimits::quotas()).hold(100_000, 0, Duration::from_millis(100)),
            Duration::from_secs(1) - Duration::from_millis(100),
            "the first ack may use the burst's credit from READY on"
        );
    }

    #[test]
    fn steady_acks_are_held_to_the_rate_and_idle_time_earns_at_most_the_burst() {
        let l = StreamLimits::quotas(); // 100,000 rows/s, 100 ms of burst.
        let mut pace = Pace::new(l);
        // 10,000 rows every 50 ms asks for twice the rate: each ack is held a further 50 ms.
        let holds: Vec<_> = (0..4)
            .map(|i| pace.hold(10_000, 0, Duration::from_millis(50 * i)))
            .collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(holds, [ms(100), ms(150), ms(200), ms(250)]);
        // Ten seconds idle: the credit is the burst, not ten seconds' worth.
        let later = Duration::from_secs(10);
        assert_eq!(pace.hold(10_000, 0, later), Duration::ZERO);
        assert_eq!(pace.hold(10_000, 0, later), ms(100));
    }
}
