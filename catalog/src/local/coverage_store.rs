//! The coverage store (seed section 8.2): which source ranges a sink has made durable in a raw
//! table, kept with the raw data and not with the sink it describes, so that it survives the
//! sink (a restart, a move to another machine) and every reader of the raw table can find it.
//!
//! It is a Delta table beside the raw table, `<raw table>__twg_coverage`, created through the
//! same catalog: one row per range a sink saved (`sink`, and the range in the reserved
//! `_twg_source_topic`, `_twg_source_partition`, `_twg_source_start`, `_twg_source_end`
//! columns; `_twg_emit_ts` is when it was saved). Rows are only appended, never updated:
//! loading union-merges them (never last-write-wins), so concurrent sinks, a save repeated
//! after a crash, or ranges saved out of order all load to the same coverage. A sink saves
//! only what its durable confirmations gave it ([`Coverage::confirm`]), so the store may lag
//! what is durable, by what was confirmed since the last save, and never leads it.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use zerobus_sink::{Coverage, CoverageRange};

use super::{LocalDelta, fit, lost_race};
use crate::catalog::{SinkId, TableCatalog};
use crate::desired::{DesiredTable, Role};
use crate::error::CatalogError;
use crate::plan::Policy;
use crate::recovery::{RecoveryError, column_as as column};
use crate::table_ref::TableRef;

/// The suffix of a raw table's coverage table.
pub const COVERAGE_SUFFIX: &str = "__twg_coverage";

/// The coverage table of `raw`: `<catalog>.<schema>.<table>__twg_coverage`.
///
/// # Errors
/// The name would not be a valid table name.
pub fn coverage_table(raw: &TableRef) -> Result<TableRef, CatalogError> {
    TableRef::parse(&format!("{}{COVERAGE_SUFFIX}", raw.full_name()))
}

/// One sink's coverage of one raw table, as stored beside it. See the module docs.
#[derive(Debug)]
pub struct CoverageStore {
    catalog: LocalDelta,
    table: TableRef,
    sink: SinkId,
    saved: Coverage,
}

impl CoverageStore {
    /// Opens (creating it if absent) the coverage table of `raw` and loads what `sink` saved.
    ///
    /// # Errors
    /// The catalog could not create or read the coverage table.
    pub async fn open(
        catalog: LocalDelta,
        raw: &TableRef,
        sink: SinkId,
    ) -> Result<CoverageStore, CatalogError> {
        let table = coverage_table(raw)?;
        let desired = DesiredTable::from_arrow(table.clone(), &payload(), None, Role::Standard)?;
        catalog.reconcile(&desired, &Policy::default()).await?;
        let mut store = CoverageStore {
            catalog,
            table,
            sink,
            saved: Coverage::new(),
        };
        store.saved = store.load(Some(&store.sink)).await?;
        Ok(store)
    }

    /// The coverage table.
    #[must_use]
    pub fn table(&self) -> &TableRef {
        &self.table
    }

    /// What this sink has saved (loaded at open, grown by each save).
    #[must_use]
    pub fn saved(&self) -> &Coverage {
        &self.saved
    }

    /// Saves what `coverage` covers beyond what is saved: the new pieces, appended in one
    /// commit. Returns how many ranges were appended (0: nothing new, nothing written).
    ///
    /// # Errors
    /// The append failed (nothing is recorded as saved; saving again is harmless).
    pub async fn save(&mut self, coverage: &Coverage) -> Result<usize, CatalogError> {
        let new: Vec<CoverageRange> = coverage
            .ranges()
            .into_iter()
            .flat_map(|r| {
                self.saved
                    .gaps(&r.topic, r.partition, r.start, r.end)
                    .into_iter()
                    .map(move |(s, e)| CoverageRange::new(r.topic.clone(), r.partition, s, e))
            })
            .collect();
        if new.is_empty() {
            return Ok(0);
        }
        self.append(&new).await?;
        self.saved
            .merge(&Coverage::from_durable(new.iter().cloned()));
        Ok(new.len())
    }

    /// Every range saved in the coverage table, union-merged: `sink`'s alone, or every sink's.
    ///
    /// # Errors
    /// The coverage table could not be read.
    pub async fn load(&self, sink: Option<&SinkId>) -> Result<Coverage, CatalogError> {
        let (batches, _) = self
            .catalog
            .read_table(&self.table)
            .await
            .map_err(|e| self.read_err(&e))?;
        let mut ranges = Vec::new();
        for batch in &batches {
            let sinks = column::<StringArray>(batch, "sink", &DataType::Utf8);
            let topics = column::<StringArray>(batch, "_twg_source_topic", &DataType::Utf8);
            let partitions = column::<Int32Array>(batch, "_twg_source_partition", &DataType::Int32);
            let starts = column::<Int64Array>(batch, "_twg_source_start", &DataType::Int64);
            let ends = column::<Int64Array>(batch, "_twg_source_end", &DataType::Int64);
            let (Some(sinks), Some(topics), Some(partitions), Some(starts), Some(ends)) =
                (sinks, topics, partitions, starts, ends)
            else {
                return Err(self.corrupt("a coverage column is missing or of another type".into()));
            };
            for i in 0..batch.num_rows() {
                if sink.is_some_and(|s| sinks.value(i) != s.0) {
                    continue;
                }
                // A partition no sink could have saved is refused, never read as another one:
                // coverage must not claim what it does not hold.
                let partition = u32::try_from(partitions.value(i)).map_err(|_| {
                    self.corrupt(format!("a row has partition {}", partitions.value(i)))
                })?;
                ranges.push(CoverageRange::new(
                    topics.value(i),
                    partition,
                    starts.value(i),
                    ends.value(i),
                ));
            }
        }
        Ok(Coverage::from_durable(ranges))
    }

    fn corrupt(&self, message: String) -> CatalogError {
        CatalogError::Delta {
            table: self.table.full_name(),
            operation: "load coverage",
            message,
        }
    }

    fn read_err(&self, e: &RecoveryError) -> CatalogError {
        CatalogError::Delta {
            table: self.table.full_name(),
            operation: "read coverage",
            message: e.to_string(),
        }
    }

    async fn append(&self, ranges: &[CoverageRange]) -> Result<(), CatalogError> {
        let delta_err = |operation, message: String| CatalogError::Delta {
            table: self.table.full_name(),
            operation,
            message,
        };
        let rows = ranges.len();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "sink",
                Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                    self.sink.0.as_str(),
                    rows,
                ))),
            ),
            (
                "_twg_emit_ts",
                Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(now, rows))),
            ),
            (
                "_twg_source_topic",
                Arc::new(StringArray::from_iter_values(
                    ranges.iter().map(|r| r.topic.as_str()),
                )),
            ),
            (
                "_twg_source_partition",
                Arc::new(Int64Array::from_iter_values(
                    ranges.iter().map(|r| i64::from(r.partition)),
                )),
            ),
            (
                "_twg_source_start",
                Arc::new(Int64Array::from_iter_values(ranges.iter().map(|r| r.start))),
            ),
            (
                "_twg_source_end",
                Arc::new(Int64Array::from_iter_values(ranges.iter().map(|r| r.end))),
            ),
            (
                "_twg_source_row",
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i as i64))),
            ),
        ];
        let batch = RecordBatch::try_from_iter(columns)
            .map_err(|e| delta_err("coverage rows", e.to_string()))?;
        for _ in 0..5 {
            let mut t = self.catalog.open(&self.table).await?;
            let mut writer =
                RecordBatchWriter::for_table(&t).map_err(|e| delta_err("writer", e.to_string()))?;
            let fitted = fit(&batch, &writer.arrow_schema())
                .map_err(|e| delta_err("coverage rows", e.to_string()))?;
            writer
                .write(fitted)
                .await
                .map_err(|e| delta_err("write coverage", e.to_string()))?;
            match writer.flush_and_commit(&mut t).await {
                Ok(_) => return Ok(()),
                Err(e) if lost_race(&e) => continue,
                Err(e) => return Err(delta_err("commit coverage", e.to_string())),
            }
        }
        Err(CatalogError::Conflict {
            table: self.table.full_name(),
            message: "append coverage: lost the race 5 times".into(),
        })
    }
}

/// The coverage table's own column (the range is in the reserved ones).
fn payload() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("sink", DataType::Utf8, false)]))
}
