//! Input files: Parquet (by its `PAR1` magic), Arrow IPC files (`ARROW1`), else an Arrow IPC
//! stream.

use std::fmt::Display;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::{ArrowError, SchemaRef};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

/// An open input's batches.
pub enum Batches {
    Parquet(ParquetRecordBatchReader),
    File(FileReader<BufReader<File>>),
    Stream(StreamReader<BufReader<File>>),
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Batches::Parquet(r) => r.next(),
            Batches::File(r) => r.next(),
            Batches::Stream(r) => r.next(),
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

pub fn open(path: &Path, batch_rows: usize) -> Result<Input, String> {
    let mut magic = [0u8; 6];
    let read = File::open(path)
        .and_then(|mut f| f.read(&mut magic))
        .map_err(|e| named(path, e))?;
    let file = File::open(path).map_err(|e| named(path, e))?;
    if read >= 4 && &magic[..4] == b"PAR1" {
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| named(path, e))?;
        let rows = u64::try_from(builder.metadata().file_metadata().num_rows()).ok();
        let schema = builder.schema().clone();
        let reader = builder
            .with_batch_size(batch_rows.max(1))
            .build()
            .map_err(|e| named(path, e))?;
        return Ok(Input {
            schema,
            rows,
            batches: Batches::Parquet(reader),
        });
    }
    if read == 6 && &magic == b"ARROW1" {
        let reader = FileReader::try_new(BufReader::new(file), None).map_err(|e| named(path, e))?;
        return Ok(Input {
            schema: reader.schema(),
            rows: None,
            batches: Batches::File(reader),
        });
    }
    let reader = StreamReader::try_new(BufReader::new(file), None).map_err(|e| named(path, e))?;
    Ok(Input {
        schema: reader.schema(),
        rows: None,
        batches: Batches::Stream(reader),
    })
}
