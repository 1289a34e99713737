//! The Databricks recovery path (Iceberg REST with vended credentials) against a loopback stub:
//! the request's shape, the metadata, Avro manifests, column names by Parquet field id, zstd
//! Parquet, deduplication and the metadata's lag, on `file://` locations (object storage:
//! `object_storage.rs`).
//!
//! Mocked, because none of it can run here: Unity Catalog's Iceberg REST endpoint (the stub
//! below answers `loadTable` as the Iceberg REST specification describes it) and the files an
//! Iceberg writer makes (written here with apache-avro and the Parquet writer, following the
//! Iceberg table specification's manifest schemas; they share our reading of that
//! specification).
#![cfg(feature = "iceberg")]

mod iceberg;

use std::path::{Path, PathBuf};
use std::time::Duration;

use iceberg::{catalog, order_ids, raw, start_stub};
use parquet::basic::Compression;
use serde_json::{Value, json};
use zerobus_sink::{Coverage, CoverageRange};
use zerobus_sink_catalog::CloudCredentials;
use zerobus_sink_catalog::recovery::{Lag, Recover, RecoveryError};

const SECRET_KEY: &str = "vended-secret-access-key-abcdef";
/// Far in the future: these credentials are never re-vended.
const EXPIRES_AT_MS: i64 = 4_102_444_800_000;

/// The storage configuration the stub answers with: credentials for a local table.
fn config() -> Value {
    json!({
        "s3.access-key-id": "ASIAEXAMPLE",
        "s3.secret-access-key": SECRET_KEY,
        "s3.session-token": "vended-session-token",
        "s3.session-token-expires-at-ms": EXPIRES_AT_MS.to_string(),
    })
}

/// Writes `bytes` to `dir/name`; returns its `file://` location.
fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    format!("file://{}", path.display())
}

fn data_file(dir: &Path, name: &str, spans: &[(i64, i64)], first: i64) -> String {
    write(dir, name, &iceberg::parquet_file(spans, first))
}

fn manifest(dir: &Path, name: &str, entries: &[(i32, i32, &str)]) -> String {
    write(dir, name, &iceberg::manifest(entries))
}

fn manifest_list(dir: &Path, name: &str, manifests: &[(i32, &str)]) -> String {
    write(dir, name, &iceberg::manifest_list(manifests))
}

struct Files {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    Files { _dir: dir, path }
}

#[tokio::test]
async fn a_range_is_read_through_iceberg_rest_once_the_metadata_catches_up() {
    let f = files();
    let (url, stub) = start_stub(config()).await;
    // Snapshot 1: spans 0-9 and 10-19, and an entry for a file since deleted (status 2: it
    // must not be read; it does not exist).
    let a = data_file(&f.path, "a.parquet", &[(0, 9), (10, 19)], 0);
    let m1 = manifest(
        &f.path,
        "m1.avro",
        &[(1, 0, &a), (2, 0, "file:///nowhere/deleted.parquet")],
    );
    stub.lock()
        .unwrap()
        .snapshots
        .push(manifest_list(&f.path, "snap-1.avro", &[(0, &m1)]));
    let catalog = catalog(&url);
    let range = CoverageRange::new("orders", 0, 0, 39);
    // The coverage says 0-39 is durable; the metadata shows 0-19 so far.
    let durable = Coverage::from_durable([range.clone()]);
    let short = Lag {
        deadline: Duration::from_millis(200),
        poll: Duration::from_millis(50),
    };
    let Err(RecoveryError::Lagging {
        missing, version, ..
    }) = catalog.recover(&raw(), &range, &durable, short).await
    else {
        panic!("the lagging metadata was taken for the truth")
    };
    assert_eq!((missing, version), (vec![(20, 39)], 1));

    // Snapshot 2 adds spans 20-29 and 30-39, and a replay of 10-19 (a duplicate).
    let b = data_file(&f.path, "b.parquet", &[(20, 29), (30, 39), (10, 19)], 4);
    let m2 = manifest(&f.path, "m2.avro", &[(1, 0, &b)]);
    stub.lock().unwrap().snapshots.push(manifest_list(
        &f.path,
        "snap-2.avro",
        &[(0, &m1), (0, &m2)],
    ));
    let recovered = catalog
        .recover(&raw(), &range, &durable, Lag::default())
        .await
        .unwrap();
    // a: ids 0-3 (spans 0-9, 10-19); b: ids 4-7 (20-29, 30-39), 8-9 the replay of 10-19.
    assert_eq!(order_ids(&recovered.batches), (0..8).collect::<Vec<_>>());
    assert_eq!(
        (recovered.rows, recovered.duplicates, recovered.version),
        (8, 2, 2)
    );

    // The requests: the table's path under the Iceberg REST prefix, the bearer token, and the
    // ask for vended credentials.
    let requests = stub.lock().unwrap().requests.clone();
    assert!(requests.len() >= 3, "one load per read: {}", requests.len());
    for (path, headers) in &requests {
        assert_eq!(path, "main/raw/orders");
        assert_eq!(
            headers["authorization"],
            format!("Bearer {}", iceberg::TOKEN)
        );
        assert_eq!(headers["x-iceberg-access-delegation"], "vended-credentials");
    }
}

#[tokio::test]
async fn the_loaded_table_carries_vended_credentials_and_never_shows_them() {
    let f = files();
    let (url, stub) = start_stub(config()).await;
    let a = data_file(&f.path, "a.parquet", &[(0, 9)], 0);
    let m = manifest(&f.path, "m.avro", &[(1, 0, &a)]);
    stub.lock()
        .unwrap()
        .snapshots
        .push(manifest_list(&f.path, "snap.avro", &[(0, &m)]));
    let loaded = catalog(&url).load_iceberg_table(&raw()).await.unwrap();
    assert_eq!(loaded.expires_at_ms, Some(EXPIRES_AT_MS));
    let CloudCredentials::Aws {
        access_key_id,
        secret_access_key,
        ..
    } = &loaded.credentials
    else {
        panic!("{:?}", loaded.credentials)
    };
    assert_eq!(
        (access_key_id.as_str(), secret_access_key.as_str()),
        ("ASIAEXAMPLE", SECRET_KEY)
    );
    let shown = format!("{loaded:?}");
    assert!(
        !shown.contains(SECRET_KEY) && !shown.contains("vended-session-token"),
        "{shown}"
    );
    assert_eq!(loaded.columns.get(&1).map(String::as_str), Some("order_id"));
    let catalog = catalog(&url);
    assert_eq!(catalog.iceberg_data_files(&loaded).await.unwrap(), vec![a]);
}

#[tokio::test]
async fn delete_files_and_unknown_storage_are_refused_by_name() {
    let f = files();
    let (url, stub) = start_stub(config()).await;
    let a = data_file(&f.path, "a.parquet", &[(0, 9)], 0);
    let data = manifest(&f.path, "data.avro", &[(1, 0, &a)]);
    let deletes = manifest(&f.path, "deletes.avro", &[(1, 1, &a)]);
    stub.lock().unwrap().snapshots.push(manifest_list(
        &f.path,
        "snap-1.avro",
        &[(0, &data), (1, &deletes)],
    ));
    let catalog = catalog(&url);
    let loaded = catalog.load_iceberg_table(&raw()).await.unwrap();
    let err = catalog
        .iceberg_data_files(&loaded)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("deletes.avro") && err.contains("delete files"),
        "{err}"
    );

    let remote = manifest(
        &f.path,
        "remote.avro",
        &[(1, 0, "hdfs://namenode/orders/data/x.parquet")],
    );
    stub.lock()
        .unwrap()
        .snapshots
        .push(manifest_list(&f.path, "snap-2.avro", &[(0, &remote)]));
    let range = CoverageRange::new("orders", 0, 0, 9);
    let err = catalog
        .recover(&raw(), &range, &Coverage::new(), Lag::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("hdfs://namenode/orders/data/x.parquet") && err.contains("is not read"),
        "{err}"
    );
    assert!(!err.contains(SECRET_KEY));
}

#[test]
fn the_data_files_are_zstd_parquet() {
    let f = files();
    let a = data_file(&f.path, "a.parquet", &[(0, 9)], 0);
    let file = std::fs::File::open(a.trim_start_matches("file://")).unwrap();
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(file).unwrap();
    let meta = parquet::file::reader::FileReader::metadata(&reader);
    assert!(matches!(
        meta.row_group(0).column(0).compression(),
        Compression::ZSTD(_)
    ));
}
