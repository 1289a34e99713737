//! Reading a local table back: every row of its current version (tests, the demo and
//! recovery), and the local backend's [`Recover`]: the table opened at the location its vended
//! credentials name, read with delta-rs and the Parquet reader (no datafusion). Each file is
//! read as the table's current schema shows it, as a Delta reader does: a file written before a
//! column was added reads that column as nulls.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use deltalake::kernel::engine::arrow_conversion::TryIntoArrow as _;
use url::Url;
use zerobus_sink::{Coverage, CoverageRange};

use super::{LocalDelta, fit};
use crate::catalog::{Access, TableCatalog};
use crate::recovery::{Lag, Recover, Recovered, RecoveryError, until_visible};
use crate::table_ref::TableRef;

impl LocalDelta {
    /// Every row of `table` at its current version, with the version, in batches of the
    /// table's current schema (a column added since a file was written reads as nulls there).
    ///
    /// # Errors
    /// [`RecoveryError::Catalog`] if the table does not exist; [`RecoveryError::Read`] naming
    /// the file or log that could not be read.
    pub async fn read_table(
        &self,
        table: &TableRef,
    ) -> Result<(Vec<RecordBatch>, u64), RecoveryError> {
        let credentials = self
            .vend_credentials(table, Access::Read)
            .await
            .map_err(|source| RecoveryError::Catalog {
                table: table.full_name(),
                source: Box::new(source),
            })?;
        read_at(table, &credentials.url).await
    }
}

/// Every row of the table at `url`, with its version.
async fn read_at(table: &TableRef, url: &str) -> Result<(Vec<RecordBatch>, u64), RecoveryError> {
    let read_err = |what: &str, message: String| RecoveryError::Read {
        table: table.full_name(),
        what: what.to_owned(),
        message,
    };
    let url = Url::parse(url).map_err(|e| read_err("its location", e.to_string()))?;
    let delta = deltalake::open_table(url)
        .await
        .map_err(|e| read_err("the Delta log", e.to_string()))?;
    let version = delta.version().unwrap_or(0);
    let schema: Schema = delta
        .snapshot()
        .map_err(|e| read_err("the snapshot", e.to_string()))?
        .schema()
        .as_ref()
        .try_into_arrow()
        .map_err(|e| read_err("the schema", e.to_string()))?;
    let schema = Arc::new(schema);
    let files: Vec<String> = delta
        .get_file_uris()
        .map_err(|e| read_err("the file list", e.to_string()))?
        .collect();
    let name = table.full_name();
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        for uri in files {
            let path = uri.strip_prefix("file://").unwrap_or(&uri).to_owned();
            let file_err = |message: String| RecoveryError::Read {
                table: name.clone(),
                what: path.clone(),
                message,
            };
            let file = std::fs::File::open(&path).map_err(|e| file_err(e.to_string()))?;
            let reader =
                deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                    file,
                )
                .and_then(|b| b.build())
                .map_err(|e| file_err(e.to_string()))?;
            for batch in reader {
                let batch = batch.map_err(|e| file_err(e.to_string()))?;
                out.push(fit(&batch, &schema).map_err(|e| file_err(e.to_string()))?);
            }
        }
        Ok((out, version))
    })
    .await
    .map_err(|e| read_err("the data files", e.to_string()))?
}

impl Recover for LocalDelta {
    async fn recover(
        &self,
        table: &TableRef,
        range: &CoverageRange,
        durable: &Coverage,
        lag: Lag,
    ) -> Result<Recovered, RecoveryError> {
        // Credentials (here: the location) are vended for each read, as they expire.
        until_visible(table, range, durable, lag, || self.read_table(table)).await
    }
}
