//! The target follows the query's output schema: a new column is added; an incompatible change
//! is refused loudly, naming the table, the partition and the column.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::datasource::MemTable;
use zerobus_sink_datafusion::{WriteError, session_context};

use common::{Rig, TABLE, count, orders, run, schema, write_error};

const COLUMNS: &str = "order_id BIGINT NOT NULL, customer VARCHAR NOT NULL, amount DOUBLE NOT NULL";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_column_in_the_query_adds_it_to_the_table() {
    let rig = Rig::new().await;
    let ctx = session_context();
    let source =
        MemTable::try_new(schema(), vec![vec![orders(0, 100)], vec![orders(100, 100)]]).unwrap();
    ctx.register_table("source", Arc::new(source)).unwrap();
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders ({COLUMNS}) STORED AS ZEROBUS LOCATION '{TABLE}' {}",
        rig.options("")
    ))
    .await
    .unwrap();
    let before = run(&ctx, "INSERT INTO orders SELECT * FROM source")
        .await
        .unwrap();
    assert_eq!(count(&before), 200);

    // The same table declared with one more column: its first INSERT adds the column.
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders_v2 ({COLUMNS}, channel VARCHAR) STORED AS ZEROBUS \
         LOCATION '{TABLE}' {}",
        rig.options("")
    ))
    .await
    .unwrap();
    let after = run(
        &ctx,
        "INSERT INTO orders_v2 SELECT order_id + 200, customer, amount, 'web' FROM source",
    )
    .await
    .unwrap();
    assert_eq!(count(&after), 200);

    let batches = rig.read(TABLE).await;
    let mut web = 0;
    let mut none = 0;
    for b in &batches {
        let channel = b
            .column_by_name("channel")
            .expect("the table gained the column `channel`");
        let channel = channel.as_string::<i32>();
        let ids = b
            .column_by_name("order_id")
            .unwrap()
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        for i in 0..b.num_rows() {
            if ids.value(i) < 200 {
                assert!(
                    channel.is_null(i),
                    "rows written before the column have none"
                );
                none += 1;
            } else {
                assert_eq!(channel.value(i), "web");
                web += 1;
            }
        }
    }
    assert_eq!((none, web), (200, 200), "every row once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incompatible_change_fails_naming_the_table_partition_and_column() {
    let rig = Rig::new().await;
    let ctx = session_context();
    let source =
        MemTable::try_new(schema(), vec![vec![orders(0, 50)], vec![orders(50, 50)]]).unwrap();
    ctx.register_table("source", Arc::new(source)).unwrap();
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders ({COLUMNS}) STORED AS ZEROBUS LOCATION '{TABLE}' {}",
        rig.options("")
    ))
    .await
    .unwrap();
    let first = run(&ctx, "INSERT INTO orders SELECT * FROM source")
        .await
        .unwrap();
    assert_eq!(count(&first), 100);

    // `amount` as text cannot go into the table's DOUBLE column: refused, not written.
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders_text (order_id BIGINT NOT NULL, customer VARCHAR NOT NULL, \
         amount VARCHAR NOT NULL) STORED AS ZEROBUS LOCATION '{TABLE}' {}",
        rig.options("")
    ))
    .await
    .unwrap();
    let err = run(
        &ctx,
        "INSERT INTO orders_text SELECT order_id, customer, 'lots' FROM source",
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    match write_error(&err) {
        WriteError::Refused {
            table,
            partition,
            start,
            reason,
            ..
        } => {
            assert_eq!(table, TABLE);
            assert!(
                *partition < 2,
                "one of the two input partitions: {partition}"
            );
            assert_eq!(*start, 0, "its first batch");
            assert!(reason.contains("amount"), "the column is named: {reason}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
    assert!(
        text.contains(TABLE) && text.contains("input partition"),
        "{text}"
    );
    let rows: usize = rig.read(TABLE).await.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 100, "nothing of the refused INSERT was written");
}
