//! The write boundary end to end: every mismatch kind under both bad-row policies, against the
//! local Zerobus with real Delta tables made by the local catalog backend, read back from disk.
//! For each cell: rows written (in the table) + rows handed back (from `send`, to `failed` or to
//! `isolated`) = rows submitted, and the rows that landed hold the converted values.

mod common;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use common::{Recorder, config};
use zerobus_sink::{Raw, Token};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::{DesiredTable, Policy, Role, TableCatalog, TableRef};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig, delta};
use zerobus_sink_tokio::{
    BadRows, Conversions, Provisioning, SendError, Sink, TableDef, ZerobusSink,
};

const ROWS: i64 = 10;
const MAX_ROW_BYTES: u64 = 4_096;

/// What differs between the batch and the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Clean,
    LosslessCast,
    UnfitValue,
    NullInRequired,
    NestedRefused,
    NestedAsJson,
    ZonedRefused,
    ZonedAsUtcWall,
    RowTooLarge,
}

const KINDS: [Kind; 9] = [
    Kind::Clean,
    Kind::LosslessCast,
    Kind::UnfitValue,
    Kind::NullInRequired,
    Kind::NestedRefused,
    Kind::NestedAsJson,
    Kind::ZonedRefused,
    Kind::ZonedAsUtcWall,
    Kind::RowTooLarge,
];

/// The table every cell writes: `id BIGINT NOT NULL, small INT, req STRING NOT NULL,
/// note STRING, at TIMESTAMP_NTZ`.
fn declared() -> Schema {
    Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int32, true),
        Field::new("req", DataType::Utf8, false),
        Field::new("note", DataType::Utf8, true),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
    ])
}

fn name(kind: Kind, policy: BadRows) -> String {
    format!("main.boundary.{kind:?}_{policy:?}").to_lowercase()
}

/// The batch for `kind`: ten rows, row 3 the bad one where the kind has one.
fn batch(kind: Kind) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..ROWS));
    let small: ArrayRef = match kind {
        Kind::LosslessCast => Arc::new(Int32Array::from_iter_values(0..10)),
        Kind::UnfitValue => Arc::new(Int64Array::from_iter_values(
            (0..ROWS).map(|i| if i == 3 { 1 << 40 } else { i }),
        )),
        _ => Arc::new(Int32Array::from_iter_values(0..10)),
    };
    let small_is_64 = kind == Kind::UnfitValue;
    let req: ArrayRef =
        Arc::new(StringArray::from_iter((0..ROWS).map(|i| {
            (!(kind == Kind::NullInRequired && i == 3)).then(|| format!("r{i}"))
        })));
    let note: ArrayRef = match kind {
        Kind::NestedRefused | Kind::NestedAsJson => {
            Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(
                (0..ROWS).map(|i| Some(vec![Some(i), Some(i + 1)])),
            ))
        }
        Kind::RowTooLarge => Arc::new(StringArray::from_iter_values((0..ROWS).map(|i| {
            if i == 3 {
                "x".repeat(8_192)
            } else {
                format!("n{i}")
            }
        }))),
        _ => Arc::new(StringArray::from_iter_values(
            (0..ROWS).map(|i| format!("n{i}")),
        )),
    };
    let micros = (0..ROWS).map(|i| 1_700_000_000_000_000 + i);
    let at = TimestampMicrosecondArray::from_iter_values(micros);
    let at: ArrayRef = match kind {
        Kind::ZonedRefused | Kind::ZonedAsUtcWall => Arc::new(at.with_timezone("UTC")),
        _ => Arc::new(at),
    };
    let small_field = if small_is_64 {
        Field::new("small", DataType::Int64, true)
    } else {
        Field::new("small", DataType::Int32, true)
    };
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        small_field,
        Field::new("req", DataType::Utf8, true),
        Field::new("note", note.data_type().clone(), true),
        Field::new("at", at.data_type().clone(), true),
    ]);
    let batch = RecordBatch::try_new(Arc::new(schema), vec![ids, small, req, note, at]).unwrap();
    if kind == Kind::LosslessCast {
        // `id` as Int32 for the BIGINT column.
        let ids: ArrayRef = Arc::new(Int32Array::from_iter_values(0..10));
        let mut fields: Vec<Field> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields[0] = Field::new("id", DataType::Int32, false);
        let mut columns = batch.columns().to_vec();
        columns[0] = ids;
        return RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    }
    batch
}

/// What a cell must come to: rows in the table, rows handed back, and how.
fn expected(kind: Kind, policy: BadRows) -> (i64, Outcome) {
    match (kind, policy) {
        (Kind::Clean | Kind::LosslessCast | Kind::NestedAsJson | Kind::ZonedAsUtcWall, _) => {
            (ROWS, Outcome::Landed)
        }
        (Kind::NestedRefused | Kind::ZonedRefused, _) => (0, Outcome::Unreconcilable),
        // A row too large for any message goes its own way whatever the policy.
        (Kind::RowTooLarge, _) => (ROWS - 1, Outcome::Isolated),
        (_, BadRows::FailBatch) => (0, Outcome::BadRows),
        (_, _) => (ROWS - 1, Outcome::Isolated),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Landed,
    Unreconcilable,
    BadRows,
    Isolated,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mismatch_kind_under_both_policies_lands_or_is_handed_back_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tables");
    let emulator = Emulator::start(
        EmulatorConfig::new(dir.path().join("wal"))
            .delta_root(&root)
            .materialize_lag(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    let catalog = LocalDelta::new(&root);
    let mut cells = Vec::new();
    let mut defs = Vec::new();
    for kind in KINDS {
        for policy in [BadRows::FailBatch, BadRows::Isolate] {
            let table = name(kind, policy);
            // The table exists before the sink, declared as it is: the mismatch is the batch's.
            let desired = DesiredTable::from_arrow(
                TableRef::parse(&table).unwrap(),
                &declared(),
                None,
                Role::Standard,
            )
            .unwrap();
            catalog
                .reconcile(&desired, &Policy::default())
                .await
                .unwrap();
            let conversions = match kind {
                Kind::NestedAsJson => Conversions::default().nested_to_json(),
                Kind::ZonedAsUtcWall => Conversions::default().zoned_to_utc_wall_time(),
                _ => Conversions::default(),
            };
            defs.push(
                TableDef::new(&table, batch(kind).schema())
                    .streams(1)
                    .conversions(conversions)
                    .bad_rows(policy),
            );
            cells.push((kind, policy, table));
        }
    }
    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::start_provisioned(
        config(&emulator).max_row_bytes(MAX_ROW_BYTES),
        defs,
        recorder.clone(),
        Provisioning::new(LocalDelta::new(&root), "boundary-test"),
    )
    .unwrap();
    let mut from_send = Vec::new();
    for (kind, policy, table) in &cells {
        let id = sink.table(table).unwrap();
        let token = Token::raw(format!("{kind:?}"), 0, ROWS - 1);
        let outcome = match sink.send(id, batch(*kind), token).await {
            Ok(receipt) => {
                drop(receipt);
                None
            }
            Err(SendError::Unreconcilable { columns, batch, .. }) => {
                let words: Vec<String> = columns.iter().map(ToString::to_string).collect();
                Some((Outcome::Unreconcilable, batch.num_rows(), words))
            }
            Err(SendError::BadRows { faults, batch, .. }) => {
                let words: Vec<String> = faults.iter().map(ToString::to_string).collect();
                Some((Outcome::BadRows, batch.num_rows(), words))
            }
            Err(e) => panic!("{table} ({kind:?}, {policy:?}): {e}"),
        };
        from_send.push(outcome);
    }
    // Each refused batch once more: the handle now knows the schema's plan (or its refusal)
    // and decides without the driver; the outcome must be the same, word for word.
    let mut refused_again = 0;
    for ((kind, policy, table), first) in cells.iter().zip(&from_send) {
        let Some((outcome, rows, words)) = first else {
            continue;
        };
        let id = sink.table(table).unwrap();
        let token = Token::raw(format!("{kind:?}"), 0, ROWS - 1);
        let again = match sink.send(id, batch(*kind), token).await {
            Err(SendError::Unreconcilable { columns, batch, .. }) => {
                let words: Vec<String> = columns.iter().map(ToString::to_string).collect();
                (Outcome::Unreconcilable, batch.num_rows(), words)
            }
            Err(SendError::BadRows { faults, batch, .. }) => {
                refused_again += 1;
                let words: Vec<String> = faults.iter().map(ToString::to_string).collect();
                (Outcome::BadRows, batch.num_rows(), words)
            }
            other => panic!("{table} ({kind:?}, {policy:?}) the second time: {other:?}"),
        };
        assert_eq!(&again, &(*outcome, *rows, words.clone()), "{table}");
    }
    assert!(refused_again > 0, "the handle refused bad rows itself");
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(10)).await;
    assert!(
        recorder.seen().failed.is_empty(),
        "{:?}",
        recorder.seen().failed
    );

    for ((kind, policy, table), sent) in cells.iter().zip(from_send) {
        let cell = format!("{kind:?} x {policy:?}");
        emulator.until_materialized(table).await;
        let (batches, _) = delta::read_table(&root, table).await.unwrap();
        let written: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let isolated: Vec<_> = recorder
            .seen()
            .isolated
            .iter()
            .filter(|(t, ..)| t == table)
            .map(|(_, offset, b, f)| {
                assert_eq!(*offset, ROWS - 1, "{cell}: the batch's position");
                (b.num_rows(), f.clone())
            })
            .collect();
        let (want_rows, want) = expected(*kind, *policy);
        let handed_back = match (&sent, want) {
            (None, Outcome::Landed) => 0,
            (None, Outcome::Isolated) => {
                let [(rows, faults)] = isolated.as_slice() else {
                    panic!("{cell}: isolated {isolated:?}");
                };
                assert!(faults[0].starts_with("row 3"), "{cell}: {faults:?}");
                *rows
            }
            (Some((outcome, rows, words)), want) if *outcome == want => {
                assert!(
                    words
                        .iter()
                        .any(|w| w.contains("row 3") || w.contains("column `")),
                    "{cell}: {words:?}"
                );
                *rows
            }
            (got, want) => panic!("{cell}: expected {want:?}, got {got:?}"),
        };
        assert_eq!(written as i64, want_rows, "{cell}: rows in the table");
        assert_eq!(
            written + handed_back,
            ROWS as usize,
            "{cell}: rows written + rows handed back = rows submitted"
        );
        check_values(*kind, want == Outcome::Isolated, &batches, &cell);
    }
    let refused: u64 = report.tables.iter().map(|t| t.loud_mismatches).sum();
    assert_eq!(
        refused, 4,
        "nested and zoned, refused under both policies: {report}"
    );
    let bad: u64 = report.tables.iter().map(|t| t.bad_rows).sum();
    assert_eq!(
        bad,
        6 + refused_again,
        "one bad row in each of 3 kinds x 2 policies, and in each batch refused again: {report}"
    );
    let isolated: u64 = report.tables.iter().map(|t| t.isolated_rows).sum();
    assert_eq!(
        isolated, 4,
        "under isolate, and oversized rows under both: {report}"
    );
}

/// The rows that landed hold what the boundary made of them.
fn check_values(kind: Kind, isolated: bool, batches: &[RecordBatch], cell: &str) {
    for b in batches {
        let ids = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let rows = b
            .column_by_name("_twg_source_row")
            .unwrap()
            .as_primitive::<Int32Type>();
        for r in 0..b.num_rows() {
            assert_eq!(i64::from(rows.value(r)), ids.value(r), "{cell}: row index");
            assert!(
                !(isolated && ids.value(r) == 3),
                "{cell}: the bad row never lands"
            );
        }
        match kind {
            Kind::NestedAsJson => {
                let note = b.column_by_name("note").unwrap().as_string::<i32>();
                for r in 0..b.num_rows() {
                    let i = ids.value(r);
                    assert_eq!(note.value(r), format!("[{i},{}]", i + 1), "{cell}");
                }
            }
            Kind::ZonedAsUtcWall => {
                let at = b.column_by_name("at").unwrap();
                let at = at.as_primitive::<TimestampMicrosecondType>();
                for r in 0..b.num_rows() {
                    assert_eq!(at.value(r), 1_700_000_000_000_000 + ids.value(r), "{cell}");
                }
            }
            Kind::LosslessCast => {
                let small = b
                    .column_by_name("small")
                    .unwrap()
                    .as_primitive::<Int32Type>();
                assert_eq!(small.null_count(), 0, "{cell}");
            }
            _ => {}
        }
    }
}
