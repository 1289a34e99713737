//! zerobus-local and the local catalog on object storage, end to end: the raw table on moto's
//! S3 server (real storage on loopback, started by `scripts/with-object-storage`, its URL in
//! `ZEROBUS_TEST_S3_ENDPOINT`), a provisioned derived sink writing it through the emulator,
//! which materializes the acked rows into the table on S3; the coverage saved beside it on S3,
//! read back after a restart of everything; recovery of every confirmed row, each once, from
//! S3. Without moto the test prints `SKIPPED` and passes; CI runs it with moto.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use common::{RAW, config, ids, orders, raw, schema};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zerobus_sink::{
    Confirmation, Coverage, CoverageRange, Derived, FailedBatch, FailureReason, Token,
};
use zerobus_sink_catalog::coverage::CoverageStore;
use zerobus_sink_catalog::local::{LocalDelta, S3Storage};
use zerobus_sink_catalog::primary_raw::validate;
use zerobus_sink_catalog::recovery::{Lag, Recover};
use zerobus_sink_catalog::{DesiredTable, Policy, PrimaryRawShape, Role, SinkId, TableCatalog};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};
use zerobus_sink_tokio::{Confirmer, IsolatedRows, Provisioning, Sink, TableDef, ZerobusSink};

const S3: &str = "ZEROBUS_TEST_S3_ENDPOINT";

/// A derived sink's confirmer: its coverage grows from durable confirmations only.
#[derive(Clone, Default)]
struct Covering {
    coverage: Arc<Mutex<Coverage>>,
    failed: Arc<Mutex<Vec<String>>>,
}

impl Confirmer<Derived> for Covering {
    fn confirmed(&mut self, _table: &str, confirmation: Confirmation<Derived>) {
        self.coverage.lock().unwrap().confirm(confirmation);
    }
    fn failed(
        &mut self,
        _table: &str,
        _batch: FailedBatch<Derived, RecordBatch>,
        reason: &FailureReason,
    ) {
        self.failed.lock().unwrap().push(reason.to_string());
    }
    fn isolated(&mut self, _table: &str, _rows: IsolatedRows<Derived>) {}
}

/// One HTTP request to moto on loopback: its status line and body.
async fn http(endpoint: &str, request: &str) -> (String, String) {
    let host = endpoint.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    stream
        .write_all(
            format!("{request}\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer.lines().next().unwrap_or_default().to_owned();
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn storage(endpoint: &str) -> S3Storage {
    S3Storage {
        endpoint: Some(endpoint.to_owned()),
        region: Some("us-east-1".into()),
        access_key_id: Some("AKIDMOTO".into()),
        secret_access_key: Some("moto-secret".into()),
        session_token: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_land_on_s3_are_recovered_and_their_coverage_survives_a_restart() {
    let Some(moto) = std::env::var(S3).ok().filter(|v| !v.is_empty()) else {
        println!(
            "SKIPPED rows_land_on_s3_are_recovered_and_their_coverage_survives_a_restart: {S3} is not set (start moto as docs/testing.md says)"
        );
        return;
    };
    let moto = moto.trim_end_matches('/').to_owned();
    let bucket = format!("zerobus-local-{}", std::process::id());
    let (status, _) = http(&moto, &format!("PUT /{bucket} HTTP/1.1")).await;
    assert!(
        status.contains(" 200"),
        "creating bucket {bucket}: {status}"
    );
    let root = format!("s3://{bucket}/tables");
    let dir = tempfile::tempdir().unwrap();

    let catalog = LocalDelta::on_s3(&root, storage(&moto)).unwrap();
    let emulator = Emulator::start(
        EmulatorConfig::new(dir.path().join("wal"))
            .delta_catalog(catalog.clone())
            .materialize_lag(Duration::from_millis(50)),
    )
    .await
    .unwrap();
    assert_eq!(
        emulator.tables_url().as_deref(),
        Some(format!("{root}/").as_str())
    );
    let desired = DesiredTable::from_arrow(raw(), &schema(), None, Role::PrimaryRaw).unwrap();
    catalog
        .reconcile(&desired, &Policy::default())
        .await
        .unwrap();
    let proof = validate(&catalog, &raw(), PrimaryRawShape::DeltaReadable)
        .await
        .unwrap();
    let confirmer = Covering::default();
    let mut sink = ZerobusSink::start_provisioned(
        config(&emulator),
        vec![TableDef::primary_raw(proof, schema()).streams(1)],
        confirmer.clone(),
        Provisioning::new(catalog.clone(), "sink-a"),
    )
    .unwrap();
    let table = sink.table(RAW).unwrap();
    for i in 0..10 {
        let range = CoverageRange::new("orders", 0, i * 10, i * 10 + 9);
        let receipt = sink
            .send(table, orders(i * 10, 10), Token::derived(range))
            .await
            .unwrap();
        receipt.await.unwrap();
    }
    sink.close(Duration::from_secs(5)).await;
    assert!(confirmer.failed.lock().unwrap().is_empty());
    let durable = confirmer.coverage.lock().unwrap().clone();
    assert!(durable.covers("orders", 0, 0, 99), "{durable:?}");
    let mut store = CoverageStore::open(catalog.clone(), &raw(), SinkId("sink-a".into()))
        .await
        .unwrap();
    assert_eq!(store.save(&durable).await.unwrap(), 1);
    emulator.until_materialized(RAW).await;
    emulator.shutdown().await;
    drop((store, catalog));

    // The data files are on the storage, beside their Delta log.
    let (_, listing) = http(
        &moto,
        &format!("GET /{bucket}?list-type=2&prefix=tables/main/raw/orders/ HTTP/1.1"),
    )
    .await;
    assert!(listing.contains(".parquet</Key>"), "{listing}");

    // A restart of everything: a new catalog on the same root reads back the coverage, and
    // recovery returns every confirmed row once, from S3.
    let restarted = LocalDelta::on_s3(&root, storage(&moto)).unwrap();
    let reopened = CoverageStore::open(restarted.clone(), &raw(), SinkId("sink-a".into()))
        .await
        .unwrap();
    assert_eq!(reopened.saved(), &durable);
    let range = CoverageRange::new("orders", 0, 0, 99);
    let lag = Lag {
        deadline: Duration::from_secs(30),
        poll: Duration::from_millis(50),
    };
    let recovered = restarted
        .recover(&raw(), &range, &reopened.load(None).await.unwrap(), lag)
        .await
        .unwrap();
    assert_eq!(recovered.rows, 100);
    let seen = ids(&recovered.batches);
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        (0..100).collect::<Vec<_>>()
    );
    assert!(seen.values().all(|n| *n == 1), "each row once: {seen:?}");
}
