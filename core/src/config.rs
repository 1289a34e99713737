//! Configuration of the core, validated once at construction.

use std::time::Duration;

use crate::error::ConfigError;

/// The bounds of one slot's ack window: what may be in flight (assigned, not yet durable).
/// A table may also hold, unassigned, up to its slot count times these bounds.
///
/// Memory held by the sink is bounded by configuration, never by input (invariant 8): a slot
/// holds at most these limits, and a table's queue of batches not yet given to a slot at most
/// its slot count times them, so the sink at most twice `sum over tables of slots x` these.
/// The one exception is a single batch larger than the limits: an empty window (or queue)
/// takes it alone, so it waits for room instead of being refused, and the window then holds
/// that one batch until it is durable (the caller held it in memory already).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowLimits {
    /// Batches in flight per slot. The official client's default is 1,000.
    pub max_batches: u32,
    /// Bytes in flight per slot, as counted by [`Batch::bytes`](crate::Batch::bytes).
    pub max_bytes: u64,
    /// Rows in flight per slot.
    pub max_rows: u64,
}

/// What one stream of the service can carry, as the service documents it (PROTOCOL.md E): the
/// terms the default window is derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamService {
    /// Rows per second per stream.
    pub rows_per_sec: u64,
    /// Bytes per second per stream.
    pub bytes_per_sec: u64,
    /// Time to durability at the 95th percentile: how long the service holds a batch before
    /// its ack.
    pub durability_p95: Duration,
    /// Unacknowledged rows the service buffers per stream, where it says.
    pub unacked_rows: Option<u64>,
    /// The rest of a batch's time in flight, outside the service's durability clock: on the
    /// client's side before it is on the wire, the wire, and the ack's way back. Little's law
    /// counts it too: a window of only `rows_per_sec x durability_p95` (or only the service's
    /// buffer) holds the rows on their way as well, so the service's side is never full and
    /// the stream runs at `durability_p95 / (durability_p95 + round_trip)` of the rate.
    pub round_trip: Duration,
}

impl StreamService {
    /// The quotas page: 100 MB/s and 100,000 records/s per stream, durability P95 500 ms (the
    /// limits page), and the ~50,000 unacked records the service buffers per stream (the
    /// service's write-ups). The older limits page's 15,000 records/s is within these. The
    /// round trip is not the service's to document: 100 ms covers a client in another region.
    /// (On loopback, 0.96-0.99 of 100,000 rows/s at 500 ms with 50,000 rows in flight put a
    /// stream's own side at 5-21 ms: docs/performance.md.)
    pub const DOCUMENTED: StreamService = StreamService {
        rows_per_sec: 100_000,
        bytes_per_sec: 100_000_000,
        durability_p95: Duration::from_millis(500),
        unacked_rows: Some(50_000),
        round_trip: Duration::from_millis(100),
    };
}

impl WindowLimits {
    /// The largest batch (by [`Batch::bytes`](crate::Batch::bytes)) that the byte bound lets
    /// be in flight together with the next one: 256 MiB. The largest batch the documented
    /// terms are measured with is 10,000 rows of 10 KB, 100 MB of data; `Batch::bytes` of a
    /// `RecordBatch` counts its buffers' capacity, which builders grow by doubling, and one
    /// such batch measured 165 MB. At 128 MiB it went alone: one batch in flight, and the
    /// stream reached 0.85 of its 100 MB/s at 200 ms and 0.68 at 500 ms
    /// (`cargo bench -p zerobus-sink-tokio --bench service_limits`); two in flight reach it.
    pub const LARGE_BATCH_BYTES: u64 = 256 * 1024 * 1024;

    /// The window a stream of `service` needs to run at its full rate, by Little's law (in
    /// flight = rate x time in flight):
    /// - rows: what the service holds, `rows_per_sec x durability_p95` capped by the rows it
    ///   buffers, plus what is on its way, `rows_per_sec x round_trip`;
    /// - bytes: `bytes_per_sec x (durability_p95 + round_trip)`, but at least two large batches
    ///   ([`Self::LARGE_BATCH_BYTES`]), so that a batch of up to that size can be on the wire
    ///   while the next is admitted (a batch above the whole bound still goes alone);
    /// - batches: the official client's 1,000, which binds only for batches under
    ///   `max_rows / 1,000` rows (50 with the documented terms).
    #[must_use]
    pub fn for_stream(service: StreamService) -> WindowLimits {
        let in_flight = |per_sec: u64, time: Duration| -> u64 {
            let micros = u64::try_from(time.as_micros()).unwrap_or(u64::MAX);
            per_sec.saturating_mul(micros) / 1_000_000
        };
        let held = in_flight(service.rows_per_sec, service.durability_p95);
        let held = service.unacked_rows.map_or(held, |cap| held.min(cap));
        let max_rows = held
            .saturating_add(in_flight(service.rows_per_sec, service.round_trip))
            .max(1);
        let max_bytes = in_flight(service.bytes_per_sec, service.durability_p95)
            .saturating_add(in_flight(service.bytes_per_sec, service.round_trip))
            .max(2 * Self::LARGE_BATCH_BYTES);
        WindowLimits {
            max_batches: 1_000,
            max_bytes,
            max_rows,
        }
    }
}

/// [`WindowLimits::for_stream`] of [`StreamService::DOCUMENTED`]: 1,000 batches, 512 MiB,
/// 60,000 rows.
impl Default for WindowLimits {
    fn default() -> WindowLimits {
        WindowLimits::for_stream(StreamService::DOCUMENTED)
    }
}

/// How a slot recovers from a failed connection.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Delay before the first reconnect (the official client waits a fixed 2 s).
    pub initial_backoff: Duration,
    /// Cap on the delay.
    pub max_backoff: Duration,
    /// Growth per consecutive failure.
    pub multiplier: f64,
    /// Fraction of each delay that is randomised (0 = none, 0.2 = the delay is 80-100 % of
    /// nominal).
    pub jitter: f64,
    /// Seed of the jitter, so that runs are reproducible.
    pub jitter_seed: u64,
    /// Consecutive failures a slot may retry before its batches are handed back (the official
    /// client: 4). Progress (an ack) resets the count.
    pub max_attempts: u32,
    /// How long a broken but still open stream may deliver its last acks before it is closed.
    pub drain_budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            initial_backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(60),
            multiplier: 2.0,
            jitter: 0.2,
            jitter_seed: 0x5EED,
            max_attempts: 4,
            drain_budget: Duration::from_millis(500),
        }
    }
}

/// Configuration of a [`SinkCore`](crate::SinkCore). Every field has a conservative default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SinkConfig {
    /// Bounds of each slot's ack window.
    pub window: WindowLimits,
    /// Cap on streams open (or opening, or backing off) across every table. When a table needs
    /// streams beyond it, the least recently used table is drained to durable and closed first.
    pub max_open_streams: u16,
    /// How long a table keeps its streams, from the moment the first of them became READY,
    /// before it may be evicted for another: without it, two tables competing under the cap
    /// would evict each other before anything was written, a reopen storm. At least
    /// `retry.initial_backoff` (and above zero).
    pub min_residency: Duration,
    /// Largest wire message; a larger batch is sent as several row slices, each with its own
    /// wire offset (PROTOCOL.md A.2: 2 MiB, as the official client).
    pub max_message_bytes: u64,
    /// How long the oldest sent batch may wait for its durable ack before the stream counts as
    /// broken (PROTOCOL.md A.3: 60 s).
    pub ack_timeout: Duration,
    /// How long an opened connection may take to become ready (PROTOCOL.md C.4: 30 s).
    pub open_timeout: Duration,
    /// Reconnect behaviour.
    pub retry: RetryPolicy,
    /// How long the core waits for the answer to an [`Output::Reconcile`](crate::Output) before
    /// asking again (a driver that lost the request must not stall the table for ever).
    pub reconcile_timeout: Duration,
}

impl Default for SinkConfig {
    fn default() -> SinkConfig {
        SinkConfig {
            window: WindowLimits::default(),
            max_open_streams: 64,
            min_residency: Duration::from_secs(10),
            max_message_bytes: 2 * 1024 * 1024,
            ack_timeout: Duration::from_secs(60),
            open_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            reconcile_timeout: Duration::from_secs(120),
        }
    }
}

impl SinkConfig {
    /// Checks every field; the error names the first field that is out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let r = &self.retry;
        let checks: [(&'static str, bool, &'static str); 14] = [
            (
                "window.max_batches",
                self.window.max_batches > 0,
                "must be at least 1",
            ),
            (
                "window.max_bytes",
                self.window.max_bytes > 0,
                "must be at least 1",
            ),
            (
                "window.max_rows",
                self.window.max_rows > 0,
                "must be at least 1",
            ),
            (
                "max_open_streams",
                self.max_open_streams > 0,
                "must be at least 1",
            ),
            (
                "max_message_bytes",
                self.max_message_bytes > 0,
                "must be at least 1",
            ),
            (
                "ack_timeout",
                !self.ack_timeout.is_zero(),
                "must be longer than zero",
            ),
            (
                "open_timeout",
                !self.open_timeout.is_zero(),
                "must be longer than zero",
            ),
            (
                "reconcile_timeout",
                !self.reconcile_timeout.is_zero(),
                "must be longer than zero",
            ),
            (
                "retry.initial_backoff",
                !r.initial_backoff.is_zero(),
                "must be longer than zero (a zero backoff reconnects in a storm)",
            ),
            (
                "min_residency",
                !self.min_residency.is_zero() && self.min_residency >= r.initial_backoff,
                "must be longer than zero and at least retry.initial_backoff \
                 (shorter, tables under the stream cap evict each other in a reopen storm)",
            ),
            (
                "retry.max_backoff",
                r.max_backoff >= r.initial_backoff,
                "must be at least retry.initial_backoff",
            ),
            (
                "retry.multiplier",
                r.multiplier.is_finite() && r.multiplier >= 1.0,
                "must be a finite number >= 1",
            ),
            (
                "retry.jitter",
                (0.0..=1.0).contains(&r.jitter),
                "must be within [0, 1]",
            ),
            (
                "retry.drain_budget",
                r.drain_budget <= self.ack_timeout,
                "must not exceed ack_timeout",
            ),
        ];
        match checks.into_iter().find(|(_, ok, _)| !ok) {
            Some((field, _, reason)) => Err(ConfigError::OutOfRange { field, reason }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_window_is_littles_law_for_the_documented_stream() {
        let w = WindowLimits::default();
        assert_eq!(w, WindowLimits::for_stream(StreamService::DOCUMENTED));
        // The service holds 100,000 rows/s x 0.5 s = 50,000 (also its unacked buffer), and
        // 100 ms of round trip carries 10,000 more.
        assert_eq!(w.max_rows, 60_000);
        // 100 MB/s x 0.6 s = 60 MB of pipeline; two 256 MiB batches need more.
        assert_eq!(w.max_bytes, 512 * 1024 * 1024);
        assert_eq!(w.max_batches, 1_000);
        // The older page's 15,000 rows/s: 7,500 held and 1,500 on their way.
        let older = StreamService {
            rows_per_sec: 15_000,
            ..StreamService::DOCUMENTED
        };
        assert_eq!(WindowLimits::for_stream(older).max_rows, 9_000);
        // Without a documented buffer the rows follow the rate; a slower service, the bytes.
        let unbounded = StreamService {
            rows_per_sec: 400_000,
            bytes_per_sec: 2_000_000_000,
            durability_p95: Duration::from_secs(1),
            unacked_rows: None,
            round_trip: Duration::from_millis(250),
        };
        let w = WindowLimits::for_stream(unbounded);
        assert_eq!((w.max_rows, w.max_bytes), (500_000, 2_500_000_000));
        // The buffer caps what the service holds, not what is on its way.
        let buffered = StreamService {
            unacked_rows: Some(100_000),
            ..unbounded
        };
        assert_eq!(WindowLimits::for_stream(buffered).max_rows, 200_000);
        // Terms that overflow saturate instead of panicking, and a window is never empty.
        let extreme = StreamService {
            rows_per_sec: u64::MAX,
            bytes_per_sec: u64::MAX,
            durability_p95: Duration::MAX,
            unacked_rows: Some(0),
            round_trip: Duration::ZERO,
        };
        let w = WindowLimits::for_stream(extreme);
        assert_eq!(w.max_rows, 1);
        let extreme = StreamService {
            round_trip: Duration::MAX,
            ..extreme
        };
        let w = WindowLimits::for_stream(extreme);
        // Each term saturates (at u64::MAX rows or bytes per million seconds).
        let saturated = u64::MAX / 1_000_000;
        assert_eq!((w.max_rows, w.max_bytes), (saturated, 2 * saturated));
        assert_eq!(
            SinkConfig {
                window: w,
                ..SinkConfig::default()
            }
            .validate(),
            Ok(())
        );
    }

    #[test]
    fn defaults_are_valid_and_bad_fields_are_named() {
        assert_eq!(SinkConfig::default().validate(), Ok(()));
        let mut c = SinkConfig::default();
        c.window.max_rows = 0;
        let err = c.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "configuration field `window.max_rows` must be at least 1"
        );
        let c = SinkConfig {
            ack_timeout: Duration::ZERO,
            ..SinkConfig::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("ack_timeout")
        );
        for residency in [Duration::ZERO, Duration::from_millis(1_999)] {
            let c = SinkConfig {
                min_residency: residency,
                ..SinkConfig::default()
            };
            assert!(
                c.validate()
                    .unwrap_err()
                    .to_string()
                    .contains("min_residency"),
                "{residency:?}"
            );
        }
        let mut c = SinkConfig::default();
        c.retry.initial_backoff = Duration::ZERO;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("initial_backoff")
        );
        let mut c = SinkConfig::default();
        c.retry.multiplier = f64::NAN;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("retry.multiplier")
        );
    }
}
