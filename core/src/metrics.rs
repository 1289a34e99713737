//! Metrics as plain data: the caller reads them and exports them however it likes.

/// A histogram of `u64` values in power-of-two buckets: fixed size, no allocation.
///
/// Bucket 0 holds the value 0; bucket `i > 0` holds values in `[2^(i-1), 2^i)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    buckets: [u64; 65],
    count: u64,
    sum: u64,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: [0; 65],
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Histogram {
    /// Records one value.
    #[inline]
    pub fn record(&mut self, value: u64) {
        let bucket = (u64::BITS - value.leading_zeros()) as usize;
        self.buckets[bucket] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Values recorded.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the values (saturating).
    #[must_use]
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Smallest value, if any.
    #[must_use]
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value, if any.
    #[must_use]
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Mean of the values, if any.
    #[must_use]
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// A lower bound of the `q`-quantile (`q` in `[0, 1]`): the low edge of the bucket that
    /// holds it. Conservative by construction: the true quantile is at least this.
    #[must_use]
    pub fn quantile_lower_bound(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(if i == 0 { 0 } else { 1u64 << (i - 1) }.max(self.min));
            }
        }
        Some(self.max)
    }
}

/// Counters and histograms of one sink. All plain data; the core never exports anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Batches confirmed per applied ack: the "are we pipelining?" signal (>> 1 under load).
    pub coalesce: Histogram,
    /// Microseconds from submit to durable confirmation, per batch.
    pub delivery_latency_us: Histogram,
    /// Largest number of batches ever pending at once.
    pub max_pending: u64,
    /// Acks applied (cumulative row count rose).
    pub acks_applied: u64,
    /// Inputs ignored because they named a connection generation that is no longer live.
    pub stale_inputs: u64,
    /// Protocol violations reported by `handle` (forward, regressed or early acks, bad slots).
    pub protocol_errors: u64,
    /// Connections requested.
    pub connections_opened: u64,
    /// Connections that failed (error, timeout, protocol violation).
    pub connections_failed: u64,
    /// Wire messages handed to the transport.
    pub messages_sent: u64,
    /// Submits refused because every window was full.
    pub backpressured: u64,
    /// Streams that broke while live (an error status or the call ending) and were rebuilt
    /// with a replay: the "our stream died" cause signal (`ack_lane_poisoned`). Slow acks are
    /// counted apart, in `ack_timeouts`.
    pub poisoned: u64,
    /// Live streams whose oldest sent batch waited past `ack_timeout` for its durable ack: the
    /// service is slow (or the stream silently dead). The environmental symptom, apart from
    /// `poisoned`.
    pub ack_timeouts: u64,
    /// Connections that could not be made and were retried after backoff.
    pub transient_failures: u64,
    /// Stream opens the service refused for concurrency (`RESOURCE_EXHAUSTED`).
    pub concurrency_rejects: u64,
    /// Graceful rotations the service asked for.
    pub rotations: u64,
    /// Credential refreshes asked of the driver after an auth rejection.
    pub credential_refreshes: u64,
    /// Connections refused for their credentials (`UNAUTHENTICATED`, `PERMISSION_DENIED`).
    pub auth_rejections: u64,
    /// Times a slot spent its retry budget and handed its batches back.
    pub retry_budgets_spent: u64,
    /// Tables drained and closed to make room under the global stream cap.
    pub evictions: u64,
    /// Tables failed fatally.
    pub tables_failed: u64,
    /// Reconciles asked of the driver (including ones asked again after `reconcile_timeout`).
    pub reconciles_asked: u64,
    /// Schemas the catalog reconciled.
    pub reconciles_ok: u64,
    /// Schemas the catalog refused.
    pub schemas_refused: u64,
    /// Times a slot drained and reopened its stream for another schema.
    pub schema_switches: u64,
    /// `poll_output` passes over every timer, table and slot; every other call took the fast
    /// path (dirty slots and tables only). Few in a steady state: each READY, failure, drain,
    /// table warming or timer due makes one.
    pub full_passes: u64,
}

/// Watermarks, in batches and rows (of the sink, a table or a slot). Both `submitted` and
/// `delivered` only grow, and `delivered <= submitted` always (invariant 2). The source may
/// advance only on `delivered`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watermarks {
    /// Batches admitted.
    pub submitted: u64,
    /// Batches confirmed durable.
    pub delivered: u64,
    /// Batches handed back as failed.
    pub failed: u64,
    /// Rows admitted.
    pub rows_submitted: u64,
    /// Rows confirmed durable.
    pub rows_delivered: u64,
}

impl Watermarks {
    /// Batches admitted and not yet ended (confirmed or failed).
    #[must_use]
    pub fn pending(&self) -> u64 {
        self.submitted - self.delivered - self.failed
    }

    pub(crate) fn plus(self, o: Watermarks) -> Watermarks {
        Watermarks {
            submitted: self.submitted + o.submitted,
            delivered: self.delivered + o.delivered,
            failed: self.failed + o.failed,
            rows_submitted: self.rows_submitted + o.rows_submitted,
            rows_delivered: self.rows_delivered + o.rows_delivered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_lower_bound_is_conservative() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_lower_bound(0.5), None);
        for v in [1, 2, 3, 3, 9, 100] {
            h.record(v);
        }
        assert_eq!(h.count(), 6);
        assert_eq!(h.min(), Some(1));
        assert_eq!(h.max(), Some(100));
        // The true median is 3; its bucket [2, 4) has low edge 2.
        assert_eq!(h.quantile_lower_bound(0.5), Some(2));
        assert_eq!(h.quantile_lower_bound(1.0), Some(64));
        assert_eq!(h.quantile_lower_bound(0.0), Some(1));
        h.record(0);
        h.record(u64::MAX);
        assert_eq!(h.quantile_lower_bound(0.0), Some(0));
        assert_eq!(h.sum(), u64::MAX);
    }
}
