//! Does one stream reach the service's per-stream limit with the configuration users get?
//! The emulator enforces the documented limits (100 MB/s and 15,000 rows/s per stream,
//! `StreamLimits::documented`) at 200 ms and 500 ms to durability; the sink runs with its
//! defaults (one stream). Rows of 50 B, 1 KB and 10 KB (incompressible, so the wire carries
//! what the limit counts), batches of 100, 1,000 and 10,000 rows. The stream is opened before
//! timing; the rate is the rows made durable between the first and the last ack that moved the
//! durable count between 1 s and 6 s of sending (past the ramp, before the flush's tail; from
//! ack to ack, so that a few large acks are not counted whole or not at all). Each cell prints
//! achieved rows/s, the limit min(100 MB/s / row size, 15,000 rows/s) and their ratio:
//!
//! ```text
//! cargo bench -p zerobus-sink-tokio --bench service_limits
//! ZEROBUS_BENCH_LIMITS=quotas cargo bench -p zerobus-sink-tokio --bench service_limits
//! ```
//!
//! The second holds the emulator to the quotas page's 100,000 rows/s per stream instead.
//! `ZEROBUS_BENCH_UNACKED=50000` also makes it stop reading a stream while that many rows are
//! read and not yet acked (the buffer the service's write-ups describe; the docs give no
//! figure), so that what a window holds beyond it waits in HTTP/2 flow control.

mod common;
use common::Strict;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch};
use zerobus_sink::{Raw, Token};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig, StreamLimits};
use zerobus_sink_tokio::{ProxyConfig, Sink, TableDef, ZerobusConfig, ZerobusSink};

const TABLE: &str = "main.bench.limits";
const WARM: Duration = Duration::from_secs(1);
const MEASURED: Duration = Duration::from_secs(5);
/// How often the durable count is read while measuring.
const SAMPLE: Duration = Duration::from_millis(5);

/// `rows` rows of an id and `row_bytes - 8` incompressible bytes.
fn batch(rows: usize, row_bytes: usize) -> RecordBatch {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let width = row_bytes.saturating_sub(8).max(1);
    let values: Vec<Vec<u8>> = (0..rows)
        .map(|_| (0..width).map(|_| next() as u8).collect())
        .collect();
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
    let payload: ArrayRef = Arc::new(BinaryArray::from_iter_values(values.iter()));
    RecordBatch::try_from_iter([("id", ids), ("payload", payload)]).expect("a batch")
}

async fn cell(
    limits: StreamLimits,
    unacked: Option<u64>,
    latency: Duration,
    row_bytes: usize,
    batch_rows: usize,
) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut config = EmulatorConfig::new(dir.path().join("wal"))
        .ack_latency(latency)
        .stream_limits(limits)
        .keep_batches(false);
    if let Some(rows) = unacked {
        config = config.max_unacked_rows(rows);
    }
    let emu = Emulator::start(config).await.expect("the emulator starts");
    let one = batch(batch_rows, row_bytes);
    let config = ZerobusConfig::new(emu.url()).proxy(ProxyConfig::Direct);
    let table = TableDef::new(TABLE, one.schema()).streams(1);
    let mut sink = ZerobusSink::<Raw>::start(config, vec![table], Strict).expect("starts");
    let id = sink.table(TABLE).expect("the table");
    let mut offset = 0i64;
    let mut send = async |sink: &mut ZerobusSink<Raw>| {
        offset += batch_rows as i64;
        let token = Token::raw("bench", 0, offset - 1);
        let _receipt = sink.send(id, one.clone(), token).await.expect("admitted");
    };
    // Open the stream before timing.
    send(&mut sink).await;
    sink.flush().await.expect("warm-up durable");
    // The rate is sampled beside the sender (a send may wait for room for seconds), between
    // the first and the last time the durable count moved inside the window: rows counted at
    // two fixed instants would count whole acks, and a 10,000-row batch of 10 KB rows is a
    // second of the limit (four or five of them in five seconds: 0.8 or 1.0).
    let observer = sink.observer();
    let sampler = tokio::spawn(async move {
        tokio::time::sleep(WARM).await;
        let end = Instant::now() + MEASURED;
        let mut last = observer.report().await.map_or(0, |r| r.rows);
        let (mut first, mut latest) = (None, None);
        while Instant::now() < end {
            tokio::time::sleep(SAMPLE).await;
            let rows = observer.report().await.map_or(0, |r| r.rows);
            if rows != last {
                let moved = (Instant::now(), rows);
                first.get_or_insert(moved);
                latest = Some(moved);
                last = rows;
            }
        }
        match (first, latest) {
            (Some((t0, r0)), Some((t1, r1))) if t1 > t0 => {
                (r1 - r0) as f64 / (t1 - t0).as_secs_f64()
            }
            _ => 0.0,
        }
    });
    while !sampler.is_finished() {
        send(&mut sink).await;
    }
    let rate = sampler.await.expect("sampled");
    sink.flush().await.expect("all durable");
    sink.close(Duration::from_secs(30)).await;
    let limit = (limits.bytes_per_sec as f64 / row_bytes as f64).min(limits.rows_per_sec as f64);
    (rate, limit)
}

#[tokio::main]
async fn main() {
    let limits = match std::env::var("ZEROBUS_BENCH_LIMITS").as_deref() {
        Ok("quotas") => StreamLimits::quotas(),
        _ => StreamLimits::documented(),
    };
    let unacked = std::env::var("ZEROBUS_BENCH_UNACKED")
        .ok()
        .map(|v| v.parse::<u64>().expect("ZEROBUS_BENCH_UNACKED: rows"));
    println!(
        "one stream, default configuration, the emulator at {} MB/s and {} rows/s per stream, \
         unacked rows {}",
        limits.bytes_per_sec / 1_000_000,
        limits.rows_per_sec,
        unacked.map_or("unbounded".to_owned(), |rows| rows.to_string())
    );
    println!("latency  row bytes  batch rows  rows/s (1-6 s)  limit rows/s  ratio");
    for latency in [200, 500] {
        for row_bytes in [50, 1_000, 10_000] {
            for batch_rows in [100, 1_000, 10_000] {
                let (rate, limit) = cell(
                    limits,
                    unacked,
                    Duration::from_millis(latency),
                    row_bytes,
                    batch_rows,
                )
                .await;
                println!(
                    "{latency:>4} ms  {row_bytes:>9}  {batch_rows:>10}  {rate:>14.0}  {limit:>12.0}  {:>5.2}",
                    rate / limit
                );
            }
        }
    }
}
