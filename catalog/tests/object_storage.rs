//! The Databricks recovery path on real object storage: moto's S3 server and Azurite, on
//! loopback, holding the files (`storage/mod.rs`); the Iceberg REST stub (ours) vends the
//! credentials that reach them (`iceberg/mod.rs`). The faults moto cannot make (503 SlowDown, a
//! key that expires) come from a loopback proxy in front of it.
//!
//! Each test prints `SKIPPED` and passes when its storage is not configured; `.ci/run` starts
//! both and sets `ZEROBUS_TEST_S3_ENDPOINT` and `ZEROBUS_TEST_AZURITE_BLOB`.
#![cfg(feature = "iceberg")]

mod iceberg;
mod storage;

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use iceberg::{Shared, order_ids, raw, start_stub};
use serde_json::{Value, json};
use zerobus_sink::{Coverage, CoverageRange};
use zerobus_sink_catalog::recovery::{Lag, Recover, RecoveryError};
use zerobus_sink_catalog::unity::storage::StorageOptions;
use zerobus_sink_catalog::unity::{Auth, Secret, UnityCatalog, UnityConfig};

const S3: &str = "ZEROBUS_TEST_S3_ENDPOINT";
const AZURITE: &str = "ZEROBUS_TEST_AZURITE_BLOB";
const SECRET: &str = "vended-secret-0f9e8d7c6b5a";
const SESSION: &str = "vended-session-token-1a2b3c4d";

/// The vended S3 configuration: key `key` (its secret and token derived from it), reaching
/// storage at `endpoint`, expiring at `expires_at_ms`.
fn s3_config(endpoint: &str, key: &str, expires_at_ms: i64) -> Value {
    json!({
        "s3.endpoint": endpoint,
        "s3.path-style-access": "true",
        "client.region": "us-east-1",
        "s3.access-key-id": key,
        "s3.secret-access-key": format!("{SECRET}-{key}"),
        "s3.session-token": format!("{SESSION}-{key}"),
        "s3.session-token-expires-at-ms": expires_at_ms.to_string(),
    })
}

fn in_ms(d: Duration) -> i64 {
    i64::try_from(
        (SystemTime::now() + d)
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn far() -> i64 {
    in_ms(Duration::from_secs(3600))
}

fn catalog_with(url: &str, storage: StorageOptions) -> UnityCatalog {
    let mut config = UnityConfig::new(
        url,
        "warehouse-1",
        Auth::Bearer(Secret::new(iceberg::TOKEN)),
    );
    config.storage = storage;
    UnityCatalog::new(config).unwrap()
}

/// What a sink confirmed: four derived batches of two rows, spans 0-9 .. 30-39 (ids 0-7), in
/// two data files, the second with a replay of 10-19 (ids 8-9).
const CONFIRMED: [(i64, i64); 4] = [(0, 9), (10, 19), (20, 29), (30, 39)];

fn range() -> CoverageRange {
    CoverageRange::new("orders", 0, 0, 39)
}

fn durable() -> Coverage {
    Coverage::from_durable(CONFIRMED.map(|(s, e)| CoverageRange::new("orders", 0, s, e)))
}

/// Writes the table's files with `put(key, bytes) -> location` and sets its snapshot.
async fn write_table<P, F>(stub: &Shared, mut put: P, missing: Option<&str>)
where
    P: FnMut(String, Vec<u8>) -> F,
    F: Future<Output = String>,
{
    let a = put(
        "orders/data/a.parquet".into(),
        iceberg::parquet_file(&CONFIRMED[..2], 0),
    )
    .await;
    let b = put(
        "orders/data/b.parquet".into(),
        iceberg::parquet_file(&[CONFIRMED[2], CONFIRMED[3], CONFIRMED[1]], 4),
    )
    .await;
    let mut entries = vec![(1, 0, a.as_str()), (1, 0, b.as_str())];
    if let Some(missing) = missing {
        entries.push((1, 0, missing));
    }
    let m = put(
        "orders/metadata/m1.avro".into(),
        iceberg::manifest(&entries),
    )
    .await;
    let list = put(
        "orders/metadata/snap-1.avro".into(),
        iceberg::manifest_list(&[(0, &m)]),
    )
    .await;
    stub.lock().unwrap().snapshots.push(list);
}

/// Every confirmed row came back, once.
fn assert_every_confirmed_row(recovered: &zerobus_sink_catalog::recovery::Recovered) {
    assert_eq!(order_ids(&recovered.batches), (0..8).collect::<Vec<_>>());
    assert_eq!((recovered.rows, recovered.duplicates), (8, 2));
    assert!(recovered.visible.gaps("orders", 0, 0, 39).is_empty());
}

/// A bucket on moto with the table written through `via` (moto itself or the proxy); the stub
/// vends keys reaching `via`.
async fn s3_table(
    moto: &str,
    via: &str,
    key: &str,
    missing: Option<&str>,
) -> (String, Shared, String) {
    let bucket = storage::unique("recovery");
    storage::make_bucket(moto, &bucket).await;
    let (url, stub) = start_stub(s3_config(via, key, far())).await;
    let missing = missing.map(|m| format!("s3://{bucket}/{m}"));
    write_table(
        &stub,
        |k, bytes| storage::put_s3(moto, &bucket, k, bytes),
        missing.as_deref(),
    )
    .await;
    (url, stub, bucket)
}

#[tokio::test]
async fn every_confirmed_row_is_recovered_from_s3() {
    logs();
    let Some(moto) = storage::endpoint(S3, "every_confirmed_row_is_recovered_from_s3") else {
        return;
    };
    let (url, _stub, _) = s3_table(&moto, &moto, "AKIDRECOVER", None).await;
    let recovered = iceberg::catalog(&url)
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap();
    assert_every_confirmed_row(&recovered);
}

#[tokio::test]
async fn every_confirmed_row_is_recovered_from_azure() {
    logs();
    let Some(blob) = storage::endpoint(AZURITE, "every_confirmed_row_is_recovered_from_azure")
    else {
        return;
    };
    let sas = storage::azurite_sas("2099-01-01T00:00:00Z");
    let container = storage::unique("recovery");
    storage::make_container(&blob, &container, &sas).await;
    let account = storage::AZURITE_ACCOUNT;
    let (url, stub) = start_stub(json!({
        format!("adls.sas-token.{account}.dfs.core.windows.net"): sas,
        format!("adls.connection-string.{account}"): format!("DefaultEndpointsProtocol=http;AccountName={account};BlobEndpoint={blob};"),
        format!("adls.sas-token-expires-at-ms.{account}"): far().to_string(),
    }))
    .await;
    write_table(
        &stub,
        |k, bytes| storage::put_azure(&blob, &container, k, bytes, &sas),
        None,
    )
    .await;
    let catalog = iceberg::catalog(&url);
    let recovered = catalog
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap();
    assert_every_confirmed_row(&recovered);

    // A SAS storage refuses (signed with the wrong key) fails naming the file, without the SAS.
    let forged = sas.replace("sig=", "sig=AAAA");
    stub.lock().unwrap().config[format!("adls.sas-token.{account}.dfs.core.windows.net")] =
        json!(forged);
    let err = catalog
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("snap-1.avro"), "{shown}");
    let sig = forged.split("sig=").nth(1).unwrap();
    assert!(
        !shown.contains(sig) && !shown.contains(&sig.replace("%2B", "+")),
        "{shown}"
    );
}

#[tokio::test]
async fn a_credential_expiring_during_a_read_is_revended_and_the_read_completes() {
    logs();
    let test = "a_credential_expiring_during_a_read_is_revended_and_the_read_completes";
    let Some(moto) = storage::endpoint(S3, test) else {
        return;
    };
    let (proxy, faults) = storage::fault_proxy(moto.clone()).await;
    let (url, stub, _) = s3_table(&moto, &proxy, "AKIDFIRST", None).await;
    // The first key expires after two reads (the manifest list and the manifest): the data
    // files are read mid-expiry. The next load vends a second key.
    *faults.expire_after.lock().unwrap() = Some(("AKIDFIRST".into(), 2));
    stub.lock().unwrap().next_configs.extend([
        s3_config(&proxy, "AKIDFIRST", far()),
        s3_config(&proxy, "AKIDSECOND", far()),
    ]);
    let recovered = iceberg::catalog(&url)
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap();
    assert_every_confirmed_row(&recovered);
    assert_eq!(
        faults.refused.load(Ordering::SeqCst),
        1,
        "one refusal, then the new key"
    );
    let served = faults.served.lock().unwrap().clone();
    assert_eq!(
        served,
        ["AKIDFIRST", "AKIDFIRST", "AKIDSECOND", "AKIDSECOND"]
    );
    assert_eq!(
        stub.lock().unwrap().requests.len(),
        2,
        "loaded, then re-vended once"
    );
}

#[tokio::test]
async fn credentials_are_revended_before_they_expire() {
    logs();
    let Some(moto) = storage::endpoint(S3, "credentials_are_revended_before_they_expire") else {
        return;
    };
    let (proxy, faults) = storage::fault_proxy(moto.clone()).await;
    let (url, stub, _) = s3_table(&moto, &proxy, "AKIDSOON", None).await;
    // The first key expires in 30 s, within the minute recovery keeps in hand: it is never
    // used (storage would refuse it), the second is vended before the first request.
    faults.expired.lock().unwrap().insert("AKIDSOON".into());
    stub.lock().unwrap().next_configs.extend([
        s3_config(&proxy, "AKIDSOON", in_ms(Duration::from_secs(30))),
        s3_config(&proxy, "AKIDFRESH", far()),
    ]);
    let recovered = iceberg::catalog(&url)
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap();
    assert_every_confirmed_row(&recovered);
    assert_eq!(faults.refused.load(Ordering::SeqCst), 0);
    assert!(
        faults
            .served
            .lock()
            .unwrap()
            .iter()
            .all(|k| k == "AKIDFRESH")
    );
}

#[tokio::test]
async fn storage_answering_503_slowdown_is_retried_within_a_bound() {
    logs();
    let test = "storage_answering_503_slowdown_is_retried_within_a_bound";
    let Some(moto) = storage::endpoint(S3, test) else {
        return;
    };
    let (proxy, faults) = storage::fault_proxy(moto.clone()).await;
    let (url, _stub, bucket) = s3_table(&moto, &proxy, "AKIDSLOW", None).await;
    let options = StorageOptions {
        max_retries: 3,
        first_backoff: Duration::from_millis(10),
        ..StorageOptions::default()
    };
    let catalog = catalog_with(&url, options);
    // Throttled three times: within the bound, the read completes.
    faults.slow_down.store(3, Ordering::SeqCst);
    let recovered = catalog
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap();
    assert_every_confirmed_row(&recovered);
    assert_eq!(faults.slowed.load(Ordering::SeqCst), 3);

    // Throttled without end: one attempt and three retries, then it fails naming the file.
    faults.slowed.store(0, Ordering::SeqCst);
    faults.slow_down.store(u32::MAX, Ordering::SeqCst);
    let started = Instant::now();
    let err = catalog
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap_err();
    assert_eq!(faults.slowed.load(Ordering::SeqCst), 4);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let RecoveryError::Read { what, message, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(what, &format!("s3://{bucket}/orders/metadata/snap-1.avro"));
    assert!(
        message.contains("SlowDown") || message.contains("503"),
        "{message}"
    );
}

#[tokio::test]
async fn a_data_file_in_the_manifest_but_missing_fails_naming_it() {
    logs();
    let test = "a_data_file_in_the_manifest_but_missing_fails_naming_it";
    let Some(moto) = storage::endpoint(S3, test) else {
        return;
    };
    let missing = "orders/data/never-written.parquet";
    let (url, _stub, bucket) = s3_table(&moto, &moto, "AKIDMISSING", Some(missing)).await;
    let err = iceberg::catalog(&url)
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap_err();
    let RecoveryError::Read {
        table,
        what,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(table, "main.raw.orders");
    assert_eq!(what, &format!("s3://{bucket}/{missing}"));
    assert!(message.contains("listed but absent"), "{message}");
}

/// A writer the test's log subscriber writes into.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every log line of this test binary (every test's), from a global subscriber installed by
/// each test before it starts: a scoped one misses events whose call site another test's
/// thread registered first.
fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    })
}

#[tokio::test]
async fn vended_secrets_never_show_in_logs_errors_or_debug() {
    let test = "vended_secrets_never_show_in_logs_errors_or_debug";
    let logs = logs();
    let Some(moto) = storage::endpoint(S3, test) else {
        return;
    };

    let (proxy, faults) = storage::fault_proxy(moto.clone()).await;
    let missing = "orders/data/gone.parquet";
    let (url, stub, _) = s3_table(&moto, &proxy, "AKIDSECRET", Some(missing)).await;
    let options = StorageOptions {
        max_retries: 2,
        first_backoff: Duration::from_millis(10),
        ..StorageOptions::default()
    };
    let catalog = catalog_with(&url, options);
    // Retries (logged by the store), a refused key re-vended, then a missing file.
    faults.slow_down.store(2, Ordering::SeqCst);
    *faults.expire_after.lock().unwrap() = Some(("AKIDSECRET".into(), 1));
    stub.lock().unwrap().next_configs.extend([
        s3_config(&proxy, "AKIDSECRET", far()),
        s3_config(&proxy, "AKIDSECRET2", far()),
    ]);
    let err = catalog
        .recover(&raw(), &range(), &durable(), Lag::default())
        .await
        .unwrap_err();
    let loaded = catalog.load_iceberg_table(&raw()).await.unwrap();
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("backing off"),
        "the retries were logged ({} 503s): {logged}\n{err}",
        faults.slowed.load(Ordering::SeqCst)
    );
    let shown = format!(
        "{err}\n{err:?}\n{loaded:?}\n{:?}\n{logged}",
        loaded.access()
    );
    assert!(shown.contains(missing), "{shown}");
    // Every test's secrets start so (the logs are every test's).
    for secret in [SECRET, SESSION] {
        assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
    }
}
