//! The uncertain tail of a stopped load: rows past a file's committed offset that may be
//! durable all the same (acked after the state file's last write, or durable in the service
//! with the ack still on the wire when the run was killed). A rerun reads them back from the
//! table, by the source columns every row carries, and sends only the batches the table does
//! not hold whole.
//!
//! The table shows a durable row only once the service has published it (about 5 s at P50 and
//! up to 30 s at P95 on Databricks; `zerobus-local`'s `--materialize-lag-ms`), so the rerun
//! first waits until `--publication-wait` has passed since the last run stopped. A row
//! published later than that is sent again: a duplicate, identifiable by its `_twg_source_*`
//! columns, and counted by the recovery path's reader.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use arrow_array::{Array, Int64Array};
use zerobus_sink::{Coverage, CoverageRange};
use zerobus_sink_catalog::recovery::{Lag, Recover, RecoveryError};
use zerobus_sink_catalog::{AnyCatalog, TableRef};

use super::journal::{State, unix_ms};

/// What the table holds of a load's uncertain tail: per (file, batch end offset), the distinct
/// rows it shows.
#[derive(Debug, Default)]
pub struct Tail {
    rows: HashMap<(u32, i64), u64>,
}

impl Tail {
    /// How many rows of the batch of file `partition` ending at `offset` the table holds.
    pub fn visible(&self, partition: u32, offset: i64) -> u64 {
        self.rows.get(&(partition, offset)).copied().unwrap_or(0)
    }
}

/// How long to wait before reading back, so that what the last run made durable is published.
pub fn wait_before_reading(state: &State, publication_wait: Duration) -> Duration {
    let stopped_ms = unix_ms(SystemTime::now()).saturating_sub(state.updated_unix_ms);
    publication_wait.saturating_sub(Duration::from_millis(stopped_ms))
}

/// Reads back, for each file the last run started and did not finish, the rows past its
/// committed offset.
///
/// # Errors
/// What the catalog's read path fails with (a backend that cannot read the table's files).
pub async fn read_back(
    catalog: &AnyCatalog,
    table: &TableRef,
    state: &State,
) -> Result<Tail, RecoveryError> {
    let mut tail = Tail::default();
    let lag = Lag {
        deadline: Duration::ZERO,
        poll: Duration::from_millis(500),
    };
    for (p, f) in state.files.iter().enumerate() {
        if !f.started || f.complete() {
            continue;
        }
        let from = f.committed.map_or(0, |c| c + 1);
        let range = CoverageRange::new(state.topic.clone(), p as u32, from, i64::MAX);
        let found = catalog
            .recover(table, &range, &Coverage::new(), lag)
            .await?;
        for batch in &found.batches {
            let Some(ends) = batch
                .column_by_name("_twg_source_end")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            else {
                return Err(RecoveryError::Column {
                    table: table.full_name(),
                    column: "_twg_source_end",
                    reason: "missing or not a 64-bit integer".into(),
                });
            };
            for end in ends.iter().flatten() {
                *tail.rows.entry((p as u32, end)).or_default() += 1;
            }
        }
    }
    Ok(tail)
}
