//! The ingest's state file: how far each input file is durable, so that a rerun continues where
//! the last run stopped instead of sending every row again.
//!
//! - **Only from confirmations.** Each batch is read through a [`SourceTracker`] (the
//!   library's own answer to "which position may I commit"): a file's `committed` offset is
//!   the end of its unbroken run of durable batches, never the highest one confirmed, so a
//!   batch handed back or lost in flight keeps the position below it.
//! - **Durably.** The file is replaced atomically (a temporary file, `fsync`, `rename`, the
//!   folder's `fsync`): a `kill -9` leaves the old state or the new one, never half of one.
//!   It is rewritten within [`WRITE_EVERY`] of a confirmation and at least every second while
//!   the ingest runs (`updated_unix_ms`: when the last run stopped, to within a second).
//! - **What it cannot know.** Rows that became durable after its last write (acked but not
//!   yet recorded, or durable in the service with the ack still on the wire) are past
//!   `committed`; a rerun finds them by reading the table back (see `tail.rs`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use zerobus_sink::{Confirmation, Raw, SourceTracker, Token};

/// The state file's format version.
const VERSION: u32 = 1;

/// How soon after a confirmation the state file records it.
pub const WRITE_EVERY: Duration = Duration::from_millis(200);

/// How often the state file is rewritten when nothing changed (its `updated_unix_ms`).
const HEARTBEAT: Duration = Duration::from_secs(1);

/// What the state file holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    /// The format version (1).
    pub version: u32,
    /// The table loaded.
    pub table: String,
    /// The source topic every row of this load carries (`_twg_source_topic`): unique per load,
    /// so that reading the table back finds this load's rows and no other's.
    pub topic: String,
    /// Rows per batch read from Parquet, CSV and JSON: a rerun must cut the files as the first
    /// run did, so that a batch's position names the same rows.
    pub batch_rows: usize,
    /// The input files, in order: file `i` is source partition `i`.
    pub files: Vec<FileState>,
    /// When this file was last written, in milliseconds since the Unix epoch.
    pub updated_unix_ms: u64,
}

/// One input file's progress.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileState {
    /// The path as given.
    pub path: String,
    /// Its size when the load began.
    pub bytes: u64,
    /// Its modification time when the load began, in milliseconds since the Unix epoch.
    pub modified_unix_ms: u64,
    /// Every row up to this offset (from 0) is durable; `None`: none is known to be.
    pub committed: Option<i64>,
    /// Its rows, once it has been read to the end.
    pub rows: Option<i64>,
    /// Whether any of its batches was ever sent (written before the first send).
    pub started: bool,
}

impl FileState {
    /// What a file is when a load begins: nothing durable, nothing sent.
    pub fn new(path: &Path) -> Result<FileState, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(FileState {
            path: path.display().to_string(),
            bytes: meta.len(),
            modified_unix_ms: meta.modified().map(unix_ms).unwrap_or(0),
            committed: None,
            rows: None,
            started: false,
        })
    }

    /// Every row of the file is durable.
    pub fn complete(&self) -> bool {
        self.rows
            .is_some_and(|n| n == 0 || self.committed.is_some_and(|c| c + 1 >= n))
    }

    /// Rows known durable (the committed prefix).
    pub fn durable_rows(&self) -> u64 {
        self.committed.map_or(0, |c| (c + 1).max(0) as u64)
    }
}

impl State {
    /// A new load's state: a topic of its own, every file at its start.
    pub fn fresh(table: &str, files: &[PathBuf], batch_rows: usize) -> Result<State, String> {
        let now = unix_ms(SystemTime::now());
        Ok(State {
            version: VERSION,
            table: table.to_owned(),
            topic: format!("zerobus-sinkctl/{now:x}-{:x}", std::process::id()),
            batch_rows,
            files: files
                .iter()
                .map(|p| FileState::new(p))
                .collect::<Result<_, _>>()?,
            updated_unix_ms: now,
        })
    }

    /// The state in `path`.
    pub fn read(path: &Path) -> Result<State, String> {
        let named = |what: String| format!("{}: {what}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| named(e.to_string()))?;
        let state: State = serde_json::from_str(&text)
            .map_err(|e| named(format!("not an ingest state file: {e}")))?;
        if state.version != VERSION {
            return Err(named(format!(
                "state file version {} (this ingest reads {VERSION})",
                state.version
            )));
        }
        Ok(state)
    }

    /// Whether this state is of a load of `files` into `table`, each unchanged since the load
    /// began; if not, what differs (the caller names the state file).
    pub fn differs(&self, table: &str, files: &[PathBuf]) -> Result<(), String> {
        if self.table != table {
            return Err(format!(
                "it records a load into {}, not {table}",
                self.table
            ));
        }
        let given: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        let recorded: Vec<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
        if given != recorded {
            return Err(format!(
                "it records the files [{}], this run names [{}]",
                recorded.join(", "),
                given.join(", ")
            ));
        }
        for (f, p) in self.files.iter().zip(files) {
            let now = FileState::new(p)?;
            if (now.bytes, now.modified_unix_ms) != (f.bytes, f.modified_unix_ms) {
                return Err(format!(
                    "{} changed since the load began ({} bytes then, {} now): its offsets may \
                     name other rows",
                    f.path, f.bytes, now.bytes
                ));
            }
        }
        Ok(())
    }

    /// Whether every file is durable to its end.
    pub fn complete(&self) -> bool {
        self.files.iter().all(FileState::complete)
    }
}

/// The state of a running load: the tracker confirmations feed, and the file it is kept in.
#[derive(Clone)]
pub struct Journal {
    path: PathBuf,
    live: Arc<Mutex<Live>>,
}

struct Live {
    state: State,
    tracker: SourceTracker,
    dirty: bool,
    /// Why the last write failed (reported once at the end, and then the run fails).
    write_failed: Option<String>,
}

impl Journal {
    /// A journal over `state`, kept in `path`; each file's tracker starts at its committed
    /// offset.
    pub fn new(path: &Path, state: State) -> Journal {
        let mut tracker = SourceTracker::new();
        for (p, f) in state.files.iter().enumerate() {
            if let Some(c) = f.committed {
                tracker.resume(&state.topic, p as u32, c);
            }
        }
        Journal {
            path: path.to_owned(),
            live: Arc::new(Mutex::new(Live {
                state,
                tracker,
                dirty: true,
                write_failed: None,
            })),
        }
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the state as it is now.
    pub fn state(&self) -> State {
        self.live().state.clone()
    }

    /// The token for a batch of file `partition` whose last row is `offset`.
    pub fn read(&self, partition: u32, offset: i64) -> Result<Token<Raw>, String> {
        let mut live = self.live();
        let topic = live.state.topic.clone();
        let mut tokens = live
            .tracker
            .read(&topic, partition, offset, 1)
            .map_err(|e| e.to_string())?;
        tokens
            .pop()
            .ok_or_else(|| "the tracker gave no token".into())
    }

    /// A batch of file `partition` ending at `offset` is in the table already (found by
    /// reading it back): durable without a send.
    pub fn skip(&self, partition: u32, offset: i64) -> Result<(), String> {
        let mut live = self.live();
        let topic = live.state.topic.clone();
        if let Some(p) = live
            .tracker
            .skip(&topic, partition, offset)
            .map_err(|e| e.to_string())?
        {
            live.commit(p.partition, p.offset);
        }
        Ok(())
    }

    /// A confirmation: the file's committed offset moves if its run is unbroken.
    pub fn confirm(&self, c: Confirmation<Raw>) {
        let mut live = self.live();
        if let Ok(Some(p)) = live.tracker.confirm(c) {
            live.commit(p.partition, p.offset);
        }
    }

    /// File `partition` has been read to its end: it has `rows` rows.
    pub fn read_to_end(&self, partition: u32, rows: i64) {
        let mut live = self.live();
        if let Some(f) = live.state.files.get_mut(partition as usize) {
            f.rows = Some(rows);
            live.dirty = true;
        }
    }

    /// File `partition`'s first batch is about to be sent: recorded on disk before it is, so
    /// that a rerun knows to read the table back for it.
    pub async fn start(&self, partition: u32) -> Result<(), String> {
        {
            let mut live = self.live();
            match live.state.files.get_mut(partition as usize) {
                Some(f) if !f.started => f.started = true,
                _ => return Ok(()),
            }
        }
        self.write().await
    }

    /// Writes the state file now.
    pub async fn write(&self) -> Result<(), String> {
        let state = {
            let mut live = self.live();
            live.dirty = false;
            live.state.updated_unix_ms = unix_ms(SystemTime::now());
            live.state.clone()
        };
        let path = self.path.clone();
        let written = tokio::task::spawn_blocking(move || replace(&path, &state))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        if let Err(e) = &written {
            let mut live = self.live();
            live.dirty = true;
            live.write_failed.get_or_insert_with(|| e.clone());
        }
        written
    }

    /// Keeps the state file current until the task is aborted: within [`WRITE_EVERY`] of a
    /// change, and every [`HEARTBEAT`] regardless.
    pub async fn keep_written(self) {
        let mut every = tokio::time::interval(WRITE_EVERY);
        let mut last = tokio::time::Instant::now();
        loop {
            every.tick().await;
            let dirty = self.live().dirty;
            if dirty || last.elapsed() >= HEARTBEAT {
                let _ = self.write().await;
                last = tokio::time::Instant::now();
            }
        }
    }

    /// Why a write of the state file failed, if one did.
    pub fn write_failed(&self) -> Option<String> {
        self.live().write_failed.clone()
    }
}

impl Live {
    fn commit(&mut self, partition: u32, offset: i64) {
        if let Some(f) = self.state.files.get_mut(partition as usize) {
            f.committed = Some(offset);
            self.dirty = true;
        }
    }
}

/// Replaces `path` with `state` atomically and durably.
fn replace(path: &Path, state: &State) -> Result<(), String> {
    use std::io::Write;
    let named = |e: std::io::Error| format!("{}: cannot write the state file: {e}", path.display());
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_vec_pretty(state).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut file = std::fs::File::create(&tmp).map_err(named)?;
    file.write_all(&text).map_err(named)?;
    file.sync_all().map_err(named)?;
    std::fs::rename(&tmp, path).map_err(named)?;
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(folder)
        .and_then(|d| d.sync_all())
        .map_err(named)
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
