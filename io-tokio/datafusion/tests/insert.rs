//! `INSERT INTO` a Zerobus table over real loopback TCP against zerobus-local, read back from
//! the Delta table by delta-rs (an independent reader): every row once, with its position.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::datasource::MemTable;
use datafusion::parquet::arrow::ArrowWriter;
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_datafusion::{Sinks, ZerobusCatalog, ZerobusTableFactory, session_context};
use zerobus_sink_tokio::{ProxyConfig, ZerobusConfig};

use common::{Rig, TABLE, count, landed, orders, run, schema};

const COLUMNS: &str =
    "(order_id BIGINT NOT NULL, customer VARCHAR NOT NULL, amount DOUBLE NOT NULL)";

/// Four partitions of 1,500 orders each (two batches apiece): partition `p` holds orders
/// `p * 1500 ..` in order.
fn partitions() -> Vec<Vec<datafusion::arrow::array::RecordBatch>> {
    (0..4)
        .map(|p| vec![orders(p * 1500, 700), orders(p * 1500 + 700, 800)])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_partition_lands_every_row_once_with_its_position() {
    let rig = Rig::new().await;
    let ctx = session_context();
    let source = MemTable::try_new(schema(), partitions()).unwrap();
    ctx.register_table("source", Arc::new(source)).unwrap();
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders {COLUMNS} STORED AS ZEROBUS LOCATION '{TABLE}' {}",
        rig.options(", 'job_id' 'job-a'")
    ))
    .await
    .unwrap();

    let plan = run(&ctx, "EXPLAIN INSERT INTO orders SELECT * FROM source")
        .await
        .unwrap();
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&plan)
        .unwrap()
        .to_string();
    assert!(text.contains("ZerobusWriteExec"), "{text}");
    assert!(
        !text.contains("RepartitionExec"),
        "the input's partitions write as they are: {text}"
    );

    let out = run(&ctx, "INSERT INTO orders SELECT * FROM source")
        .await
        .unwrap();
    assert_eq!(count(&out), 6000, "the count is every row");

    let rows = landed(&rig.read(TABLE).await);
    assert_eq!(rows.len(), 6000, "every row once, no more");
    for (i, row) in rows.iter().enumerate() {
        let id = i as i64;
        assert_eq!(row.order_id, id, "every order id once");
        assert_eq!(row.job, "job-a");
        assert_eq!(i64::from(row.partition), id / 1500, "{row:?}");
        assert_eq!(
            row.offset,
            id % 1500,
            "its offset in its partition: {row:?}"
        );
    }

    let read = ctx.sql("SELECT * FROM orders").await;
    let refused = match read {
        Err(e) => e.to_string(),
        Ok(df) => df.collect().await.unwrap_err().to_string(),
    };
    assert!(refused.contains("write-only"), "{refused}");
    assert!(refused.contains(TABLE), "{refused}");
}

/// Three Parquet files of 2,000 orders.
fn parquet_files(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    for f in 0..3i64 {
        let file = std::fs::File::create(dir.join(format!("part-{f}.parquet"))).unwrap();
        let mut writer = ArrowWriter::try_new(file, schema(), None).unwrap();
        for b in 0..4 {
            writer
                .write(&orders(1000 + f * 2000 + b * 500, 500))
                .unwrap();
        }
        writer.close().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_files_land_through_the_catalog_without_a_create() {
    let rig = Rig::new().await;
    let sinks = Sinks::default();
    let ctx = zerobus_sink_datafusion::with_zerobus(
        datafusion::execution::SessionStateBuilder::new().with_default_features(),
        ZerobusTableFactory::new(sinks.clone()),
    )
    .enable_url_table();
    // The table is created by a first INSERT through CREATE EXTERNAL TABLE.
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE orders {COLUMNS} STORED AS ZEROBUS LOCATION '{TABLE}' {}",
        rig.options("")
    ))
    .await
    .unwrap();
    let first = run(
        &ctx,
        "INSERT INTO orders VALUES (1, 'first', 1.5), (2, 'second', 2.5)",
    )
    .await
    .unwrap();
    assert_eq!(count(&first), 2);

    // Then by its three-part name alone, from Parquet files, under a job id set in the session.
    let config = ZerobusConfig::new(rig.emulator.url()).proxy(ProxyConfig::Direct);
    let catalog = ZerobusCatalog::new("main", config, LocalDelta::new(&rig.root), sinks);
    ctx.register_catalog("main", Arc::new(catalog));
    let files = rig.dir.path().join("files");
    parquet_files(&files);
    ctx.sql("SET zerobus.job_id = 'job-files'").await.unwrap();
    let out = run(
        &ctx,
        &format!(
            "INSERT INTO main.bronze.orders SELECT * FROM '{}/*.parquet'",
            files.display()
        ),
    )
    .await
    .unwrap();
    assert_eq!(count(&out), 6000);

    let rows = landed(&rig.read(TABLE).await);
    let ids: Vec<i64> = rows.iter().map(|r| r.order_id).collect();
    let mut expected: Vec<i64> = vec![1, 2];
    expected.extend(1000..7000);
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, expected, "every row once");
    // Each input partition's rows hold the offsets 0..n exactly once.
    let mut offsets: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.job == "job-files") {
        offsets.entry(r.partition).or_default().push(r.offset);
    }
    assert_eq!(offsets.values().map(Vec::len).sum::<usize>(), 6000);
    for (partition, mut o) in offsets {
        o.sort_unstable();
        let n = o.len() as i64;
        assert_eq!(o, (0..n).collect::<Vec<_>>(), "partition {partition}");
    }
    let first_job: Vec<&str> = rows
        .iter()
        .filter(|r| r.order_id < 1000)
        .map(|r| r.job.as_str())
        .collect();
    assert_eq!(first_job.len(), 2);
    assert!(
        first_job.iter().all(|j| *j != "job-files" && !j.is_empty()),
        "the first INSERT had a generated job id: {first_job:?}"
    );
}
