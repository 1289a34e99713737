//! At emit: a batch as the stream carries it, its columns converted by their rules and the
//! sink's columns stamped.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    make_array,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_json::writer::{EncoderOptions, make_encoder};
use arrow_schema::{ArrowError, DataType, Field, TimeUnit};
use zerobus_sink::SourceSpan;

use super::plan::{Plan, Source, Stamp};
use super::rules::Rule;

/// Where a batch came from in the source, for the `_twg_source_*` columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) topic: String,
    pub(crate) partition: u32,
    pub(crate) start: i64,
    pub(crate) end: i64,
}

impl Origin {
    pub(crate) fn of(position: &impl SourceSpan) -> Origin {
        Origin {
            topic: position.topic().to_owned(),
            partition: position.partition(),
            start: position.start(),
            end: position.end(),
        }
    }
}

/// Each row's index in the batch as the pipeline sent it.
#[derive(Debug, Clone)]
pub(crate) enum RowIds {
    /// Consecutive, from this index.
    From(u64),
    /// Listed (the good rows of an isolated batch), from this position of the list.
    Listed(Arc<[u32]>, usize),
}

impl RowIds {
    /// The ids of the rows from `offset` on.
    pub(crate) fn skip(&self, offset: u64) -> RowIds {
        match self {
            RowIds::From(first) => RowIds::From(first + offset),
            RowIds::Listed(ids, at) => RowIds::Listed(
                ids.clone(),
                at + usize::try_from(offset).unwrap_or(usize::MAX),
            ),
        }
    }

    fn column(&self, rows: usize) -> Int32Array {
        let id = |i: u64| i32::try_from(i).unwrap_or(i32::MAX);
        match self {
            RowIds::From(first) => {
                Int32Array::from_iter_values((0..rows as u64).map(|i| id(first + i)))
            }
            RowIds::Listed(ids, at) => Int32Array::from_iter_values(
                ids.iter().skip(*at).take(rows).map(|&i| id(u64::from(i))),
            ),
        }
    }
}

/// What a batch is stamped with at emit.
#[derive(Debug)]
pub(crate) struct Stamps<'a> {
    /// The driver's clock when the batch went to a stream, in µs since the epoch (UTC).
    pub(crate) emit_micros: i64,
    pub(crate) origin: Option<&'a Origin>,
    pub(crate) rows: &'a RowIds,
}

/// The stamp columns that repeat from one send to the next (a source partition's topic and
/// number, the row indices of whole batches), kept from the last send, so that a send costs an
/// `Arc` clone for them rather than a new array.
#[derive(Debug, Default)]
pub(crate) struct StampCache {
    topic: Option<(String, usize, ArrayRef)>,
    partition: Option<(u32, usize, ArrayRef)>,
    rows: Option<(u64, usize, ArrayRef)>,
}

impl StampCache {
    fn topic(&mut self, topic: &str, n: usize) -> ArrayRef {
        match &self.topic {
            Some((t, m, a)) if t == topic && *m == n => a.clone(),
            _ => {
                let a: ArrayRef = Arc::new(repeated(topic, n));
                self.topic = Some((topic.to_owned(), n, a.clone()));
                a
            }
        }
    }

    fn partition(&mut self, partition: u32, n: usize) -> ArrayRef {
        match &self.partition {
            Some((p, m, a)) if *p == partition && *m == n => a.clone(),
            _ => {
                let value = i32::try_from(partition).unwrap_or(i32::MAX);
                let a: ArrayRef = Arc::new(Int32Array::from_value(value, n));
                self.partition = Some((partition, n, a.clone()));
                a
            }
        }
    }

    fn rows(&mut self, rows: &RowIds, n: usize) -> ArrayRef {
        match (rows, &self.rows) {
            (RowIds::From(first), Some((f, m, a))) if f == first && *m == n => a.clone(),
            (RowIds::From(first), _) => {
                let a: ArrayRef = Arc::new(rows.column(n));
                self.rows = Some((*first, n, a.clone()));
                a
            }
            (RowIds::Listed(..), _) => Arc::new(rows.column(n)),
        }
    }
}

impl Plan {
    /// `batch` as the stream carries it.
    pub(crate) fn apply(
        &self,
        batch: &RecordBatch,
        stamps: &Stamps<'_>,
        cache: &mut StampCache,
    ) -> Result<RecordBatch, ArrowError> {
        if self.identity {
            return Ok(batch.clone());
        }
        let n = batch.num_rows();
        let columns = self
            .sources
            .iter()
            .map(|source| {
                Ok(match source {
                    Source::Batch { index, rule, .. } => convert(batch.column(*index), rule)?,
                    Source::Stamp(stamp) => stamp_column(*stamp, n, stamps, cache),
                })
            })
            .collect::<Result<Vec<ArrayRef>, ArrowError>>()?;
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}

fn stamp_column(stamp: Stamp, n: usize, stamps: &Stamps<'_>, cache: &mut StampCache) -> ArrayRef {
    match (stamp, stamps.origin) {
        (Stamp::EmitTs, _) => Arc::new(
            TimestampMicrosecondArray::from_value(stamps.emit_micros, n).with_timezone("UTC"),
        ),
        (Stamp::Topic, Some(o)) => cache.topic(&o.topic, n),
        (Stamp::Partition, Some(o)) => cache.partition(o.partition, n),
        (Stamp::Start, Some(o)) => Arc::new(Int64Array::from_value(o.start, n)),
        (Stamp::End, Some(o)) => Arc::new(Int64Array::from_value(o.end, n)),
        (Stamp::Row, _) => cache.rows(stamps.rows, n),
        (Stamp::Topic, None) => Arc::new(StringArray::new_null(n)),
        (Stamp::Partition, None) => Arc::new(Int32Array::new_null(n)),
        (Stamp::Start | Stamp::End, None) => Arc::new(Int64Array::new_null(n)),
    }
}

/// `value` `n` times, built as two buffers (a builder's per-value appends cost several times
/// more, on every batch).
fn repeated(value: &str, n: usize) -> StringArray {
    let len = i32::try_from(value.len()).unwrap_or(i32::MAX);
    let offsets: ScalarBuffer<i32> = (0..=n)
        .map(|i| len.saturating_mul(i32::try_from(i).unwrap_or(i32::MAX)))
        .collect();
    let values = Buffer::from(value.repeat(n).into_bytes());
    StringArray::new(OffsetBuffer::new(offsets), values, None)
}

/// One column converted by its rule.
pub(crate) fn convert(column: &ArrayRef, rule: &Rule) -> Result<ArrayRef, ArrowError> {
    match rule {
        Rule::Pass => Ok(column.clone()),
        Rule::Cast { to, .. } => arrow_cast::cast(column, to),
        Rule::Json => json_text(column),
        Rule::UtcWall { .. } => arrow_cast::cast(
            &without_zone(column)?,
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        ),
    }
}

/// A zoned timestamp column's values (instants in UTC) as wall times without a zone: the same
/// numbers, relabelled (a cast would convert to the zone's local time).
pub(crate) fn without_zone(column: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let DataType::Timestamp(unit, Some(_)) = column.data_type() else {
        return Err(ArrowError::CastError(format!(
            "{} is not a zoned timestamp",
            column.data_type()
        )));
    };
    let data = column
        .to_data()
        .into_builder()
        .data_type(DataType::Timestamp(*unit, None))
        .build()?;
    Ok(make_array(data))
}

/// Each value as JSON text (nulls stay null).
fn json_text(column: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let field = Arc::new(Field::new("value", column.data_type().clone(), true));
    let options = EncoderOptions::default();
    let mut encoder = make_encoder(&field, column.as_ref(), &options)?;
    let mut out = StringBuilder::with_capacity(column.len(), column.len() * 16);
    let mut buffer = Vec::new();
    for i in 0..column.len() {
        if column.is_null(i) {
            out.append_null();
            continue;
        }
        buffer.clear();
        encoder.encode(i, &mut buffer);
        out.append_value(String::from_utf8_lossy(&buffer));
    }
    Ok(Arc::new(out.finish()))
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::TimestampMicrosecondType;
    use arrow_array::{Int64Array, ListArray};
    use arrow_schema::Schema;

    use super::super::Conversions;
    use super::super::plan::{EMIT_TS, live_of};
    use super::*;

    #[test]
    fn columns_are_converted_and_every_row_is_stamped_with_its_origin() {
        let table = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("tags", DataType::Utf8, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Field::new(
                EMIT_TS,
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
            Field::new("_twg_source_topic", DataType::Utf8, false),
            Field::new("_twg_source_partition", DataType::Int32, false),
            Field::new("_twg_source_start", DataType::Int64, false),
            Field::new("_twg_source_end", DataType::Int64, false),
            Field::new("_twg_source_row", DataType::Int32, false),
        ]);
        let live = live_of("main.bronze.t", &table);
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let tags: ArrayRef = Arc::new(ListArray::from_iter_primitive::<
            arrow_array::types::Int64Type,
            _,
            _,
        >(vec![Some(vec![Some(1), Some(2)]), None]));
        let at: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![1_000_000, 2_000_000]).with_timezone("+05:00"),
        );
        let batch = RecordBatch::try_from_iter([("id", ids), ("tags", tags), ("at", at)]).unwrap();
        let conversions = Conversions::default()
            .nested_to_json()
            .zoned_to_utc_wall_time();
        let plan = Plan::new(&batch.schema(), &live, conversions).unwrap();
        let origin = Origin {
            topic: "orders".into(),
            partition: 3,
            start: 10,
            end: 19,
        };
        let rows = RowIds::Listed(Arc::from(vec![4u32, 9]), 0);
        let stamps = Stamps {
            emit_micros: 42,
            origin: Some(&origin),
            rows: &rows,
        };
        let mut cache = StampCache::default();
        let wire = plan.apply(&batch, &stamps, &mut cache).unwrap();
        let again = plan.apply(&batch, &stamps, &mut cache).unwrap();
        assert_eq!(wire, again, "the cached stamps are the same columns");
        let tags = wire.column_by_name("tags").unwrap().as_string::<i32>();
        assert_eq!(tags.value(0), "[1,2]");
        assert!(tags.is_null(1), "a null stays null");
        let at = wire
            .column_by_name("at")
            .unwrap()
            .as_primitive::<TimestampMicrosecondType>();
        assert_eq!(
            at.value(0),
            1_000_000,
            "the UTC wall time: the same instant"
        );
        assert_eq!(at.timezone(), None);
        let topic = wire
            .column_by_name("_twg_source_topic")
            .unwrap()
            .as_string::<i32>();
        assert_eq!((topic.value(0), topic.value(1)), ("orders", "orders"));
        let row = wire.column_by_name("_twg_source_row").unwrap();
        let row = row.as_primitive::<arrow_array::types::Int32Type>();
        assert_eq!(row.values().as_ref(), &[4, 9]);
        let end = wire.column_by_name("_twg_source_end").unwrap();
        assert_eq!(
            end.as_primitive::<arrow_array::types::Int64Type>().value(1),
            19
        );
        assert_eq!(RowIds::From(5).skip(2).column(2).values().as_ref(), &[7, 8]);
    }
}
