//! `zerobus-sinkctl ingest`: files into one table, with a progress bar of durable rows.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use indicatif::{ProgressBar, ProgressStyle};
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw, Token};
use zerobus_sink_tokio::settings::SinkFile;
use zerobus_sink_tokio::{Confirmer, IsolatedRows, Sink, ZerobusSink};

use crate::input;

/// The position every ingested batch is stamped with: this topic, partition 0, the offset of
/// its last row across the whole load.
const TOPIC: &str = "zerobus-sink-ingest";

#[derive(Debug, Default)]
struct Outcome {
    durable_rows: u64,
    failed_rows: u64,
    isolated_rows: u64,
    reasons: Vec<String>,
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
        for fault in rows.faults {
            o.reasons.push(format!("{table}: row refused: {fault}"));
        }
    }
}

pub async fn run(config: &Path, table: &str, files: &[PathBuf], batch_rows: usize) -> ExitCode {
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
    let Some(schema) = inputs.first().map(|(_, i)| i.schema.clone()) else {
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
    let mut last: i64 = -1;
    let mut stopped = None;
    'files: for (path, input) in inputs {
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
            last += batch.num_rows() as i64;
            match sink.send(id, batch, Token::raw(TOPIC, 0, last)).await {
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
    let o = loader.outcome();
    println!(
        "{}: {} rows durable, {} not durable, {} refused; {report}",
        table, o.durable_rows, o.failed_rows, o.isolated_rows
    );
    for reason in &o.reasons {
        eprintln!("{reason}");
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
