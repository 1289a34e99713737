//! Input files: Parquet (by its `PAR1` magic), Arrow IPC files (`ARROW1`), Arrow IPC streams
//! (their continuation marker, or `.arrows`), CSV with a header row (`.csv`) and
//! newline-delimited JSON (`.json`, `.jsonl`, `.ndjson`), the last two with the table's
//! declared columns as their schema or, without them, one inferred from the first 1,000 rows.
//! Anything else is refused, naming the formats that are read.

use std::fmt::Display;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::{ArrowError, SchemaRef};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

/// Rows read to infer a CSV or JSON file's schema when the table declares none.
const INFER_ROWS: usize = 1000;

/// An open input's batches.
pub enum Batches {
    Parquet(ParquetRecordBatchReader),
    File(FileReader<BufReader<File>>),
    Stream(StreamReader<BufReader<File>>),
    // Boxed: a CSV reader is three times the size of the others, one per input file.
    Csv(Box<arrow_csv::Reader<BufReader<File>>>),
    Json(arrow_json::Reader<BufReader<File>>),
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Batches::Parquet(r) => r.next(),
            Batches::File(r) => r.next(),
            Batches::Stream(r) => r.next(),
            Batches::Csv(r) => r.next(),
            Batches::Json(r) => r.next(),
        }
    }
}

/// An open input: its schema, its row count if known up front, and its batches.
pub struct Input {
    pub schema: SchemaRef,
    pub rows: Option<u64>,
    pub batches: Batches,
}

fn named(path: &Path, e: impl Display) -> String {
    format!("{}: {e}", path.display())
}

/// What a file holds, by its first bytes, else by its extension.
enum Format {
    Parquet,
    IpcFile,
    IpcStream,
    Csv,
    Json,
}

fn format(path: &Path, magic: &[u8]) -> Result<Format, String> {
    if magic.starts_with(b"PAR1") {
        return Ok(Format::Parquet);
    }
    if magic.starts_with(b"ARROW1") {
        return Ok(Format::IpcFile);
    }
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("csv") => return Ok(Format::Csv),
        Some("json" | "jsonl" | "ndjson") => return Ok(Format::Json),
        Some("arrows") => return Ok(Format::IpcStream),
        _ => {}
    }
    // An IPC stream's messages begin with the continuation marker (or, before Arrow 0.15, with
    // the metadata length).
    if magic.starts_with(&[0xff, 0xff, 0xff, 0xff]) {
        return Ok(Format::IpcStream);
    }
    Err(named(
        path,
        "not a format ingest reads: Parquet, Arrow IPC (file or stream), CSV with a header row \
         (*.csv) or newline-delimited JSON (*.json, *.jsonl, *.ndjson)",
    ))
}

/// Opens `path`; `declared` is the table's schema from the file's `columns`, if any (the schema
/// of CSV and JSON input; Parquet and Arrow files carry their own).
pub fn open(path: &Path, batch_rows: usize, declared: Option<SchemaRef>) -> Result<Input, String> {
    let mut magic = [0u8; 6];
    let read = File::open(path)
        .and_then(|mut f| f.read(&mut magic))
        .map_err(|e| named(path, e))?;
    let file = File::open(path).map_err(|e| named(path, e))?;
    let batch_rows = batch_rows.max(1);
    match format(path, &magic[..read])? {
        Format::Parquet => {
            let builder =
                ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| named(path, e))?;
            let rows = u64::try_from(builder.metadata().file_metadata().num_rows()).ok();
            let schema = builder.schema().clone();
            let reader = builder
                .with_batch_size(batch_rows)
                .build()
                .map_err(|e| named(path, e))?;
            Ok(Input {
                schema,
                rows,
                batches: Batches::Parquet(reader),
            })
        }
        Format::IpcFile => {
            let reader =
                FileReader::try_new(BufReader::new(file), None).map_err(|e| named(path, e))?;
            Ok(Input {
                schema: reader.schema(),
                rows: None,
                batches: Batches::File(reader),
            })
        }
        Format::IpcStream => {
            let reader = StreamReader::try_new(BufReader::new(file), None)
                .map_err(|e| named(path, format!("as an Arrow IPC stream: {e}")))?;
            Ok(Input {
                schema: reader.schema(),
                rows: None,
                batches: Batches::Stream(reader),
            })
        }
        Format::Csv => {
            let mut file = BufReader::new(file);
            let csv = arrow_csv::reader::Format::default().with_header(true);
            let schema = match declared {
                Some(s) => s,
                None => {
                    let (schema, _) = csv
                        .infer_schema(&mut file, Some(INFER_ROWS))
                        .map_err(|e| named(path, format!("as CSV: {e}")))?;
                    file.rewind().map_err(|e| named(path, e))?;
                    Arc::new(schema)
                }
            };
            let reader = arrow_csv::ReaderBuilder::new(schema.clone())
                .with_format(csv)
                .with_batch_size(batch_rows)
                .build(file)
                .map_err(|e| named(path, format!("as CSV: {e}")))?;
            Ok(Input {
                schema,
                rows: None,
                batches: Batches::Csv(Box::new(reader)),
            })
        }
        Format::Json => {
            let mut file = BufReader::new(file);
            let schema = match declared {
                Some(s) => s,
                None => {
                    let (schema, _) =
                        arrow_json::reader::infer_json_schema(&mut file, Some(INFER_ROWS))
                            .map_err(|e| named(path, format!("as newline-delimited JSON: {e}")))?;
                    file.rewind().map_err(|e| named(path, e))?;
                    Arc::new(schema)
                }
            };
            let reader = arrow_json::ReaderBuilder::new(schema.clone())
                .with_batch_size(batch_rows)
                .build(file)
                .map_err(|e| named(path, format!("as newline-delimited JSON: {e}")))?;
            Ok(Input {
                schema,
                rows: None,
                batches: Batches::Json(reader),
            })
        }
    }
}
