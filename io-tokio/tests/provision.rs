//! Rows land in real Delta tables: the sink provisions and evolves its table through the local
//! catalog backend, the local Zerobus checks every stream against that table and materializes
//! what it acked into it, and delta-rs reads the table back. All over loopback TCP, with real
//! tables on disk.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use common::{Recorder, config};
use zerobus_sink::{Raw, Token};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::{DesiredTable, Policy, Role, TableCatalog, TableRef};
use zerobus_sink_testkit::emulator::{Count, Emulator, EmulatorConfig, Fault, delta};
use zerobus_sink_tokio::{EMIT_TS, Provisioning, SendError, Sink, TableDef, ZerobusSink};

const TABLE: &str = "main.bronze.events";

/// Events `start .. start + n`: an id and a name; with `amount`, a third column (the drift).
fn events(start: i64, n: i64, amount: bool) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + n));
    let names: ArrayRef = Arc::new(StringArray::from_iter_values(
        (start..start + n).map(|i| format!("event-{i}")),
    ));
    let mut columns = vec![("id", ids), ("name", names)];
    if amount {
        columns.push((
            "amount",
            Arc::new(Int64Array::from_iter_values(start..start + n)) as ArrayRef,
        ));
    }
    RecordBatch::try_from_iter(columns).unwrap()
}

struct Rig {
    dir: tempfile::TempDir,
    emulator: Emulator,
}

impl Rig {
    async fn new(f: impl FnOnce(EmulatorConfig) -> EmulatorConfig) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let config = EmulatorConfig::new(dir.path().join("wal"))
            .delta_root(dir.path().join("tables"))
            .materialize_lag(Duration::from_millis(50));
        let emulator = Emulator::start(f(config)).await.unwrap();
        Rig { dir, emulator }
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("tables")
    }

    fn sink(&self, recorder: &Recorder) -> ZerobusSink<Raw> {
        let table = TableDef::new(TABLE, events(0, 1, false).schema()).streams(2);
        let provisioning = Provisioning::new(LocalDelta::new(self.root()), "test-sink");
        ZerobusSink::start_provisioned(
            config(&self.emulator),
            vec![table],
            recorder.clone(),
            provisioning,
        )
        .unwrap()
    }

    /// The ids in the table once materialized, with how often each occurs.
    async fn ids(&self) -> BTreeMap<i64, u32> {
        self.emulator.until_materialized(TABLE).await;
        let (batches, _) = delta::read_table(&self.root(), TABLE).await.unwrap();
        let mut out = BTreeMap::new();
        for b in &batches {
            let col = b.column_by_name("id").unwrap();
            for v in col.as_any().downcast_ref::<Int64Array>().unwrap().values() {
                *out.entry(*v).or_default() += 1;
            }
        }
        out
    }
}

async fn send(sink: &mut ZerobusSink<Raw>, batch: RecordBatch) {
    let table = sink.table(TABLE).unwrap();
    let last = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .last()
        .copied()
        .unwrap();
    // Fire-and-forget: the confirmer hears of durability.
    drop(
        sink.send(table, batch, Token::raw("events", 0, last))
            .await
            .unwrap(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_creates_the_table_evolves_it_on_drift_and_every_confirmed_row_lands_in_it() {
    let rig = Rig::new(|c| c).await;
    let recorder = Recorder::default();
    let mut sink = rig.sink(&recorder);
    for i in 0..10 {
        send(&mut sink, events(i * 100, 100, false)).await;
    }
    // The drift: a new column, half way.
    for i in 10..20 {
        send(&mut sink, events(i * 100, 100, true)).await;
    }
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(10)).await;
    assert_eq!(report.rows, 2_000, "{report}");
    assert!(
        recorder.seen().failed.is_empty(),
        "{:?}",
        recorder.seen().failed
    );
    let t = &report.tables[0];
    assert_eq!(
        (t.schemas_reconciled, t.schemas_refused),
        (2, 0),
        "{report}"
    );
    // One reconcile per schema, not per batch; one reopen per slot that carried the new one.
    assert_eq!(report.metrics.reconciles_asked, 2);
    assert!(report.metrics.schema_switches <= 2, "{report:?}");

    // The table, as the catalog made it and as a reader sees it.
    let live = LocalDelta::new(rig.root())
        .describe(&TableRef::parse(TABLE).unwrap())
        .await
        .unwrap()
        .unwrap();
    let names: Vec<&str> = live.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "id",
            "name",
            EMIT_TS,
            "_twg_source_topic",
            "_twg_source_partition",
            "_twg_source_start",
            "_twg_source_end",
            "_twg_source_row",
            "amount"
        ]
    );
    assert!(
        live.properties.contains_key("twg.sink.test-sink"),
        "registered as a writer"
    );
    let ids = rig.ids().await;
    assert_eq!(ids.len(), 2_000);
    assert!(
        ids.values().all(|n| *n == 1),
        "no duplicates without faults"
    );
    let (batches, version) = delta::read_table(&rig.root(), TABLE).await.unwrap();
    assert!(version >= 3, "create, evolve, appends: version {version}");
    for b in &batches {
        let stamps = b.column_by_name(EMIT_TS).unwrap();
        assert_eq!(stamps.null_count(), 0, "every row stamped");
        let ids = b.column_by_name("id").unwrap();
        let ids = ids.as_any().downcast_ref::<Int64Array>().unwrap();
        let amount = b.column_by_name("amount").unwrap();
        let topic = b.column_by_name("_twg_source_topic").unwrap();
        let topic = topic.as_any().downcast_ref::<StringArray>().unwrap();
        let end = b.column_by_name("_twg_source_end").unwrap();
        let end = end.as_any().downcast_ref::<Int64Array>().unwrap();
        let index = b.column_by_name("_twg_source_row").unwrap();
        let index = index.as_any().downcast_ref::<Int32Array>().unwrap();
        for row in 0..b.num_rows() {
            // Each row names its batch (the token's offset: the batch's last id) and its index
            // in it: the key a reader deduplicates replays by.
            let id = ids.value(row);
            assert_eq!(topic.value(row), "events");
            assert_eq!(end.value(row), id / 100 * 100 + 99, "row {id}");
            assert_eq!(i64::from(index.value(row)), id % 100, "row {id}");
            // Rows from before the drift have no amount; after it, their own id.
            assert_eq!(
                amount.is_null(row),
                ids.value(row) < 1_000,
                "row {}",
                ids.value(row)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_drift_comes_back_from_send_naming_the_column_and_the_table_keeps_serving() {
    let rig = Rig::new(|c| c).await;
    let recorder = Recorder::default();
    let mut sink = rig.sink(&recorder);
    send(&mut sink, events(0, 100, false)).await;
    sink.flush().await.unwrap();
    // `id` as Int32 for the BIGINT column: a lossless cast, no evolution (and no refusal).
    let narrower = RecordBatch::try_from_iter([
        ("id", Arc::new(Int32Array::from(vec![100])) as ArrayRef),
        ("name", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
    ])
    .unwrap();
    let table = sink.table(TABLE).unwrap();
    let receipt = sink.send(table, narrower, Token::raw("events", 0, 100));
    drop(receipt.await.unwrap());
    // `id` as text: no rule converts it. Refused at describe time, from `send`, naming it.
    let text = RecordBatch::try_from_iter([
        ("id", Arc::new(StringArray::from(vec!["7"])) as ArrayRef),
        ("name", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
    ])
    .unwrap();
    for offset in [101, 102] {
        let err = sink
            .send(table, text.clone(), Token::raw("events", 0, offset))
            .await
            .unwrap_err();
        let SendError::Unreconcilable { columns, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(
            columns.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["column `id`: no conversion from Utf8 to the table's bigint"]
        );
        let (batch, token) = err.into_parts().unwrap();
        assert_eq!((batch.num_rows(), token.position().offset), (1, offset));
    }
    // The old schema still flows; nothing reached the confirmer's `failed`.
    send(&mut sink, events(200, 100, false)).await;
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(10)).await;
    assert_eq!(report.rows, 201, "{report}");
    let t = &report.tables[0];
    // The first schema, pushed out of the two the handle remembers by the later two, was
    // planned again when it came back: three reconciles.
    assert_eq!(
        (t.schemas_reconciled, t.schemas_refused),
        (3, 1),
        "{report}"
    );
    assert_eq!(
        t.type_reconcile.get("lossless_cast"),
        Some(&1),
        "{report:?}"
    );
    assert_eq!(t.type_reconcile.get("refused_unconvertible"), Some(&1));
    assert!(recorder.seen().failed.is_empty());
    assert_eq!(rig.ids().await.len(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_zerobus_refuses_an_absent_table_and_a_schema_that_does_not_fit() {
    let rig = Rig::new(|c| c).await;
    // A sink that takes its table as it is (no catalog): the table does not exist.
    let recorder = Recorder::default();
    let table = TableDef::new(TABLE, events(0, 1, false).schema());
    let mut sink =
        ZerobusSink::<Raw>::start(config(&rig.emulator), vec![table.clone()], recorder.clone())
            .unwrap();
    send(&mut sink, events(0, 10, false)).await;
    let _ = sink.flush().await;
    let _ = sink.close(Duration::from_secs(5)).await;
    let reason = recorder.seen().failed[0].2.clone();
    assert!(reason.contains("does not exist"), "{reason}");
    // The table exists (as a catalog made it, with the stamped column), but these batches do
    // not carry the stamped NOT NULL column: the service's schema rejection.
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]);
    let desired = DesiredTable::from_arrow(
        TableRef::parse(TABLE).unwrap(),
        &schema,
        None,
        Role::Standard,
    )
    .unwrap();
    LocalDelta::new(rig.root())
        .reconcile(&desired, &Policy::default())
        .await
        .unwrap();
    let recorder = Recorder::default();
    let mut sink =
        ZerobusSink::<Raw>::start(config(&rig.emulator), vec![table], recorder.clone()).unwrap();
    send(&mut sink, events(0, 10, false)).await;
    let _ = sink.flush().await;
    let _ = sink.close(Duration::from_secs(5)).await;
    let reason = recorder.seen().failed[0].2.clone();
    assert!(
        reason.contains("MISSING_REQUIRED_COLUMN") || reason.contains("schema"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sinks_provisioning_the_same_table_at_once_both_land_their_rows() {
    let rig = Rig::new(|c| c).await;
    let (a, b) = (Recorder::default(), Recorder::default());
    let mut one = rig.sink(&a);
    let mut two = rig.sink(&b);
    let (x, y) = tokio::join!(
        async {
            for i in 0..5 {
                send(&mut one, events(i * 100, 100, false)).await;
            }
            one.close(Duration::from_secs(10)).await
        },
        async {
            for i in 5..10 {
                send(&mut two, events(i * 100, 100, false)).await;
            }
            two.close(Duration::from_secs(10)).await
        }
    );
    assert_eq!((x.rows, y.rows), (500, 500), "{x}\n{y}");
    assert_eq!(rig.ids().await.len(), 1_000);
}

/// The fault matrix: a killed connection, a rotation, slow acks, and the local Zerobus
/// crashing and restarting while materializing. Every confirmed row is in the table once
/// materialized (replays may duplicate: at-least-once, counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_lose_no_confirmed_row_in_the_delta_table() {
    let rig = Rig::new(|c| c.ack_latency(Duration::from_millis(20))).await;
    rig.emulator.inject(
        TABLE,
        Fault::DropAfter {
            logged: Count::Rows(150),
        },
    );
    rig.emulator.inject(
        TABLE,
        Fault::RotateAfter {
            acked: Count::Rows(100),
            grace: Duration::from_millis(200),
        },
    );
    let recorder = Recorder::default();
    let mut sink = rig.sink(&recorder);
    for i in 0..20 {
        send(&mut sink, events(i * 50, 50, i >= 10)).await;
    }
    sink.flush().await.unwrap();
    // A crash of the local Zerobus between materializer rounds, then a restart on the same
    // directories: it resumes materializing from the table's last transaction.
    let addr = rig.emulator.addr();
    let Rig { dir, emulator } = rig;
    emulator.kill().await;
    let emulator = Emulator::bind(
        addr,
        EmulatorConfig::new(dir.path().join("wal"))
            .delta_root(dir.path().join("tables"))
            .materialize_lag(Duration::from_millis(50)),
    )
    .await
    .unwrap();
    let rig = Rig { dir, emulator };
    for i in 20..30 {
        send(&mut sink, events(i * 50, 50, true)).await;
    }
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(10)).await;
    assert!(
        recorder.seen().failed.is_empty(),
        "{:?}",
        recorder.seen().failed
    );
    assert_eq!(report.rows, 1_500);
    let ids = rig.ids().await;
    assert_eq!(ids.len(), 1_500, "every confirmed row is in the table");
    let duplicates: u32 = ids.values().map(|n| n - 1).sum();
    println!("fault matrix: 1500 rows confirmed, {duplicates} duplicates from replays");
    assert!(report.metrics.connections_opened > 2, "{report:?}");
}

/// Events `start .. start + n` with `extra` more columns, `c1 ..= c{extra}` (each drift adds
/// one).
fn drifted(start: i64, n: i64, extra: usize) -> RecordBatch {
    let mut fields = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(start..start + n)),
        Arc::new(StringArray::from_iter_values(
            (start..start + n).map(|i| format!("event-{i}")),
        )),
    ];
    for c in 1..=extra {
        fields.push(Field::new(format!("c{c}"), DataType::Int64, true));
        columns.push(Arc::new(Int64Array::from_iter_values(start..start + n)));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_drifts_on_and_on_keeps_a_bounded_number_of_schemas() {
    let rig = Rig::new(|c| c).await;
    let recorder = Recorder::default();
    let mut sink = rig.sink(&recorder);
    let mut next = 0;
    let mut send_of = async |sink: &mut ZerobusSink<Raw>, extra: usize| {
        send(sink, drifted(next, 50, extra)).await;
        next += 50;
    };
    // Twelve schemas, one after another, each flushed before the next.
    let drifts = 12;
    for extra in 0..drifts {
        send_of(&mut sink, extra).await;
        send_of(&mut sink, extra).await;
        sink.flush().await.unwrap();
    }
    let report = sink.report().await.unwrap();
    let t = &report.tables[0];
    assert_eq!(t.schemas_reconciled, 12, "{report}");
    // The two most recent stay planned; the ten before them were retired (before this fix,
    // all twelve stayed for the sink's life).
    assert_eq!(t.schemas_kept, 2, "{report:?}");
    // Alternating between the two latest costs nothing new: both are remembered.
    for i in 0..10 {
        send_of(&mut sink, drifts - 1 - i % 2).await;
    }
    sink.flush().await.unwrap();
    let report = sink.report().await.unwrap();
    assert_eq!(report.tables[0].schemas_reconciled, 12, "{report}");
    // The first schema, retired long ago, comes back: planned again, as a new one, and its
    // rows land.
    send_of(&mut sink, 0).await;
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(10)).await;
    let t = &report.tables[0];
    assert_eq!((t.schemas_reconciled, t.schemas_kept), (13, 2), "{report}");
    assert!(recorder.seen().failed.is_empty());
    let rows = 50 * (2 * drifts as u64 + 10 + 1);
    assert_eq!(report.rows, rows, "{report}");
    let ids = rig.ids().await;
    assert_eq!(ids.len() as u64, rows);
    assert!(
        ids.values().all(|n| *n == 1),
        "no duplicates without faults"
    );
}
