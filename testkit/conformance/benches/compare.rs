//! This sink against the official client (`databricks-zerobus-ingest-sdk` 2.12.0, Arrow Flight,
//! its defaults) and a bare Arrow Flight `DoPut` client (the floor: encode, send, read acks,
//! nothing else), without a window and with ours' (`paced`, below), each with its default
//! configuration, on the same emulator.
//!
//! For every cell of streams x rows per batch x time to durability, with the emulator holding
//! each stream to the quotas page's limits (100,000 rows/s, 100 MB/s), and at 0 ms also without
//! limits (where CPU is what differs):
//! - rows/s, min / median / max over `ZEROBUS_BENCH_REPS` repetitions (default 3), the clients'
//!   order rotated each repetition;
//! - CPU per MB of Arrow data and context switches per batch, medians, counted on the client's
//!   threads only (the emulator runs on a runtime of its own, its threads named apart;
//!   `/proc/self/task/*/schedstat` and `status`); and the emulator's CPU per MB while serving
//!   each client (its messages' shape is the client's choice, and on 2 cores the server's
//!   work competes with the client's);
//! - the kernel's share of the client's threads' time (system over user plus system ticks of
//!   `stat`, summed over the client's runs; `-` under 100 ticks, as in five 2 s runs under the
//!   limits on one to four streams): what of a CPU figure is syscalls and wake-ups rather
//!   than the client's own code, whose instructions `scripts/client-instructions` counts;
//! - ours' CPU per MB over each other client's, repetition by repetition, min-max: the runs of
//!   one repetition are one rotation of the clients, seconds apart, so what drifts between
//!   repetitions is mostly in both (one build's ratio of medians moved from 1.56 to 1.29
//!   between two rounds), and the range says how far one run's ratio can be trusted;
//! - every client's streams are open (READY) and then idle for the emulator's burst (100 ms,
//!   so that each starts with the same credit against the limits) before its timer starts, and
//!   a run ends when every row is durable; so under the limits a run of 2 s of the limit's
//!   rows takes about 1.9 s plus the time to durability;
//! - each run sends `ZEROBUS_BENCH_SECONDS` (default 2) of the limit's worth of rows, or, without
//!   limits, `ZEROBUS_BENCH_ROWS` (default 20,000,000: 1.3-7 s here; 2,000,000 took 0.13 s
//!   at 10,000-row batches, too short to tell a window from its ramp); the emulator keeps no
//!   batches. Each cell's rows a run are said on stderr (`cell NAME: N rows a run`).
//! - then many tables: `ZEROBUS_BENCH_TABLES` (default 50) tables of one stream each, 1,000-row
//!   batches in turn, through one sink here and one client stream object per table there. Ours
//!   is always fed by one task (a sink has one handle). The others are fed first as at their
//!   best, a task per stream with its share of the batches (the source split by table before
//!   it reaches them), then (cells named `.../one`, "one source") by one task handing every
//!   client the same batches in the same order, as one source of rows for many tables would.
//!   `ZEROBUS_BENCH_RUN` (default 1) is how many batches in a row that source gives one table.
//!   `ZEROBUS_BENCH_SOURCE=one` feeds the single-table cells by one source too, named
//!   `.../one`: the other clients' streams in turn (`ZEROBUS_BENCH_RUN` batches to each), ours
//!   through its one handle as always.
//! - then one stream of wide rows (cells named `.../wide`): each row carries
//!   `ZEROBUS_BENCH_PAYLOAD` (default 1,000) bytes more of log-like text, in batches of 1,000
//!   and 10,000 rows (1 and 10 MB), without limits and under them: one stream whose work is
//!   compression. Without limits each run sends 2 GB (`ZEROBUS_BENCH_ROWS` x 100 B).
//!
//! ```text
//! cargo bench -p zerobus-sink-conformance --bench compare
//! ZEROBUS_BENCH_QUICK=1 cargo bench -p zerobus-sink-conformance --bench compare   # 1 and 4 streams, 100 and 10,000 rows, 0 and 200 ms
//! ```
//!
//! To look at one cell or one client (under `perf`, say): `ZEROBUS_BENCH_CELLS` keeps the cells
//! named as `limits/durability ms/tables x streams/rows`, comma-separated (e.g.
//! `quotas/0/1x1/1000,none/0/50x1/1000`), and `ZEROBUS_BENCH_CLIENTS` the clients (`ours`,
//! `official`, `bare`, `paced`, comma-separated); a client left out shows `-`.
//!
//! The bare client has no window: it encodes and queues a whole run ahead of its acks, so under
//! limits it encodes back to back while the others encode as acks free room. The fourth client,
//! `paced`, is the same bare client held to ours' default rows window per stream (rows sent and
//! not yet acked; it waits for acks before encoding more): the floor for a client that encodes
//! as acks free room. `ZEROBUS_BENCH_BARE_WINDOW` gives the bare client a window too.
//! `ZEROBUS_BENCH_COALESCE` sets ours' `coalesce_bytes` (0: every batch its own message, as
//! the other clients send them; default the sink's, `COALESCE_BYTES`).
//! `ZEROBUS_BENCH_REALISTIC=1` gives the emulator the service's HTTP/2 windows (32 MiB a
//! connection, 2 MiB a stream) and its buffer of 50,000 unacked rows per stream, as
//! `zerobus-local --realistic` (whose publication lag does not matter here), on the one-table
//! cells of 1 and 4 streams at every time to durability, with and without limits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, SchemaAsIpc};
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_ipc::{CompressionType, MetadataVersion};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use databricks_zerobus_ingest_sdk::ZerobusSdk;
use tokio::runtime::Runtime;
use zerobus_sink::{
    Batch, Confirmation, FailedBatch, FailureReason, PoolSizing, Raw, Token, WindowLimits,
};
use zerobus_sink_testkit::emulator::{
    Emulator, EmulatorConfig, Http2Windows, SERVICE_UNACKED_ROWS, StreamLimits,
};
use zerobus_sink_tokio::health::{Phase, TableHealth};
use zerobus_sink_tokio::{
    COALESCE_BYTES, Confirmer, IsolatedRows, Sink, TableDef, ZerobusConfig, ZerobusSink,
};

const EMULATOR: &str = "emulator";
const CLIENT: &str = "client";

struct Count;
impl Confirmer<Raw> for Count {
    fn confirmed(&mut self, _: &str, _: Confirmation<Raw>) {}
    fn failed(&mut self, table: &str, _: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        panic!("{table}: batch failed in the benchmark: {why}");
    }
    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        panic!("{table}: rows refused in the benchmark: {:?}", rows.faults);
    }
}

/// The rows' schema: three narrow columns, and with `payload` a text column of that many bytes
/// a row.
fn schema(payload: usize) -> SchemaRef {
    let mut fields = vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
    ];
    if payload > 0 {
        fields.push(Field::new("payload", DataType::Utf8, false));
    }
    Arc::new(Schema::new(fields))
}

/// 16 distinct batches of `rows` rows (about 30 B a row, and `payload` bytes more in a column
/// of their own), sent in turn.
fn batches(rows: i64, payload: usize) -> Vec<RecordBatch> {
    let schema = schema(payload);
    (0..16)
        .map(|b| {
            let r = b * rows..(b + 1) * rows;
            let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(r.clone()));
            let c: ArrayRef = Arc::new(StringArray::from_iter_values(
                r.clone().map(|i| format!("customer-{:05}", i % 10_007)),
            ));
            let a: ArrayRef = Arc::new(Float64Array::from_iter_values(
                r.clone().map(|i| ((i * 7_919) % 100_000) as f64 / 100.0),
            ));
            let mut columns = vec![ids, c, a];
            if payload > 0 {
                columns.push(Arc::new(StringArray::from_iter_values(
                    r.map(|i| log_line(i.unsigned_abs(), payload)),
                )));
            }
            RecordBatch::try_new(schema.clone(), columns).expect("batch")
        })
        .collect()
}

/// `len` bytes of text like a log line's (words of a small vocabulary and numbers, picked by a
/// hash of the row and the position): what zstd compresses by a few times, slowly enough that
/// one stream's large batches keep a core busy, unlike the narrow columns' repeats.
fn log_line(row: u64, len: usize) -> String {
    const WORDS: [&str; 16] = [
        "GET",
        "POST",
        "/api/v1/orders",
        "/api/v1/items",
        "status=200",
        "status=404",
        "user",
        "session",
        "latency_ms",
        "cache=miss",
        "cache=hit",
        "region=eu",
        "region=us",
        "retry",
        "ok",
        "error",
    ];
    let mut line = String::with_capacity(len + 24);
    let mut state = row.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while line.len() < len {
        // xorshift64: deterministic, no dependency.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        if state.is_multiple_of(3) {
            line.push_str(&(state % 100_000).to_string());
        } else {
            line.push_str(WORDS[(state >> 8) as usize % WORDS.len()]);
        }
        line.push(' ');
    }
    line.truncate(len);
    line
}

/// What the threads whose names start with `prefix` have used so far: CPU time (the
/// scheduler's nanoseconds, `/proc/self/task/*/schedstat`, not the 10 ms ticks of `stat`),
/// context switches, voluntary and not (`status`), and the ticks of `stat` split into user and
/// system time (only their ratio is used: the kernel's share of the threads' time).
fn usage_of(prefix: &str) -> Usage {
    let mut usage = Usage::default();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return usage;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let schedstat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
        let ns = schedstat
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
        usage.cpu += Duration::from_nanos(ns);
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // After the command's closing parenthesis: state (field 3), ..., utime (14), stime (15).
        let mut ticks = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .skip(11)
            .map(|f| f.parse::<u64>().unwrap_or(0));
        usage.user_ticks += ticks.next().unwrap_or(0);
        usage.system_ticks += ticks.next().unwrap_or(0);
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        usage.switches += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    usage
}

/// CPU time and context switches of a set of threads (see [`usage_of`]).
#[derive(Clone, Copy, Default)]
struct Usage {
    cpu: Duration,
    switches: u64,
    /// Clock ticks of user time (`stat`'s utime).
    user_ticks: u64,
    /// Clock ticks of system time (`stat`'s stime).
    system_ticks: u64,
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, before: Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(before.cpu),
            switches: self.switches.saturating_sub(before.switches),
            user_ticks: self.user_ticks.saturating_sub(before.user_ticks),
            system_ticks: self.system_ticks.saturating_sub(before.system_ticks),
        }
    }
}

/// One run's outcome.
#[derive(Clone, Copy)]
struct Run {
    took: Duration,
    /// The client's threads' CPU time and context switches during the run.
    used: Usage,
    /// The emulator's threads' (the server's work for this client's messages: on 2 cores it
    /// competes with the client).
    served: Usage,
}

/// What both sides have used so far: (client, emulator).
fn usage() -> (Usage, Usage) {
    (usage_of(CLIENT), usage_of(EMULATOR))
}

/// Called by every client once its streams are READY, just before its timer starts: the
/// emulator gives a stream that has sat idle up to `burst` of credit against its limits, and a
/// client's streams have sat idle for as long as its setup took since they became READY (ours
/// waits for a warm-up row's ack, the others start at their last READY), so each waits out the
/// whole burst and every client starts with the same credit.
async fn settle() {
    tokio::time::sleep(StreamLimits::quotas().burst).await;
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Client {
    Ours,
    Official,
    Bare,
    /// The bare client held to ours' default rows window ([`paced_window`]).
    Paced,
}

impl Client {
    const ALL: [Client; 4] = [Client::Ours, Client::Official, Client::Bare, Client::Paced];

    fn name(self) -> &'static str {
        match self {
            Client::Ours => "ours",
            Client::Official => "official",
            Client::Bare => "bare",
            Client::Paced => "paced",
        }
    }
}

/// The comma-separated values of environment variable `name`, if it is set.
fn listed(name: &str) -> Option<Vec<String>> {
    let value = std::env::var(name).ok()?;
    Some(value.split(',').map(|v| v.trim().to_owned()).collect())
}

/// Who hands the clients their batches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Each of the other clients' streams has a task with its share of the batches (their best
    /// case: the source split by table before it reaches them); ours has one handle, one task.
    Split,
    /// One task hands every client's batches over in the same order, as one source (a topic
    /// with rows for many tables) would: batch `i` to lane `(i / ZEROBUS_BENCH_RUN) % lanes`
    /// ([`lane_of`]; a lane is a table's stream, ours' lanes its tables).
    One,
}

struct Cell {
    limits: bool,
    latency_ms: u64,
    /// Streams per table.
    streams: u16,
    rows: i64,
    tables: usize,
    source: Source,
    /// Bytes of log-like text a row carries besides the narrow columns (0: none): the "wide"
    /// cells, one stream whose large batches make compression the client's work.
    payload: usize,
}

impl Cell {
    /// The cell's name for `ZEROBUS_BENCH_CELLS`: `limits/durability ms/tables x streams/rows`,
    /// and `/one` when one task feeds every client.
    fn name(&self) -> String {
        let limits = if self.limits { "quotas" } else { "none" };
        let one = if self.source == Source::One {
            "/one"
        } else {
            ""
        };
        let wide = if self.payload > 0 { "/wide" } else { "" };
        format!(
            "{limits}/{}/{}x{}/{}{one}{wide}",
            self.latency_ms, self.tables, self.streams, self.rows
        )
    }
}

/// Batches to send in a run of `cell`.
fn count(cell: &Cell) -> usize {
    let rows = if cell.limits {
        let streams = u64::from(cell.streams) * cell.tables as u64;
        StreamLimits::quotas().rows_per_sec * streams * env("ZEROBUS_BENCH_SECONDS", 2)
    } else {
        // Wide rows: the narrow cells' rows' worth of 100 B rows (2 GB by default).
        let rows = env("ZEROBUS_BENCH_ROWS", 20_000_000);
        if cell.payload > 0 {
            rows * 100 / (30 + cell.payload as u64)
        } else {
            rows
        }
    };
    usize::try_from(rows / cell.rows.unsigned_abs())
        .unwrap_or(1)
        .max(1)
}

/// How many batches in a row one source hands to the same table (`ZEROBUS_BENCH_RUN`, default
/// 1: each batch to the next table).
fn run_length() -> usize {
    env("ZEROBUS_BENCH_RUN", 1).max(1)
}

/// Ours' `coalesce_bytes` (`ZEROBUS_BENCH_COALESCE`, default the sink's).
fn coalesce() -> u64 {
    env("ZEROBUS_BENCH_COALESCE", COALESCE_BYTES)
}

/// Environment variable `name` parsed, or `default` when it is unset or does not parse.
fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The lane (of `lanes`) that one source hands batch `i` to.
fn lane_of(i: usize, run: usize, lanes: usize) -> usize {
    (i / run) % lanes
}

/// Each lane's batches of a run of `n`, as indices into a pool of `pool` batches: batch `i`
/// to lane `i % lanes` ([`Source::Split`]), or as one source hands them ([`lane_of`]).
fn shares(source: Source, n: usize, pool: usize, lanes: usize) -> Vec<Vec<usize>> {
    let run = match source {
        Source::Split => 1,
        Source::One => run_length(),
    };
    let mut shares = vec![Vec::new(); lanes];
    for i in 0..n {
        shares[lane_of(i, run, lanes)].push(i % pool);
    }
    shares
}

/// Table names: one table for the cells, `tables` of them for the many-tables runs.
fn names(prefix: &str, tables: usize) -> Vec<String> {
    (0..tables)
        .map(|t| format!("main.bench.{prefix}_{t}"))
        .collect()
}

/// One sink with a pool of `streams` per table; batch `i` goes to table `i % tables`.
async fn ours(url: String, streams: u16, tables: usize, pool: &[RecordBatch], n: usize) -> Run {
    let schema = pool[0].schema();
    let names = names("ours", tables);
    let defs = names
        .iter()
        .map(|t| TableDef::new(t.as_str(), schema.clone()).sizing(PoolSizing::fixed(streams)))
        .collect();
    let config = ZerobusConfig::new(url).coalesce_bytes(coalesce());
    let mut sink = ZerobusSink::<Raw>::start(config, defs, Count).expect("start");
    let ids: Vec<_> = names
        .iter()
        .map(|t| sink.table(t).expect("table"))
        .collect();
    // Open every stream before timing: a first batch opens a table's pool; wait until all
    // are live.
    for &id in &ids {
        let first = pool[0].slice(0, 1);
        let receipt = sink
            .send(id, first, Token::raw("bench", 0, -1))
            .await
            .expect("send");
        drop(receipt);
    }
    sink.flush().await.expect("flush");
    loop {
        let health = sink.health().await.expect("health");
        let live = |t: &TableHealth| t.streams.iter().all(|s| s.phase == Phase::Live);
        if health.tables.iter().all(live) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let run = run_length();
    settle().await;
    let (used, served) = usage();
    let started = Instant::now();
    for i in 0..n {
        let b = pool[i % pool.len()].clone();
        let _receipt = sink
            .send(
                ids[lane_of(i, run, tables)],
                b,
                Token::raw("bench", 0, i as i64),
            )
            .await
            .expect("send");
    }
    sink.flush().await.expect("flush");
    let run = Run {
        took: started.elapsed(),
        used: usage_of(CLIENT) - used,
        served: usage_of(EMULATOR) - served,
    };
    sink.close(Duration::from_secs(60)).await;
    run
}

/// `streams` client streams per table (the client's stream object is one table's): batch `i`
/// goes to lane `i % lanes`, each lane fed by a task of its own ([`Source::Split`]), or every
/// lane by one task in the source's order ([`lane_of`], [`Source::One`]).
async fn official(
    url: String,
    (streams, tables, source): (u16, usize, Source),
    pool: &[RecordBatch],
    n: usize,
) -> Run {
    let schema = pool[0].schema();
    let sdk = Arc::new(
        ZerobusSdk::builder()
            .endpoint(url)
            .no_tls()
            .build()
            .expect("sdk"),
    );
    let mut lanes = Vec::new();
    for table in names("official", tables) {
        for _ in 0..streams {
            let stream = sdk
                .stream_builder()
                .table(&table)
                .no_auth()
                .arrow(schema.clone())
                .build_arrow()
                .await
                .expect("stream");
            lanes.push(stream);
        }
    }
    settle().await;
    let (used, served) = usage();
    let started = Instant::now();
    let lanes = match source {
        Source::One => {
            let run = run_length();
            for i in 0..n {
                let b = pool[i % pool.len()].clone();
                let lane = &lanes[lane_of(i, run, lanes.len())];
                lane.ingest_batch(b).await.expect("ingest");
            }
            for lane in &lanes {
                lane.flush().await.expect("flush");
            }
            lanes
        }
        Source::Split => {
            let mut tasks = Vec::new();
            let shares = shares(Source::Split, n, pool.len(), lanes.len());
            for (share, stream) in shares.into_iter().zip(lanes) {
                let mine: Vec<RecordBatch> = share.into_iter().map(|p| pool[p].clone()).collect();
                tasks.push(tokio::spawn(async move {
                    for b in mine {
                        stream.ingest_batch(b).await.expect("ingest");
                    }
                    stream.flush().await.expect("flush");
                    stream
                }));
            }
            let mut streams_back = Vec::new();
            for t in tasks {
                streams_back.push(t.await.expect("task"));
            }
            streams_back
        }
    };
    let run = Run {
        took: started.elapsed(),
        used: usage_of(CLIENT) - used,
        served: usage_of(EMULATOR) - served,
    };
    for mut lane in lanes {
        lane.close().await.expect("close");
    }
    run
}

fn ipc_options() -> IpcWriteOptions {
    IpcWriteOptions::try_new(64, false, MetadataVersion::V5)
        .and_then(|o| o.try_with_compression(Some(CompressionType::ZSTD)))
        .expect("options")
}

/// The cumulative rows an ack's metadata carries, and whether it is READY.
fn ack_rows(metadata: &[u8]) -> (i64, u64) {
    let text = String::from_utf8_lossy(metadata);
    let number = |key: &str| -> i64 {
        text.split_once(key)
            .and_then(|(_, rest)| {
                let rest = rest.trim_start_matches(['"', ':', ' ']);
                let end = rest
                    .find(|c: char| c != '-' && !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                rest[..end].parse().ok()
            })
            .unwrap_or(0)
    };
    (
        number("ack_up_to_offset"),
        number("ack_up_to_records").unsigned_abs(),
    )
}

/// The bare client's window: rows sent and not yet acked per stream, at most
/// (`ZEROBUS_BENCH_BARE_WINDOW`; `None`, the default: no window).
fn bare_window() -> Option<u64> {
    std::env::var("ZEROBUS_BENCH_BARE_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// The paced bare client's window: ours' default rows window per stream, so that it encodes
/// as acks free room, as ours does.
fn paced_window() -> u64 {
    WindowLimits::default().max_rows
}

/// A bare lane's batches: its share, or what the one source hands it.
enum Feed {
    Share(std::vec::IntoIter<RecordBatch>),
    Handed(tokio::sync::mpsc::Receiver<RecordBatch>),
}

impl Feed {
    async fn next(&mut self) -> Option<RecordBatch> {
        match self {
            Feed::Share(batches) => batches.next(),
            Feed::Handed(rx) => rx.recv().await,
        }
    }
}

/// `streams` DoPut calls per table, each in its own task, with its share of the batches
/// ([`Source::Split`]) or handed them by one task in the source's order ([`Source::One`]).
async fn bare(
    url: String,
    (streams, tables, source): (u16, usize, Source),
    pool: &[RecordBatch],
    n: usize,
    window: Option<u64>,
) -> Run {
    let schema = pool[0].schema();
    let mut lanes = Vec::new();
    for (table, _) in names("bare", tables)
        .into_iter()
        .flat_map(|t| (0..streams).map(move |s| (t.clone(), s)))
    {
        let channel = tonic::transport::Endpoint::from_shared(url.clone())
            .expect("url")
            .connect()
            .await
            .expect("connect");
        let mut client = FlightServiceClient::new(channel);
        let (tx, rx) = tokio::sync::mpsc::channel::<FlightData>(1_000);
        let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        request.metadata_mut().insert(
            "x-databricks-zerobus-table-name",
            table.parse().expect("header"),
        );
        tx.send(SchemaAsIpc::new(&schema, &ipc_options()).into())
            .await
            .expect("schema");
        let mut acks = client.do_put(request).await.expect("do_put").into_inner();
        let ready = acks.message().await.expect("ready").expect("ready");
        assert_eq!(ack_rows(&ready.app_metadata).0, -1, "READY first");
        lanes.push((tx, acks));
    }
    settle().await;
    let (used, served) = usage();
    let started = Instant::now();
    let mut tasks = Vec::new();
    let lanes_n = lanes.len();
    // The senders of the lanes the one source feeds.
    let mut handers = Vec::new();
    for (share, (tx, mut acks)) in shares(source, n, pool.len(), lanes_n)
        .into_iter()
        .zip(lanes)
    {
        let rows: u64 = share.iter().map(|&p| pool[p].num_rows() as u64).sum();
        let mut feed = match source {
            Source::Split => Feed::Share(
                share
                    .into_iter()
                    .map(|p| pool[p].clone())
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            Source::One => {
                let (hand, handed) = tokio::sync::mpsc::channel(1_000);
                handers.push(hand);
                Feed::Handed(handed)
            }
        };
        let (acked_tx, mut acked) = tokio::sync::watch::channel(0u64);
        let reader = tokio::spawn(async move {
            while let Some(ack) = acks.message().await.expect("ack") {
                let durable = ack_rows(&ack.app_metadata).1;
                if window.is_some() {
                    acked_tx.send_replace(durable);
                }
                if durable >= rows {
                    return;
                }
            }
            panic!("the call ended before every row was acked");
        });
        tasks.push(tokio::spawn(async move {
            let options = ipc_options();
            let generator = IpcDataGenerator::default();
            let mut context = IpcWriteContext::default();
            let mut sent = 0u64;
            let mut offset = 0u64;
            while let Some(b) = feed.next().await {
                if let Some(window) = window {
                    // Room for this batch, or nothing in flight (a batch above the window).
                    let in_flight = |acked: &u64| sent.saturating_sub(*acked);
                    acked
                        .wait_for(|a| {
                            in_flight(a) + b.num_rows() as u64 <= window || in_flight(a) == 0
                        })
                        .await
                        .expect("acks");
                }
                sent += b.num_rows() as u64;
                let (_, encoded) = generator
                    .encode(
                        &b,
                        &mut DictionaryTracker::new(false),
                        &options,
                        &mut context,
                    )
                    .expect("encode");
                let message = FlightData::from(encoded)
                    .with_app_metadata(format!("{{\"offset_id\":{offset}}}").into_bytes());
                tx.send(message).await.expect("send");
                offset += 1;
            }
            reader.await.expect("acks");
            drop(tx);
        }));
    }
    if source == Source::One {
        let run = run_length();
        for i in 0..n {
            let hand = &handers[lane_of(i, run, lanes_n)];
            hand.send(pool[i % pool.len()].clone()).await.expect("hand");
        }
    }
    drop(handers);
    for t in tasks {
        t.await.expect("lane");
    }
    Run {
        took: started.elapsed(),
        used: usage_of(CLIENT) - used,
        served: usage_of(EMULATOR) - served,
    }
}

fn run(client: Client, client_rt: &Runtime, url: &str, cell: &Cell, pool: &[RecordBatch]) -> Run {
    let n = count(cell);
    let (url, pool, streams, tables) = (url.to_string(), pool.to_vec(), cell.streams, cell.tables);
    let shape = (streams, tables, cell.source);
    client_rt
        .block_on(async move {
            tokio::spawn(async move {
                match client {
                    Client::Ours => ours(url, streams, tables, &pool, n).await,
                    Client::Official => official(url, shape, &pool, n).await,
                    Client::Bare => bare(url, shape, &pool, n, bare_window()).await,
                    Client::Paced => bare(url, shape, &pool, n, Some(paced_window())).await,
                }
            })
            .await
        })
        .expect("client task")
}

/// min / median / max; `None` for a client that did not run.
fn spread(mut values: Vec<f64>) -> Option<(f64, f64, f64)> {
    values.sort_by(f64::total_cmp);
    Some((*values.first()?, values[values.len() / 2], *values.last()?))
}

/// A figure with `digits` decimals, or `-` for a client that did not run.
fn shown(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
}

/// Ours' `of` over each other client's, repetition by repetition, as `min-max` for
/// `official / bare / paced`.
fn paired(runs: &[Vec<Run>], of: impl Fn(&Run) -> f64) -> String {
    runs[1..]
        .iter()
        .map(|other| {
            let ratios = runs[0]
                .iter()
                .zip(other)
                .map(|(a, b)| of(a) / of(b))
                .collect();
            spread(ratios).map_or_else(|| "-".to_owned(), |(lo, _, hi)| format!("{lo:.2}-{hi:.2}"))
        })
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Each client's median of `of` over its runs, `ours / official / bare / paced`.
fn medians(runs: &[Vec<Run>], of: impl Fn(&Run) -> f64, digits: usize) -> String {
    runs.iter()
        .map(|r| shown(spread(r.iter().map(&of).collect()).map(|s| s.1), digits))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The fewest ticks (10 ms each at the usual 100 Hz) a system-time share is shown for: below
/// it one tick more or less moves the share by over 1%.
const FEWEST_TICKS: u64 = 100;

/// Each client's system time as a share of its ticks over all its runs, in percent, or `-`
/// when they add up to fewer than [`FEWEST_TICKS`] (five 2 s runs under the limits on one to
/// four streams did: their share would be noise), `ours / official / bare / paced`.
fn system_shares(runs: &[Vec<Run>]) -> String {
    runs.iter()
        .map(|r| {
            let system: u64 = r.iter().map(|r| r.used.system_ticks).sum();
            let all = system + r.iter().map(|r| r.used.user_ticks).sum::<u64>();
            let share = (all >= FEWEST_TICKS).then(|| system as f64 * 100.0 / all as f64);
            shown(share, 0)
        })
        .collect::<Vec<_>>()
        .join(" / ")
}

fn main() {
    let quick = std::env::var("ZEROBUS_BENCH_QUICK").is_ok();
    let realistic = std::env::var("ZEROBUS_BENCH_REALISTIC").is_ok();
    let reps: usize = env("ZEROBUS_BENCH_REPS", 3);
    let emulator_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(EMULATOR)
        .enable_all()
        .build()
        .expect("runtime");
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(CLIENT)
        .enable_all()
        .build()
        .expect("runtime");
    let (streams, sizes, latencies): (&[u16], &[i64], &[u64]) = if quick {
        (&[1, 4], &[100, 10_000], &[0, 200])
    } else if realistic {
        (&[1, 4], &[100, 1_000, 10_000], &[0, 50, 200])
    } else {
        (&[1, 2, 4, 8], &[100, 1_000, 10_000], &[0, 50, 200])
    };
    // The single-table cells' source: split unless `ZEROBUS_BENCH_SOURCE=one`.
    let source = match std::env::var("ZEROBUS_BENCH_SOURCE").as_deref() {
        Ok("one") => Source::One,
        Ok("split") | Err(_) => Source::Split,
        Ok(other) => panic!("ZEROBUS_BENCH_SOURCE is split or one, not {other:?}"),
    };
    let mut cells = Vec::new();
    for &latency_ms in latencies {
        for limits in [true, false] {
            // Without limits only at 0 ms, except against the service's buffer: there the
            // time to durability is what the buffer is measured against.
            if !limits && latency_ms > 0 && !realistic {
                continue;
            }
            for &s in streams {
                for &rows in sizes {
                    cells.push(Cell {
                        limits,
                        latency_ms,
                        streams: s,
                        rows,
                        tables: 1,
                        source,
                        payload: 0,
                    });
                }
            }
        }
    }
    // Many tables through one sink: `ZEROBUS_BENCH_TABLES` (default 50) tables of one stream
    // each, 1,000-row batches spread over them in turn, the other clients' streams each fed by
    // a task of its own, then every client fed by one task.
    let tables = env("ZEROBUS_BENCH_TABLES", 50);
    let sources: &[Source] = if realistic {
        &[]
    } else {
        &[Source::Split, Source::One]
    };
    for &source in sources {
        for (limits, latency_ms) in [(false, 0), (true, 200)] {
            cells.push(Cell {
                limits,
                latency_ms,
                streams: 1,
                rows: 1_000,
                tables,
                source,
                payload: 0,
            });
        }
    }
    // One stream of wide rows (`ZEROBUS_BENCH_PAYLOAD`, default 1,000 bytes of log-like text a
    // row): 1 MB and 10 MB batches, compression the client's work.
    let payload = env("ZEROBUS_BENCH_PAYLOAD", 1_000);
    let wide: &[(bool, i64)] = if realistic {
        &[]
    } else {
        &[(false, 1_000), (false, 10_000), (true, 1_000)]
    };
    for &(limits, rows) in wide {
        cells.push(Cell {
            limits,
            latency_ms: 0,
            streams: 1,
            rows,
            tables: 1,
            source,
            payload,
        });
    }
    if let Some(keep) = listed("ZEROBUS_BENCH_CELLS") {
        cells.retain(|c| keep.contains(&c.name()));
        assert!(
            !cells.is_empty(),
            "ZEROBUS_BENCH_CELLS names no cell: {keep:?}"
        );
    }
    let clients: Vec<bool> = match listed("ZEROBUS_BENCH_CLIENTS") {
        Some(keep) => Client::ALL
            .iter()
            .map(|c| keep.iter().any(|k| k == c.name()))
            .collect(),
        None => vec![true; Client::ALL.len()],
    };
    assert!(
        clients.contains(&true),
        "ZEROBUS_BENCH_CLIENTS names no client (ours, official, bare, paced)"
    );
    println!(
        "each client at its defaults; ours: window {:?}, small batches grouped up to {} B; bare: window {}; paced: the bare client with a window of {} rows; {reps} repetitions, order rotated; rows/s min / median / max; CPU ms per MB of Arrow data (client threads, then the emulator's), context switches per batch (client threads), medians; the system time's share of the client threads' ticks over all runs; ours' CPU per MB over the others' per repetition, min-max",
        WindowLimits::default(),
        coalesce(),
        bare_window().map_or("none".into(), |w| format!("{w} rows")),
        paced_window(),
    );
    println!(
        "| limits | durability | tables x streams | rows/batch | ours rows/s | official rows/s | bare rows/s | paced rows/s | ours/official | ours/bare | ours/paced | CPU ms/MB ours / official / bare / paced | emulator CPU ms/MB serving ours / official / bare / paced | context switches per batch ours / official / bare / paced | system time % ours / official / bare / paced | ours' CPU per MB over official / bare / paced, per repetition |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for cell in &cells {
        let pool = batches(cell.rows, cell.payload);
        let batches = count(cell) as f64;
        let rows_total = batches * cell.rows as f64;
        // Said on stderr, apart from the table: `scripts/client-instructions` divides by it.
        eprintln!("cell {}: {rows_total:.0} rows a run", cell.name());
        let mb =
            batches * pool.iter().map(Batch::bytes).sum::<u64>() as f64 / pool.len() as f64 / 1e6;
        let dir = tempfile::tempdir().expect("dir");
        let mut config = EmulatorConfig::new(dir.path())
            .ack_latency(Duration::from_millis(cell.latency_ms))
            .keep_batches(false);
        if cell.limits {
            config = config.stream_limits(StreamLimits::quotas());
        }
        if realistic {
            // The service's windows and per-stream buffer (the publication lag is moot: no
            // tables here).
            config = config
                .http2_windows(Http2Windows::SERVICE)
                .max_unacked_rows(SERVICE_UNACKED_ROWS);
        }
        let emu = emulator_rt
            .block_on(Emulator::start(config))
            .expect("emulator");
        let url = emu.url();
        let all = Client::ALL.len();
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); all];
        for rep in 0..reps {
            for k in 0..all {
                let index = (rep + k) % all;
                let client = Client::ALL[index];
                if !clients[index] {
                    continue;
                }
                runs[index].push(run(client, &client_rt, &url, cell, &pool));
            }
        }
        emulator_rt.block_on(emu.shutdown());
        let rates: Vec<_> = runs
            .iter()
            .map(|r| {
                spread(
                    r.iter()
                        .map(|r| rows_total / r.took.as_secs_f64())
                        .collect(),
                )
            })
            .collect();
        let fmt = |spread: Option<(f64, f64, f64)>| match spread {
            Some((min, med, max)) => format!("{min:.0} / {med:.0} / {max:.0}"),
            None => "-".to_owned(),
        };
        let ratio = |a: usize, b: usize| Some(rates[a]?.1 / rates[b]?.1);
        println!(
            "| {} | {} ms | {} x {}{} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            if cell.limits { "quotas" } else { "none" },
            cell.latency_ms,
            cell.tables,
            cell.streams,
            if cell.source == Source::One {
                ", one source"
            } else {
                ""
            },
            cell.rows,
            if cell.payload > 0 {
                format!(" of {} B more", cell.payload)
            } else {
                String::new()
            },
            fmt(rates[0]),
            fmt(rates[1]),
            fmt(rates[2]),
            fmt(rates[3]),
            shown(ratio(0, 1), 2),
            shown(ratio(0, 2), 2),
            shown(ratio(0, 3), 2),
            // CPU ms per MB of the client's threads and of the emulator's while serving it,
            // the client's context switches per batch, and the kernel's share of its time.
            medians(&runs, |r| r.used.cpu.as_secs_f64() * 1e3 / mb, 2),
            medians(&runs, |r| r.served.cpu.as_secs_f64() * 1e3 / mb, 2),
            medians(&runs, |r| r.used.switches as f64 / batches, 2),
            system_shares(&runs),
            paired(&runs, |r| r.used.cpu.as_secs_f64()),
        );
    }
}
