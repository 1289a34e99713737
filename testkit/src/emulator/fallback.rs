//! The fallback directory: rows acked before a breaking change to their table and published
//! after it. The service writes such rows as Parquet files to a fallback directory under the
//! table's location, for someone to reprocess by hand; they are not lost, and not in the table
//! (docs.databricks.com/gcp/ja/ingestion/zerobus-features; PROTOCOL.md E). A change is
//! breaking when it is not additive: a column's type changed, or a column was dropped or
//! renamed. Added columns are not: rows without them are published with nulls.
//!
//! The materializer compares each round's table with the table of the round before it (the
//! last publication): a logged batch that carries a column changed in between, with a type the
//! column no longer has (or a column no longer there), goes here instead of into the table.
//! After a restart the first round has no earlier table to compare with, and publishes as
//! before. The service does not document the directory's name; ours is `_zerobus_fallback/`
//! under the table, one file per batch, named by the log position its round started at and its
//! index in the round, so a round repeated after a crash rewrites the same files.

use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use deltalake::parquet::arrow::ArrowWriter;
use zerobus_sink_catalog::{DeltaType, LiveColumn, LiveTable};

/// The fallback directory's name under a table's location.
pub const DIR: &str = "_zerobus_fallback";

/// Why a batch of `schema` cannot be published to `now`, a table that was `before` at the
/// last publication: the first column that changed under it, in words; `None` if it can be.
pub(crate) fn breaking(schema: &Schema, before: &[LiveColumn], now: &LiveTable) -> Option<String> {
    for field in schema.fields() {
        let name = field.name();
        let Some(was) = before.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
            continue;
        };
        let Some(is) = now.column(name) else {
            return Some(format!("column {name} was dropped or renamed"));
        };
        if is.data_type == was.data_type {
            continue;
        }
        let sent = DeltaType::from_arrow(name, field.data_type()).ok();
        if sent.as_ref() != Some(&is.data_type) {
            return Some(format!(
                "column {name} changed from {} to {}",
                was.data_type.type_text(),
                is.data_type.type_text()
            ));
        }
    }
    None
}

/// Writes `batch` to the fallback directory under `location`, as the `index`th batch of the
/// round that started at log position `at`; returns the file.
pub(crate) fn write(
    location: &Path,
    at: u64,
    index: usize,
    batch: &RecordBatch,
) -> Result<PathBuf, String> {
    let dir = location.join(DIR);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{at:020}-{index:05}.parquet"));
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writer
        .write(batch)
        .and_then(|()| writer.close().map(|_| ()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Every row in the fallback directory of the table at `location`, read back (for tests and
/// operators: what a reprocessing job would find).
///
/// # Errors
/// A file cannot be read (the message names it).
pub fn read(location: &Path) -> Result<Vec<RecordBatch>, String> {
    let dir = location.join(DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let reader =
            deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .and_then(|b| b.build())
                .map_err(|e| format!("{}: {e}", path.display()))?;
        for batch in reader {
            out.push(batch.map_err(|e| format!("{}: {e}", path.display()))?);
        }
    }
    Ok(out)
}
