//! Tables: with a catalog root ([`EmulatorConfig::delta_root`](super::EmulatorConfig)) the
//! emulator serves the Delta tables of the local catalog backend, as the service serves Unity
//! Catalog tables.
//!
//! - **At open** a stream's table must exist (`NOT_FOUND` otherwise) and its schema must fit the
//!   table (`INVALID_ARGUMENT` with a `SCHEMA_VALIDATION_FAILED` `ErrorInfo` naming the causes
//!   otherwise, PROTOCOL.md C.2): every field a column of the table, of the same Delta type; every
//!   `NOT NULL` column present. Before that, the table must be one the service writes to (its
//!   names, managed, no catalog-managed commits; `INVALID_ARGUMENT` otherwise), and it must not
//!   be recreated while the stream writes (`FAILED_PRECONDITION`): the emulator's
//!   `requirements` module.
//! - **After the ack** the rows are in the write-ahead log (durable). A materializer appends them
//!   to the table's Delta log asynchronously: every `lag`, everything logged since the last round
//!   goes into one commit, so a read right after a write may not see it yet, as with the service.
//!   Each commit carries a Delta transaction identifier (`txn`: app id `zerobus-local`, version
//!   = the log's byte position after the last record committed), written atomically with the
//!   rows. At start the materializer resumes from that version, so every logged row lands in the
//!   table exactly once across crashes. (Replays by a client after a lost ack are new records:
//!   at-least-once end to end, as with the service.)
//! - **A breaking change between ack and publication** (a type changed, a column dropped or
//!   renamed since the previous round) sends the rows that no longer fit to the table's fallback
//!   directory instead ([`super::fallback`]), as the service does: counted
//!   ([`Stats::fallback_rows`](super::Stats)) and logged at WARN, naming the table, the file and
//!   the column.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use deltalake::kernel::Transaction;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::parquet::basic::Compression;
use deltalake::parquet::file::properties::WriterProperties;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use tonic::Status;
use zerobus_sink_catalog::local::{LocalDelta, fit};
use zerobus_sink_catalog::{DeltaType, LiveTable, TableCatalog, TableRef};

use super::wal::{self, Cursor};
use super::{Shared, fallback};

/// The app id of the emulator's transaction identifiers.
pub const APP_ID: &str = "zerobus-local";

/// The Delta table `table` names in `catalog`, if it exists.
async fn describe(
    catalog: &LocalDelta,
    table: &str,
) -> Result<Option<(TableRef, LiveTable)>, Status> {
    let name = TableRef::parse(table)
        .map_err(|e| Status::invalid_argument(format!("table name {table:?}: {e}")))?;
    match catalog.describe(&name).await {
        Ok(Some(live)) => Ok(Some((name, live))),
        Ok(None) => Ok(None),
        Err(e) => Err(Status::internal(format!("describe {table}: {e}"))),
    }
}

/// Checks a stream's schema against its table, as the service does at open; returns the
/// table's columns.
pub(crate) async fn check_stream(
    catalog: &LocalDelta,
    table: &str,
    schema: &Schema,
) -> Result<Vec<zerobus_sink_catalog::LiveColumn>, Status> {
    let Some((_, live)) = describe(catalog, table).await? else {
        return Err(Status::not_found(format!(
            "table {table} does not exist (no Delta table under {})",
            catalog.root_url()
        )));
    };
    let mut causes = Vec::new();
    let mut details = Vec::new();
    for field in schema.fields() {
        let Some(column) = live.column(field.name()) else {
            causes.push("FIELD_NOT_IN_TABLE");
            details.push(format!(
                "field {} is not a column of the table",
                field.name()
            ));
            continue;
        };
        let fits = DeltaType::from_arrow(field.name(), field.data_type())
            .is_ok_and(|t| t.loosened() == column.data_type.loosened());
        if !fits {
            causes.push("TYPE_INCOMPATIBLE");
            details.push(format!(
                "field {} is {} but the column is {}",
                field.name(),
                field.data_type(),
                column.data_type.type_text()
            ));
        }
    }
    for column in &live.columns {
        if !column.nullable && schema.field_with_name(&column.name).is_err() {
            causes.push("MISSING_REQUIRED_COLUMN");
            details.push(format!("NOT NULL column {} is missing", column.name));
        }
    }
    if causes.is_empty() {
        return Ok(live.columns);
    }
    causes.dedup();
    Err(schema_rejected(
        table,
        &causes.join(","),
        &details.join("; "),
    ))
}

/// `INVALID_ARGUMENT` with the `SCHEMA_VALIDATION_FAILED` detail (PROTOCOL.md C.2).
pub(crate) fn schema_rejected(table: &str, causes: &str, why: &str) -> Status {
    let metadata = HashMap::from([
        ("causes".to_owned(), causes.to_owned()),
        ("error_code".to_owned(), "8001".to_owned()),
    ]);
    let details = tonic_types::ErrorDetails::with_error_info(
        "SCHEMA_VALIDATION_FAILED",
        "zerobus.databricks.com",
        metadata,
    );
    let message = if why.is_empty() {
        format!("schema does not match table {table}")
    } else {
        format!("schema does not match table {table}: {why}")
    };
    <Status as tonic_types::StatusExt>::with_error_details(
        tonic::Code::InvalidArgument,
        message,
        details,
    )
}

/// What the materializer knows of one table's log.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Where the next read of the log starts (`None` until read from the table's `txn`).
    cursor: Option<Cursor>,
    /// The table's columns at the last publication (`None` until the first round).
    before: Option<Vec<zerobus_sink_catalog::LiveColumn>>,
}

/// One round: every table with a log, everything logged since the last round, one commit each.
/// Errors are logged and retried next round (nothing is skipped).
pub(crate) async fn materialize(
    shared: &Arc<Shared>,
    catalog: &LocalDelta,
    progress: &mut BTreeMap<String, Progress>,
) {
    let tables: Vec<String> = shared.read().tables.keys().cloned().collect();
    for table in tables {
        let p = progress.entry(table.clone()).or_default();
        match materialize_table(shared, catalog, &table, p).await {
            Ok(0) => {}
            Ok(rows) => tracing::debug!(table, rows, "materialized"),
            Err(e) => {
                shared.lock().stats.materialize_errors += 1;
                tracing::warn!(table, error = %e, "materializing into Delta failed; retrying next round");
            }
        }
    }
}

/// Appends what `table`'s log holds past its cursor to its Delta table, with the new log
/// position as the commit's transaction version. Returns the rows committed.
async fn materialize_table(
    shared: &Arc<Shared>,
    catalog: &LocalDelta,
    table: &str,
    progress: &mut Progress,
) -> Result<u64, String> {
    let log = wal::path(&shared.config.wal_dir, table);
    if !log.exists() {
        return Ok(0);
    }
    let Some((name, live)) = describe(catalog, table)
        .await
        .map_err(|s| s.message().to_owned())?
    else {
        return Ok(0);
    };
    // Fallback files go beside a folder's table, or under the WAL directory for a table on
    // object storage.
    let location = match catalog.folder() {
        Some(_) => catalog.location(&name),
        None => shared
            .config
            .wal_dir
            .join("fallback")
            .join(catalog.location(&name)),
    };
    let mut delta = catalog.open_table(&name).await.map_err(|e| e.to_string())?;
    let cursor = match &progress.cursor {
        Some(c) => c.clone(),
        None => {
            let done = delta
                .snapshot()
                .map_err(|e| e.to_string())?
                .transaction_version(delta.log_store().as_ref(), APP_ID)
                .await
                .map_err(|e| e.to_string())?
                .unwrap_or(0);
            let c = wal::cursor_at(&log, u64::try_from(done).unwrap_or(0))
                .map_err(|e| e.to_string())?;
            shared.lock().materialized.insert(table.to_owned(), c.at);
            progress.cursor = Some(c.clone());
            c
        }
    };
    let (batches, next) = wal::read_from(&log, &cursor).map_err(|e| e.to_string())?;
    if next.at == cursor.at {
        return Ok(0);
    }
    let version = i64::try_from(next.at).map_err(|e| e.to_string())?;
    let mut writer = RecordBatchWriter::for_table(&delta)
        .map_err(|e| e.to_string())?
        .with_writer_properties(writer_properties())
        .with_commit_properties(
            CommitProperties::default()
                .with_application_transaction(Transaction::new(APP_ID, version)),
        );
    let target = writer.arrow_schema();
    let mut rows = 0u64;
    let mut fell_back = (0u64, 0u64);
    // The table at the last publication, or when this run first accepted a stream for it.
    let before = progress.before.clone().or_else(|| {
        shared
            .read()
            .tables
            .get(table)
            .and_then(|t| t.columns_at_open.clone())
    });
    for (index, batch) in batches.iter().enumerate() {
        let changed = before
            .as_deref()
            .and_then(|before| fallback::breaking(&batch.schema(), before, &live));
        if let Some(why) = changed {
            let file = fallback::write(&location, cursor.at, index, batch)?;
            tracing::warn!(
                table,
                rows = batch.num_rows(),
                file = %file.display(),
                cause = %why,
                "acked rows written to the fallback directory, not the table: it changed between their ack and their publication"
            );
            fell_back.0 += batch.num_rows() as u64;
            fell_back.1 += 1;
            continue;
        }
        rows += batch.num_rows() as u64;
        let projected = fit(batch, &target)
            .map_err(|e| format!("{table}: a logged batch does not fit the table: {e}"))?;
        writer.write(projected).await.map_err(|e| e.to_string())?;
    }
    writer
        .flush_and_commit(&mut delta)
        .await
        .map_err(|e| e.to_string())?;
    progress.cursor = Some(next.clone());
    progress.before = Some(live.columns);
    let mut state = shared.lock();
    state.materialized.insert(table.to_owned(), next.at);
    state.stats.materialized_rows += rows;
    state.stats.materialized_commits += 1;
    state.stats.fallback_rows += fell_back.0;
    state.stats.fallback_files += fell_back.1;
    Ok(rows)
}

/// Every row of `table`'s Delta table under `root`, read back through delta-rs (the files of
/// its current version), with the table's version. For tests and the demo: what a reader of
/// the table sees.
///
/// # Errors
/// The table cannot be opened or a data file cannot be read (the message names which).
pub async fn read_table(root: &Path, table: &str) -> Result<(Vec<RecordBatch>, u64), String> {
    let name = TableRef::parse(table).map_err(|e| e.to_string())?;
    LocalDelta::new(root)
        .read_table(&name)
        .await
        .map_err(|e| e.to_string())
}

/// Snappy, as delta-rs writes by default, without dictionary encoding: interning every value
/// was most of the materializer's CPU (a third of the demo's), and the emulator shares its
/// machine with the sink it serves. Any Parquet reader reads these files.
fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .build()
}
