//! Pool sizing: streams per table from bandwidth, never from record count alone (seed 3.3).

/// How many stream slots a table gets: enough for its peak bytes and its peak rows, at least
/// `min_slots`, at most `max_slots`.
///
/// `slots = clamp(max(ceil(peak MB/s / per-stream MB/s), ceil(peak rows/s / per-stream rows/s),
/// min_slots), .., max_slots)`. The per-stream defaults are the service's documented limits:
/// 100 MB/s and 15,000 rows/s per stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolSizing {
    /// The table's expected peak, in MB/s (10^6 bytes).
    pub peak_mb_per_sec: f64,
    /// The table's expected peak, in rows/s.
    pub peak_rows_per_sec: f64,
    /// One stream's byte ceiling (documented: 100 MB/s). Operators may set it lower for headroom.
    pub per_stream_mb_per_sec: f64,
    /// One stream's row ceiling (documented: 15,000 rows/s).
    pub per_stream_rows_per_sec: f64,
    /// The floor.
    pub min_slots: u16,
    /// The cap.
    pub max_slots: u16,
}

impl Default for PoolSizing {
    /// No declared peak: the floor of 2 streams (the plan's "defaulting low, 2-4").
    fn default() -> PoolSizing {
        PoolSizing {
            peak_mb_per_sec: 0.0,
            peak_rows_per_sec: 0.0,
            per_stream_mb_per_sec: 100.0,
            per_stream_rows_per_sec: 15_000.0,
            min_slots: 2,
            max_slots: 16,
        }
    }
}

/// The derived pool size and the terms it came from, for the adapter to log at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizedPool {
    /// The slots the table gets.
    pub slots: u16,
    /// Streams its peak bytes need.
    pub by_bytes: u64,
    /// Streams its peak rows need.
    pub by_rows: u64,
    /// Whether `max_slots` cut the pool below what the peaks need.
    pub capped: bool,
}

impl PoolSizing {
    /// Exactly `slots` streams, whatever the load.
    #[must_use]
    pub fn fixed(slots: u16) -> PoolSizing {
        PoolSizing {
            min_slots: slots,
            max_slots: slots,
            ..PoolSizing::default()
        }
    }

    /// Sized for `peak_mb_per_sec` and `peak_rows_per_sec`, other fields default.
    #[must_use]
    pub fn for_peak(peak_mb_per_sec: f64, peak_rows_per_sec: f64) -> PoolSizing {
        PoolSizing {
            peak_mb_per_sec,
            peak_rows_per_sec,
            min_slots: 1,
            ..PoolSizing::default()
        }
    }

    /// Derives the pool. Never panics: non-finite or non-positive ceilings count as "no need",
    /// and the result is always within `[max(min_slots, 1), max(max_slots, 1)]`.
    #[must_use]
    pub fn size(&self) -> SizedPool {
        let need = |peak: f64, ceiling: f64| -> u64 {
            if peak.is_finite() && ceiling.is_finite() && peak > 0.0 && ceiling > 0.0 {
                (peak / ceiling).ceil().min(u64::MAX as f64) as u64
            } else {
                0
            }
        };
        let by_bytes = need(self.peak_mb_per_sec, self.per_stream_mb_per_sec);
        let by_rows = need(self.peak_rows_per_sec, self.per_stream_rows_per_sec);
        let max = self.max_slots.max(1);
        let wanted = by_bytes.max(by_rows).max(u64::from(self.min_slots.max(1)));
        let slots = u16::try_from(wanted).unwrap_or(u16::MAX).min(max);
        SizedPool {
            slots,
            by_bytes,
            by_rows,
            capped: wanted > u64::from(max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_worked_example_15kb_rows_at_10000_rows_per_sec_needs_two_streams() {
        // 15 KB rows x 10,000 rows/s = 150 MB/s > one stream's 100 MB/s.
        let large = PoolSizing::for_peak(15_000.0 * 10_000.0 / 1e6, 10_000.0).size();
        assert_eq!((large.slots, large.by_bytes, large.by_rows), (2, 2, 1));
        // Small rows at the same row rate fit on one stream.
        let small = PoolSizing::for_peak(100.0 * 10_000.0 / 1e6, 10_000.0).size();
        assert_eq!(small.slots, 1);
    }

    #[test]
    fn rows_can_dominate_and_the_cap_and_floor_hold() {
        let rows = PoolSizing::for_peak(1.0, 40_000.0).size();
        assert_eq!((rows.slots, rows.by_rows), (3, 3));
        let capped = PoolSizing {
            max_slots: 4,
            ..PoolSizing::for_peak(10_000.0, 0.0)
        }
        .size();
        assert_eq!(
            (capped.slots, capped.by_bytes, capped.capped),
            (4, 100, true)
        );
        assert_eq!(PoolSizing::default().size().slots, 2);
        assert_eq!(PoolSizing::fixed(3).size().slots, 3);
        let silly = PoolSizing {
            per_stream_mb_per_sec: 0.0,
            peak_mb_per_sec: f64::NAN,
            min_slots: 0,
            max_slots: 0,
            ..PoolSizing::default()
        };
        assert_eq!(silly.size().slots, 1);
    }
}
