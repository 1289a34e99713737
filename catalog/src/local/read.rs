//! Reading a local table back: every row of its current version (tests, the demo and
//! recovery), and the local backend's [`Recover`]: the table opened at the location its vended
//! credentials name, read with delta-rs and the Parquet reader (no datafusion). Each file is
//! read as the table's current schema shows it, as a Delta reader does: a file written before a
//! column was added reads that column as nulls.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use deltalake::DeltaTableBuilder;
use deltalake::kernel::engine::arrow_conversion::TryIntoArrow as _;
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use object_store::ObjectStoreExt as _;
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
        let _permit = self.gate.enter().await;
        let credentials = self
            .vend_credentials(table, Access::Read)
            .await
            .map_err(|source| RecoveryError::Catalog {
                table: table.full_name(),
                source: Box::new(source),
            })?;
        read_at(table, &credentials.url, self.storage_options()).await
    }
}

/// Every row of the table at `url` (a folder's `file://` URL or an `s3://` one, opened with
/// `options`), with its version. Data files are read through the table's object store.
async fn read_at(
    table: &TableRef,
    url: &str,
    options: HashMap<String, String>,
) -> Result<(Vec<RecordBatch>, u64), RecoveryError> {
    let read_err = |what: &str, message: String| RecoveryError::Read {
        table: table.full_name(),
        what: what.to_owned(),
        message,
    };
    let url = Url::parse(url).map_err(|e| read_err("its location", e.to_string()))?;
    let delta = DeltaTableBuilder::from_url(url.clone())
        .map_err(|e| read_err("its location", e.to_string()))?
        .with_storage_options(options)
        .load()
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
    // The table's own store, rooted at its folder: a file's path is its URI below the folder.
    let store = delta.object_store();
    // delta-rs gives a local file as its path, any other as its URL.
    let root = url.as_str().trim_end_matches('/').to_owned();
    let folder = url
        .to_file_path()
        .ok()
        .map(|p| p.display().to_string().trim_end_matches('/').to_owned());
    let mut out = Vec::new();
    for uri in files {
        let file_err = |message: String| RecoveryError::Read {
            table: table.full_name(),
            what: uri.clone(),
            message,
        };
        let relative = uri
            .strip_prefix(&root)
            .or_else(|| folder.as_deref().and_then(|f| uri.strip_prefix(f)))
            .map(|r| r.trim_start_matches('/'))
            .ok_or_else(|| file_err(format!("not below the table's folder {root}")))?;
        let path = object_store::path::Path::from_url_path(relative)
            .map_err(|e| file_err(e.to_string()))?;
        let bytes = async { store.get(&path).await?.bytes().await }
            .await
            .map_err(|e| file_err(e.to_string()))?;
        let schema = schema.clone();
        let batches = tokio::task::spawn_blocking(move || {
            ParquetRecordBatchReaderBuilder::try_new(bytes)
                .and_then(|b| b.build())
                .map_err(|e| e.to_string())?
                .map(|batch| {
                    let batch = batch.map_err(|e| e.to_string())?;
                    fit(&batch, &schema).map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .await
        .map_err(|e| file_err(e.to_string()))?
        .map_err(file_err)?;
        out.extend(batches);
    }
    Ok((out, version))
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
