//! Loopback throughput of this sink against the official client (`databricks-zerobus-ingest-sdk`
//! 2.12.0, Arrow Flight), on the same emulator, the same batches and the same number of streams
//! (1, 2, 4), at two ack latencies. Reported as ratios from one run (the machine is noisy):
//!
//! ```text
//! cargo bench -p zerobus-sink-conformance --bench loopback
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use databricks_zerobus_ingest_sdk::ZerobusSdk;
use zerobus_sink::{
    Batch, Confirmation, FailedBatch, FailureReason, PoolSizing, Raw, SinkConfig, Token,
    WindowLimits,
};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};
use zerobus_sink_tokio::{Confirmer, IsolatedRows, Sink, TableDef, ZerobusConfig, ZerobusSink};

const BATCHES: i64 = 400;
const ROWS: i64 = 5_000;

struct Count(u64);
impl Confirmer<Raw> for Count {
    fn confirmed(&mut self, _: &str, c: Confirmation<Raw>) {
        self.0 += c.rows();
    }
    fn failed(&mut self, table: &str, _: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        panic!("{table}: batch failed in the benchmark: {why}");
    }
    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        panic!("{table}: rows refused in the benchmark: {:?}", rows.faults);
    }
}

fn batches() -> (SchemaRef, Vec<RecordBatch>) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
    ]));
    let out = (0..BATCHES)
        .map(|b| {
            let r = b * ROWS..(b + 1) * ROWS;
            let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(r.clone()));
            let c: ArrayRef = Arc::new(StringArray::from_iter_values(
                r.clone().map(|i| format!("customer-{:05}", i % 10_007)),
            ));
            let a: ArrayRef = Arc::new(Float64Array::from_iter_values(
                r.map(|i| ((i * 7_919) % 100_000) as f64 / 100.0),
            ));
            RecordBatch::try_new(schema.clone(), vec![ids, c, a]).unwrap()
        })
        .collect();
    (schema, out)
}

async fn ours(
    emu: &Emulator,
    table: &str,
    streams: u16,
    window: WindowLimits,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Duration {
    let def = TableDef::new(table, schema.clone()).sizing(PoolSizing::fixed(streams));
    let config = ZerobusConfig::new(emu.url()).core(SinkConfig {
        window,
        ..SinkConfig::default()
    });
    let mut sink = ZerobusSink::<Raw>::start(config, vec![def], Count(0)).unwrap();
    let id = sink.table(table).unwrap();
    let started = Instant::now();
    for (i, b) in batches.iter().enumerate() {
        let _receipt = sink
            .send(id, b.clone(), Token::raw("bench", 0, i as i64))
            .await
            .unwrap();
    }
    sink.flush().await.unwrap();
    let took = started.elapsed();
    let report = sink.close(Duration::from_secs(60)).await;
    assert_eq!(report.rows, (BATCHES * ROWS) as u64);
    took
}

async fn official(
    emu: &Emulator,
    table: &str,
    streams: usize,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Duration {
    let sdk = Arc::new(
        ZerobusSdk::builder()
            .endpoint(emu.url())
            .no_tls()
            .build()
            .unwrap(),
    );
    let mut lanes = Vec::new();
    for _ in 0..streams {
        let s = sdk
            .stream_builder()
            .table(table)
            .no_auth()
            .arrow(schema.clone())
            .build_arrow()
            .await
            .unwrap();
        lanes.push(s);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (lane, mut stream) in lanes.into_iter().enumerate() {
        let mine: Vec<RecordBatch> = batches
            .iter()
            .skip(lane)
            .step_by(streams)
            .cloned()
            .collect();
        tasks.push(tokio::spawn(async move {
            for b in mine {
                stream.ingest_batch(b).await.unwrap();
            }
            stream.flush().await.unwrap();
            let took = Instant::now();
            stream.close().await.unwrap();
            took
        }));
    }
    let mut end = started;
    for t in tasks {
        end = end.max(t.await.unwrap());
    }
    end - started
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (schema, batches) = batches();
        let bytes: u64 = batches.iter().map(Batch::bytes).sum();
        let rows = (BATCHES * ROWS) as f64;
        println!(
            "{BATCHES} batches x {ROWS} rows ({:.1} MB of Arrow data) per run; zstd both sides",
            bytes as f64 / 1e6
        );
        println!(
            "sink = default window (50,000 rows per stream); sink* = the official client's bound \
             (1,000 batches in flight per stream, no row cap); ratio = sdk time / sink time"
        );
        println!(
            "{:<9} {:>7} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12} {:>8} {:>8}",
            "ack lat.",
            "streams",
            "sink MB/s",
            "sink* MB/s",
            "sdk MB/s",
            "sink rows/s",
            "sink* rows/s",
            "sdk rows/s",
            "sink",
            "sink*"
        );
        let sdk_window = WindowLimits {
            max_batches: 1_000,
            max_rows: u64::MAX,
            ..WindowLimits::default()
        };
        for latency in [0u64, 50] {
            for streams in [1u16, 2, 4] {
                let dir = tempfile::tempdir().unwrap();
                let emu = Emulator::start(
                    EmulatorConfig::new(dir.path()).ack_latency(Duration::from_millis(latency)),
                )
                .await
                .unwrap();
                let default = WindowLimits::default();
                let a = ours(&emu, "main.bench.sink", streams, default, &schema, &batches).await;
                let w = ours(&emu, "main.bench.wide", streams, sdk_window, &schema, &batches).await;
                let b = official(
                    &emu,
                    "main.bench.sdk",
                    usize::from(streams),
                    &schema,
                    &batches,
                )
                .await;
                let mbs = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
                let rps = |d: Duration| rows / d.as_secs_f64();
                println!(
                    "{:<9} {streams:>7} {:>10.1} {:>10.1} {:>10.1} {:>12.0} {:>12.0} {:>12.0} {:>7.2}x {:>7.2}x",
                    format!("{latency} ms"),
                    mbs(a),
                    mbs(w),
                    mbs(b),
                    rps(a),
                    rps(w),
                    rps(b),
                    b.as_secs_f64() / a.as_secs_f64(),
                    b.as_secs_f64() / w.as_secs_f64()
                );
                emu.shutdown().await;
            }
        }
    });
}
