//! The write-ahead log: one file per table, appended and synced before any ack covers what it
//! holds. Records are the IPC bytes exactly as received, framed as
//! `kind: u8, header_len: u32 LE, body_len: u32 LE, header, body` (kind 0 = schema, 1 = batch).
//! [`read`] decodes a log back into batches, so tests can check what is really on disk.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::FlightData;
use arrow_schema::SchemaRef;
use tokio::fs::{File, OpenOptions};
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

const SCHEMA: u8 = 0;
const BATCH: u8 = 1;

/// One table's log, shared by its connections.
#[derive(Debug, Clone)]
pub(crate) struct Wal {
    file: Arc<Mutex<File>>,
    path: PathBuf,
}

impl Wal {
    /// Opens (creating or appending to) the log of `table` under `dir`.
    pub(crate) async fn open(dir: &Path, table: &str) -> io::Result<Wal> {
        tokio::fs::create_dir_all(dir).await?;
        let path = path(dir, table);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await?;
        Ok(Wal {
            file: Arc::new(Mutex::new(file)),
            path,
        })
    }

    /// Appends a connection's schema message and the batches after it, then syncs: when this
    /// returns `Ok`, they are durable.
    pub(crate) async fn append(
        &self,
        schema: Option<&FlightData>,
        batches: &[FlightData],
    ) -> io::Result<()> {
        let mut buf = Vec::new();
        if let Some(s) = schema {
            frame(&mut buf, SCHEMA, s)?;
        }
        for b in batches {
            frame(&mut buf, BATCH, b)?;
        }
        let mut file = self.file.lock().await;
        file.write_all(&buf).await?;
        file.sync_data().await
    }

    /// The log's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Where the log of `table` lives under `dir`.
pub(crate) fn path(dir: &Path, table: &str) -> PathBuf {
    let name: String = table
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("{name}.wal"))
}

fn frame(buf: &mut Vec<u8>, kind: u8, data: &FlightData) -> io::Result<()> {
    let len = |n: usize| {
        u32::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "record too large"))
    };
    buf.push(kind);
    buf.extend_from_slice(&len(data.data_header.len())?.to_le_bytes());
    buf.extend_from_slice(&len(data.data_body.len())?.to_le_bytes());
    buf.extend_from_slice(&data.data_header);
    buf.extend_from_slice(&data.data_body);
    Ok(())
}

/// Where a reader of a growing log stands: the byte after the last record it took, and the
/// schema in force there (each connection logs its schema before its first batches).
#[derive(Debug, Clone, Default)]
pub(crate) struct Cursor {
    /// The byte after the last complete record read.
    pub(crate) at: u64,
    /// The schema of the batches that follow.
    pub(crate) schema: Option<SchemaRef>,
}

/// Every complete record of a growing log from `cursor` on: its batches, and where the next
/// read starts. A record still being written (a torn tail) is left for the next read; a
/// corrupt one is an error naming its byte offset.
pub(crate) fn read_from(path: &Path, cursor: &Cursor) -> io::Result<(Vec<RecordBatch>, Cursor)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(cursor.at))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let mut out = Vec::new();
    let mut schema = cursor.schema.clone();
    let mut at = 0;
    let corrupt = |at: usize, what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: record at byte {}: {what}",
                path.display(),
                cursor.at + at as u64
            ),
        )
    };
    while let Some((kind, data, next)) = record(&bytes, at) {
        match kind {
            SCHEMA => {
                schema = Some(super::frame::schema(&data).map_err(|e| corrupt(at, e.to_string()))?)
            }
            BATCH => {
                let s = schema
                    .as_ref()
                    .ok_or_else(|| corrupt(at, "batch before any schema".into()))?;
                let b = super::frame::batch(&data, s, u64::MAX)
                    .map_err(|e| corrupt(at, e.to_string()))?;
                out.push(b.batch);
            }
            k => return Err(corrupt(at, format!("unknown record kind {k}"))),
        }
        at = next;
    }
    Ok((
        out,
        Cursor {
            at: cursor.at + at as u64,
            schema,
        },
    ))
}

/// The cursor at byte `at` of a log (a record boundary): the last schema logged before it.
pub(crate) fn cursor_at(path: &Path, at: u64) -> io::Result<Cursor> {
    let mut schema = None;
    let end = walk(path, at, |kind, header, offset| {
        if kind == SCHEMA {
            let data = FlightData::new().with_data_header(bytes::Bytes::copy_from_slice(header));
            schema = Some(super::frame::schema(&data).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: schema at byte {offset}: {e}", path.display()),
                )
            })?);
        }
        Ok(())
    })?;
    Ok(Cursor { at: end, schema })
}

/// What a log holds, counted from its records' headers without decoding a body: the batch
/// messages, their rows, and the byte after the last complete record (a log is longer than
/// that only by a torn tail: a record a crash cut short, never synced, so never acked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Batch messages.
    pub(crate) messages: u64,
    /// Rows in them.
    pub(crate) rows: u64,
    /// The byte after the last complete record.
    pub(crate) end: u64,
}

/// Counts a log's batches and rows from the headers alone (a restart of a long run reads a
/// few bytes per batch, not the gigabytes of its bodies).
pub(crate) fn tally(path: &Path) -> io::Result<Tally> {
    let mut tally = Tally::default();
    tally.end = walk(path, u64::MAX, |kind, header, offset| {
        if kind == BATCH {
            let rows = arrow_ipc::root_as_message(header)
                .ok()
                .and_then(|m| m.header_as_record_batch())
                .map(|b| b.length())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: record at byte {offset}: not an IPC record batch",
                            path.display()
                        ),
                    )
                })?;
            tally.messages += 1;
            tally.rows += u64::try_from(rows).unwrap_or(0);
        }
        Ok(())
    })?;
    Ok(tally)
}

/// Visits every complete record of a log that ends at or before byte `end`, in order, with
/// its kind, its message header and its offset, reading the headers and seeking over the
/// bodies. Returns the byte after the last record visited.
fn walk(
    path: &Path,
    end: u64,
    mut visit: impl FnMut(u8, &[u8], u64) -> io::Result<()>,
) -> io::Result<u64> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let end = end.min(file.metadata()?.len());
    let mut reader = io::BufReader::new(file);
    let mut at = 0u64;
    let mut header = Vec::new();
    loop {
        let mut head = [0u8; 9];
        if at + 9 > end {
            return Ok(at);
        }
        reader.read_exact(&mut head)?;
        let (hl, bl) = lengths(&head);
        let next = at + 9 + u64::from(hl) + u64::from(bl);
        if next > end {
            return Ok(at);
        }
        header.resize(hl as usize, 0);
        reader.read_exact(&mut header)?;
        reader.seek_relative(i64::from(bl))?;
        if !matches!(head[0], SCHEMA | BATCH) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: record at byte {at}: unknown record kind {}",
                    path.display(),
                    head[0]
                ),
            ));
        }
        visit(head[0], &header, at)?;
        at = next;
    }
}

/// Cuts a torn tail off a log (see [`Tally::end`]), so that the records appended after a
/// restart follow a complete one. Returns the bytes cut.
pub(crate) fn cut_torn_tail(path: &Path, tally: &Tally) -> io::Result<u64> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let len = file.metadata()?.len();
    if len > tally.end {
        file.set_len(tally.end)?;
        file.sync_all()?;
    }
    Ok(len.saturating_sub(tally.end))
}

/// A record's header and body lengths, from its 9-byte frame head (`kind, header_len,
/// body_len`).
fn lengths(head: &[u8]) -> (u32, u32) {
    let le = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    (le(1), le(5))
}

/// The complete record at `at`, if there is one: its kind, its message and where the next
/// record starts.
fn record(bytes: &[u8], at: usize) -> Option<(u8, FlightData, usize)> {
    let head = bytes.get(at..at.checked_add(9)?)?;
    let (hl, bl) = lengths(head);
    let (hl, bl) = (hl as usize, bl as usize);
    let start = at + 9;
    let header = bytes.get(start..start.checked_add(hl)?)?;
    let body = bytes.get(start + hl..(start + hl).checked_add(bl)?)?;
    let data = FlightData::new()
        .with_data_header(bytes::Bytes::copy_from_slice(header))
        .with_data_body(bytes::Bytes::copy_from_slice(body));
    Some((head[0], data, start + hl + bl))
}

/// The complete records of a log that may still be written to, for a reader racing the
/// writer (a test checking what is durable while the emulator runs): a torn tail is a record
/// being appended now, not yet synced nor acked, and is left out. [`read`] instead treats a
/// torn tail as an error, for a log that should be at rest.
///
/// # Errors
/// The file cannot be read, or a complete record cannot be decoded.
pub fn read_complete(path: &Path) -> io::Result<Vec<RecordBatch>> {
    read_from(path, &Cursor::default()).map(|(batches, _)| batches)
}

/// Reads a log back: every batch on disk, in the order written. Fails on a torn or corrupt
/// record, naming its byte offset.
pub fn read(path: &Path) -> io::Result<Vec<RecordBatch>> {
    let (batches, cursor) = read_from(path, &Cursor::default())?;
    let len = std::fs::metadata(path)?.len();
    if cursor.at == len {
        Ok(batches)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: record at byte {}: torn record",
                path.display(),
                cursor.at
            ),
        ))
    }
}
