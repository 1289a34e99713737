//! `zerobus-sinkctl ingest`: files into one table, with a progress bar of durable rows, a state
//! file of how far each file is durable, and a rerun that continues from it.
//!
//! Every batch is stamped with a position: the load's own topic (in the state file), the input
//! file's index as the partition, and the offset of the batch's last row in its file (from 0).

mod journal;
mod loader;
mod tail;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_schema::SchemaRef;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::net::TcpListener;
use zerobus_sink::Raw;
use zerobus_sink_catalog::TableRef;
use zerobus_sink_tokio::settings::SinkFile;
use zerobus_sink_tokio::{Sink, ZerobusSink, ops};

use crate::input;
use journal::{Journal, State};
use loader::Loader;
use tail::Tail;

/// How often a progress line is printed when stderr is not a terminal (no bar to move).
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Whether a run continues a load its state file records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Continue when the state file exists, else begin.
    Auto,
    /// Continue; refuse if there is no state file.
    Resume,
    /// Begin again, replacing the state file (every row is sent again).
    Fresh,
}

/// What `ingest` was asked to do.
#[derive(Debug)]
pub struct Args {
    pub config: PathBuf,
    pub table: String,
    pub files: Vec<PathBuf>,
    pub batch_rows: usize,
    pub metrics_addr: Option<SocketAddr>,
    pub rejects: PathBuf,
    pub state: Option<PathBuf>,
    pub mode: Mode,
    pub publication_wait: Duration,
}

/// The state file when `--state` is not given: `<table>.ingest-state.json` here.
pub fn default_state(table: &str) -> PathBuf {
    PathBuf::from(format!("{table}.ingest-state.json"))
}

/// The state this run starts from, and whether it continues an earlier run. A load its state
/// file records as finished never stands in the way: the same files again have nothing to do,
/// others begin a new load. An unfinished one of other files (or another table, or a file
/// changed since) is refused, naming the state file: `--fresh` replaces it.
fn start_from(path: &Path, a: &Args) -> Result<(State, bool), String> {
    let fresh = || State::fresh(&a.table, &a.files, a.batch_rows);
    match (a.mode, path.exists()) {
        (Mode::Fresh, _) | (Mode::Auto, false) => Ok((fresh()?, false)),
        (Mode::Resume, false) => Err(format!(
            "{}: no state file to resume from (a first run makes it)",
            path.display()
        )),
        (Mode::Auto | Mode::Resume, true) => {
            let state = State::read(path)?;
            match state.differs(&a.table, &a.files) {
                Ok(()) => Ok((state, true)),
                Err(_) if state.complete() && a.mode == Mode::Auto => Ok((fresh()?, false)),
                Err(why) => Err(format!(
                    "{}: {why}; the load it records is not finished: run it with the same \
                     files, name another --state, or --fresh to replace it",
                    path.display()
                )),
            }
        }
    }
}

/// What a resumed run found before sending anything.
#[derive(Debug, Default)]
struct Resumed {
    /// Rows the state file records as durable.
    before: u64,
    /// Rows of the uncertain tail the table holds whole (not sent again).
    found: u64,
    /// Rows of batches the table holds in part, sent again whole (duplicates by their source
    /// columns).
    replayed: u64,
}

pub async fn run(a: Args) -> ExitCode {
    let table = a.table.as_str();
    let file = match SinkFile::load(&a.config).and_then(|f| f.only(table)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("refused: {e}");
            return ExitCode::FAILURE;
        }
    };
    let state_path = a.state.clone().unwrap_or_else(|| default_state(table));
    let (state, resumed) = match start_from(&state_path, &a) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("refused: {e}");
            return ExitCode::from(2);
        }
    };
    if resumed && state.complete() {
        println!(
            "{table}: nothing to do: every row of these files is durable ({}); --fresh loads \
             them again",
            state_path.display()
        );
        return ExitCode::SUCCESS;
    }
    if resumed && state.batch_rows != a.batch_rows {
        eprintln!(
            "resuming with --batch-rows {}, as the load began",
            state.batch_rows
        );
    }
    // Open every file first: an unreadable one stops the load before anything is sent.
    let mut inputs = Vec::new();
    let declared = file.table_schema(table);
    for path in &a.files {
        match input::open(path, state.batch_rows, declared.clone()) {
            Ok(i) => inputs.push((path, i)),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }
    // The columns the file declares are the table's: an input that does not have them is
    // refused before anything is sent, naming both.
    if let Some(declared) = &declared {
        for (path, input) in &inputs {
            if !same_columns(declared, &input.schema) {
                eprintln!(
                    "{}: its columns ({}) are not those {} declares for {table} ({})",
                    path.display(),
                    columns(&input.schema),
                    a.config.display(),
                    columns(declared)
                );
                return ExitCode::from(2);
            }
        }
    }
    let Some(schema) = declared
        .clone()
        .or_else(|| inputs.first().map(|(_, i)| i.schema.clone()))
    else {
        eprintln!("no input files");
        return ExitCode::from(2);
    };
    let mut resume = Resumed {
        before: state
            .files
            .iter()
            .map(journal::FileState::durable_rows)
            .sum(),
        ..Resumed::default()
    };
    let tail = if resumed {
        eprintln!(
            "resuming from {}: {} rows durable before this run",
            state_path.display(),
            resume.before
        );
        read_back(&file, table, &state, a.publication_wait).await
    } else {
        Tail::default()
    };
    let journal = Journal::new(&state_path, state.clone());
    // Written before anything is sent: a state file that cannot be written stops the load here.
    if let Err(e) = journal.write().await {
        eprintln!("refused: {e}");
        return ExitCode::from(2);
    }
    let total: Option<u64> = inputs.iter().map(|(_, i)| i.rows).sum();
    let bar = match total {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} rows durable ({per_sec}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let loader = Loader {
        bar: bar.clone(),
        journal: journal.clone(),
        outcome: Arc::default(),
    };
    // The operator endpoint: bound, and the recorder installed, before the sink starts (its
    // metrics' handles are registered then).
    let endpoint = match a.metrics_addr {
        None => None,
        Some(addr) => match (TcpListener::bind(addr).await, ops::install_prometheus()) {
            (Ok(listener), Ok(prometheus)) => Some((listener, prometheus)),
            (Err(e), _) => {
                eprintln!("--metrics-addr {addr}: {e}");
                return ExitCode::from(2);
            }
            (_, Err(e)) => {
                eprintln!("--metrics-addr {addr}: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let mut sink = match ZerobusSink::<Raw>::from_file(
        &file,
        |_| Some(schema.clone()),
        loader.clone(),
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("refused: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(id) = sink.table(table) else {
        eprintln!("refused: the sink has no table {table}");
        return ExitCode::FAILURE;
    };
    if let Some((listener, prometheus)) = endpoint {
        if let Ok(addr) = listener.local_addr() {
            eprintln!("operator endpoint: http://{addr}/metrics, http://{addr}/health");
        }
        tokio::spawn(ops::serve(listener, sink.observer(), prometheus));
    }
    let read = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let progress = (!terminal).then(|| {
        let (read, loader) = (read.clone(), loader.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(PROGRESS_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                eprintln!("{}", progress_line(&read, &loader, started));
            }
        })
    });
    loader.outcome().files = inputs
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    let keeper = tokio::spawn(journal.clone().keep_written());
    let mut stopped = None;
    'files: for (partition, (path, input)) in inputs.into_iter().enumerate() {
        let p = partition as u32;
        let known = &state.files[partition];
        if known.complete() {
            bar.inc(known.durable_rows());
            continue;
        }
        let committed = known.committed.unwrap_or(-1);
        let mut last: i64 = -1;
        bar.set_message(path.display().to_string());
        for batch in input.batches {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    stopped = Some(format!("{}: {e}", path.display()));
                    break 'files;
                }
            };
            if batch.num_rows() == 0 {
                continue;
            }
            let rows = batch.num_rows() as u64;
            last += rows as i64;
            if last <= committed {
                // Durable before this run, as the state file records.
                bar.inc(rows);
                continue;
            }
            let visible = tail.visible(p, last);
            if visible >= rows {
                // Durable before this run, found in the table.
                resume.found += rows;
                bar.inc(rows);
                if let Err(e) = journal.skip(p, last) {
                    stopped = Some(format!("{}: {e}", path.display()));
                    break 'files;
                }
                continue;
            }
            resume.replayed += visible;
            let token = match journal.start(p).await.and_then(|()| journal.read(p, last)) {
                Ok(t) => t,
                Err(e) => {
                    stopped = Some(format!("{}: {e}", path.display()));
                    break 'files;
                }
            };
            read.fetch_add(rows, Ordering::Relaxed);
            loader.outcome().sent.insert((p, last), rows);
            if let Err(e) = sink.send(id, batch, token).await {
                stopped = Some(format!("{}: {e}", path.display()));
                break 'files;
            }
        }
        journal.read_to_end(p, last + 1);
    }
    let _ = sink.flush().await;
    let report = sink.close(file.drain()).await;
    keeper.abort();
    let _ = keeper.await;
    let _ = journal.write().await;
    bar.finish_and_clear();
    if let Some(progress) = progress {
        progress.abort();
        eprintln!("{}", progress_line(&read, &loader, started));
    }
    let o = loader.outcome();
    println!(
        "{}: {} rows durable, {} not durable, {} refused; {report}",
        table, o.durable_rows, o.failed_rows, o.isolated_rows
    );
    if resumed {
        println!(
            "resumed: {} rows were durable before this run (state file), {} found in the table \
             (read back), {} of partly published batches sent again",
            resume.before, resume.found, resume.replayed
        );
    }
    for reason in &o.reasons {
        eprintln!("{reason}");
    }
    if !o.rejects.is_empty() {
        write_rejects(&a.rejects, &o.rejects, resumed);
    }
    if let Some(why) = &stopped {
        eprintln!("stopped: {why}");
    }
    let done = journal.state().complete();
    match journal.write_failed() {
        Some(e) => eprintln!("{e}"),
        None if done => println!("state: {} (every file durable)", state_path.display()),
        None => println!(
            "state: {} (run the same command again to continue where this run stopped)",
            state_path.display()
        ),
    }
    if done && stopped.is_none() && o.failed_rows == 0 && o.isolated_rows == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Reads back the rows a stopped run may have made durable past its state file, once they can
/// be published. A table that cannot be read back is said, and the load goes on: rows durable
/// but not recorded are then sent again (duplicates by their source columns), never lost.
async fn read_back(file: &SinkFile, table: &str, state: &State, wait: Duration) -> Tail {
    let Ok(name) = TableRef::parse(table) else {
        return Tail::default();
    };
    let catalog = match file.catalog_with_env(|n| std::env::var(n).ok()) {
        Ok(Some(c)) => c,
        Ok(None) => {
            eprintln!(
                "warning: no [catalog] to read {table} back: rows made durable after the state \
                 file's last write are sent again"
            );
            return Tail::default();
        }
        Err(e) => {
            eprintln!(
                "warning: cannot read {table} back ({e}): rows made durable after the state file's last write are sent again"
            );
            return Tail::default();
        }
    };
    let pause = tail::wait_before_reading(state, wait);
    if !pause.is_zero() {
        eprintln!(
            "waiting {:.1} s for rows the last run made durable to be published \
             (--publication-wait {})",
            pause.as_secs_f64(),
            humantime::format_duration(wait)
        );
        tokio::time::sleep(pause).await;
    }
    match tail::read_back(&catalog, &name, state).await {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "warning: cannot read {table} back ({e}): rows made durable after the state \
                 file's last write are sent again"
            );
            Tail::default()
        }
    }
}

/// The refused rows, to the reject file (appended to by a resumed run).
fn write_rejects(path: &Path, rejects: &[String], append: bool) {
    use std::io::Write;
    let mut text = rejects.join("\n");
    text.push('\n');
    let written = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    match written {
        Ok(()) => println!(
            "{} refused rows written to {} (a JSON line each: file, row from 0, faults, values)",
            rejects.len(),
            path.display()
        ),
        Err(e) => eprintln!("{}: cannot write the refused rows: {e}", path.display()),
    }
}

/// `progress: N rows read, M durable (R rows/s)`, for a log without a terminal.
fn progress_line(read: &AtomicU64, loader: &Loader, started: Instant) -> String {
    let durable = loader.outcome().durable_rows;
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    format!(
        "progress: {} rows read, {durable} durable ({:.0} rows/s)",
        read.load(Ordering::Relaxed),
        durable as f64 / secs
    )
}

/// Whether two schemas have the same columns by name and type, in any order (nullability is
/// the write boundary's to check, row by row).
fn same_columns(a: &SchemaRef, b: &SchemaRef) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields().iter().all(|f| {
            b.field_with_name(f.name())
                .is_ok_and(|g| g.data_type() == f.data_type())
        })
}

/// `name type, ...`, for a refusal.
fn columns(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}
