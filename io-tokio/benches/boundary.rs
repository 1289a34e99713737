//! What the write boundary costs on the no-mismatch path: the same rows on the same emulator,
//! once through a sink that takes its table as it is (the batches already carry the six
//! `_twg_*` columns, so the wire bytes are the same) and once through a provisioned sink whose
//! boundary plans the schema, checks every batch and stamps the six columns itself. A third
//! run sends a nullable field for a NOT NULL column and an `Int32` for a BIGINT column (a null
//! check and a cast per batch, still no bad row). Alternated, 7 rounds; medians and ratios from
//! one run (the machine is noisy):
//!
//! ```text
//! cargo bench -p zerobus-sink-tokio --bench boundary
//! ```

mod common;
use common::Strict;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{Field, Schema};
use zerobus_sink::{PoolSizing, Raw, Token};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};
use zerobus_sink_tokio::{Provisioning, Sink, TableDef, ZerobusConfig, ZerobusSink};

const BATCHES: i64 = 1_000;
const ROWS: i64 = 5_000;

/// The payload of batch `b`; `mismatched`: `id` as a nullable Int32 (no nulls).
fn payload(b: i64, mismatched: bool) -> Vec<(&'static str, ArrayRef, bool)> {
    let r = b * ROWS..(b + 1) * ROWS;
    let id: ArrayRef = if mismatched {
        Arc::new(Int32Array::from_iter_values(r.clone().map(|i| i as i32)))
    } else {
        Arc::new(Int64Array::from_iter_values(r.clone()))
    };
    let customer: ArrayRef = Arc::new(StringArray::from_iter_values(
        r.clone().map(|i| format!("customer-{:05}", i % 10_007)),
    ));
    let amount: ArrayRef = Arc::new(Float64Array::from_iter_values(
        r.map(|i| ((i * 7_919) % 100_000) as f64 / 100.0),
    ));
    vec![
        ("id", id, mismatched),
        ("customer", customer, false),
        ("amount", amount, false),
    ]
}

fn batch(columns: Vec<(&'static str, ArrayRef, bool)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a, nullable)| Field::new(*n, a.data_type().clone(), *nullable))
        .collect();
    let arrays = columns.into_iter().map(|(_, a, _)| a).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

/// Batch `b` with the six columns a provisioned sink stamps, filled in beforehand.
fn stamped(b: i64) -> RecordBatch {
    let n = ROWS as usize;
    let mut columns = payload(b, false);
    let ts = TimestampMicrosecondArray::from_value(1_700_000_000_000_000, n).with_timezone("UTC");
    columns.extend([
        ("_twg_emit_ts", Arc::new(ts) as ArrayRef, false),
        (
            "_twg_source_topic",
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                "bench", n,
            ))),
            true,
        ),
        (
            "_twg_source_partition",
            Arc::new(Int32Array::from_value(0, n)),
            true,
        ),
        (
            "_twg_source_start",
            Arc::new(Int64Array::from_value(b, n)),
            true,
        ),
        (
            "_twg_source_end",
            Arc::new(Int64Array::from_value(b, n)),
            true,
        ),
        (
            "_twg_source_row",
            Arc::new(Int32Array::from_iter_values(0..ROWS as i32)),
            true,
        ),
    ]);
    batch(columns)
}

/// CPU time this process has used (user + system; Linux, 10 ms ticks): the emulator runs in
/// the same process, and its share is the same in every run.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After the command name: state is field 0, utime field 11, stime field 12.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Wall time and CPU time of sending every batch but the first.
async fn run(
    emu: &Emulator,
    catalog: Option<LocalDelta>,
    table: &str,
    batches: &[RecordBatch],
) -> (Duration, Duration) {
    let def = TableDef::new(table, batches[0].schema()).sizing(PoolSizing::fixed(1));
    let config = ZerobusConfig::new(emu.url());
    let mut sink = match catalog {
        None => ZerobusSink::<Raw>::start(config, vec![def], Strict).unwrap(),
        Some(c) => ZerobusSink::<Raw>::start_provisioned(
            config,
            vec![def],
            Strict,
            Provisioning::new(c, "bench"),
        )
        .unwrap(),
    };
    let id = sink.table(table).unwrap();
    // Untimed: the first batch opens the stream (and, provisioned, plans the schema through
    // the catalog: a one-off per schema, not the per-batch cost measured here).
    let _receipt = sink
        .send(id, batches[0].clone(), Token::raw("bench", 0, 0))
        .await
        .unwrap();
    sink.flush().await.unwrap();
    let (started, cpu_before) = (Instant::now(), cpu());
    for (i, b) in batches.iter().enumerate().skip(1) {
        let _receipt = sink
            .send(id, b.clone(), Token::raw("bench", 0, i as i64))
            .await
            .unwrap();
    }
    sink.flush().await.unwrap();
    let took = (started.elapsed(), cpu() - cpu_before);
    let report = sink.close(Duration::from_secs(60)).await;
    assert_eq!(report.rows, batches.len() as u64 * ROWS as u64);
    took
}

fn median(v: &[(Duration, Duration)], pick: fn(&(Duration, Duration)) -> Duration) -> Duration {
    let mut v: Vec<Duration> = v.iter().map(pick).collect();
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let plain: Vec<RecordBatch> = (0..BATCHES).map(stamped).collect();
        let clean: Vec<RecordBatch> = (0..BATCHES).map(|b| batch(payload(b, false))).collect();
        let cast: Vec<RecordBatch> = (0..BATCHES).map(|b| batch(payload(b, true))).collect();
        let dir = tempfile::tempdir().unwrap();
        let emu = Emulator::start(EmulatorConfig::new(dir.path().join("wal")))
            .await
            .unwrap();
        let tables = dir.path().join("tables");
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..7 {
            a.push(run(&emu, None, &format!("main.bench.plain{round}"), &plain).await);
            let catalog = || Some(LocalDelta::new(&tables));
            b.push(run(&emu, catalog(), &format!("main.bench.clean{round}"), &clean).await);
            // The table exists (BIGINT NOT NULL id) before the mismatched batches arrive.
            run(
                &emu,
                catalog(),
                &format!("main.bench.cast{round}"),
                &clean[..1],
            )
            .await;
            c.push(run(&emu, catalog(), &format!("main.bench.cast{round}"), &cast).await);
        }
        let rows = ((BATCHES - 1) * ROWS) as f64;
        println!("{BATCHES} batches x {ROWS} rows, 1 stream, 0 ms acks, zstd; medians of 7 (the first batch untimed)");
        println!("{:<46} {:>12} {:>9} {:>14} {:>9}", "", "rows/s", "ratio", "CPU us/batch", "ratio");
        let (wall_a, cpu_a) = (median(&a, |x| x.0), median(&a, |x| x.1));
        for (label, runs) in [
            ("as it is, _twg_* filled by the caller", &a),
            ("boundary, no mismatch (plan, check, stamp)", &b),
            ("boundary, null check + Int32->BIGINT cast", &c),
        ] {
            let (wall, cpu) = (median(runs, |x| x.0), median(runs, |x| x.1));
            println!(
                "{label:<46} {:>12.0} {:>8.3}x {:>14.0} {:>8.3}x",
                rows / wall.as_secs_f64(),
                wall_a.as_secs_f64() / wall.as_secs_f64(),
                cpu.as_secs_f64() * 1e6 / (BATCHES - 1) as f64,
                cpu_a.as_secs_f64() / cpu.as_secs_f64().max(1e-9),
            );
        }
    });
}
