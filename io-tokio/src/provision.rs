//! Provisioning through a catalog: the sink calls the [`TableCatalog`], it never writes DDL.
//!
//! The core asks for each new batch schema of a table to be reconciled
//! ([`Output::Reconcile`](zerobus_sink::Output)); the driver runs [`reconcile`] in a task: the
//! table is created or evolved from the batch's Arrow schema (with the reserved `_twg_*`
//! columns, the contract's comments and properties), the sink registers as a writer (once per
//! table), and the live table is described so that the wire schema follows the table's column
//! order. A refusal (a narrowing, a type conflict) comes back as `Err` with every refusal
//! named; the core hands that schema's batches back. A transient catalog failure is retried
//! here a few times, then left unanswered: the core asks again after its
//! `reconcile_timeout`, so a catalog outage delays a table, it never refuses its schema.
//!
//! On the wire each batch carries the columns it has, in the table's order, and
//! `_twg_emit_ts` stamped with the time it was sent ([`WireShape`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow_array::{ArrayRef, RecordBatch, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use zerobus_sink_catalog::{
    Access, CatalogError, Contract, DesiredTable, LiveTable, Policy, ReconcileOutcome, Role,
    SinkId, TableCatalog, TableRef, VendedCredentials,
};

/// The column the sink stamps on every row: when it was sent (UTC, microseconds).
pub const EMIT_TS: &str = "_twg_emit_ts";

/// How a sink provisions its tables: the catalog (the Unity Catalog backend for Databricks, the
/// local backend for `zerobus-local`), the name it registers as a writer under, and the
/// reconcile policy (widening, human edits to comments, the primary-raw shape).
#[derive(Debug, Clone)]
pub struct Provisioning<C> {
    /// The catalog.
    pub catalog: C,
    /// The writer name recorded on each table.
    pub sink: SinkId,
    /// What reconciling may change.
    pub policy: Policy,
}

impl<C: TableCatalog> Provisioning<C> {
    /// Provisions through `catalog`, registering as writer `sink`, with the default policy (no
    /// widening: it upgrades a table's protocol, an owner's decision).
    pub fn new(catalog: C, sink: impl Into<String>) -> Provisioning<C> {
        Provisioning {
            catalog,
            sink: SinkId(sink.into()),
            policy: Policy::default(),
        }
    }

    /// The same, with `policy`.
    #[must_use]
    pub fn policy(mut self, policy: Policy) -> Provisioning<C> {
        self.policy = policy;
        self
    }
}

/// The catalog of a sink that provisions nothing (tables taken as they are): it has no value,
/// so none of its methods can ever run.
#[derive(Debug, Clone, Copy)]
pub enum NoCatalog {}

impl TableCatalog for NoCatalog {
    async fn describe(&self, _: &TableRef) -> Result<Option<LiveTable>, CatalogError> {
        match *self {}
    }

    async fn reconcile(
        &self,
        _: &DesiredTable,
        _: &Policy,
    ) -> Result<ReconcileOutcome, CatalogError> {
        match *self {}
    }

    async fn register_sink(&self, _: &TableRef, _: &SinkId) -> Result<(), CatalogError> {
        match *self {}
    }

    async fn vend_credentials(
        &self,
        _: &TableRef,
        _: Access,
    ) -> Result<VendedCredentials, CatalogError> {
        match *self {}
    }
}

/// What a reconcile is for: a table, the batch schema, and what the table definition adds.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) table: String,
    pub(crate) schema: SchemaRef,
    pub(crate) contract: Option<Contract>,
    pub(crate) role: Role,
    /// Register the sink as a writer (the table's first reconcile).
    pub(crate) register: bool,
}

/// A reconcile's answer: the table's column order, or the catalog's refusal in words; `None`
/// when the catalog could not be reached (the core will ask again).
pub(crate) type Answer = Option<Result<(Vec<String>, Vec<String>), String>>;

/// Makes the table take `request.schema`; see the module docs. Returns the live column order
/// and the statements (or commits) executed.
pub(crate) async fn reconcile<C: TableCatalog>(
    catalog: &C,
    sink: &SinkId,
    policy: &Policy,
    request: &Request,
) -> Answer {
    let table = match TableRef::parse(&request.table) {
        Ok(t) => t,
        Err(e) => return Some(Err(e.to_string())),
    };
    let desired = match DesiredTable::from_arrow(
        table.clone(),
        &request.schema,
        request.contract.as_ref(),
        request.role,
    ) {
        Ok(d) => d,
        Err(e) => return Some(Err(e.to_string())),
    };
    let mut delay = Duration::from_millis(500);
    for attempt in 1..=4 {
        let outcome = async {
            let outcome = catalog.reconcile(&desired, policy).await?;
            if request.register {
                catalog.register_sink(&table, sink).await?;
            }
            let live = catalog.describe(&table).await?;
            Ok::<_, CatalogError>((outcome, live))
        }
        .await;
        match outcome {
            Ok((outcome, Some(live))) => {
                let columns = live.columns.iter().map(|c| c.name.clone()).collect();
                return Some(Ok((columns, outcome.executed)));
            }
            Ok((_, None)) => {
                return Some(Err(format!(
                    "{table}: the catalog reconciled it but then describes it as absent"
                )));
            }
            Err(e) if e.is_retryable() || e.is_conflict() => {
                tracing::warn!(%table, attempt, error = %e, "reconcile failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) => return Some(Err(e.to_string())),
        }
    }
    tracing::warn!(%table, "the catalog is unreachable; the sink will ask again");
    None
}

/// How a batch of one schema goes on the wire: the table's columns the batch has, in the
/// table's order, with `_twg_emit_ts` stamped where the table has it.
#[derive(Debug)]
pub(crate) struct WireShape {
    /// The schema message of the stream.
    pub(crate) schema: SchemaRef,
    /// Per wire column: the batch's column index, or `None` for the stamp.
    columns: Vec<Option<usize>>,
}

impl WireShape {
    /// The shape for batches of `batch_schema` into a table whose columns are `order`.
    pub(crate) fn new(batch_schema: &Schema, order: &[String]) -> WireShape {
        let stamp = Field::new(
            EMIT_TS,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        );
        let mut fields = Vec::with_capacity(order.len());
        let mut columns = Vec::with_capacity(order.len());
        for name in order {
            if name == EMIT_TS {
                fields.push(stamp.clone());
                columns.push(None);
            } else if let Ok(i) = batch_schema.index_of(name) {
                fields.push(batch_schema.field(i).clone());
                columns.push(Some(i));
            }
        }
        if !columns.contains(&None) {
            fields.push(stamp);
            columns.push(None);
        }
        WireShape {
            schema: Arc::new(Schema::new(fields)),
            columns,
        }
    }

    /// `batch` as the stream carries it, stamped with the current time.
    pub(crate) fn apply(
        &self,
        batch: &RecordBatch,
    ) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let stamp: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from_value(micros, batch.num_rows()).with_timezone("UTC"),
        );
        let columns = self
            .columns
            .iter()
            .map(|c| c.map_or_else(|| stamp.clone(), |i| batch.column(i).clone()))
            .collect();
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;

    #[test]
    fn the_wire_follows_the_tables_order_and_stamps_every_row() {
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let added: ArrayRef = Arc::new(Int64Array::from(vec![7, 8]));
        let batch = RecordBatch::try_from_iter([("added", added), ("id", ids)]).unwrap();
        let order = ["id", EMIT_TS, "added", "gone"].map(String::from);
        let shape = WireShape::new(&batch.schema(), &order);
        let names: Vec<&str> = shape
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["id", EMIT_TS, "added"]);
        let wire = shape.apply(&batch).unwrap();
        assert_eq!(wire.num_rows(), 2);
        assert_eq!(wire.column(0).null_count(), 0);
        let ts = wire
            .column(1)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert!(
            ts.value(0) > 1_700_000_000_000_000,
            "stamped with the wall clock"
        );
        // A table without the column yet (never before the first reconcile, but safe).
        let shape = WireShape::new(&batch.schema(), &["id".to_owned()]);
        assert_eq!(shape.schema.fields().len(), 2);
    }
}
