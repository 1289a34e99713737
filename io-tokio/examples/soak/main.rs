//! An hour under faults, in one process (issue 50): a steady source feeds 50 tables through one
//! sink while zerobus-local (a child process) is killed with `kill -9` and restarted every 1-3
//! minutes (none in the source's last 150 s, `--quiet-tail`, so that its last minute is measured
//! in the same steady state as the baseline's), the catalog is unreachable once for two minutes
//! (60-180 s), and every table's schema gains a column every ten minutes (at 200 s, 800 s, ...).
//! The outage and the first drift come before the baseline minute (240-300 s), so that the
//! baseline is memory once every kind of fault has run once. At the end an independent reader
//! (delta-rs over the tables the emulator materialized) finds every committed source position's
//! rows; duplicates must stay within what the kills could replay, and both resident memory and
//! the live heap (counted by the global allocator, mimalloc: `heap.rs` says why), averaged over
//! the source's last minute, within 10% of their values in the minute to five minutes. Prints a
//! summary, writes `samples.csv` and `soak.svg` (throughput, pending rows, memory over time) to
//! `--dir`, and exits non-zero on any failed check.
//!
//! ```text
//! cargo build --release -p zerobus-sink-testkit --bin zerobus-local
//! cargo run --release -p zerobus-sink-tokio --features local --example soak -- --minutes 60
//! # the one-minute version CI runs (memory reported, not judged, under ten minutes):
//! cargo run -p zerobus-sink-tokio --features local --example soak -- --minutes 1 \
//!     --kill-every 10..20 --drift-every 20 --outage-at 25 --outage-for 10
//! ```

mod emulator;
mod flaky;
mod heap;
mod plot;
mod rss;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw, SourceTracker};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_testkit::emulator::delta;
use zerobus_sink_tokio::{
    Confirmer, IsolatedRows, Provisioning, Sink, TableDef, ZerobusConfig, ZerobusSink,
};

use heap::{HeapPeak, heap_mib};
use plot::Sample;
use rss::{rss_anon_mib, rss_mib};

struct Args {
    minutes: f64,
    tables: usize,
    rows_per_sec: u64,
    kill_every: (u64, u64),
    drift_every: u64,
    /// The first drift, and the catalog outage, come before the baseline minute: the baseline
    /// is then memory once every kind of fault has run once (its code paged in, its buffers
    /// sized), so the last minute's comparison with it measures growth, not first times.
    first_drift: u64,
    outage_at: u64,
    outage_for: u64,
    baseline_at: u64,
    /// No kill in the source's last `quiet_tail` seconds, so that its last minute is measured in
    /// the same steady state as the baseline's minute (a kill's replay is data the sink must
    /// hold, not a leak).
    quiet_tail: u64,
    /// Tables the local catalog describes or changes at once (`LocalDelta::with_tables_at_once`).
    catalog_at_once: usize,
    dir: PathBuf,
    zerobus_local: PathBuf,
}

fn args() -> Result<Args, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // target/<profile>/examples/soak -> target/<profile>/zerobus-local
    let sibling = exe
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("zerobus-local"))
        .unwrap_or_default();
    let mut a = Args {
        minutes: 60.0,
        tables: 50,
        rows_per_sec: 20_000,
        kill_every: (60, 180),
        drift_every: 600,
        first_drift: 200,
        outage_at: 60,
        outage_for: 120,
        baseline_at: 300,
        quiet_tail: 150,
        catalog_at_once: zerobus_sink_catalog::local::TABLES_AT_ONCE,
        dir: PathBuf::from("target/soak"),
        zerobus_local: sibling,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--minutes" => a.minutes = value()?.parse().map_err(|e| format!("--minutes: {e}"))?,
            "--tables" => a.tables = num(value()?)? as usize,
            "--rows-per-sec" => a.rows_per_sec = num(value()?)?,
            "--kill-every" => {
                let v = value()?;
                let (lo, hi) = v.split_once("..").ok_or("--kill-every LO..HI (seconds)")?;
                a.kill_every = (num(lo.into())?, num(hi.into())?.max(num(lo.into())?));
            }
            "--drift-every" => a.drift_every = num(value()?)?.max(1),
            "--first-drift" => a.first_drift = num(value()?)?,
            "--outage-at" => a.outage_at = num(value()?)?,
            "--outage-for" => a.outage_for = num(value()?)?,
            "--baseline-at" => a.baseline_at = num(value()?)?,
            "--quiet-tail" => a.quiet_tail = num(value()?)?,
            "--catalog-at-once" => a.catalog_at_once = num(value()?)? as usize,
            "--dir" => a.dir = value()?.into(),
            "--zerobus-local" => a.zerobus_local = value()?.into(),
            other => return Err(format!("unknown flag {other} (see the file's header)")),
        }
    }
    if a.minutes * 60.0 < a.baseline_at as f64 * 2.0 {
        a.baseline_at = (a.minutes * 60.0 / 4.0) as u64;
    }
    a.quiet_tail = a.quiet_tail.min((a.minutes * 60.0 / 4.0) as u64);
    a.first_drift = a.first_drift.min(a.drift_every);
    Ok(a)
}

fn schema(extra: usize) -> SchemaRef {
    let mut fields = vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("payload", DataType::Utf8, false),
    ];
    for k in 0..extra {
        fields.push(Field::new(format!("extra_{k}"), DataType::Int64, true));
    }
    Arc::new(Schema::new(fields))
}

fn rows(schema: &SchemaRef, start: i64, n: i64) -> RecordBatch {
    let seq = start..start + n;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(seq.clone())),
        Arc::new(StringArray::from_iter_values(
            seq.clone().map(|i| format!("row {i:>12} of the soak")),
        )),
    ];
    for _ in 2..schema.fields().len() {
        columns.push(Arc::new(Int64Array::from_iter_values(seq.clone())));
    }
    RecordBatch::try_new(schema.clone(), columns).expect("the soak's batch matches its schema")
}

/// When the kills and drifts happened (seconds) and the rows pending at the kills (the most
/// a kill can make the sink replay).
#[derive(Clone, Default)]
struct Events {
    kills: Vec<f64>,
    drifts: Vec<f64>,
    replay_bound: u64,
}

/// What the confirmer saw.
#[derive(Default)]
struct Books {
    tracker: SourceTracker,
    committed: HashMap<String, i64>,
    failed_rows: u64,
    failed_batches: u64,
    isolated_rows: u64,
}

#[derive(Clone)]
struct Ledger(Arc<Mutex<Books>>);

impl Confirmer<Raw> for Ledger {
    fn confirmed(&mut self, _table: &str, c: Confirmation<Raw>) {
        let mut b = self.0.lock().unwrap();
        if let Ok(Some(p)) = b.tracker.confirm(c) {
            b.committed.insert(p.topic, p.offset);
        }
    }
    fn failed(&mut self, _table: &str, batch: FailedBatch<Raw, RecordBatch>, _why: &FailureReason) {
        let mut b = self.0.lock().unwrap();
        b.failed_rows += batch.batch.num_rows() as u64;
        b.failed_batches += 1;
    }
    fn isolated(&mut self, _table: &str, rows: IsolatedRows<Raw>) {
        self.0.lock().unwrap().isolated_rows += rows.batch.num_rows() as u64;
    }
}

fn name(i: usize) -> String {
    format!("main.soak.t{i:03}")
}

/// A small deterministic generator for the kill intervals (no clock in the seed: reruns match).
struct Lcg(u64);
impl Lcg {
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (self.0 >> 33) % (hi - lo + 1)
    }
}

fn main() -> std::process::ExitCode {
    if let Some(code) = heap::rerun_with_purge() {
        return code;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("soak: a tokio runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(run()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool, String> {
    let a = args()?;
    let _ = std::fs::remove_dir_all(&a.dir);
    std::fs::create_dir_all(a.dir.join("tables")).map_err(|e| e.to_string())?;
    let dir = std::fs::canonicalize(&a.dir).map_err(|e| e.to_string())?;
    let local = Arc::new(Mutex::new(emulator::Local::start(&a.zerobus_local, &dir)?));
    let endpoint = local.lock().unwrap().endpoint();
    println!(
        "soak: {} tables, {} rows/s, {:.0} min, kill -9 every {}..{} s, drift at {} s and every {} s, catalog down {}..{} s; {}",
        a.tables,
        a.rows_per_sec,
        a.minutes,
        a.kill_every.0,
        a.kill_every.1,
        a.first_drift,
        a.drift_every,
        a.outage_at,
        a.outage_at + a.outage_for,
        dir.display()
    );
    println!("allocator: mimalloc, {}", heap::settings());

    let ledger = Ledger(Arc::default());
    let down = Arc::new(AtomicBool::new(false));
    let catalog = flaky::Flaky {
        inner: LocalDelta::new(dir.join("tables")).with_tables_at_once(a.catalog_at_once),
        down: down.clone(),
    };
    let defs = (0..a.tables)
        .map(|i| TableDef::new(name(i), schema(0)).streams(2))
        .collect();
    // Every table has work all the time, so the cap fits all their streams: under the default
    // cap of 64, 100 busy streams take turns every `min_residency` by design (the fairness
    // rule; the `many_tables` example measures that), which is not what the soak is about.
    let cap = u16::try_from(a.tables * 2).map_err(|_| "--tables: at most 32,767")?;
    let mut sink = ZerobusSink::<Raw>::start_provisioned(
        ZerobusConfig::new(endpoint).max_open_streams(cap),
        defs,
        ledger.clone(),
        Provisioning::new(catalog, "soak"),
    )
    .map_err(|e| e.to_string())?;
    let ids: Vec<_> = (0..a.tables).map(|i| sink.table(&name(i))).collect();

    let started = Instant::now();
    let total = Duration::from_secs_f64(a.minutes * 60.0);
    let generated = Arc::new(AtomicU64::new(0));
    let drifts = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let events: Arc<Mutex<Events>> = Arc::default();

    // kill -9 every kill_every seconds; the rows pending at each kill bound its replays.
    let killer = {
        let (local, stop, events, ledger, generated) = (
            local.clone(),
            stop.clone(),
            events.clone(),
            ledger.clone(),
            generated.clone(),
        );
        let (lo, hi) = a.kill_every;
        let quiet_tail = Duration::from_secs(a.quiet_tail);
        tokio::spawn(async move {
            let mut rng = Lcg(0x5eed);
            loop {
                tokio::time::sleep(Duration::from_secs(rng.between(lo, hi))).await;
                if stop.load(Ordering::Relaxed) || started.elapsed() + quiet_tail > total {
                    return;
                }
                let pending = generated.load(Ordering::Relaxed) - durable(&ledger);
                let local = local.clone();
                let restarted =
                    tokio::task::spawn_blocking(move || local.lock().unwrap().kill9_and_restart())
                        .await;
                let mut e = events.lock().unwrap();
                e.kills.push(started.elapsed().as_secs_f64());
                e.replay_bound += pending;
                if let Ok(Err(err)) | Err(err) = restarted.map_err(|e| e.to_string()) {
                    eprintln!("soak: restarting zerobus-local failed: {err}");
                    return;
                }
            }
        })
    };
    // The catalog outage and the drifts, on the clock.
    let schedule = {
        let (down, drifts, stop, events) =
            (down.clone(), drifts.clone(), stop.clone(), events.clone());
        let (outage_at, outage_for, drift_every) = (a.outage_at, a.outage_for, a.drift_every);
        let first_drift = a.first_drift;
        tokio::spawn(async move {
            let mut next_drift = first_drift;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if stop.load(Ordering::Relaxed) {
                    down.store(false, Ordering::Relaxed);
                    return;
                }
                let t = started.elapsed().as_secs();
                down.store(
                    t >= outage_at && t < outage_at + outage_for,
                    Ordering::Relaxed,
                );
                if t >= next_drift {
                    drifts.fetch_add(1, Ordering::Relaxed);
                    events
                        .lock()
                        .unwrap()
                        .drifts
                        .push(started.elapsed().as_secs_f64());
                    next_drift += drift_every;
                }
            }
        })
    };
    // The sampler: throughput, pending, memory every 5 s; a line every 30 s.
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampler = {
        let (ledger, generated, stop, samples, local) = (
            ledger.clone(),
            generated.clone(),
            stop.clone(),
            samples.clone(),
            local.clone(),
        );
        let peak = HeapPeak::start();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            let mut last = (0.0, 0u64);
            loop {
                tick.tick().await;
                let t = started.elapsed().as_secs_f64();
                let d = durable(&ledger);
                let g = generated.load(Ordering::Relaxed);
                let s = Sample {
                    t,
                    rows_per_sec: (d - last.1) as f64 / (t - last.0).max(1e-9),
                    pending: (g - d.min(g)) as f64,
                    rss_mib: rss_mib(),
                    rss_anon_mib: rss_anon_mib(),
                    heap_mib: heap_mib(),
                    heap_peak_mib: peak.take(),
                };
                last = (t, d);
                samples.lock().unwrap().push(s);
                if (t as u64) % 30 < 5 {
                    println!(
                        "{:>6.0} s  generated {g:>11}  durable {d:>11}  pending {:>8}  {:>9.0} rows/s  rss {:>6.1} MiB  heap {:>6.1} MiB (peak {:>6.1})  kills {}",
                        t,
                        s.pending,
                        s.rows_per_sec,
                        s.rss_mib,
                        s.heap_mib,
                        s.heap_peak_mib,
                        local.lock().unwrap().kills
                    );
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
            }
        })
    };

    // The source: every 100 ms, one batch per table, in table order.
    let per_batch = (a.rows_per_sec / 10 / a.tables as u64).max(1) as i64;
    let mut next: Vec<i64> = vec![0; a.tables];
    let mut schemas: Vec<SchemaRef> = vec![schema(0)];
    let mut refused = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while started.elapsed() < total {
        tick.tick().await;
        let k = drifts.load(Ordering::Relaxed);
        while schemas.len() <= k {
            schemas.push(schema(schemas.len()));
        }
        for (i, id) in ids.iter().enumerate() {
            let Some(id) = *id else { continue };
            let start = next[i];
            let batch = rows(&schemas[k], start, per_batch);
            let token = ledger
                .0
                .lock()
                .unwrap()
                .tracker
                .read(&name(i), 0, start + per_batch - 1, 1)
                .map_err(|e| e.to_string())?
                .pop()
                .ok_or("no token")?;
            match sink.send(id, batch, token).await {
                Ok(_) => {
                    next[i] += per_batch;
                    generated.fetch_add(per_batch as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    refused += 1;
                    if refused <= 5 {
                        eprintln!("soak: send to {} refused: {e}", name(i));
                    }
                    // The read stays open: this partition's position cannot pass it (as it
                    // must not). The soak reports it.
                    next[i] += per_batch;
                }
            }
        }
    }
    let source_end = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = schedule.await;
    killer.abort();
    let flush = tokio::time::timeout(Duration::from_secs(300), sink.flush()).await;
    // At rest: every row durable, the streams and tables still open.
    let (rest_heap, rest_rss) = (heap_mib(), rss_mib());
    let report = sink.close(Duration::from_secs(60)).await;
    let _ = sampler.await;
    let elapsed = started.elapsed();
    {
        let local = local.clone();
        tokio::task::spawn_blocking(move || local.lock().unwrap().stop())
            .await
            .map_err(|e| e.to_string())??;
    }

    // The independent reader: every committed position's rows, duplicates counted.
    let (committed_at, failed_rows, failed_batches) = {
        let b = ledger.0.lock().unwrap();
        (b.committed.clone(), b.failed_rows, b.failed_batches)
    };
    let mut missing = 0u64;
    let mut duplicates = 0u64;
    let mut in_tables = 0u64;
    let mut committed_rows = 0u64;
    for i in 0..a.tables {
        let table = name(i);
        let committed = committed_at.get(&table).copied().unwrap_or(-1);
        committed_rows += (committed + 1) as u64;
        let (batches, _) = delta::read_table(&dir.join("tables"), &table)
            .await
            .map_err(|e| format!("{table}: {e}"))?;
        let mut seqs: Vec<i64> = Vec::new();
        for b in &batches {
            let col = b
                .column_by_name("seq")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .ok_or_else(|| format!("{table}: no seq column"))?;
            seqs.extend(col.values().iter().copied());
        }
        in_tables += seqs.len() as u64;
        seqs.sort_unstable();
        let before = seqs.len();
        seqs.dedup();
        duplicates += (before - seqs.len()) as u64;
        let present = seqs.iter().take_while(|&&s| s <= committed).count() as i64;
        missing += (committed + 1 - present).max(0) as u64;
    }
    let samples = samples.lock().unwrap().clone();
    let events = events.lock().unwrap().clone();
    // Resident memory and the live heap, each averaged over the minute to `baseline_at` and
    // over the source's last minute (one sample swings with the rows pending at that moment).
    let mean = |from: f64, to: f64, of: fn(&Sample) -> f64| {
        let v: Vec<f64> = samples
            .iter()
            .filter(|s| s.t >= from && s.t <= to)
            .map(of)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    // The last minute of the schedule, not of the source's loop: a send that waits at the end
    // runs the loop past it, into the flush's transient (the hour's run on glibc: 26 MiB at
    // 3,610 s lifted its last minute's mean from 12.0 to 13.1 MiB).
    let end = total.as_secs_f64().min(source_end);
    let (first, last) = (
        (a.baseline_at as f64 - 60.0, a.baseline_at as f64),
        (end - 60.0, end),
    );
    let baseline = mean(first.0, first.1, |s| s.rss_mib);
    let end_rss = mean(last.0, last.1, |s| s.rss_mib);
    let (anon_baseline, end_anon) = (
        mean(first.0, first.1, |s| s.rss_anon_mib),
        mean(last.0, last.1, |s| s.rss_anon_mib),
    );
    let heap_baseline = mean(first.0, first.1, |s| s.heap_mib);
    let end_heap = mean(last.0, last.1, |s| s.heap_mib);
    let judged = a.minutes >= 10.0;
    let memory_ok = !judged || (end_heap <= heap_baseline * 1.10 && end_rss <= baseline * 1.10);
    let replay_bound = events.replay_bound;
    let ok = missing == 0 && duplicates <= replay_bound && flush.is_ok() && memory_ok;

    let mut csv = String::from(
        "t_s,durable_rows_per_s,pending_rows,rss_mib,rss_anon_mib,heap_mib,heap_peak_mib\n",
    );
    for s in &samples {
        csv.push_str(&format!(
            "{:.1},{:.0},{:.0},{:.1},{:.1},{:.1},{:.1}\n",
            s.t, s.rows_per_sec, s.pending, s.rss_mib, s.rss_anon_mib, s.heap_mib, s.heap_peak_mib
        ));
    }
    std::fs::write(dir.join("samples.csv"), csv).map_err(|e| e.to_string())?;
    let outage = (a.outage_at as f64, (a.outage_at + a.outage_for) as f64);
    std::fs::write(
        dir.join("soak.svg"),
        plot::svg(&samples, &events.kills, &events.drifts, outage),
    )
    .map_err(|e| e.to_string())?;

    println!(
        "\n==== soak summary ({}) ====",
        if ok { "PASS" } else { "FAIL" }
    );
    println!(
        "ran          {:.1} min; {} tables; {} kill -9 of zerobus-local; {} drifts; catalog down {} s",
        elapsed.as_secs_f64() / 60.0,
        a.tables,
        events.kills.len(),
        events.drifts.len(),
        a.outage_for
    );
    println!(
        "rows         {} generated, {} committed, {} in the tables; {} handed back in {} batches; {} sends refused",
        generated.load(Ordering::Relaxed),
        committed_rows,
        in_tables,
        failed_rows,
        failed_batches,
        refused
    );
    println!("missing      {missing} rows at or below a committed position (must be 0)");
    println!("duplicates   {duplicates} (bound: {replay_bound} rows pending at the kills)");
    let limit = if judged {
        " (limit +10%)"
    } else {
        " (not judged under 10 minutes)"
    };
    println!(
        "resident     {baseline:.1} MiB in the minute to {} s, {end_rss:.1} MiB in the last minute ({:+.1}%){limit}",
        a.baseline_at,
        (end_rss / baseline.max(1e-9) - 1.0) * 100.0,
    );
    println!(
        "  of which    anonymous {anon_baseline:.1} MiB, then {end_anon:.1} MiB ({:+.1}%); file-backed (code, libraries) {:.1} MiB, then {:.1} MiB",
        (end_anon / anon_baseline.max(1e-9) - 1.0) * 100.0,
        baseline - anon_baseline,
        end_rss - end_anon,
    );
    println!(
        "live heap    {heap_baseline:.1} MiB in the minute to {} s, {end_heap:.1} MiB in the last minute ({:+.1}%){limit}",
        a.baseline_at,
        (end_heap / heap_baseline.max(1e-9) - 1.0) * 100.0,
    );
    println!(
        "at rest      {rest_heap:.1} MiB live heap, {rest_rss:.1} MiB resident after the flush (every row durable, streams open)"
    );
    println!(
        "flush        {}",
        if flush.is_ok() {
            "completed"
        } else {
            "did not complete within 300 s"
        }
    );
    println!("sink         {report}");
    println!("files        {0}/samples.csv, {0}/soak.svg", dir.display());
    Ok(ok)
}

fn durable(ledger: &Ledger) -> u64 {
    ledger
        .0
        .lock()
        .unwrap()
        .committed
        .values()
        .map(|o| (o + 1) as u64)
        .sum()
}
