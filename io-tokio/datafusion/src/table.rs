//! The table: [`ZerobusTable`], a write-only DataFusion table whose `INSERT` lands rows in a
//! Delta table through Zerobus.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::config::ConfigExtension;
use datafusion::common::{Result, extensions_options, not_impl_err, plan_err};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use zerobus_sink_catalog::{RESERVED_PREFIX, TableCatalog};
use zerobus_sink_tokio::TableDef;

use crate::count::ZerobusCountExec;
use crate::error::TableError;
use crate::shared::{SharedSink, Sinks};
use crate::target::Target;
use crate::write::ZerobusWriteExec;

extensions_options! {
    /// Session options of Zerobus tables, set with `SET zerobus.<option> = '...'` once
    /// registered on the session's config (`SessionConfig::with_option_extension`, which
    /// [`session_context`](crate::session_context) does).
    pub struct ZerobusOptions {
        /// The job id stamped on the rows of the session's next `INSERT`s as
        /// `_twg_source_topic` (empty: one generated per `INSERT`). A table's own `job_id`
        /// option wins over it.
        pub job_id: String, default = String::new()
    }
}

impl ConfigExtension for ZerobusOptions {
    const PREFIX: &'static str = "zerobus";
}

/// A Zerobus table: its `INSERT INTO` writes every input partition in parallel through the
/// process's one sink for the target (started at the first `INSERT`, shared by every
/// partition and every later `INSERT` through the same [`Sinks`]) and returns the row count
/// once every row is durable. The target is created when absent and evolved (columns added)
/// from the query's output schema by the sink's provisioning; an incompatible change fails
/// the query, every column named. Write-only: a `SELECT` from it is refused (read the Delta
/// table).
///
/// Delivery is at least once: each row carries its position (`_twg_source_topic` = the job,
/// `_twg_source_partition` = the input partition, `_twg_source_start + _twg_source_row` = its
/// offset in the partition), so that the copies a retried task writes can be dropped by a
/// reader (README.md, "Semantics").
#[derive(Debug)]
pub struct ZerobusTable {
    target: Arc<Target>,
    schema: SchemaRef,
    sink: Arc<SharedSink>,
}

impl ZerobusTable {
    /// A table writing `schema`'s columns to `target` through the sink `sinks` holds for it.
    #[must_use]
    pub fn new(target: Target, schema: SchemaRef, sinks: &Sinks) -> ZerobusTable {
        let sink = sinks.of(&target);
        ZerobusTable {
            target: Arc::new(target),
            schema,
            sink,
        }
    }

    /// A table with the target's columns as the catalog describes them now (without the
    /// sink's `_twg_*` columns); `None` if the table does not exist.
    ///
    /// # Errors
    /// [`TableError::Catalog`] when the catalog cannot describe it.
    pub async fn described(
        target: Target,
        sinks: &Sinks,
    ) -> Result<Option<ZerobusTable>, TableError> {
        match live_schema(&target).await? {
            Some(schema) => Ok(Some(ZerobusTable::new(target, schema, sinks))),
            None => Ok(None),
        }
    }

    /// The target.
    #[must_use]
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The job id of an `INSERT` planned in `state`: the table's, else the session's
    /// `zerobus.job_id`, else a new UUID.
    fn job(&self, state: &dyn Session) -> Arc<str> {
        if let Some(job) = self.target.fixed_job_id() {
            return job.into();
        }
        let session = state
            .config_options()
            .extensions
            .get::<ZerobusOptions>()
            .map(|o| o.job_id.clone())
            .filter(|j| !j.is_empty());
        session
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
            .into()
    }
}

/// The live table's columns without the sink's reserved ones; `None` if it does not exist.
pub(crate) async fn live_schema(target: &Target) -> Result<Option<SchemaRef>, TableError> {
    let live = target
        .catalog()
        .describe(target.table())
        .await
        .map_err(|source| TableError::Catalog {
            table: target.table().full_name(),
            source: Box::new(source),
        })?;
    Ok(live.map(|live| {
        let fields: Vec<Field> = live
            .columns
            .iter()
            .filter(|c| !c.name.starts_with(RESERVED_PREFIX))
            .map(|c| Field::new(&c.name, c.data_type.to_arrow(), c.nullable))
            .collect();
        Arc::new(Schema::new(fields))
    }))
}

#[async_trait]
impl TableProvider for ZerobusTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan_err!(
            "table {} is not readable through Zerobus (write-only): read its Delta table",
            self.target.table()
        )
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return not_impl_err!(
                "table {}: only INSERT INTO (append) reaches Zerobus, not {insert_op}",
                self.target.table()
            );
        }
        let job = self.job(state);
        tracing::info!(table = %self.target.table(), %job, "planning an INSERT through Zerobus");
        let def = TableDef::new(self.target.table().full_name(), self.schema.clone())
            .streams(self.target.stream_count());
        let write = Arc::new(ZerobusWriteExec::new(
            input,
            self.target.clone(),
            def,
            self.sink.clone(),
            job,
        ));
        let merged = Arc::new(CoalescePartitionsExec::new(write));
        Ok(Arc::new(ZerobusCountExec::new(merged)))
    }
}
