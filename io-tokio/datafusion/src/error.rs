//! The package's errors. Each names the table concerned, and a write error the input partition
//! and the rows; none carries a secret (endpoints and paths only, never credentials).

use datafusion::error::DataFusionError;
use zerobus_sink_catalog::CatalogError;
use zerobus_sink_tokio::{DeliveryError, StartError};

/// Why an input partition of an `INSERT` failed. Every variant is final: the sink has already
/// retried what retrying could fix (reconnects, resubmits within its
/// [`ResubmitPolicy`](zerobus_sink_tokio::ResubmitPolicy)), so the query fails with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The shared sink could not start (a bad endpoint or configuration).
    #[error("table {table}, input partition {partition}: the sink could not start: {source}")]
    Start {
        /// The target table.
        table: String,
        /// The input partition that tried to start it.
        partition: usize,
        /// Why.
        #[source]
        source: StartError,
    },
    /// The sink refused a batch before sending it: its schema cannot be written to the table
    /// (an incompatible change, every column named), rows the table would refuse, or a table
    /// the service has failed for good.
    #[error(
        "table {table}, input partition {partition}: rows {start}..{end} of job {job} refused: {reason}"
    )]
    Refused {
        /// The target table.
        table: String,
        /// The job (query id) stamped on the rows.
        job: String,
        /// The input partition.
        partition: usize,
        /// The first row's offset in the partition.
        start: i64,
        /// One past the last row's offset.
        end: i64,
        /// The sink's refusal, in words.
        reason: String,
    },
    /// A batch was sent but will never be durable (the service refused it for good, or the
    /// sink stopped).
    #[error(
        "table {table}, input partition {partition}: rows {start}..{end} of job {job} not durable: {source}"
    )]
    NotDurable {
        /// The target table.
        table: String,
        /// The job (query id) stamped on the rows.
        job: String,
        /// The input partition.
        partition: usize,
        /// The first row's offset in the partition.
        start: i64,
        /// One past the last row's offset.
        end: i64,
        /// Why.
        #[source]
        source: DeliveryError,
    },
    /// More input partitions than the `_twg_source_partition` column can number.
    #[error("table {table}, input partition {partition}: beyond the {max} partitions a position can name", max = u32::MAX)]
    Partition {
        /// The target table.
        table: String,
        /// The input partition.
        partition: usize,
    },
}

/// Why a Zerobus table could not be defined (`CREATE EXTERNAL TABLE`, the catalog provider, or
/// [`Target::new`](crate::Target::new)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The name is not `catalog.schema.table`.
    #[error("table {table}: {reason}")]
    Name {
        /// The name given.
        table: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A required option is missing.
    #[error("table {table}: option '{key}' is required")]
    Missing {
        /// The target table.
        table: String,
        /// The option.
        key: &'static str,
    },
    /// An option is unknown or its value cannot be used.
    #[error("table {table}: option '{key}': {reason}")]
    Option {
        /// The target table.
        table: String,
        /// The option as given.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The table does not exist and the statement declares no columns to create it with.
    #[error(
        "table {table} does not exist in the catalog: declare its columns in CREATE EXTERNAL TABLE \
         (the first INSERT creates it)"
    )]
    NoColumns {
        /// The target table.
        table: String,
    },
    /// The catalog could not describe the table.
    #[error("table {table}: the catalog could not describe it: {source}")]
    Catalog {
        /// The target table.
        table: String,
        /// Why (boxed: the catalog's error is large, and this one is rare).
        #[source]
        source: Box<CatalogError>,
    },
}

impl From<WriteError> for DataFusionError {
    fn from(e: WriteError) -> DataFusionError {
        DataFusionError::External(Box::new(e))
    }
}

impl From<TableError> for DataFusionError {
    fn from(e: TableError) -> DataFusionError {
        DataFusionError::External(Box::new(e))
    }
}
