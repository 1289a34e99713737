//! A breaking change between ack and publication (docs/decisions/0010): rows the service acked
//! before a widening and publishes after it go to the table's fallback directory, not the
//! table. With widening allowed, rows in flight on four streams and a drift that widens a
//! column, the sink quiesces the table and waits for publication before it alters it: every
//! row is in the table (read back with delta-rs) and none in the fallback directory. Without
//! the wait, zerobus-local puts the rows acked just before the alter in the fallback directory,
//! as the service does: what the wait is for.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch};
use common::{Recorder, config, ids};
use zerobus_sink::{Raw, Token};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::{Policy, TableRef};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig, delta, fallback};
use zerobus_sink_tokio::{Provisioning, Sink, TableDef, ZerobusSink};

const TABLE: &str = "main.bronze.readings";
const BATCHES: i64 = 40;
const ROWS: i64 = 250;
/// How long acked rows wait before the emulator publishes them.
const LAG: Duration = Duration::from_millis(1_500);

/// Readings `start .. start + n`: an id and a value, the value `Int32` before the drift and
/// `Int64` after it.
fn readings(start: i64, n: i64, wide: bool) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + n));
    let values: ArrayRef = if wide {
        Arc::new(Int64Array::from_iter_values(start..start + n))
    } else {
        Arc::new(Int32Array::from_iter_values(
            (start..start + n).map(|i| i32::try_from(i).unwrap()),
        ))
    };
    RecordBatch::try_from_iter([("id", ids), ("value", values)]).unwrap()
}

struct Landed {
    /// Each id in the table, with how often it occurs.
    in_table: BTreeMap<i64, u32>,
    /// Rows in the table whose `value` (read as `Int64`) is not their id.
    wrong_values: usize,
    in_fallback: BTreeMap<i64, u32>,
    fallback_rows: u64,
    failed: usize,
}

/// Sends half the readings narrow and half wide (the drift widens `value`) over four streams
/// of a table the sink provisions with widening allowed, waiting `publication_wait` before the
/// alter; returns where the rows landed.
async fn widen_under_load(publication_wait: Duration) -> Landed {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tables");
    let emu = Emulator::start(
        EmulatorConfig::new(dir.path().join("wal"))
            .delta_root(&root)
            .materialize_lag(LAG)
            .ack_latency(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    let recorder = Recorder::default();
    let table = TableDef::new(TABLE, readings(0, 1, false).schema()).streams(4);
    let provisioning = Provisioning::new(LocalDelta::new(&root), "quiesce-test")
        .policy(Policy {
            allow_widening: true,
            ..Policy::default()
        })
        .publication_wait(publication_wait);
    let mut sink =
        ZerobusSink::<Raw>::start_provisioned(config(&emu), vec![table], recorder.clone(), {
            provisioning
        })
        .unwrap();
    let id = sink.table(TABLE).unwrap();
    for b in 0..BATCHES {
        let wide = b >= BATCHES / 2;
        let token = Token::raw("readings", 0, b * ROWS + ROWS - 1);
        let batch = readings(b * ROWS, ROWS, wide);
        drop(sink.send(id, batch, token).await.unwrap());
    }
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(30)).await;
    assert_eq!(report.rows, (BATCHES * ROWS) as u64, "{report}");
    emu.until_materialized(TABLE).await;
    let (batches, _) = delta::read_table(&root, TABLE).await.unwrap();
    let location = LocalDelta::new(&root).location(&TableRef::parse(TABLE).unwrap());
    let fell_back = fallback::read(&location).unwrap();
    let failed = recorder.seen().failed.len();
    let wrong_values = batches
        .iter()
        .map(|b| {
            let id = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
            let value = b
                .column_by_name("value")
                .unwrap()
                .as_primitive::<Int64Type>();
            (0..b.num_rows())
                .filter(|&i| value.is_null(i) || value.value(i) != id.value(i))
                .count()
        })
        .sum();
    Landed {
        in_table: ids(&batches),
        wrong_values,
        in_fallback: ids(&fell_back),
        fallback_rows: emu.stats().fallback_rows,
        failed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_widening_under_load_waits_for_publication_and_nothing_falls_back() {
    // Twice the emulator's lag: every acked row is published before the alter.
    let landed = widen_under_load(2 * LAG).await;
    assert_eq!(landed.failed, 0);
    assert_eq!(landed.fallback_rows, 0, "{:?}", landed.in_fallback.len());
    assert!(landed.in_fallback.is_empty());
    assert_eq!(landed.in_table.len(), (BATCHES * ROWS) as usize);
    assert!(landed.in_table.values().all(|n| *n == 1), "each row once");
    // Rows written before the widening (their files INT) read back as BIGINT, intact.
    assert_eq!(landed.wrong_values, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_wait_rows_acked_before_the_widening_land_in_the_fallback_directory() {
    let landed = widen_under_load(Duration::ZERO).await;
    assert_eq!(landed.failed, 0, "every batch was acked");
    assert!(
        landed.fallback_rows > 0,
        "the alter came before the rows acked just before it were published"
    );
    // Nothing is lost: each row is in the table or in the fallback directory, once.
    assert_eq!(landed.fallback_rows as usize, landed.in_fallback.len());
    for id in 0..BATCHES * ROWS {
        let seen = landed.in_table.get(&id).copied().unwrap_or(0)
            + landed.in_fallback.get(&id).copied().unwrap_or(0);
        assert_eq!(seen, 1, "row {id}");
    }
}
