//! Where a table's rows go: [`Target`].

use zerobus_sink_catalog::TableRef;
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_tokio::ZerobusConfig;

use crate::error::TableError;

/// The writer name a [`Target`] registers on its table unless told otherwise.
pub const WRITER: &str = "zerobus-sink-datafusion";

/// One target table and how to reach it: the Zerobus endpoint (with its credentials, in the
/// [`ZerobusConfig`]), the catalog that provisions the table, its stream pool, and the job id
/// stamped on its rows. `Debug` shows the endpoint and the catalog's root, never a credential.
#[derive(Debug, Clone)]
pub struct Target {
    table: TableRef,
    config: ZerobusConfig,
    catalog: LocalDelta,
    streams: u16,
    job_id: Option<String>,
    writer: String,
}

impl Target {
    /// Rows for `table` (`catalog.schema.table`) go through Zerobus at `config.endpoint`; the
    /// table is created and evolved through `catalog` (the local Delta backend: phase 1 serves
    /// `zerobus-local`), with a pool of 2 streams, a job id generated per `INSERT`, and
    /// [`WRITER`] as the writer's name.
    ///
    /// # Errors
    /// [`TableError::Name`] when `table` is not `catalog.schema.table`.
    pub fn new(
        table: &str,
        config: ZerobusConfig,
        catalog: LocalDelta,
    ) -> Result<Target, TableError> {
        let table = TableRef::parse(table).map_err(|e| TableError::Name {
            table: table.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Target {
            table,
            config,
            catalog,
            streams: 2,
            job_id: None,
            writer: WRITER.to_owned(),
        })
    }

    /// Exactly `streams` Zerobus streams for the table (at least 1), shared by every input
    /// partition writing it in this process.
    #[must_use]
    pub fn streams(mut self, streams: u16) -> Target {
        self.streams = streams.max(1);
        self
    }

    /// Stamps every `INSERT` into this table with `job` as `_twg_source_topic` (instead of the
    /// session's `zerobus.job_id`, or an id generated per `INSERT`). Two runs with the same
    /// job id name the same rows with the same positions: a rerun's duplicates are
    /// identifiable.
    #[must_use]
    pub fn job_id(mut self, job: impl Into<String>) -> Target {
        self.job_id = Some(job.into());
        self
    }

    /// Registers on the table as writer `name` (the catalog records it once per table).
    #[must_use]
    pub fn writer(mut self, name: impl Into<String>) -> Target {
        self.writer = name.into();
        self
    }

    /// The table, `catalog.schema.table`.
    #[must_use]
    pub fn table(&self) -> &TableRef {
        &self.table
    }

    /// The connection settings.
    #[must_use]
    pub fn config(&self) -> &ZerobusConfig {
        &self.config
    }

    /// The catalog that provisions the table.
    #[must_use]
    pub fn catalog(&self) -> &LocalDelta {
        &self.catalog
    }

    /// The table's streams.
    #[must_use]
    pub fn stream_count(&self) -> u16 {
        self.streams
    }

    /// The job id set on the table, if any.
    #[must_use]
    pub fn fixed_job_id(&self) -> Option<&str> {
        self.job_id.as_deref()
    }

    /// The writer's name.
    #[must_use]
    pub fn writer_name(&self) -> &str {
        &self.writer
    }

    /// What identifies the sink a target writes through: the endpoint and the table.
    pub(crate) fn key(&self) -> (String, String) {
        (self.config.endpoint.clone(), self.table.full_name())
    }
}
