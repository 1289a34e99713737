//! A thousand tables through one sink (issue 50): 1,000 tables of 2 streams each under a cap of
//! 200 open streams, against zerobus-local (a child process), with a skewed load: a few hot
//! tables carry most rows, a long tail of cold ones gets a batch now and then. Reports rows/s,
//! the longest wait of any batch from submit to durable (which bounds the time its table waited
//! for streams) against the bound the cap's fairness rule gives, and opens per minute.
//!
//! ```text
//! cargo build --release -p zerobus-sink-testkit --bin zerobus-local
//! cargo run --release -p zerobus-sink-tokio --features local --example many_tables
//!     [-- --tables 1000 --streams 2 --cap 200 --seconds 180 --hot 10 --hot-share 0.8
//!         --rows-per-sec 50000 --cold-batch-rows 100]
//! ```
//!
//! A benchmark with a documented command, not a test: docs/performance.md has its numbers.

#[path = "../soak/emulator.rs"]
#[allow(dead_code)] // the kills are the soak's
mod emulator;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw, SinkConfig, Token};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_tokio::{
    Confirmer, IsolatedRows, Provisioning, Sink, TableDef, ZerobusConfig, ZerobusSink,
};

struct Args {
    tables: usize,
    streams: u16,
    cap: u16,
    seconds: u64,
    warmup: u64,
    hot: usize,
    hot_share: f64,
    rows_per_sec: u64,
    cold_batch_rows: i64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        tables: 1000,
        streams: 2,
        cap: 200,
        seconds: 180,
        warmup: 30,
        hot: 10,
        hot_share: 0.8,
        rows_per_sec: 50_000,
        cold_batch_rows: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag.as_str() {
            "--tables" => a.tables = v.parse().map_err(|e| bad(&e))?,
            "--streams" => a.streams = v.parse().map_err(|e| bad(&e))?,
            "--cap" => a.cap = v.parse().map_err(|e| bad(&e))?,
            "--seconds" => a.seconds = v.parse().map_err(|e| bad(&e))?,
            "--warmup" => a.warmup = v.parse().map_err(|e| bad(&e))?,
            "--hot" => a.hot = v.parse().map_err(|e| bad(&e))?,
            "--hot-share" => a.hot_share = v.parse().map_err(|e| bad(&e))?,
            "--rows-per-sec" => a.rows_per_sec = v.parse().map_err(|e| bad(&e))?,
            "--cold-batch-rows" => a.cold_batch_rows = v.parse().map_err(|e| bad(&e))?,
            other => return Err(format!("unknown flag {other} (see the file's header)")),
        }
    }
    if a.hot >= a.tables || a.tables == 0 {
        return Err("--hot must be below --tables".into());
    }
    Ok(a)
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("payload", DataType::Utf8, false),
    ]))
}

fn batch(schema: &SchemaRef, start: i64, n: i64) -> RecordBatch {
    let seq = start..start + n;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(seq.clone())),
        Arc::new(StringArray::from_iter_values(
            seq.map(|i| format!("row {i:>12} of many")),
        )),
    ];
    RecordBatch::try_new(schema.clone(), columns).expect("the batch matches its schema")
}

/// What the confirmer saw: rows, and the longest submit-to-durable time, overall and after
/// the warm-up (the first reconcile of each table through the catalog is in the former).
#[derive(Default)]
struct Seen {
    rows: u64,
    failed_rows: u64,
    longest: Duration,
    longest_table: String,
    longest_after_warmup: Duration,
    longest_after_warmup_table: String,
    /// Submit-to-durable times after the warm-up, in ms, for the percentiles.
    waits_ms: Vec<u32>,
    measuring: bool,
}

#[derive(Clone)]
struct Books(Arc<Mutex<Seen>>);

impl Confirmer<Raw> for Books {
    fn confirmed(&mut self, table: &str, c: Confirmation<Raw>) {
        let wait = c.confirmed_at() - c.submitted_at();
        let mut s = self.0.lock().unwrap();
        s.rows += c.rows();
        if wait > s.longest {
            s.longest = wait;
            s.longest_table = table.to_owned();
        }
        if s.measuring {
            s.waits_ms
                .push(u32::try_from(wait.as_millis()).unwrap_or(u32::MAX));
            if wait > s.longest_after_warmup {
                s.longest_after_warmup = wait;
                s.longest_after_warmup_table = table.to_owned();
            }
        }
    }
    fn failed(&mut self, table: &str, b: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        let mut s = self.0.lock().unwrap();
        s.failed_rows += b.batch.num_rows() as u64;
        if s.failed_rows == b.batch.num_rows() as u64 {
            eprintln!("many_tables: {table}: handed back: {why}");
        }
    }
    fn isolated(&mut self, _: &str, _: IsolatedRows<Raw>) {}
}

/// A small deterministic generator (reruns pick the same tables).
struct Lcg(u64);
impl Lcg {
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn uptime() -> String {
    std::process::Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("many_tables: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let a = args()?;
    println!("uptime before: {}", uptime());
    let dir = std::env::temp_dir().join(format!("zerobus-many-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("tables")).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let binary: PathBuf = exe
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("zerobus-local"))
        .unwrap_or_default();
    let mut local = emulator::Local::start(&binary, &dir)?;
    let schema = schema();
    let names: Vec<String> = (0..a.tables)
        .map(|i| format!("main.many.t{i:04}"))
        .collect();
    let config = ZerobusConfig::new(local.endpoint()).max_open_streams(a.cap);
    let core: SinkConfig = config.core;
    let defs = names
        .iter()
        .map(|n| TableDef::new(n.clone(), schema.clone()).streams(a.streams))
        .collect();
    let books = Books(Arc::default());
    let mut sink = ZerobusSink::<Raw>::start_provisioned(
        config,
        defs,
        books.clone(),
        Provisioning::new(LocalDelta::new(dir.join("tables")), "many"),
    )
    .map_err(|e| e.to_string())?;
    let ids: Vec<_> = names.iter().filter_map(|n| sink.table(n)).collect();
    let observer = sink.observer();
    // A watchdog: if the source has not moved for 10 s, what the sink's tables are doing.
    let progress = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watchdog = {
        let (observer, progress) = (observer.clone(), progress.clone());
        tokio::spawn(async move {
            let mut last = u64::MAX;
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let now = progress.load(std::sync::atomic::Ordering::Relaxed);
                if now != last {
                    last = now;
                    continue;
                }
                let Some(h) = observer.health().await else {
                    return;
                };
                let mut phases = std::collections::BTreeMap::new();
                for t in &h.tables {
                    for s in &t.streams {
                        *phases.entry(format!("{:?}", s.phase)).or_insert(0) += 1;
                    }
                }
                let queued: Vec<_> = h
                    .tables
                    .iter()
                    .filter(|t| t.queued_batches > 0)
                    .map(|t| format!("{}:{}", t.name, t.queued_batches))
                    .collect();
                let full: Vec<_> = h
                    .tables
                    .iter()
                    .filter(|t| t.backpressure)
                    .map(|t| t.name.clone())
                    .collect();
                eprintln!(
                    "many_tables: the source waits (10 s without a send): {} streams open; phases {phases:?}; {} tables with queued batches (first: {:?}); backpressure on {full:?}",
                    h.open_streams,
                    queued.len(),
                    queued.iter().take(5).collect::<Vec<_>>(),
                );
            }
        })
    };

    // Every 100 ms: each hot table a batch of its share; the cold tail's share in batches of
    // `cold_batch_rows`, each to a cold table drawn with a skew (u^2: the first cold tables
    // often, the last rarely).
    let hot_rows = ((a.rows_per_sec as f64 * a.hot_share) / 10.0 / a.hot as f64).max(1.0) as i64;
    let cold_per_tick =
        (a.rows_per_sec as f64 * (1.0 - a.hot_share)) / 10.0 / a.cold_batch_rows as f64;
    let cold = a.tables - a.hot;
    println!(
        "many_tables: {} tables x {} streams, cap {}, {} s; {} hot tables x {} rows per 100 ms, {:.1} cold batches of {} rows per 100 ms over {} tables (skewed)",
        a.tables,
        a.streams,
        a.cap,
        a.seconds,
        a.hot,
        hot_rows,
        cold_per_tick,
        a.cold_batch_rows,
        cold
    );
    let mut next = vec![0i64; a.tables];
    // Provisioning first: a table's first batch waits for its schema to be reconciled through
    // the catalog (here ~3-7 tables/s of delta-rs creates on this machine), and `send` waits
    // with it; one row per table before the clock starts, so the run measures the cap alone.
    let provisioning = Instant::now();
    for i in 0..a.tables {
        let token = Token::raw(names[i].clone(), 0, 0);
        let _receipt = sink
            .send(ids[i], batch(&schema, 0, 1), token)
            .await
            .map_err(|e| format!("{}: {e}", names[i]))?;
        next[i] = 1;
    }
    let provisioned = provisioning.elapsed().as_secs_f64();
    // And those rows durable, so that the clock starts with no table waiting for streams (the
    // rows took turns under the cap: a turn per table beyond the first cap / streams).
    sink.flush().await.map_err(|e| format!("flush: {e}"))?;
    println!(
        "provisioned {} tables in {provisioned:.0} s, their one row each durable after {:.0} s (not in the figures below)",
        a.tables,
        provisioning.elapsed().as_secs_f64()
    );
    let mut rng = Lcg(0x1000);
    let mut carry = 0.0;
    let mut touched = vec![false; a.tables];
    let started = Instant::now();
    let mut measured_from = (0u64, 0u64, 0u64); // (rows, opens, evictions) at the warm-up's end
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_print = 0;
    let total = Duration::from_secs(a.seconds);
    while started.elapsed() < total {
        tick.tick().await;
        let mut sends: Vec<(usize, i64)> = (0..a.hot).map(|i| (i, hot_rows)).collect();
        carry += cold_per_tick;
        while carry >= 1.0 {
            carry -= 1.0;
            let u = rng.unit();
            let i = a.hot + ((u * u * cold as f64) as usize).min(cold - 1);
            sends.push((i, a.cold_batch_rows));
        }
        for (i, n) in sends {
            let start = next[i];
            next[i] += n;
            touched[i] = true;
            let token = Token::raw(names[i].clone(), 0, start + n - 1);
            // The confirmer sees the outcome; the receipt is not awaited.
            let _receipt = sink
                .send(ids[i], batch(&schema, start, n), token)
                .await
                .map_err(|e| format!("{}: {e}", names[i]))?;
            progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let s = started.elapsed().as_secs();
        if s >= a.warmup && !books.0.lock().unwrap().measuring {
            let r = observer.report().await.unwrap_or_default();
            let mut b = books.0.lock().unwrap();
            measured_from = (b.rows, r.metrics.connections_opened, r.metrics.evictions);
            b.measuring = true;
        }
        if s >= last_print + 15 {
            last_print = s;
            let r = observer.report().await.unwrap_or_default();
            // One lock at a time: two guards in one statement would wait on each other.
            let (rows, longest) = {
                let b = books.0.lock().unwrap();
                (b.rows, b.longest)
            };
            println!(
                "{s:>5} s  durable {rows:>10} rows  open streams {:>4}  opens {:>6}  evictions {:>6}  longest wait {:>6.1} s",
                r.open_streams,
                r.metrics.connections_opened,
                r.metrics.evictions,
                longest.as_secs_f64(),
            );
        }
    }
    watchdog.abort();
    let generated: i64 = next.iter().sum();
    let measured_for = started.elapsed().as_secs_f64() - a.warmup as f64;
    let at_end = observer.report().await.unwrap_or_default();
    let rows_at_end = books.0.lock().unwrap().rows;
    let flushed = tokio::time::timeout(Duration::from_secs(300), sink.flush()).await;
    let report = sink.close(Duration::from_secs(60)).await;
    let _ = local.stop();
    let _ = std::fs::remove_dir_all(&dir);

    let mut s = books.0.lock().unwrap();
    s.waits_ms.sort_unstable();
    let pct = |q: f64| {
        s.waits_ms
            .get(((s.waits_ms.len() as f64 - 1.0) * q) as usize)
            .map_or(0.0, |&ms| f64::from(ms) / 1000.0)
    };
    let w = usize::from(a.cap / a.streams.max(1));
    let tables_with_work = touched.iter().filter(|&&t| t).count();
    let residency = core.min_residency.as_secs_f64();
    let open_timeout = core.open_timeout.as_secs_f64();
    let opens = at_end.metrics.connections_opened - measured_from.1;
    let evictions = at_end.metrics.evictions - measured_from.2;
    println!(
        "\n==== many tables ({} x {}, cap {}) ====",
        a.tables, a.streams, a.cap
    );
    println!(
        "rows/s       {:.0} durable after the {} s warm-up ({} generated in all, {} durable at close, {} handed back; flush {})",
        (rows_at_end - measured_from.0) as f64 / measured_for,
        a.warmup,
        generated,
        s.rows,
        s.failed_rows,
        if flushed.is_ok() {
            "completed"
        } else {
            "timed out"
        }
    );
    println!(
        "wait         submit to durable after the warm-up: p50 {:.2} s, p99 {:.2} s, longest {:.1} s ({}); longest overall {:.1} s ({})",
        pct(0.5),
        pct(0.99),
        s.longest_after_warmup.as_secs_f64(),
        s.longest_after_warmup_table,
        s.longest.as_secs_f64(),
        s.longest_table,
    );
    println!(
        "bound        {} tables had work; {} tables hold the cap at once; a table behind L others waits at most ceil(L / {w}) x (min_residency {residency:.0} s + time to READY) plus the evictions' drains: {:.0} s for L = {}",
        tables_with_work,
        w,
        (tables_with_work.saturating_sub(1) as f64 / w as f64).ceil() * residency,
        tables_with_work.saturating_sub(1),
    );
    println!(
        "opens        {opens} in {:.1} min after the warm-up ({:.0}/min), {evictions} evictions ({:.0}/min); open_timeout {open_timeout:.0} s",
        measured_for / 60.0,
        opens as f64 / (measured_for / 60.0),
        evictions as f64 / (measured_for / 60.0),
    );
    println!("sink         {report}");
    println!("uptime after: {}", uptime());
    Ok(())
}
