//! The local backend's coverage table ([`CoverageLog`] for [`LocalDelta`]): rows appended with
//! delta-rs, one commit per save (retried when another writer's commit wins the version), and
//! read back with the local read path. The rules (union-merged, grown only from durable
//! confirmations, lag never lead) are [`CoverageStore`]'s, in [`crate::coverage`]; the names
//! are re-exported here for the code that found them here first.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use zerobus_sink::CoverageRange;

use super::{LocalDelta, fit, lost_race};
use crate::catalog::SinkId;
pub use crate::coverage::{COVERAGE_SUFFIX, CoverageStore, coverage_table};
use crate::coverage::{CoverageLog, SavedRange};
use crate::error::CatalogError;
use crate::recovery::column_as as column;
use crate::table_ref::TableRef;

impl CoverageLog for LocalDelta {
    async fn append_coverage(
        &self,
        table: &TableRef,
        sink: &SinkId,
        ranges: &[CoverageRange],
    ) -> Result<(), CatalogError> {
        let delta_err = |operation, message: String| CatalogError::Delta {
            table: table.full_name(),
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
                    sink.0.as_str(),
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
        let _permit = self.gate.enter().await;
        for _ in 0..5 {
            let mut t = self.open(table).await?;
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
            table: table.full_name(),
            message: "append coverage: lost the race 5 times".into(),
        })
    }

    async fn read_coverage(
        &self,
        table: &TableRef,
        sink: Option<&SinkId>,
    ) -> Result<Vec<SavedRange>, CatalogError> {
        let delta_err = |operation, message: String| CatalogError::Delta {
            table: table.full_name(),
            operation,
            message,
        };
        let (batches, _) = self
            .read_table(table)
            .await
            .map_err(|e| delta_err("read coverage", e.to_string()))?;
        let mut out = Vec::new();
        for batch in &batches {
            let sinks = column::<StringArray>(batch, "sink", &DataType::Utf8);
            let topics = column::<StringArray>(batch, "_twg_source_topic", &DataType::Utf8);
            let partitions = column::<Int32Array>(batch, "_twg_source_partition", &DataType::Int32);
            let starts = column::<Int64Array>(batch, "_twg_source_start", &DataType::Int64);
            let ends = column::<Int64Array>(batch, "_twg_source_end", &DataType::Int64);
            let (Some(sinks), Some(topics), Some(partitions), Some(starts), Some(ends)) =
                (sinks, topics, partitions, starts, ends)
            else {
                return Err(delta_err(
                    "load coverage",
                    "a coverage column is missing or of another type".into(),
                ));
            };
            for i in 0..batch.num_rows() {
                if sink.is_some_and(|s| sinks.value(i) != s.0) {
                    continue;
                }
                out.push(SavedRange {
                    sink: sinks.value(i).to_owned(),
                    topic: topics.value(i).to_owned(),
                    partition: i64::from(partitions.value(i)),
                    start: starts.value(i),
                    end: ends.value(i),
                });
            }
        }
        Ok(out)
    }
}
