//! The recovery read path (seed section 8.1): the rows a primary-raw table holds for a source
//! range, read back through the catalog with vended credentials, deduplicated, once the table
//! shows everything the coverage says is durable.
//!
//! - **Selection.** Every row a provisioned sink writes carries its batch's source span
//!   (`_twg_source_topic`, `_twg_source_partition`, `_twg_source_start`, `_twg_source_end`)
//!   and its index in the batch (`_twg_source_row`). A row belongs to a source range when its
//!   topic and partition match and its span meets the range (a derived batch's rows cannot be
//!   split by offset: the batch is returned whole).
//! - **Duplicates.** Zerobus is at-least-once: a batch replayed after a lost ack is written
//!   again. A row is identified by its span and its index, so the second copy is dropped
//!   ([`Recovered::duplicates`] counts them).
//! - **Lag.** Tables are materialized asynchronously (Iceberg metadata on Databricks, the
//!   materializer of `zerobus-local`): a read right after a write may see an older table.
//!   Recovery never assumes read-after-write consistency: given what the coverage says is
//!   durable, it reads again ([`Lag::poll`]) until the table shows all of it in the range, or
//!   fails with [`RecoveryError::Lagging`] naming what is still missing after
//!   [`Lag::deadline`].
//!
//! [`Recover`] is the backend's half. The local backend implements it with delta-rs
//! ([`LocalDelta`](crate::local::LocalDelta)); the Databricks one reads through Iceberg REST,
//! with vended credentials, from cloud object storage (`unity::iceberg`, feature `iceberg`).

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::DataType;
use zerobus_sink::{Coverage, CoverageRange};

use crate::error::CatalogError;
use crate::table_ref::TableRef;

/// The reserved columns recovery reads, with the Arrow type it reads each as.
const SPAN_COLUMNS: [(&str, DataType); 5] = [
    ("_twg_source_topic", DataType::Utf8),
    ("_twg_source_partition", DataType::Int32),
    ("_twg_source_start", DataType::Int64),
    ("_twg_source_end", DataType::Int64),
    ("_twg_source_row", DataType::Int32),
];

/// How long recovery waits for a table to show what the coverage says is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lag {
    /// Give up after this long (60 s by default: `zerobus-local` materializes every few
    /// hundred milliseconds, Databricks generates Iceberg metadata within seconds to minutes).
    pub deadline: Duration,
    /// Read again this often while waiting (500 ms by default).
    pub poll: Duration,
}

impl Default for Lag {
    fn default() -> Lag {
        Lag {
            deadline: Duration::from_secs(60),
            poll: Duration::from_millis(500),
        }
    }
}

/// The rows of a source range, read back.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recovered {
    /// The rows, every column of the table (the `_twg_*` ones included), each row once.
    pub batches: Vec<RecordBatch>,
    /// Rows returned.
    pub rows: u64,
    /// Copies of rows dropped (replays).
    pub duplicates: u64,
    /// The table version read.
    pub version: u64,
    /// The source spans the rows carry, merged: what the table showed in the range.
    pub visible: Coverage,
    /// How long recovery waited for the table to catch up with the coverage.
    pub waited: Duration,
}

/// Why a recovery read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The table did not show every offset the coverage says is durable within the deadline.
    #[error(
        "{table}: after {waited:?}, version {version} still lacks offsets the coverage says are durable in {topic}/{partition}: {missing:?}"
    )]
    Lagging {
        /// The table.
        table: String,
        /// The source topic.
        topic: String,
        /// The source partition.
        partition: u32,
        /// The missing offsets, as inclusive ranges.
        missing: Vec<(i64, i64)>,
        /// The last version read.
        version: u64,
        /// How long recovery waited.
        waited: Duration,
    },
    /// The table has no source-position column (it was not written by a provisioned sink), or
    /// one of a type recovery cannot read.
    #[error("{table}: column {column}: {reason}")]
    Column {
        /// The table.
        table: String,
        /// The column.
        column: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The table or a data file could not be read.
    #[error("{table}: reading {what}: {message}")]
    Read {
        /// The table.
        table: String,
        /// What was being read (a file, the log).
        what: String,
        /// What failed.
        message: String,
    },
    /// The catalog failed (describing the table, vending credentials).
    #[error("{table}: {source}")]
    Catalog {
        /// The table.
        table: String,
        /// What the catalog said.
        #[source]
        source: Box<CatalogError>,
    },
}

/// A backend's recovery read path.
pub trait Recover {
    /// The rows `table` holds for `range`, once it shows every offset `durable` covers in the
    /// range (waiting as `lag` allows). See the module docs.
    fn recover(
        &self,
        table: &TableRef,
        range: &CoverageRange,
        durable: &Coverage,
        lag: Lag,
    ) -> impl Future<Output = Result<Recovered, RecoveryError>> + Send;
}

/// Reads the table (`read`: every row and the version read) until it shows every offset of
/// `range` that `durable` covers, or `lag.deadline` passes: the lag loop every backend shares.
///
/// # Errors
/// What `read` or [`select`] fails with, or [`RecoveryError::Lagging`].
#[cfg(any(feature = "local", feature = "iceberg"))]
pub(crate) async fn until_visible<F, Fut>(
    table: &TableRef,
    range: &CoverageRange,
    durable: &Coverage,
    lag: Lag,
    mut read: F,
) -> Result<Recovered, RecoveryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(Vec<RecordBatch>, u64), RecoveryError>>,
{
    let started = std::time::Instant::now();
    loop {
        let (batches, version) = read().await?;
        let selection = select(table, &batches, range)?;
        let missing = selection.missing(range, durable);
        let waited = started.elapsed();
        if missing.is_empty() {
            return Ok(Recovered {
                batches: selection.batches,
                rows: selection.rows,
                duplicates: selection.duplicates,
                version,
                visible: selection.visible,
                waited,
            });
        }
        if waited >= lag.deadline {
            return Err(RecoveryError::Lagging {
                table: table.full_name(),
                topic: range.topic.clone(),
                partition: range.partition,
                missing,
                version,
                waited,
            });
        }
        tokio::time::sleep(lag.poll.min(lag.deadline - waited)).await;
    }
}

/// The rows of `batches` in `range`, each once, with the spans they carry.
///
/// # Errors
/// [`RecoveryError::Column`] if a batch lacks a source-position column or has one that cannot
/// be read as its type.
pub fn select(
    table: &TableRef,
    batches: &[RecordBatch],
    range: &CoverageRange,
) -> Result<Selection, RecoveryError> {
    let mut out = Selection::default();
    let mut seen: HashSet<(i64, i64, i32)> = HashSet::new();
    for batch in batches {
        let span = Span::of(table, batch)?;
        let mut keep = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            let (start, end) = (span.start.value(i), span.end.value(i));
            let inside = span.stamped(i)
                && span.topic.value(i) == range.topic
                && i64::from(span.partition.value(i)) == i64::from(range.partition)
                && start <= range.end
                && end >= range.start;
            let first = inside && seen.insert((start, end, span.row.value(i)));
            if inside && !first {
                out.duplicates += 1;
            }
            keep.push(first);
        }
        let mask = BooleanArray::from(keep);
        let kept = arrow_select::filter::filter_record_batch(batch, &mask).map_err(|e| {
            RecoveryError::Read {
                table: table.full_name(),
                what: "rows of the range".into(),
                message: e.to_string(),
            }
        })?;
        if kept.num_rows() > 0 {
            out.rows += kept.num_rows() as u64;
            out.batches.push(kept);
        }
    }
    // The spans the kept rows carry (a row's first copy only: its key holds its span).
    let spans: BTreeSet<(i64, i64)> = seen.iter().map(|&(start, end, _)| (start, end)).collect();
    out.visible =
        Coverage::from_durable(spans.into_iter().map(|(start, end)| {
            CoverageRange::new(range.topic.clone(), range.partition, start, end)
        }));
    Ok(out)
}

/// What [`select`] found.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// The rows in the range, each once.
    pub batches: Vec<RecordBatch>,
    /// How many.
    pub rows: u64,
    /// Copies dropped.
    pub duplicates: u64,
    /// The spans the rows carry, merged.
    pub visible: Coverage,
}

impl Selection {
    /// The offsets of `range` that `durable` covers and this selection does not show.
    #[must_use]
    pub fn missing(&self, range: &CoverageRange, durable: &Coverage) -> Vec<(i64, i64)> {
        let (topic, partition) = (range.topic.as_str(), range.partition);
        durable
            .ranges()
            .into_iter()
            .filter(|r| r.topic == topic && r.partition == partition)
            .filter(|r| r.start <= range.end && r.end >= range.start)
            .flat_map(|r| {
                self.visible.gaps(
                    topic,
                    partition,
                    r.start.max(range.start),
                    r.end.min(range.end),
                )
            })
            .collect()
    }
}

/// A batch's source-position columns, read as their types.
struct Span {
    topic: StringArray,
    partition: Int32Array,
    start: Int64Array,
    end: Int64Array,
    row: Int32Array,
}

impl Span {
    fn of(table: &TableRef, batch: &RecordBatch) -> Result<Span, RecoveryError> {
        Ok(Span {
            topic: typed(table, batch, 0)?,
            partition: typed(table, batch, 1)?,
            start: typed(table, batch, 2)?,
            end: typed(table, batch, 3)?,
            row: typed(table, batch, 4)?,
        })
    }

    /// Whether row `i` carries a whole source position (rows another writer added do not).
    fn stamped(&self, i: usize) -> bool {
        !(self.topic.is_null(i)
            || self.partition.is_null(i)
            || self.start.is_null(i)
            || self.end.is_null(i)
            || self.row.is_null(i))
    }
}

/// Source-position column `index` of `batch`, read as its type.
fn typed<T: Array + Clone + 'static>(
    table: &TableRef,
    batch: &RecordBatch,
    index: usize,
) -> Result<T, RecoveryError> {
    let (name, data_type) = &SPAN_COLUMNS[index];
    column_as(batch, name, data_type).ok_or_else(|| RecoveryError::Column {
        table: table.full_name(),
        column: name,
        reason: match batch.column_by_name(name) {
            None => "missing: the table was not written by a provisioned zerobus-sink".into(),
            Some(c) => format!("a {} column cannot be read as {data_type}", c.data_type()),
        },
    })
}

/// Column `name` of `batch` as `T`, cast to `data_type` (from a string view, a dictionary, a
/// narrower integer); `None` if it is missing or cannot be.
pub(crate) fn column_as<T: Array + Clone + 'static>(
    batch: &RecordBatch,
    name: &str,
    data_type: &DataType,
) -> Option<T> {
    let column: &ArrayRef = batch.column_by_name(name)?;
    let cast = arrow_cast::cast(column, data_type).ok()?;
    cast.as_any().downcast_ref::<T>().cloned()
}
