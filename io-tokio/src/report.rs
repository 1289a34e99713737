//! What the sink reports while running and when closed.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use zerobus_sink::{Metrics, TableId, Watermarks};

/// One table's share of a [`Report`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableReport {
    /// The table's name.
    pub name: String,
    /// Rows confirmed durable.
    pub rows: u64,
    /// Batches confirmed durable.
    pub batches: u64,
    /// Batches handed to the confirmer's `failed`.
    pub failed_batches: u64,
    /// Batches the sink submitted again after a transient hand-back.
    pub resubmitted: u64,
    /// Batch schemas reconciled with the table through the catalog (provisioned sinks).
    pub schemas_reconciled: u64,
    /// Batch schemas refused, by the write boundary or the catalog (their batches come back
    /// from `send`).
    pub schemas_refused: u64,
    /// Batch schemas the sink keeps a plan for now: the handle's most recently sent ones
    /// (two per table) and any that a batch not yet confirmed still needs. Older ones are
    /// retired, so this stays bounded however often the source drifts.
    pub schemas_kept: usize,
    /// The write boundary's decisions, one per column of each schema it planned, by kind
    /// (`pass`, `lossless_cast`, `checked_cast`, `nested_to_json`, `zoned_to_utc_wall_time`,
    /// `refused_*`): the plan's `zerobus_type_reconcile_total{kind}`.
    pub type_reconcile: BTreeMap<&'static str, u64>,
    /// Columns refused for one of the two loud mismatches (nested values for a STRING column,
    /// a zoned timestamp for TIMESTAMP_NTZ).
    pub loud_mismatches: u64,
    /// Rows the write boundary refused before send (handed back whole or isolated).
    pub bad_rows: u64,
    /// Of those, rows isolated (handed to the confirmer's `isolated` while their batch's good
    /// rows went on).
    pub isolated_rows: u64,
}

/// Progress so far, or the summary at close.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Report {
    /// Since the sink started.
    pub elapsed: Duration,
    /// Rows confirmed durable.
    pub rows: u64,
    /// Batches confirmed durable.
    pub batches: u64,
    /// Batches handed to the confirmer's `failed`.
    pub failed_batches: u64,
    /// Batches waiting to be submitted again.
    pub waiting_to_resubmit: usize,
    /// Streams open now.
    pub open_streams: usize,
    /// Per table, in order of registration.
    pub tables: Vec<TableReport>,
    /// Submitted, delivered and failed counts.
    pub watermarks: Watermarks,
    /// The core's counters: coalesce ratio, pending depth, connections, rotations, failures.
    pub metrics: Metrics,
    /// Times the driver woke, for an event or a timer. It follows the events and the backoff
    /// schedule; far more wake-ups than events would be a busy loop.
    pub wakeups: u64,
}

impl Report {
    pub(crate) fn for_tables(names: impl Iterator<Item = String>) -> Report {
        Report {
            tables: names
                .map(|name| TableReport {
                    name,
                    ..TableReport::default()
                })
                .collect(),
            ..Report::default()
        }
    }

    fn table(&mut self, table: TableId) -> Option<&mut TableReport> {
        self.tables.get_mut(table.index())
    }

    pub(crate) fn confirmed(&mut self, table: TableId, rows: u64) {
        self.rows += rows;
        self.batches += 1;
        if let Some(t) = self.table(table) {
            t.rows += rows;
            t.batches += 1;
        }
    }

    pub(crate) fn failed(&mut self, table: TableId) {
        self.failed_batches += 1;
        if let Some(t) = self.table(table) {
            t.failed_batches += 1;
        }
    }

    pub(crate) fn resubmitted(&mut self, table: TableId) {
        if let Some(t) = self.table(table) {
            t.resubmitted += 1;
        }
    }

    pub(crate) fn reconciled(&mut self, table: TableId, ok: bool) {
        if let Some(t) = self.table(table) {
            if ok {
                t.schemas_reconciled += 1;
            } else {
                t.schemas_refused += 1;
            }
        }
    }

    pub(crate) fn planned<'a>(
        &mut self,
        table: TableId,
        kinds: impl Iterator<Item = &'static str>,
        refusals: impl Iterator<Item = &'a crate::boundary::ColumnRefusal>,
    ) {
        if let Some(t) = self.table(table) {
            for kind in kinds {
                *t.type_reconcile.entry(kind).or_default() += 1;
            }
            for r in refusals {
                *t.type_reconcile.entry(r.kind()).or_default() += 1;
                t.loud_mismatches += u64::from(r.is_loud());
            }
        }
    }

    pub(crate) fn bad_rows(&mut self, table: TableId, rows: u64, isolated: bool) {
        if let Some(t) = self.table(table) {
            t.bad_rows += rows;
            if isolated {
                t.isolated_rows += rows;
            }
        }
    }

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

/// A summary, not a dump: counts and the histograms' means and maxima.
impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.metrics;
        f.debug_struct("Report")
            .field("elapsed", &self.elapsed)
            .field("rows", &self.rows)
            .field("batches", &self.batches)
            .field("failed_batches", &self.failed_batches)
            .field("waiting_to_resubmit", &self.waiting_to_resubmit)
            .field("open_streams", &self.open_streams)
            .field("tables", &self.tables)
            .field("watermarks", &self.watermarks)
            .field("coalesce_mean", &m.coalesce.mean())
            .field("coalesce_max", &m.coalesce.max())
            .field("delivery_latency_us_mean", &m.delivery_latency_us.mean())
            .field("delivery_latency_us_max", &m.delivery_latency_us.max())
            .field("max_pending", &m.max_pending)
            .field("connections_opened", &m.connections_opened)
            .field("connections_failed", &m.connections_failed)
            .field("poisoned", &m.poisoned)
            .field("ack_timeouts", &m.ack_timeouts)
            .field("rotations", &m.rotations)
            .finish_non_exhaustive()
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
        )?;
        for t in &self.tables {
            write!(
                f,
                "\n  {}: {} rows in {} batches, {} failed, {} resubmitted",
                t.name, t.rows, t.batches, t.failed_batches, t.resubmitted
            )?;
            if t.schemas_reconciled + t.schemas_refused > 0 {
                write!(
                    f,
                    "; {} schemas reconciled, {} refused",
                    t.schemas_reconciled, t.schemas_refused
                )?;
            }
            if t.bad_rows > 0 {
                write!(
                    f,
                    "; {} bad rows ({} isolated)",
                    t.bad_rows, t.isolated_rows
                )?;
            }
            if t.loud_mismatches > 0 {
                write!(f, "; {} loud type mismatches", t.loud_mismatches)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_a_summary_without_raw_histograms() {
        let mut r = Report::for_tables(["main.a.b".to_owned()].into_iter());
        r.metrics.coalesce.record(3);
        r.confirmed(TableId::from_index(0), 10);
        let debug = format!("{r:?}");
        assert!(!debug.contains("buckets"), "{debug}");
        assert!(debug.contains("coalesce_mean: Some(3.0)"), "{debug}");
        assert!(format!("{r}").contains("main.a.b: 10 rows in 1 batches"));
    }
}
