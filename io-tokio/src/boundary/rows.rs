//! Per batch, before send: the rows the table would refuse, and splitting them off.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow_schema::{ArrowError, DataType};

use super::apply;
use super::plan::{Plan, Source};
use super::rules::Rule;
use super::{BadRows, FaultKind, RowFault};

/// What the boundary makes of one batch, by its table's policy.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// No bad row: the batch goes as it is.
    Clean,
    /// The batch fails whole, every fault named (`FailBatch`, or no good row to isolate).
    Fail(Vec<RowFault>),
    /// The good rows go (with their indices in the batch); the bad ones are handed back.
    Isolate {
        good: RecordBatch,
        ids: Arc<[u32]>,
        bad: RecordBatch,
        faults: Vec<RowFault>,
    },
}

/// The verdict on `batch` under `plan` and `policy`. Rows too large for a message are
/// isolated whatever the policy (the rest of the batch goes), unless the batch also has rows
/// the policy fails it for.
pub(crate) fn judge(
    plan: &Plan,
    batch: &RecordBatch,
    max_row_bytes: u64,
    policy: BadRows,
) -> Result<Verdict, ArrowError> {
    let faults = plan.check(batch, max_row_bytes)?;
    if faults.is_empty() {
        return Ok(Verdict::Clean);
    }
    let only_too_large = faults
        .iter()
        .all(|f| matches!(f.kind, FaultKind::TooLarge { .. }));
    if policy == BadRows::Isolate || only_too_large {
        let (good, ids, bad) = split(batch, &faults)?;
        if good.num_rows() > 0 {
            return Ok(Verdict::Isolate {
                good,
                ids,
                bad,
                faults,
            });
        }
    }
    Ok(Verdict::Fail(faults))
}

impl Plan {
    /// Every row of `batch` the table would refuse, in row order (a row may have several
    /// faults). The no-mismatch path costs a null count per required column and one size sum.
    pub(crate) fn check(
        &self,
        batch: &RecordBatch,
        max_row_bytes: u64,
    ) -> Result<Vec<RowFault>, ArrowError> {
        let mut faults = Vec::new();
        if self.checks_rows {
            for source in &self.sources {
                let Source::Batch {
                    index,
                    rule,
                    required,
                    declared,
                } = source
                else {
                    continue;
                };
                let column = batch.column(*index);
                let name = || Some(batch.schema().field(*index).name().clone());
                if *required && column.null_count() > 0 {
                    for row in (0..column.len()).filter(|&i| column.is_null(i)) {
                        faults.push(RowFault {
                            row,
                            column: name(),
                            kind: FaultKind::NullInRequired,
                        });
                    }
                }
                let checked = matches!(
                    rule,
                    Rule::Cast { checked: true, .. } | Rule::UtcWall { checked: true }
                );
                if checked {
                    let unfit = unfit(column, rule)?;
                    for row in (0..unfit.len()).filter(|&i| unfit.value(i)) {
                        faults.push(RowFault {
                            row,
                            column: name(),
                            kind: FaultKind::DoesNotFit {
                                declared: declared.clone(),
                            },
                        });
                    }
                }
            }
        }
        if batch.get_array_memory_size() as u64 > max_row_bytes {
            for (row, bytes) in row_bytes(batch).into_iter().enumerate() {
                if bytes > max_row_bytes {
                    faults.push(RowFault {
                        row,
                        column: None,
                        kind: FaultKind::TooLarge {
                            bytes,
                            limit: max_row_bytes,
                        },
                    });
                }
            }
        }
        faults.sort_by_key(|f| f.row);
        Ok(faults)
    }
}

/// Per row, whether a checked cast loses its value: it became null, or does not come back
/// unchanged (an overflow, dropped digits, a time of day in a date).
fn unfit(column: &ArrayRef, rule: &Rule) -> Result<BooleanArray, ArrowError> {
    let cast = apply::convert(column, rule)?;
    let back = arrow_cast::cast(&cast, column.data_type())?;
    let source = match rule {
        // The wall time is the same number without the zone: compare as such.
        Rule::UtcWall { .. } => apply::without_zone(column)?,
        _ => column.clone(),
    };
    let back = if source.data_type() == back.data_type() {
        back
    } else {
        arrow_cast::cast(&back, source.data_type())?
    };
    let changed = arrow_ord::cmp::distinct(&back, &source)?;
    // A null stays null: only values that were there can be lost.
    Ok(changed
        .iter()
        .enumerate()
        .map(|(i, c)| Some(c.unwrap_or(false) && source.is_valid(i)))
        .collect())
}

/// Each row's size as the wire counts its values: fixed widths, string and binary lengths,
/// and for nested columns the row's slice of the buffers. Only computed when the whole batch
/// is larger than the limit (so that no row can be otherwise).
fn row_bytes(batch: &RecordBatch) -> Vec<u64> {
    let mut sizes = vec![0u64; batch.num_rows()];
    for column in batch.columns() {
        add_sizes(column, &mut sizes);
    }
    sizes
}

fn add_sizes(column: &ArrayRef, sizes: &mut [u64]) {
    fn add(sizes: &mut [u64], f: impl Fn(usize) -> usize) {
        for (i, s) in sizes.iter_mut().enumerate() {
            *s += f(i) as u64;
        }
    }
    match column.data_type() {
        DataType::Utf8 => {
            let a = column.as_string::<i32>();
            add(sizes, |i| a.value(i).len());
        }
        DataType::LargeUtf8 => {
            let a = column.as_string::<i64>();
            add(sizes, |i| a.value(i).len());
        }
        DataType::Binary => {
            let a = column.as_binary::<i32>();
            add(sizes, |i| a.value(i).len());
        }
        DataType::LargeBinary => {
            let a = column.as_binary::<i64>();
            add(sizes, |i| a.value(i).len());
        }
        DataType::Utf8View => {
            let a = column.as_string_view();
            add(sizes, |i| a.value(i).len());
        }
        DataType::BinaryView => {
            let a = column.as_binary_view();
            add(sizes, |i| a.value(i).len());
        }
        t => match t.primitive_width() {
            Some(width) => add(sizes, |_| width),
            None => add(sizes, |i| {
                column
                    .slice(i, 1)
                    .to_data()
                    .get_slice_memory_size()
                    .unwrap_or(0)
            }),
        },
    }
}

/// `batch` split by `faults`: the good rows with their indices in `batch`, and the bad rows.
pub(crate) fn split(
    batch: &RecordBatch,
    faults: &[RowFault],
) -> Result<(RecordBatch, Arc<[u32]>, RecordBatch), ArrowError> {
    let mut bad = vec![false; batch.num_rows()];
    for f in faults {
        if let Some(b) = bad.get_mut(f.row) {
            *b = true;
        }
    }
    let good_ids: Vec<u32> = (0..batch.num_rows())
        .filter(|&i| !bad[i])
        .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
        .collect();
    let bad_ids: UInt32Array = (0..batch.num_rows())
        .filter(|&i| bad[i])
        .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
        .collect();
    let good_rows = UInt32Array::from(good_ids.clone());
    let take = |ids: &UInt32Array| -> Result<RecordBatch, ArrowError> {
        let columns = batch
            .columns()
            .iter()
            .map(|c| arrow_select::take::take(c.as_ref(), ids, None))
            .collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new(batch.schema(), columns)
    };
    Ok((take(&good_rows)?, good_ids.into(), take(&bad_ids)?))
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::super::plan::live_of;
    use super::super::{BadRows, Conversions};
    use super::*;

    #[test]
    fn nulls_in_required_columns_values_that_do_not_fit_and_oversized_rows_are_named() {
        let table = Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("note", DataType::Utf8, true),
        ]);
        let live = live_of("main.bronze.t", &table);
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(1),
            None,
            Some(i64::from(i32::MAX) + 1),
            Some(4),
        ]));
        let notes: ArrayRef = Arc::new(StringArray::from(vec![
            "a".to_owned(),
            "b".to_owned(),
            "c".to_owned(),
            "x".repeat(300),
        ]));
        let batch = RecordBatch::try_from_iter([("id", ids), ("note", notes)]).unwrap();
        let plan = Plan::new(&batch.schema(), &live, Conversions::default()).unwrap();
        let faults = plan.check(&batch, 200).unwrap();
        let words: Vec<String> = faults.iter().map(ToString::to_string).collect();
        assert_eq!(
            words,
            [
                "row 1 column `id`: null in a NOT NULL column",
                "row 2 column `id`: value does not fit int",
                "row 3: 308 bytes, over the 200-byte message limit",
            ]
        );
        let (good, ids, bad) = split(&batch, &faults).unwrap();
        assert_eq!((good.num_rows(), bad.num_rows()), (1, 3));
        assert_eq!(&*ids, &[0]);
        assert!(plan.check(&good, 200).unwrap().is_empty());
    }

    /// One generated row: which faults it has.
    #[derive(Debug, Clone, Copy)]
    struct Row {
        null_required: bool,
        overflow: bool,
        sub_micro: bool,
        huge: bool,
    }

    impl quickcheck::Arbitrary for Row {
        fn arbitrary(g: &mut quickcheck::Gen) -> Row {
            let mut one_in = |n: u8| <u8 as quickcheck::Arbitrary>::arbitrary(g) % n == 0;
            Row {
                null_required: one_in(7),
                overflow: one_in(7),
                sub_micro: one_in(9),
                huge: one_in(11),
            }
        }
    }

    /// Every mismatch kind a batch can carry per row at once (a null in a NOT NULL column, an
    /// integer that overflows its column, a timestamp with sub-µs digits, a row over the size
    /// limit), under both policies: rows written + rows handed back = rows submitted, the
    /// handed-back rows are exactly the bad ones, and what goes is clean.
    #[test]
    fn rows_written_plus_rows_handed_back_equal_rows_submitted() {
        fn property(rows: Vec<Row>, isolate: bool) -> quickcheck::TestResult {
            if rows.is_empty() {
                return quickcheck::TestResult::discard();
            }
            const LIMIT: u64 = 200;
            let table = Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("req", DataType::Utf8, false),
                Field::new("small", DataType::Int32, true),
                Field::new("note", DataType::Utf8, true),
                Field::new(
                    "at",
                    DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None),
                    true,
                ),
            ]);
            let live = live_of("main.bronze.t", &table);
            let n = rows.len() as i64;
            let columns: Vec<(&str, ArrayRef)> = vec![
                ("id", Arc::new(Int64Array::from_iter_values(0..n))),
                (
                    "req",
                    Arc::new(StringArray::from_iter(
                        rows.iter().map(|r| (!r.null_required).then_some("r")),
                    )),
                ),
                (
                    "small",
                    Arc::new(Int64Array::from_iter_values(
                        rows.iter().map(|r| if r.overflow { 1 << 33 } else { 5 }),
                    )),
                ),
                (
                    "note",
                    Arc::new(StringArray::from_iter_values(
                        rows.iter()
                            .map(|r| if r.huge { "x".repeat(300) } else { "n".into() }),
                    )),
                ),
                (
                    "at",
                    Arc::new(arrow_array::TimestampNanosecondArray::from_iter_values(
                        rows.iter().map(|r| if r.sub_micro { 1_001 } else { 2_000 }),
                    )),
                ),
            ];
            let batch = RecordBatch::try_from_iter(columns).unwrap();
            let plan = Plan::new(&batch.schema(), &live, Conversions::default()).unwrap();
            let policy = if isolate {
                BadRows::Isolate
            } else {
                BadRows::FailBatch
            };
            let expected: Vec<usize> = (0..rows.len())
                .filter(|&i| {
                    let r = rows[i];
                    r.null_required || r.overflow || r.sub_micro || r.huge
                })
                .collect();
            let bad_rows = |faults: &[RowFault]| {
                let mut v: Vec<usize> = faults.iter().map(|f| f.row).collect();
                v.dedup();
                v
            };
            let (written, handed_back) = match judge(&plan, &batch, LIMIT, policy).unwrap() {
                Verdict::Clean => {
                    assert!(expected.is_empty(), "{expected:?}");
                    (batch.num_rows(), 0)
                }
                Verdict::Fail(faults) => {
                    assert_eq!(bad_rows(&faults), expected);
                    let only_huge = expected.iter().all(|&i| {
                        let r = rows[i];
                        r.huge && !(r.null_required || r.overflow || r.sub_micro)
                    });
                    assert!(
                        !(isolate || only_huge) || expected.len() == rows.len(),
                        "isolated unless no row is good"
                    );
                    (0, batch.num_rows())
                }
                Verdict::Isolate {
                    good,
                    ids,
                    bad,
                    faults,
                } => {
                    let only_huge = faults
                        .iter()
                        .all(|f| matches!(f.kind, FaultKind::TooLarge { .. }));
                    assert!(
                        isolate || only_huge,
                        "fail_batch isolates only oversized rows"
                    );
                    assert_eq!(bad_rows(&faults), expected);
                    let kept: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
                    let complement: Vec<usize> =
                        (0..rows.len()).filter(|i| !expected.contains(i)).collect();
                    assert_eq!(kept, complement);
                    assert!(
                        plan.check(&good, LIMIT).unwrap().is_empty(),
                        "what goes is clean"
                    );
                    (good.num_rows(), bad.num_rows())
                }
            };
            quickcheck::TestResult::from_bool(written + handed_back == rows.len())
        }
        quickcheck::QuickCheck::new()
            .tests(300)
            .quickcheck(property as fn(Vec<Row>, bool) -> quickcheck::TestResult);
    }
}
