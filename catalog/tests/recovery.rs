//! The recovery read path's selection (a source range's rows, each once) and the coverage
//! store on real Delta tables: saved, reopened after a restart, merged across sinks.
#![cfg(feature = "local")]

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use quickcheck::{Arbitrary, Gen, QuickCheck};
use zerobus_sink::{Coverage, CoverageRange};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::local::coverage_store::{CoverageStore, coverage_table};
use zerobus_sink_catalog::recovery::{RecoveryError, select};
use zerobus_sink_catalog::{SinkId, TableRef};

fn raw() -> TableRef {
    TableRef::parse("main.raw.orders").unwrap()
}

/// A row as a sink stamps it: (payload id, topic, partition, start, end, row).
type Row<'a> = (i64, &'a str, i32, i64, i64, i32);

/// Rows as a sink stamps them.
fn stamped(rows: &[Row<'_>]) -> RecordBatch {
    let col = |f: fn(&Row<'_>) -> i64| {
        Arc::new(Int64Array::from_iter_values(rows.iter().map(f))) as ArrayRef
    };
    RecordBatch::try_from_iter([
        ("id", col(|r| r.0)),
        (
            "_twg_source_topic",
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))) as ArrayRef,
        ),
        (
            "_twg_source_partition",
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2))) as ArrayRef,
        ),
        ("_twg_source_start", col(|r| r.3)),
        ("_twg_source_end", col(|r| r.4)),
        (
            "_twg_source_row",
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.5))) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    let mut out: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn a_range_selects_the_batches_that_meet_it_each_row_once() {
    // Two derived batches of orders/0 (spans 0-9 and 10-19, two rows each), a replay of the
    // first, one of orders/1 and one of another topic.
    let first = stamped(&[(1, "orders", 0, 0, 9, 0), (2, "orders", 0, 0, 9, 1)]);
    let second = stamped(&[(3, "orders", 0, 10, 19, 0), (4, "orders", 0, 10, 19, 1)]);
    let replay = stamped(&[(1, "orders", 0, 0, 9, 0), (2, "orders", 0, 0, 9, 1)]);
    let other = stamped(&[(5, "orders", 1, 0, 9, 0), (6, "refunds", 0, 0, 9, 0)]);
    let batches = [first, replay, second, other];
    let all = select(&raw(), &batches, &CoverageRange::new("orders", 0, 0, 19)).unwrap();
    assert_eq!(ids(&all.batches), vec![1, 2, 3, 4]);
    assert_eq!((all.rows, all.duplicates), (4, 2));
    assert_eq!(
        all.visible,
        Coverage::from_durable([CoverageRange::new("orders", 0, 0, 19)])
    );
    // A range that meets a span returns its batch whole.
    let part = select(&raw(), &batches, &CoverageRange::new("orders", 0, 15, 15)).unwrap();
    assert_eq!(ids(&part.batches), vec![3, 4]);
    let none = select(&raw(), &batches, &CoverageRange::new("orders", 0, 20, 99)).unwrap();
    assert_eq!((none.rows, none.batches.len()), (0, 0));
}

#[test]
fn missing_is_what_the_coverage_claims_in_the_range_and_the_table_does_not_show() {
    let batches = [stamped(&[
        (1, "orders", 0, 0, 9, 0),
        (3, "orders", 0, 20, 29, 0),
    ])];
    let range = CoverageRange::new("orders", 0, 5, 34);
    let selection = select(&raw(), &batches, &range).unwrap();
    let durable = Coverage::from_durable([
        CoverageRange::new("orders", 0, 0, 39),
        CoverageRange::new("orders", 1, 0, 99),
    ]);
    assert_eq!(
        selection.missing(&range, &durable),
        vec![(10, 19), (30, 34)]
    );
    assert_eq!(selection.missing(&range, &Coverage::new()), vec![]);
}

#[test]
fn a_table_without_source_positions_is_named() {
    let plain =
        RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef)])
            .unwrap();
    let err = select(&raw(), &[plain], &CoverageRange::new("orders", 0, 0, 9)).unwrap_err();
    assert!(
        matches!(
            err,
            RecoveryError::Column {
                column: "_twg_source_topic",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("main.raw.orders: column _twg_source_topic: missing")
    );
}

/// Random stamped rows with replays: what `select` returns is exactly the distinct rows whose
/// span meets the range.
#[derive(Debug, Clone)]
struct Rows(Vec<(i64, i64, i32)>);

impl Arbitrary for Rows {
    fn arbitrary(g: &mut Gen) -> Rows {
        let n = usize::arbitrary(g) % 40;
        Rows(
            (0..n)
                .map(|_| {
                    let start = i64::from(u8::arbitrary(g) % 50);
                    (
                        start,
                        start + i64::from(u8::arbitrary(g) % 8),
                        i32::from(u8::arbitrary(g) % 3),
                    )
                })
                .collect(),
        )
    }
}

#[test]
fn selection_is_the_distinct_rows_that_meet_the_range() {
    fn property(rows: Rows, a: u8, b: u8) -> bool {
        let (lo, hi) = (i64::from(a.min(b) % 60), i64::from(a.max(b) % 60));
        let stamped_rows: Vec<_> = rows
            .0
            .iter()
            .enumerate()
            .map(|(i, &(s, e, r))| (i as i64, "t", 0, s, e, r))
            .collect();
        let batch = stamped(&stamped_rows);
        let Ok(sel) = select(&raw(), &[batch], &CoverageRange::new("t", 0, lo, hi)) else {
            return false;
        };
        let mut want = std::collections::BTreeSet::new();
        let inside: Vec<_> = rows
            .0
            .iter()
            .filter(|(s, e, _)| *s <= hi && *e >= lo)
            .collect();
        for r in &inside {
            want.insert(**r);
        }
        sel.rows as usize == want.len() && sel.duplicates as usize == inside.len() - want.len()
    }
    QuickCheck::new()
        .tests(300)
        .quickcheck(property as fn(Rows, u8, u8) -> bool);
}

#[tokio::test]
async fn the_coverage_store_survives_a_restart_and_merges_sinks() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    let a = SinkId("sink-a".into());
    let b = SinkId("sink-b".into());
    let mut store_a = CoverageStore::open(catalog.clone(), &raw(), a.clone())
        .await
        .unwrap();
    assert_eq!(store_a.table(), &coverage_table(&raw()).unwrap());
    assert_eq!(store_a.saved(), &Coverage::new());

    let mut covered = Coverage::from_durable([CoverageRange::new("orders", 0, 0, 99)]);
    assert_eq!(store_a.save(&covered).await.unwrap(), 1);
    assert_eq!(store_a.save(&covered).await.unwrap(), 0, "nothing new");
    // Grown on both sides of a gap: only the new pieces are appended.
    covered.merge(&Coverage::from_durable([
        CoverageRange::new("orders", 0, 100, 149),
        CoverageRange::new("orders", 0, 200, 249),
    ]));
    assert_eq!(store_a.save(&covered).await.unwrap(), 2);

    // Another sink of the same raw table, concurrently.
    let mut store_b = CoverageStore::open(catalog.clone(), &raw(), b.clone())
        .await
        .unwrap();
    let for_b = Coverage::from_durable([CoverageRange::new("orders", 0, 150, 199)]);
    let for_a = Coverage::from_durable([CoverageRange::new("orders", 1, 0, 9)]);
    let (saved_b, saved_a) = tokio::join!(store_b.save(&for_b), store_a.save(&for_a));
    assert_eq!((saved_b.unwrap(), saved_a.unwrap()), (1, 1));

    // A restart: a new store loads what each sink saved, and the union of every sink.
    drop((store_a, store_b));
    let reopened = CoverageStore::open(catalog.clone(), &raw(), a.clone())
        .await
        .unwrap();
    assert_eq!(
        reopened.saved(),
        &Coverage::from_durable([
            CoverageRange::new("orders", 0, 0, 149),
            CoverageRange::new("orders", 0, 200, 249),
            CoverageRange::new("orders", 1, 0, 9),
        ])
    );
    assert_eq!(reopened.saved().gaps("orders", 0, 0, 249), vec![(150, 199)]);
    let every_sink = reopened.load(None).await.unwrap();
    assert_eq!(every_sink.gaps("orders", 0, 0, 249), vec![]);
    assert_eq!(
        reopened.load(Some(&b)).await.unwrap(),
        Coverage::from_durable([CoverageRange::new("orders", 0, 150, 199)])
    );
}
