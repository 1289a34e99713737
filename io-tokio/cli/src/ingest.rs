//! `zerobus-sinkctl ingest`: files into one table, with a progress bar of durable rows.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::net::TcpListener;
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw, Token};
use zerobus_sink_tokio::settings::SinkFile;
use zerobus_sink_tokio::{Confirmer, IsolatedRows, RowFault, Sink, ZerobusSink, ops};

use crate::input;

/// The position every ingested batch is stamped with: this topic, the input file's index as the
/// partition, and the offset of the batch's last row in its file (from 0).
const TOPIC: &str = "zerobus-sink-ingest";

#[derive(Debug, Default)]
struct Outcome {
    durable_rows: u64,
    failed_rows: u64,
    isolated_rows: u64,
    reasons: Vec<String>,
    /// The input files, by partition.
    files: Vec<String>,
    /// Rows of each batch sent, by its position (partition, offset of its last row).
    sent: HashMap<(u32, i64), u64>,
    /// One JSON line per refused row: its file, its row in the file, its faults, its values.
    rejects: Vec<String>,
}

/// Counts what became durable (and moves the bar), and what did not (with why).
#[derive(Clone)]
struct Loader {
    bar: ProgressBar,
    outcome: Arc<Mutex<Outcome>>,
}

impl Loader {
    fn outcome(&self) -> std::sync::MutexGuard<'_, Outcome> {
        self.outcome
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Confirmer<Raw> for Loader {
    fn confirmed(&mut self, _table: &str, c: Confirmation<Raw>) {
        self.outcome().durable_rows += c.rows();
        self.bar.inc(c.rows());
    }

    fn failed(&mut self, table: &str, b: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        let mut o = self.outcome();
        o.failed_rows += b.batch.num_rows() as u64;
        o.reasons.push(format!(
            "{table}: {} rows not durable: {why}",
            b.batch.num_rows()
        ));
    }

    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        let mut o = self.outcome();
        o.isolated_rows += rows.batch.num_rows() as u64;
        let p = &rows.position;
        let file = o
            .files
            .get(p.partition as usize)
            .cloned()
            .unwrap_or_default();
        let sent = o.sent.get(&(p.partition, p.offset)).copied().unwrap_or(0);
        // The batch's first row in its file, from 0; a fault's row is its index in the batch.
        let first = (p.offset + 1).saturating_sub(sent as i64).max(0) as usize;
        let mut refused: Vec<usize> = rows.faults.iter().map(|f| f.row).collect();
        refused.sort_unstable();
        refused.dedup();
        let values = json_rows(&rows.batch);
        for (k, row) in refused.iter().enumerate() {
            let faults: Vec<RowFault> = rows
                .faults
                .iter()
                .filter(|f| f.row == *row)
                .map(|f| RowFault {
                    row: first + f.row,
                    ..f.clone()
                })
                .collect();
            for fault in &faults {
                o.reasons
                    .push(format!("{table}: {file}: {fault} (refused)"));
            }
            let line = serde_json::json!({
                "file": file,
                "row": first + row,
                "faults": faults.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "values": values.get(k).cloned().unwrap_or(serde_json::Value::Null),
            });
            o.rejects.push(line.to_string());
        }
    }
}

/// How often a progress line is printed when stderr is not a terminal (no bar to move).
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub async fn run(
    config: &Path,
    table: &str,
    files: &[PathBuf],
    batch_rows: usize,
    metrics_addr: Option<SocketAddr>,
    rejects: &Path,
) -> ExitCode {
    let file = match SinkFile::load(config).and_then(|f| f.only(table)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("refused: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Open every file first: an unreadable one stops the load before anything is sent.
    let mut inputs = Vec::new();
    let declared = file.table_schema(table);
    for path in files {
        match input::open(path, batch_rows, declared.clone()) {
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
                    config.display(),
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
        outcome: Arc::default(),
    };
    // The operator endpoint: bound, and the recorder installed, before the sink starts (its
    // metrics' handles are registered then).
    let endpoint = match metrics_addr {
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
    let mut stopped = None;
    'files: for (partition, (path, input)) in inputs.into_iter().enumerate() {
        let partition = partition as u32;
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
            read.fetch_add(rows, Ordering::Relaxed);
            loader.outcome().sent.insert((partition, last), rows);
            match sink
                .send(id, batch, Token::raw(TOPIC, partition, last))
                .await
            {
                Ok(_receipt) => {}
                Err(e) => {
                    stopped = Some(format!("{}: {e}", path.display()));
                    break 'files;
                }
            }
        }
    }
    let _ = sink.flush().await;
    let report = sink.close(file.drain()).await;
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
    for reason in &o.reasons {
        eprintln!("{reason}");
    }
    if !o.rejects.is_empty() {
        let mut text = o.rejects.join("\n");
        text.push('\n');
        match std::fs::write(rejects, text) {
            Ok(()) => println!(
                "{} refused rows written to {} (a JSON line each: file, row from 0, faults, values)",
                o.rejects.len(),
                rejects.display()
            ),
            Err(e) => eprintln!("{}: cannot write the refused rows: {e}", rejects.display()),
        }
    }
    if let Some(why) = &stopped {
        eprintln!("stopped: {why}");
    }
    if stopped.is_none() && o.failed_rows == 0 && o.isolated_rows == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
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

/// Each row of `batch` as a JSON object (arrow-json's line writer), for the reject file.
fn json_rows(batch: &RecordBatch) -> Vec<serde_json::Value> {
    let mut buf = Vec::new();
    let mut writer = arrow_json::LineDelimitedWriter::new(&mut buf);
    if writer.write(batch).and_then(|()| writer.finish()).is_err() {
        return Vec::new();
    }
    String::from_utf8_lossy(&buf)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(serde_json::Value::Null))
        .collect()
}
