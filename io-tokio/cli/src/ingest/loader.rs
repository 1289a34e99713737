//! The ingest's confirmer: counts what became durable (moving the bar and the state file), and
//! what did not, with why; refused rows become lines of the reject file, numbered within their
//! file.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use indicatif::ProgressBar;
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw};
use zerobus_sink_tokio::{Confirmer, IsolatedRows, RowFault};

use super::journal::Journal;

/// What a run did, for its summary.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Rows this run made durable.
    pub durable_rows: u64,
    /// Rows handed back (not durable).
    pub failed_rows: u64,
    /// Rows the table refused (in the reject file).
    pub isolated_rows: u64,
    /// Why, a line each.
    pub reasons: Vec<String>,
    /// The input files, by partition.
    pub files: Vec<String>,
    /// Rows of each batch sent, by its position (partition, offset of its last row).
    pub sent: HashMap<(u32, i64), u64>,
    /// One JSON line per refused row: its file, its row in the file, its faults, its values.
    pub rejects: Vec<String>,
}

/// Counts what became durable (moving the bar and the journal), and what did not (with why).
#[derive(Clone)]
pub struct Loader {
    pub bar: ProgressBar,
    pub journal: Journal,
    pub outcome: Arc<Mutex<Outcome>>,
}

impl Loader {
    pub fn outcome(&self) -> std::sync::MutexGuard<'_, Outcome> {
        self.outcome
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Confirmer<Raw> for Loader {
    fn confirmed(&mut self, _table: &str, c: Confirmation<Raw>) {
        self.outcome().durable_rows += c.rows();
        self.bar.inc(c.rows());
        self.journal.confirm(c);
    }

    fn failed(&mut self, table: &str, b: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        let mut o = self.outcome();
        o.failed_rows += b.batch.num_rows() as u64;
        o.reasons.push(format!(
            "{table}: {} rows not durable: {why}",
            b.batch.num_rows()
        ));
    }

    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        let mut o = self.outcome();
        o.isolated_rows += rows.batch.num_rows() as u64;
        let p = &rows.position;
        let file = o
            .files
            .get(p.partition as usize)
            .cloned()
            .unwrap_or_default();
        let sent = o.sent.get(&(p.partition, p.offset)).copied().unwrap_or(0);
        // The batch's first row in its file, from 0; a fault's row is its index in the batch.
        let first = (p.offset + 1).saturating_sub(sent as i64).max(0) as usize;
        let mut refused: Vec<usize> = rows.faults.iter().map(|f| f.row).collect();
        refused.sort_unstable();
        refused.dedup();
        let values = json_rows(&rows.batch);
        for (k, row) in refused.iter().enumerate() {
            let faults: Vec<RowFault> = rows
                .faults
                .iter()
                .filter(|f| f.row == *row)
                .map(|f| RowFault {
                    row: first + f.row,
                    ..f.clone()
                })
                .collect();
            for fault in &faults {
                o.reasons
                    .push(format!("{table}: {file}: {fault} (refused)"));
            }
            let line = serde_json::json!({
                "file": file,
                "row": first + row,
                "faults": faults.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "values": values.get(k).cloned().unwrap_or(serde_json::Value::Null),
            });
            o.rejects.push(line.to_string());
        }
    }
}

/// Each row of `batch` as a JSON object (arrow-json's line writer), for the reject file.
fn json_rows(batch: &RecordBatch) -> Vec<serde_json::Value> {
    let mut buf = Vec::new();
    let mut writer = arrow_json::LineDelimitedWriter::new(&mut buf);
    if writer.write(batch).and_then(|()| writer.finish()).is_err() {
        return Vec::new();
    }
    String::from_utf8_lossy(&buf)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(serde_json::Value::Null))
        .collect()
}
