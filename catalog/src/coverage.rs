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
//!
//! [`CoverageStore`] holds those rules once; how rows reach the table is the backend's
//! ([`CoverageLog`]): delta-rs commits on the local backend
//! ([`LocalDelta`](crate::local::LocalDelta)), `INSERT` and `SELECT` through the Statement
//! Execution API on Unity Catalog ([`UnityCatalog`](crate::unity::UnityCatalog), ADR 0011).

use std::future::Future;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use zerobus_sink::{Coverage, CoverageRange};

use crate::catalog::{SinkId, TableCatalog};
use crate::desired::{DesiredTable, Role};
use crate::error::CatalogError;
use crate::plan::Policy;
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

/// One row of a coverage table as a backend read it: a range one sink saved. The partition is
/// kept as the table holds it; [`CoverageStore::load`] refuses one no sink could have saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedRange {
    /// The sink that saved it.
    pub sink: String,
    /// The source topic.
    pub topic: String,
    /// The source partition, as stored.
    pub partition: i64,
    /// The first offset covered.
    pub start: i64,
    /// The last offset covered.
    pub end: i64,
}

/// How a backend appends to and reads a coverage table (the rules are [`CoverageStore`]'s).
/// Implemented by [`LocalDelta`](crate::local::LocalDelta) (feature `local`),
/// [`UnityCatalog`](crate::unity::UnityCatalog) and [`AnyCatalog`](crate::AnyCatalog)
/// (feature `unity`).
pub trait CoverageLog: TableCatalog {
    /// Appends one row per range, all saved by `sink`, in one commit.
    fn append_coverage(
        &self,
        table: &TableRef,
        sink: &SinkId,
        ranges: &[CoverageRange],
    ) -> impl Future<Output = Result<(), CatalogError>> + Send;

    /// Every row of the coverage table, or `sink`'s rows only.
    fn read_coverage(
        &self,
        table: &TableRef,
        sink: Option<&SinkId>,
    ) -> impl Future<Output = Result<Vec<SavedRange>, CatalogError>> + Send;
}

/// One sink's coverage of one raw table, as stored beside it. See the module docs.
#[derive(Debug)]
pub struct CoverageStore<C> {
    catalog: C,
    table: TableRef,
    sink: SinkId,
    saved: Coverage,
}

impl<C: CoverageLog> CoverageStore<C> {
    /// Opens (creating it if absent) the coverage table of `raw` and loads what `sink` saved.
    ///
    /// # Errors
    /// The catalog could not create or read the coverage table.
    pub async fn open(
        catalog: C,
        raw: &TableRef,
        sink: SinkId,
    ) -> Result<CoverageStore<C>, CatalogError> {
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

    /// The sink whose coverage this store saves.
    #[must_use]
    pub fn sink(&self) -> &SinkId {
        &self.sink
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
        self.catalog
            .append_coverage(&self.table, &self.sink, &new)
            .await?;
        self.saved
            .merge(&Coverage::from_durable(new.iter().cloned()));
        Ok(new.len())
    }

    /// Every range saved in the coverage table, union-merged: `sink`'s alone, or every sink's.
    ///
    /// # Errors
    /// The coverage table could not be read, or holds a row no sink could have saved (a
    /// negative partition): coverage must not claim what it does not hold, so such a row fails
    /// the load, naming the table and the partition.
    pub async fn load(&self, sink: Option<&SinkId>) -> Result<Coverage, CatalogError> {
        let rows = self.catalog.read_coverage(&self.table, sink).await?;
        let mut ranges = Vec::with_capacity(rows.len());
        for row in rows {
            if sink.is_some_and(|s| row.sink != s.0) {
                continue;
            }
            // A partition no sink could have saved is refused, never read as another one.
            let partition = u32::try_from(row.partition)
                .map_err(|_| self.corrupt(format!("a row has partition {}", row.partition)))?;
            ranges.push(CoverageRange::new(row.topic, partition, row.start, row.end));
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
}

/// The coverage table's own column (the range is in the reserved ones).
pub(crate) fn payload() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("sink", DataType::Utf8, false)]))
}
