//! Shared setup: zerobus-local in process over loopback TCP, materializing Delta tables under a
//! catalog root, order rows, and the rows read back with their positions.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema, SchemaRef};
use datafusion::error::DataFusionError;
use zerobus_sink_datafusion::WriteError;
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig, delta};

pub const TABLE: &str = "main.bronze.orders";

/// Runs `sql` in `ctx` to its end: the batches it returns.
pub async fn run(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
) -> Result<Vec<RecordBatch>, DataFusionError> {
    ctx.sql(sql).await?.collect().await
}

/// zerobus-local materializing into `dir/tables` every 20 ms.
pub struct Rig {
    pub dir: tempfile::TempDir,
    pub emulator: Emulator,
    pub root: PathBuf,
}

impl Rig {
    pub async fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tables");
        let config = EmulatorConfig::new(dir.path().join("wal"))
            .delta_root(root.clone())
            .materialize_lag(Duration::from_millis(20));
        let emulator = Emulator::start(config).await.expect("emulator starts");
        Rig {
            dir,
            emulator,
            root,
        }
    }

    /// The OPTIONS clause of a `STORED AS ZEROBUS` table on this rig.
    pub fn options(&self, extra: &str) -> String {
        format!(
            "OPTIONS ('endpoint' '{}', 'catalog_root' '{}', 'proxy' 'direct'{extra})",
            self.emulator.url(),
            self.root.display()
        )
    }

    /// Every row of `table` once the emulator has materialized everything acked.
    pub async fn read(&self, table: &str) -> Vec<RecordBatch> {
        self.emulator.until_materialized(table).await;
        let (batches, _) = delta::read_table(&self.root, table)
            .await
            .expect("the Delta table reads back");
        batches
    }
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
    ]))
}

/// Orders `start .. start + n`.
pub fn orders(start: i64, n: i64) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + n));
    let customers: ArrayRef = Arc::new(StringArray::from_iter_values(
        (start..start + n).map(|i| format!("customer-{}", i % 97)),
    ));
    let amounts: ArrayRef = Arc::new(Float64Array::from_iter_values(
        (start..start + n).map(|i| (i % 1000) as f64 / 10.0),
    ));
    RecordBatch::try_new(schema(), vec![ids, customers, amounts]).expect("valid batch")
}

/// One row as read back: its order id and its position.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Landed {
    pub order_id: i64,
    pub job: String,
    pub partition: i32,
    /// `_twg_source_start + _twg_source_row`: the row's offset in its input partition.
    pub offset: i64,
}

/// Every row of `batches` with its position.
pub fn landed(batches: &[RecordBatch]) -> Vec<Landed> {
    let mut out = Vec::new();
    for b in batches {
        let col = |name: &str| {
            b.column_by_name(name)
                .unwrap_or_else(|| panic!("column {name} in {:?}", b.schema()))
                .clone()
        };
        let ids = col("order_id");
        let ids = ids.as_primitive::<Int64Type>();
        let topic = col("_twg_source_topic");
        let topic = topic.as_string::<i32>();
        let partition = col("_twg_source_partition");
        let partition = partition.as_primitive::<Int32Type>();
        let start = col("_twg_source_start");
        let start = start.as_primitive::<Int64Type>();
        let row = col("_twg_source_row");
        let row = row.as_primitive::<Int32Type>();
        for i in 0..b.num_rows() {
            assert!(!ids.is_null(i), "order_id is never null");
            out.push(Landed {
                order_id: ids.value(i),
                job: topic.value(i).to_owned(),
                partition: partition.value(i),
                offset: start.value(i) + i64::from(row.value(i)),
            });
        }
    }
    out.sort();
    out
}

/// The count an `INSERT` returned.
pub fn count(batches: &[RecordBatch]) -> u64 {
    assert_eq!(batches.len(), 1, "one batch: {batches:?}");
    assert_eq!(batches[0].num_rows(), 1, "one row: {batches:?}");
    batches[0]
        .column_by_name("count")
        .expect("a count column")
        .as_primitive::<datafusion::arrow::datatypes::UInt64Type>()
        .value(0)
}

/// The write error inside a query's error, however DataFusion wrapped it.
pub fn write_error(e: &DataFusionError) -> &WriteError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(w) = s.downcast_ref::<WriteError>() {
            return w;
        }
        if let Some(DataFusionError::External(inner)) = s.downcast_ref::<DataFusionError>() {
            source = Some(inner.as_ref());
            continue;
        }
        source = s.source();
    }
    panic!("no WriteError in {e}");
}
