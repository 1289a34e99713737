//! The local backend on object storage: tables under `s3://bucket/prefix` on moto's S3 server
//! (real storage on loopback, started by `scripts/with-object-storage`, its URL in
//! `ZEROBUS_TEST_S3_ENDPOINT`): created, described, vended, read back, and the coverage store
//! across a restart and two sinks racing for the same Delta version. Without moto each test
//! prints `SKIPPED` and passes; CI runs them with it.
#![cfg(feature = "local")]

mod storage;

use arrow_schema::{DataType, Field, Schema};
use zerobus_sink::{Coverage, CoverageRange};
use zerobus_sink_catalog::coverage::CoverageStore;
use zerobus_sink_catalog::local::{LocalDelta, S3Storage};
use zerobus_sink_catalog::{
    Access, CloudCredentials, DesiredTable, Policy, Role, SinkId, TableCatalog, TableRef,
};

const S3: &str = "ZEROBUS_TEST_S3_ENDPOINT";
const SECRET: &str = "moto-secret-7e6d5c4b3a";

fn raw() -> TableRef {
    TableRef::parse("main.raw.orders").unwrap()
}

fn moto_storage(endpoint: &str) -> S3Storage {
    S3Storage {
        endpoint: Some(endpoint.to_owned()),
        region: Some("us-east-1".into()),
        access_key_id: Some("AKIDMOTO".into()),
        secret_access_key: Some(SECRET.into()),
        session_token: None,
    }
}

/// A fresh bucket on moto and a catalog rooted in a prefix of it.
async fn catalog(endpoint: &str) -> (LocalDelta, String) {
    let bucket = storage::unique("local-s3");
    storage::make_bucket(endpoint, &bucket).await;
    let root = format!("s3://{bucket}/tables");
    (
        LocalDelta::on_s3(&root, moto_storage(endpoint)).unwrap(),
        bucket,
    )
}

/// The keys moto holds under `prefix` in `bucket` (what is really on the storage).
async fn keys(endpoint: &str, bucket: &str, prefix: &str) -> Vec<String> {
    let body = reqwest::get(format!("{endpoint}/{bucket}?list-type=2&prefix={prefix}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    body.split("<Key>")
        .skip(1)
        .filter_map(|k| k.split("</Key>").next())
        .map(str::to_owned)
        .collect()
}

fn ranges(r: &[(&str, u32, i64, i64)]) -> Coverage {
    Coverage::from_durable(
        r.iter().map(|&(topic, partition, start, end)| {
            CoverageRange::new(topic, partition, start, end)
        }),
    )
}

#[tokio::test]
async fn a_table_on_s3_is_created_described_vended_and_read_back() {
    let Some(moto) = storage::endpoint(
        S3,
        "a_table_on_s3_is_created_described_vended_and_read_back",
    ) else {
        return;
    };
    let (catalog, bucket) = catalog(&moto).await;
    let table = raw();
    assert_eq!(catalog.describe(&table).await.unwrap(), None);
    let schema = Schema::new(vec![Field::new("id", DataType::Int64, false)]);
    let desired = DesiredTable::from_arrow(table.clone(), &schema, None, Role::Standard).unwrap();
    let made = catalog
        .reconcile(&desired, &Policy::default())
        .await
        .unwrap();
    assert!(!made.executed.is_empty());
    assert!(
        catalog
            .reconcile(&desired, &Policy::default())
            .await
            .unwrap()
            .executed
            .is_empty(),
        "idempotent"
    );
    // The Delta log is on the storage, under the table's folder below the prefix.
    let log = keys(&moto, &bucket, "tables/main/raw/orders/_delta_log/").await;
    assert!(
        log.iter().any(|k| k.ends_with("00000000000000000000.json")),
        "{log:?}"
    );
    let live = catalog.describe(&table).await.unwrap().unwrap();
    assert_eq!(
        live.storage_location.as_deref(),
        Some(format!("s3://{bucket}/tables/main/raw/orders/").as_str())
    );
    assert!(live.column("id").is_some() && live.column("_twg_source_row").is_some());
    let vended = catalog
        .vend_credentials(&table, Access::Read)
        .await
        .unwrap();
    assert_eq!(vended.url, format!("s3://{bucket}/tables/main/raw/orders/"));
    assert!(matches!(vended.credentials, CloudCredentials::Aws { .. }));
    let (batches, version) = catalog.read_table(&table).await.unwrap();
    assert_eq!(
        (batches.iter().map(|b| b.num_rows()).sum::<usize>(), version),
        (0, 0)
    );
    // A table that is not there is absent, not an error; the secret is in no Debug output.
    let other = TableRef::parse("main.raw.nothing").unwrap();
    assert_eq!(catalog.describe(&other).await.unwrap(), None);
    let shown = format!("{catalog:?} {vended:?}");
    assert!(!shown.contains(SECRET), "{shown}");
}

#[tokio::test]
async fn the_coverage_store_survives_a_restart_on_s3() {
    let Some(moto) = storage::endpoint(S3, "the_coverage_store_survives_a_restart_on_s3") else {
        return;
    };
    let (catalog, bucket) = catalog(&moto).await;
    let root = format!("s3://{bucket}/tables");
    let (a, b) = (SinkId("sink-a".into()), SinkId("sink-b".into()));
    let mut covered = ranges(&[("orders", 0, 0, 99)]);
    {
        let mut store_a = CoverageStore::open(catalog.clone(), &raw(), a.clone())
            .await
            .unwrap();
        let mut store_b = CoverageStore::open(catalog, &raw(), b.clone())
            .await
            .unwrap();
        assert_eq!(store_a.save(&covered).await.unwrap(), 1);
        // Two sinks commit at once: both race for the same Delta version on S3; the put-if-
        // absent lets one win, the other commits the next version. Neither save is lost.
        covered.merge(&ranges(&[("orders", 0, 200, 249), ("orders", 1, 0, 9)]));
        let for_b = ranges(&[("orders", 0, 100, 199)]);
        let (saved_a, saved_b) = tokio::join!(store_a.save(&covered), store_b.save(&for_b));
        assert_eq!((saved_a.unwrap(), saved_b.unwrap()), (2, 1));
    }
    let commits: Vec<String> = keys(
        &moto,
        &bucket,
        "tables/main/raw/orders__twg_coverage/_delta_log/",
    )
    .await
    .into_iter()
    .filter(|k| k.ends_with(".json"))
    .collect();
    assert_eq!(commits.len(), 4, "create and three appends: {commits:?}");

    // A restart: a new catalog on the same root, a new store, reads back what was written.
    let restarted = LocalDelta::on_s3(&root, moto_storage(&moto)).unwrap();
    let reopened = CoverageStore::open(restarted, &raw(), a.clone())
        .await
        .unwrap();
    assert_eq!(reopened.saved(), &covered);
    assert_eq!(reopened.saved().gaps("orders", 0, 0, 249), vec![(100, 199)]);
    let every_sink = reopened.load(None).await.unwrap();
    assert_eq!(every_sink.gaps("orders", 0, 0, 249), vec![]);
    assert_eq!(
        reopened.load(Some(&b)).await.unwrap(),
        ranges(&[("orders", 0, 100, 199)])
    );
}
