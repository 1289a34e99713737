//! What a sink costs in resident memory (issue 50): per table and per open stream, idle and
//! with every stream's window full, against the window settings. Each shape runs in a process
//! of its own (this binary with `--one`), so that no shape inherits another's heap.
//!
//! ```text
//! cargo build --release -p zerobus-sink-testkit --bin zerobus-local
//! cargo run --release -p zerobus-sink-tokio --example memory
//!     [-- --tables 1,10,100 --streams 1,2,4 --batch-rows 1000]
//! ```
//!
//! zerobus-local (a child process, not counted) acks 3 s late, so that under load each stream
//! holds its whole window (60,000 rows by default) unacked: the sink keeps every unacked batch
//! until its ack, to replay it if the stream fails.

#[path = "../soak/emulator.rs"]
#[allow(dead_code)] // the kills are the soak's
mod emulator;
#[path = "../soak/rss.rs"]
#[allow(
    dead_code,
    reason = "the soak's anonymous/file split is not reported here"
)]
mod rss;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rss::rss_mib;
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw, Token};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_tokio::{
    Confirmer, IsolatedRows, Provisioning, Sink, TableDef, ZerobusConfig, ZerobusSink,
};

struct Quiet;
impl Confirmer<Raw> for Quiet {
    fn confirmed(&mut self, _: &str, _: Confirmation<Raw>) {}
    fn failed(&mut self, table: &str, b: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        eprintln!(
            "memory: {table}: {} rows handed back: {why}",
            b.batch.num_rows()
        );
    }
    fn isolated(&mut self, _: &str, _: IsolatedRows<Raw>) {}
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("payload", DataType::Utf8, false),
    ]))
}

/// Rows of about 40 bytes of Arrow data each.
fn batch(schema: &SchemaRef, start: i64, n: i64) -> RecordBatch {
    let seq = start..start + n;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(seq.clone())),
        Arc::new(StringArray::from_iter_values(
            seq.map(|i| format!("row {i:>12} of it")),
        )),
    ];
    RecordBatch::try_new(schema.clone(), columns).expect("matches")
}

fn list(v: &str) -> Vec<usize> {
    v.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
            .unwrap_or_else(|| default.to_owned())
    };
    let batch_rows: i64 = flag("--batch-rows", "1000").parse().unwrap_or(1000);
    if let Some(i) = args.iter().position(|a| a == "--one") {
        let tables: usize = args[i + 1].parse().unwrap_or(1);
        let streams: u16 = args[i + 2].parse().unwrap_or(1);
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        return match rt.block_on(one(tables, streams, batch_rows)) {
            Ok(line) => {
                println!("{line}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("memory: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let exe = std::env::current_exe().expect("own path");
    println!(
        "| tables x streams | RSS started (MiB) | idle, streams open (MiB) | per table idle (KiB) | per stream idle (KiB) | windows full (MiB) | Arrow data held (MiB) | per stream under load (MiB) | over the data held |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for tables in list(&flag("--tables", "1,10,100")) {
        for streams in list(&flag("--streams", "1,2,4")) {
            let out = std::process::Command::new(&exe)
                .args(["--one", &tables.to_string(), &streams.to_string()])
                .args(["--batch-rows", &batch_rows.to_string()])
                .output()
                .expect("runs itself");
            print!("{}", String::from_utf8_lossy(&out.stdout));
            if !out.status.success() {
                eprint!("{}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
    println!("(`uptime`: {})", uptime());
    std::process::ExitCode::SUCCESS
}

fn uptime() -> String {
    std::process::Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

async fn one(tables: usize, streams: u16, batch_rows: i64) -> Result<String, String> {
    let dir = tempdir()?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let binary: PathBuf = exe
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("zerobus-local"))
        .unwrap_or_default();
    let local = emulator::Local::start_with(&binary, &dir, &["--ack-latency-ms", "3000"])?;
    let schema = schema();
    let names: Vec<String> = (0..tables).map(|i| format!("main.mem.t{i:04}")).collect();
    let config = ZerobusConfig::new(local.endpoint());
    let window = config.core.window;
    let defs = names
        .iter()
        .map(|n| TableDef::new(n.clone(), schema.clone()).streams(streams))
        .collect();
    let mut sink = ZerobusSink::<Raw>::start_provisioned(
        config.max_open_streams(u16::try_from(tables * usize::from(streams)).unwrap_or(u16::MAX)),
        defs,
        Quiet,
        Provisioning::new(LocalDelta::new(dir.join("tables")), "memory"),
    )
    .map_err(|e| e.to_string())?;
    let started = rss_mib();
    let ids: Vec<_> = names.iter().filter_map(|n| sink.table(n)).collect();
    // Idle: one small batch per stream opens every stream; once acked, nothing is held.
    let mut seq = 0;
    for id in &ids {
        for _ in 0..streams {
            let token = Token::raw("mem", 0, seq);
            let _receipt = sink
                .send(*id, batch(&schema, seq, 10), token)
                .await
                .map_err(|e| e.to_string())?;
            seq += 10;
        }
    }
    sink.flush().await.map_err(|e| e.to_string())?;
    let idle = rss_mib();
    // Under load: send until every window is full (send waits), then read RSS while they are.
    let per_stream_rows = window
        .max_rows
        .min(window.max_batches as u64 * batch_rows as u64);
    let to_fill = (per_stream_rows as i64 / batch_rows) * i64::from(streams);
    let one_batch = batch(&schema, 0, batch_rows);
    let batch_bytes = one_batch.get_array_memory_size() as f64;
    for _round in 0..to_fill {
        for id in &ids {
            let token = Token::raw("mem", 0, seq);
            let b = batch(&schema, seq, batch_rows);
            seq += batch_rows;
            let _receipt = sink.send(*id, b, token).await.map_err(|e| e.to_string())?;
        }
    }
    let full = rss_mib();
    let held_mib = batch_bytes * (to_fill as f64) * tables as f64 / 1048576.0;
    let _ = tokio::time::timeout(Duration::from_secs(120), sink.flush()).await;
    let _ = sink.close(Duration::from_secs(30)).await;
    drop(local);
    let _ = std::fs::remove_dir_all(&dir);
    let n_streams = (tables * usize::from(streams)) as f64;
    Ok(format!(
        "| {tables} x {streams} | {started:.1} | {idle:.1} | {:.0} | {:.0} | {full:.1} | {held_mib:.1} | {:.2} | {:.2} |",
        (idle - started) * 1024.0 / tables as f64,
        (idle - started) * 1024.0 / n_streams,
        (full - idle) / n_streams,
        (full - idle) / held_mib.max(1e-9),
    ))
}

fn tempdir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("zerobus-memory-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("tables")).map_err(|e| e.to_string())?;
    Ok(dir)
}
