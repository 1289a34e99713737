//! The README's first command: starts the Zerobus emulator in-process (a real Arrow Flight server
//! on loopback, with a write-ahead log), streams synthetic order rows through a pool of streams
//! with a progress line, and ends with a summary.
//!
//! ```text
//! cargo run --release -p zerobus-sink-tokio --example demo -- [--rows 10000000] [--batch-rows 5000]
//!     [--streams 3] [--ack-latency-ms 20]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Mutex;

use zerobus_sink::{Batch, Confirmation, FailedBatch, FailureReason, Raw, SourceTracker};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};
use zerobus_sink_tokio::{Confirmer, Sink, TableDef, ZerobusConfig, ZerobusSink};

const TABLE: &str = "main.demo.orders";

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
    ]))
}

fn orders(schema: &SchemaRef, start: i64, n: i64) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + n));
    let customers: ArrayRef = Arc::new(StringArray::from_iter_values(
        (start..start + n).map(|i| format!("customer-{:05}", i % 10_007)),
    ));
    let amounts: ArrayRef = Arc::new(Float64Array::from_iter_values(
        (start..start + n).map(|i| ((i * 7_919) % 100_000) as f64 / 100.0),
    ));
    RecordBatch::try_new(schema.clone(), vec![ids, customers, amounts]).expect("valid batch")
}

/// The "source": commits, as a Kafka consumer would, only the unbroken durable run the tracker
/// gives back; a batch the sink gives up on (after its own resubmissions) stops the demo.
#[derive(Clone, Default)]
struct Source {
    tracker: Arc<Mutex<SourceTracker>>,
    fatal: Arc<Mutex<Option<String>>>,
}

impl Confirmer<Raw> for Source {
    fn confirmed(&mut self, _table: &str, c: Confirmation<Raw>) {
        if let Err(e) = self.tracker.lock().expect("tracker").confirm(c) {
            *self.fatal.lock().expect("fatal") = Some(e.to_string());
        }
    }
    fn failed(&mut self, table: &str, b: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        *self.fatal.lock().expect("fatal") = Some(format!(
            "{table}: {} rows not durable: {why}",
            b.batch.num_rows()
        ));
    }
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{name} {v}: {e}")))
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows = arg("--rows", 10_000_000) as i64;
    let batch_rows = arg("--batch-rows", 5_000).max(1) as i64;
    let streams = arg("--streams", 3) as u16;
    let latency = Duration::from_millis(arg("--ack-latency-ms", 20));

    let wal = std::env::temp_dir().join(format!("zerobus-demo-{}", std::process::id()));
    let emulator = Emulator::start(EmulatorConfig::new(&wal).ack_latency(latency)).await?;
    println!(
        "emulator on {} (ack latency {latency:?}, WAL in {}); {rows} rows in batches of {batch_rows} over {streams} streams",
        emulator.url(),
        wal.display()
    );

    let schema = schema();
    let table = TableDef::new(TABLE, schema.clone()).streams(streams);
    let source = Source::default();
    let mut sink = ZerobusSink::<Raw>::start(
        ZerobusConfig::new(emulator.url()),
        vec![table],
        source.clone(),
    )?;
    let id = sink.table(TABLE).expect("registered");

    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut bytes = 0u64;
    let mut start = 0;
    while start < rows {
        let n = batch_rows.min(rows - start);
        let batch = orders(&schema, start, n);
        bytes += Batch::bytes(&batch);
        if let Some(why) = source.fatal.lock().expect("fatal").take() {
            return Err(why.into());
        }
        let token = source
            .tracker
            .lock()
            .expect("tracker")
            .read("orders", 0, start + n - 1, 1)?
            .pop()
            .expect("one token");
        // Fire-and-forget: the receipt is dropped; the token reaches the confirmer.
        let _receipt = sink.send(id, batch, token).await?;
        start += n;
        if last_progress.elapsed() >= Duration::from_millis(500) {
            last_progress = Instant::now();
            if let Some(r) = sink.report().await {
                println!(
                    "  {:>5.1}s  sent {start:>10} rows  durable {:>10}  pending {:>4} batches  streams {}",
                    started.elapsed().as_secs_f64(),
                    r.rows,
                    r.watermarks.pending(),
                    r.open_streams
                );
            }
        }
    }
    sink.flush().await?;
    let report = sink.close(Duration::from_secs(60)).await;
    let secs = started.elapsed().as_secs_f64();
    let stats = emulator.stats();
    println!("summary:");
    let committed = source
        .tracker
        .lock()
        .expect("tracker")
        .committed("orders", 0);
    println!(
        "  rows durable     {} of {rows} ({} handed back); source committed through offset {}",
        report.rows,
        report.failed_batches,
        committed.map_or("-".into(), |c| c.to_string())
    );
    println!(
        "  throughput       {:.1} MB/s (Arrow bytes), {:.0} rows/s, {secs:.2} s",
        bytes as f64 / 1e6 / secs,
        report.rows as f64 / secs
    );
    println!(
        "  coalesce ratio   {:.1} batches per ack (max {})",
        report.metrics.coalesce.mean().unwrap_or(0.0),
        report.metrics.coalesce.max().unwrap_or(0)
    );
    println!(
        "  pending depth    max {} batches in flight",
        report.metrics.max_pending
    );
    println!(
        "  rebuilds         {} (connections opened {}, failed {})",
        report.rebuilds(u64::from(streams)),
        report.metrics.connections_opened,
        report.metrics.connections_failed
    );
    println!(
        "  emulator         {} messages, {} rows logged, {} acks, codecs {:?}",
        stats.messages, stats.rows, stats.acks, stats.codecs
    );
    emulator.shutdown().await;
    let _ = std::fs::remove_dir_all(&wal);
    if report.rows != rows as u64 || committed != Some(rows - 1) {
        return Err(format!(
            "only {} of {rows} rows were confirmed (committed {committed:?})",
            report.rows
        )
        .into());
    }
    Ok(())
}
