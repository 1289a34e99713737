//! The README's first command, the whole product in one process: the sink provisions a Delta
//! table through the local catalog, streams synthetic order rows to the Zerobus emulator (a real
//! Arrow Flight server on loopback, with a write-ahead log) with a progress line, drifts the
//! schema once half way (a new column: the table evolves, the streams reopen), closes, and
//! reads the table back with delta-rs once the emulator has materialized what it acked. The
//! source ranges made durable are saved in the coverage store beside the table and read back
//! as a restarted pipeline would, with the gaps of the source range (none, when all went well).
//!
//! ```text
//! cargo run --release -p zerobus-sink-tokio --example demo -- [--rows 10000000]
//!     [--batch-rows 5000] [--streams 3] [--ack-latency-ms 20] [--materialize-lag-ms 1000]
//!     [--dir DIR] [--clean] [--ops 127.0.0.1:9464] [--tables s3://bucket/prefix]
//! ```
//!
//! With `--tables s3://bucket/prefix` the table and its coverage live on S3 (or an
//! S3-compatible store): endpoint, region and credentials from `AWS_ENDPOINT_URL`,
//! `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (the bucket must exist); the
//! emulator's write-ahead log stays in `--dir`.
//!
//! With `--ops ADDR` it serves the operator endpoint there while it runs: `/metrics`
//! (Prometheus text) and `/health` (the health tree as JSON; `zerobus-sinkctl status
//! http://ADDR` prints it).
//!
//! It exits non-zero unless every source offset was committed, the rows in the table are
//! exactly the rows confirmed plus the duplicates it counts (replays are at-least-once), and
//! the stored coverage has no gap.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use zerobus_sink::{
    Batch, Confirmation, Coverage, CoverageRange, FailedBatch, FailureReason, Raw, SourceTracker,
};
use zerobus_sink_catalog::local::coverage_store::CoverageStore;
use zerobus_sink_catalog::local::{LocalDelta, S3Storage};
use zerobus_sink_catalog::{SinkId, TableRef};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};
use zerobus_sink_tokio::{
    Confirmer, IsolatedRows, Provisioning, ProxyConfig, Sink, TableDef, ZerobusConfig, ZerobusSink,
};

const TABLE: &str = "main.demo.orders";

/// The orders' schema; `channel` is the column that appears half way (the drift).
fn schema(channel: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
    ];
    if channel {
        fields.push(Field::new("channel", DataType::Utf8, true));
    }
    Arc::new(Schema::new(fields))
}

fn orders(schema: &SchemaRef, start: i64, n: i64) -> RecordBatch {
    let ids = start..start + n;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(ids.clone())),
        Arc::new(StringArray::from_iter_values(
            ids.clone().map(|i| format!("customer-{:05}", i % 10_007)),
        )),
        Arc::new(Float64Array::from_iter_values(
            ids.clone().map(|i| ((i * 7_919) % 100_000) as f64 / 100.0),
        )),
    ];
    if schema.fields().len() > 3 {
        const CHANNELS: [&str; 3] = ["web", "store", "phone"];
        columns.push(Arc::new(StringArray::from_iter_values(
            ids.map(|i| CHANNELS[(i % 3) as usize]),
        )));
    }
    RecordBatch::try_new(schema.clone(), columns).expect("valid batch")
}

/// The "source": commits, as a Kafka consumer would, only the unbroken durable run the tracker
/// gives back; a batch the sink gives up on (after its own resubmissions) stops the demo. Each
/// batch holds the source records whose offsets are its order ids, and its token names the
/// last: what a confirmation makes durable (first to last) goes into the coverage.
#[derive(Clone, Default)]
struct Source {
    tracker: Arc<Mutex<SourceTracker>>,
    /// Per batch in flight: its token's offset -> its first offset.
    firsts: Arc<Mutex<HashMap<i64, i64>>>,
    coverage: Arc<Mutex<Coverage>>,
    fatal: Arc<Mutex<Option<String>>>,
}

impl Confirmer<Raw> for Source {
    fn confirmed(&mut self, _table: &str, c: Confirmation<Raw>) {
        let last = c.position().clone();
        if let Some(first) = self.firsts.lock().expect("firsts").remove(&last.offset) {
            let range = CoverageRange::new(last.topic, last.partition, first, last.offset);
            let durable = Coverage::from_durable([range]);
            self.coverage.lock().expect("coverage").merge(&durable);
        }
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
    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        *self.fatal.lock().expect("fatal") = Some(format!(
            "{table}: {} rows refused before send: {:?}",
            rows.batch.num_rows(),
            rows.faults
        ));
    }
}

struct Args {
    rows: i64,
    batch_rows: i64,
    streams: u16,
    latency: Duration,
    lag: Duration,
    dir: PathBuf,
    clean: bool,
    /// `s3://bucket/prefix`: the tables on S3 instead of under `dir/tables`.
    tables: Option<String>,
    ops: Option<std::net::SocketAddr>,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        const VALUED: [&str; 8] = [
            "--rows",
            "--batch-rows",
            "--streams",
            "--ack-latency-ms",
            "--materialize-lag-ms",
            "--dir",
            "--ops",
            "--tables",
        ];
        let mut rest = args.iter();
        while let Some(a) = rest.next() {
            match a.as_str() {
                a if VALUED.contains(&a) => {
                    rest.next();
                }
                "--clean" => {}
                other => {
                    return Err(format!(
                        "unknown argument {other:?}; flags: {} N, --dir DIR, --clean, --ops ADDR, --tables s3://BUCKET/PREFIX",
                        VALUED[..5].join(" N, ")
                    ));
                }
            }
        }
        let number = |name: &str, default: u64| -> Result<u64, String> {
            match args.iter().position(|a| a == name) {
                None => Ok(default),
                Some(i) => {
                    let v = args.get(i + 1).ok_or(format!("{name} needs a value"))?;
                    v.parse().map_err(|e| format!("{name} {v}: {e}"))
                }
            }
        };
        let dir = match args.iter().position(|a| a == "--dir") {
            Some(i) => PathBuf::from(args.get(i + 1).ok_or("--dir needs a value")?),
            None => std::env::temp_dir().join(format!("zerobus-demo-{}", std::process::id())),
        };
        Ok(Args {
            rows: i64::try_from(number("--rows", 10_000_000)?).map_err(|e| e.to_string())?,
            batch_rows: number("--batch-rows", 5_000)?.clamp(1, 1 << 30) as i64,
            streams: u16::try_from(number("--streams", 3)?).map_err(|e| e.to_string())?,
            latency: Duration::from_millis(number("--ack-latency-ms", 20)?),
            lag: Duration::from_millis(number("--materialize-lag-ms", 1_000)?),
            dir,
            clean: args.iter().any(|a| a == "--clean"),
            tables: match args.iter().position(|a| a == "--tables") {
                Some(i) => Some(
                    args.get(i + 1)
                        .ok_or("--tables needs s3://bucket/prefix")?
                        .clone(),
                ),
                None => None,
            },
            ops: match args.iter().position(|a| a == "--ops") {
                Some(i) => {
                    let v = args.get(i + 1).ok_or("--ops needs an address")?;
                    Some(v.parse().map_err(|e| format!("--ops {v}: {e}"))?)
                }
                None => None,
            },
        })
    }
}

/// What the table holds: rows, distinct order ids, and whether they are exactly `0..rows`.
struct Contents {
    rows: u64,
    distinct: u64,
    complete: bool,
    version: u64,
}

async fn read_back(catalog: &LocalDelta, rows: i64) -> Result<Contents, String> {
    let table = TableRef::parse(TABLE).map_err(|e| e.to_string())?;
    let (batches, version) = catalog
        .read_table(&table)
        .await
        .map_err(|e| e.to_string())?;
    let mut seen: HashMap<i64, u32> = HashMap::with_capacity(rows.max(0) as usize);
    let mut total = 0u64;
    for b in &batches {
        let ids = b
            .column_by_name("order_id")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or("the table has no Int64 order_id column")?;
        total += ids.len() as u64;
        for id in ids.values() {
            *seen.entry(*id).or_default() += 1;
        }
    }
    let complete = seen.len() as i64 == rows && seen.keys().all(|id| (0..rows).contains(id));
    Ok(Contents {
        rows: total,
        distinct: seen.len() as u64,
        complete,
        version,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse()?;
    let (rows, batch_rows, streams) = (args.rows, args.batch_rows, args.streams);
    let catalog = match &args.tables {
        Some(url) => LocalDelta::on_s3(url, S3Storage::from_env())?,
        None => LocalDelta::new(args.dir.join("tables")),
    };
    let root = catalog
        .folder()
        .map_or_else(|| catalog.root_url(), |f| f.display().to_string());
    let emulator = Emulator::start(
        EmulatorConfig::new(args.dir.join("wal"))
            .delta_catalog(catalog.clone())
            .ack_latency(args.latency)
            .materialize_lag(args.lag),
    )
    .await?;
    println!(
        "emulator on {} (ack latency {:?}), tables under {}; {rows} rows in batches of {batch_rows} over {streams} streams",
        emulator.url(),
        args.latency,
        root
    );

    // The metrics' recorder goes in before the sink starts (their handles are registered then).
    #[cfg(feature = "ops")]
    let prometheus = match args.ops {
        Some(_) => Some(zerobus_sink_tokio::ops::install_prometheus()?),
        None => None,
    };
    #[cfg(not(feature = "ops"))]
    if args.ops.is_some() {
        return Err("--ops serves the operator endpoint, built with the `ops` feature: \
                    cargo run --release -p zerobus-sink-tokio --features ops --example demo -- --ops ADDR"
            .into());
    }
    let source = Source::default();
    let provisioning = Provisioning::new(catalog.clone(), "demo");
    let mut sink = ZerobusSink::<Raw>::start_provisioned(
        // The emulator is in this process: never through a proxy the environment names.
        ZerobusConfig::new(emulator.url()).proxy(ProxyConfig::Direct),
        vec![TableDef::new(TABLE, schema(false)).streams(streams)],
        source.clone(),
        provisioning,
    )?;
    let id = sink.table(TABLE).expect("registered");
    #[cfg(feature = "ops")]
    if let (Some(addr), Some(prometheus)) = (args.ops, prometheus) {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        println!(
            "operator endpoint on http://{addr}: /metrics, /health (zerobus-sinkctl status http://{addr})"
        );
        tokio::spawn(zerobus_sink_tokio::ops::serve(
            listener,
            sink.observer(),
            prometheus,
        ));
    }

    let (before, after) = (schema(false), schema(true));
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut drifted_at = None;
    let mut bytes = 0u64;
    let mut start = 0;
    while start < rows {
        let n = batch_rows.min(rows - start);
        let drifted = start >= rows / 2;
        if drifted && drifted_at.is_none() {
            drifted_at = Some((Instant::now(), sink.report().await.map_or(0, |r| r.rows)));
            println!("  drift: a `channel` column from offset {start} on");
        }
        let batch = orders(if drifted { &after } else { &before }, start, n);
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
        source
            .firsts
            .lock()
            .expect("firsts")
            .insert(start + n - 1, start);
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
    if let Some(why) = source.fatal.lock().expect("fatal").take() {
        return Err(why.into());
    }
    // Shutting down materializes what is left: every acked row into the Delta table.
    let materializing = Instant::now();
    let stats = emulator.shutdown().await;
    let materialized_in = materializing.elapsed().as_secs_f64();
    let contents = read_back(&catalog, rows).await?;
    let duplicates = contents.rows - contents.distinct;
    let committed = source
        .tracker
        .lock()
        .expect("tracker")
        .committed("orders", 0);
    let table = TableRef::parse(TABLE)?;
    let location = catalog.table_url(&table)?;
    // The coverage, saved beside the table and loaded back as a restarted pipeline would.
    let coverage = source.coverage.lock().expect("coverage").clone();
    let sink_id = SinkId("demo".into());
    let mut store = CoverageStore::open(catalog.clone(), &table, sink_id.clone()).await?;
    store.save(&coverage).await?;
    // A restarted pipeline: a new catalog on the same root.
    let restarted = match &args.tables {
        Some(url) => LocalDelta::on_s3(url, S3Storage::from_env())?,
        None => LocalDelta::new(args.dir.join("tables")),
    };
    let reopened = CoverageStore::open(restarted, &table, sink_id).await?;
    let gaps = reopened.saved().gaps("orders", 0, 0, rows - 1);

    println!("summary:");
    println!(
        "  rows confirmed   {} of {rows} ({} handed back); source committed through offset {}",
        report.rows,
        report.failed_batches,
        committed.map_or("-".into(), |c| c.to_string())
    );
    println!(
        "  rows in table    {} ({} distinct order ids, {duplicates} duplicates from replays)",
        contents.rows, contents.distinct
    );
    println!(
        "  throughput       {:.1} MB/s (Arrow bytes), {:.0} rows/s, {secs:.2} s",
        bytes as f64 / 1e6 / secs,
        report.rows as f64 / secs
    );
    if let Some((at, durable)) = drifted_at {
        let first = at - started;
        let second = Duration::from_secs_f64(secs).saturating_sub(first);
        println!(
            "  drift            before {:.0} rows/s, after {:.0} rows/s; {} reconciles, {} schema switches",
            durable as f64 / first.as_secs_f64().max(1e-9),
            (report.rows - durable) as f64 / second.as_secs_f64().max(1e-9),
            report.metrics.reconciles_asked,
            report.metrics.schema_switches
        );
    }
    println!(
        "  coalesce ratio   {:.1} batches per ack (max {}); max {} batches in flight",
        report.metrics.coalesce.mean().unwrap_or(0.0),
        report.metrics.coalesce.max().unwrap_or(0),
        report.metrics.max_pending
    );
    println!(
        "  rebuilds         {} (connections opened {}, failed {})",
        report.rebuilds(u64::from(streams)),
        report.metrics.connections_opened,
        report.metrics.connections_failed
    );
    println!(
        "  emulator         {} messages, {} rows logged, {} acks; materialized {} rows in {} commits (last {materialized_in:.2} s after close)",
        stats.messages, stats.rows, stats.acks, stats.materialized_rows, stats.materialized_commits
    );
    println!(
        "  coverage         {} range(s) saved in {}; gaps of orders/0 0..={}: {}",
        reopened.saved().ranges().len(),
        reopened.table(),
        rows - 1,
        if gaps.is_empty() {
            "none".to_owned()
        } else {
            format!("{gaps:?}")
        }
    );
    println!(
        "  table            {location} (Delta version {})",
        contents.version
    );
    // pyarrow imported first: with deltalake 1.6.6 and pyarrow 26, deltalake alone prints the
    // count and then aborts at exit.
    println!(
        "  open it          python3 -c \"import pyarrow, deltalake; print(deltalake.DeltaTable('{}').to_pyarrow_table().num_rows)\"",
        location
            .to_file_path()
            .map_or_else(|()| location.to_string(), |p| p.display().to_string())
    );
    let ok = report.rows == rows as u64
        && committed == Some(rows - 1)
        && contents.complete
        && contents.rows == report.rows + duplicates
        && gaps.is_empty();
    if args.clean {
        let _ = std::fs::remove_dir_all(&args.dir);
    }
    if !ok {
        return Err(format!(
            "{} of {rows} rows confirmed (committed {committed:?}); the table holds {} rows, {} distinct, complete: {}; coverage gaps: {gaps:?}",
            report.rows, contents.rows, contents.distinct, contents.complete
        )
        .into());
    }
    Ok(())
}
