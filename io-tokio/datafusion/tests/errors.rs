//! A failure that retrying cannot fix fails the query, naming the table and the partition.

mod common;

use std::sync::Arc;

use datafusion::datasource::MemTable;
use zerobus_sink_datafusion::{WriteError, session_context};
use zerobus_sink_testkit::emulator::{Code, Fault};

use common::{Rig, TABLE, orders, run, schema, write_error};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_the_service_refuses_for_good_fails_the_query_naming_table_and_partition() {
    let rig = Rig::new().await;
    // The service refuses the table (NotFound is final): nothing retries it into success.
    rig.emulator.inject(
        TABLE,
        Fault::RejectOpen {
            code: Code::NotFound,
        },
    );
    let ctx = session_context();
    let source =
        MemTable::try_new(schema(), vec![vec![orders(0, 10)], vec![orders(10, 10)]]).unwrap();
    ctx.register_table("source", Arc::new(source)).unwrap();
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders (order_id BIGINT NOT NULL, customer VARCHAR NOT NULL, \
         amount DOUBLE NOT NULL) STORED AS ZEROBUS LOCATION '{TABLE}' {}",
        rig.options(", 'streams' '1'")
    ))
    .await
    .unwrap();
    let err = run(&ctx, "INSERT INTO orders SELECT * FROM source")
        .await
        .unwrap_err();
    let text = err.to_string();
    let (table, partition) = match write_error(&err) {
        WriteError::NotDurable {
            table,
            partition,
            source,
            ..
        } => {
            assert!(source.to_string().contains("NotFound"), "{source}");
            (table, partition)
        }
        // A partition that sends after the table failed is refused at once.
        WriteError::Refused {
            table,
            partition,
            reason,
            ..
        } => {
            assert!(reason.to_lowercase().contains("fail"), "{reason}");
            (table, partition)
        }
        other => panic!("expected a delivery failure, got {other}"),
    };
    assert_eq!(table, TABLE);
    assert!(*partition < 2, "{partition}");
    assert!(
        text.contains(&format!("table {TABLE}, input partition {partition}")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_options_are_refused_when_the_table_is_created() {
    let rig = Rig::new().await;
    let ctx = session_context();
    let create = |opts: String| {
        format!("CREATE EXTERNAL TABLE t (a BIGINT) STORED AS ZEROBUS LOCATION '{TABLE}' {opts}")
    };
    let unknown = ctx
        .sql(&create(rig.options(", 'colour' 'blue'")))
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("colour"), "{unknown}");
    assert!(unknown.to_string().contains(TABLE), "{unknown}");
    let missing = ctx
        .sql(&create(format!(
            "OPTIONS ('endpoint' '{}')",
            rig.emulator.url()
        )))
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("catalog_root"), "{missing}");
    let name = ctx
        .sql(&create(rig.options("")).replace(&format!("'{TABLE}'"), "'orders'"))
        .await
        .unwrap_err();
    assert!(name.to_string().contains("orders"), "{name}");
    // Without columns, the table must exist.
    let absent = ctx
        .sql(&format!(
            "CREATE EXTERNAL TABLE t STORED AS ZEROBUS LOCATION '{TABLE}' {}",
            rig.options("")
        ))
        .await
        .unwrap_err();
    assert!(absent.to_string().contains("does not exist"), "{absent}");
}
