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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apache_avro::types::{Record, Value as Avro};
use apache_avro::{Codec, Schema as AvroSchema, Writer};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde_json::{Value, json};
use zerobus_sink::{Coverage, CoverageRange};
use zerobus_sink_catalog::recovery::{Lag, Recover, RecoveryError};
use zerobus_sink_catalog::unity::{Auth, Secret, UnityCatalog, UnityConfig};
use zerobus_sink_catalog::{CloudCredentials, TableRef};

const TOKEN: &str = "dapi-test-token-0123456789";
const SECRET_KEY: &str = "vended-secret-access-key-abcdef";
/// Far in the future: these credentials are never re-vended.
const EXPIRES_AT_MS: i64 = 4_102_444_800_000;

/// The columns: field id, Iceberg name, Arrow type (the physical Parquet names are `col-<id>`,
/// as a column-mapped table writes them).
const COLUMNS: [(i32, &str, DataType); 6] = [
    (1, "order_id", DataType::Int64),
    (2, "_twg_source_topic", DataType::Utf8),
    (3, "_twg_source_partition", DataType::Int32),
    (4, "_twg_source_start", DataType::Int64),
    (5, "_twg_source_end", DataType::Int64),
    (6, "_twg_source_row", DataType::Int32),
];

/// What the stub serves and what it was asked.
#[derive(Default)]
struct Stub {
    /// The snapshots so far: each one's manifest list.
    snapshots: Vec<String>,
    /// Every request: its path and headers.
    requests: Vec<(String, HashMap<String, String>)>,
}

type Shared = Arc<Mutex<Stub>>;

async fn load_table(
    State(stub): State<Shared>,
    UrlPath((catalog, namespace, table)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Json<Value> {
    let mut stub = stub.lock().unwrap();
    let headers = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    stub.requests
        .push((format!("{catalog}/{namespace}/{table}"), headers));
    let snapshots: Vec<Value> = stub
        .snapshots
        .iter()
        .enumerate()
        .map(|(i, list)| json!({"snapshot-id": i + 1, "manifest-list": list}))
        .collect();
    let fields: Vec<Value> = COLUMNS
        .iter()
        .map(|(id, name, _)| json!({"id": id, "name": name, "required": false, "type": "string"}))
        .collect();
    Json(json!({
        "metadata-location": "file:///warehouse/orders/metadata/v3.metadata.json",
        "metadata": {
            "format-version": 2,
            "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
            "current-snapshot-id": if snapshots.is_empty() { -1 } else { snapshots.len() as i64 },
            "snapshots": snapshots,
            "current-schema-id": 0,
            "schemas": [{"type": "struct", "schema-id": 0, "fields": fields}],
        },
        "config": {
            "s3.access-key-id": "ASIAEXAMPLE",
            "s3.secret-access-key": SECRET_KEY,
            "s3.session-token": "vended-session-token",
            "s3.session-token-expires-at-ms": EXPIRES_AT_MS.to_string(),
        },
    }))
}

async fn start_stub() -> (String, Shared) {
    let stub = Shared::default();
    let app = Router::new()
        .route(
            "/api/2.1/unity-catalog/iceberg-rest/v1/catalogs/{catalog}/namespaces/{namespace}/tables/{table}",
            get(load_table),
        )
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, stub)
}

fn catalog(url: &str) -> UnityCatalog {
    UnityCatalog::new(UnityConfig::new(
        url,
        "warehouse-1",
        Auth::Bearer(Secret::new(TOKEN)),
    ))
    .unwrap()
}

fn raw() -> TableRef {
    TableRef::parse("main.raw.orders").unwrap()
}

/// A zstd Parquet data file of derived batches (order ids from `first`, `rows_per_batch` per
/// span), physical names `col-<id>` with the field ids.
fn data_file(dir: &Path, name: &str, spans: &[(i64, i64)], first: i64) -> String {
    let fields: Vec<Field> = COLUMNS
        .iter()
        .map(|(id, _, t)| {
            Field::new(format!("col-{id}"), t.clone(), false).with_metadata(HashMap::from([(
                "PARQUET:field_id".to_owned(),
                id.to_string(),
            )]))
        })
        .collect();
    let mut ids = Vec::new();
    let (mut starts, mut ends, mut rows) = (Vec::new(), Vec::new(), Vec::new());
    let mut next = first;
    for &(start, end) in spans {
        for row in 0..2 {
            ids.push(next);
            next += 1;
            starts.push(start);
            ends.push(end);
            rows.push(row);
        }
    }
    let n = ids.len();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(StringArray::from(vec!["orders"; n])),
        Arc::new(Int32Array::from(vec![0; n])),
        Arc::new(Int64Array::from(starts)),
        Arc::new(Int64Array::from(ends)),
        Arc::new(Int32Array::from(rows)),
    ];
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let path = dir.join(name);
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut writer = ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    format!("file://{}", path.display())
}

const MANIFEST_ENTRY: &str = r#"{
  "type": "record", "name": "manifest_entry", "fields": [
    {"name": "status", "type": "int", "field-id": 0},
    {"name": "snapshot_id", "type": ["null", "long"], "default": null, "field-id": 1},
    {"name": "data_file", "field-id": 2, "type": {
      "type": "record", "name": "r2", "fields": [
        {"name": "content", "type": "int", "field-id": 134},
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104}
      ]}}
  ]}"#;

const MANIFEST_FILE: &str = r#"{
  "type": "record", "name": "manifest_file", "fields": [
    {"name": "manifest_path", "type": "string", "field-id": 500},
    {"name": "manifest_length", "type": "long", "field-id": 501},
    {"name": "partition_spec_id", "type": "int", "field-id": 502},
    {"name": "content", "type": "int", "field-id": 517},
    {"name": "added_snapshot_id", "type": "long", "field-id": 503}
  ]}"#;

/// A manifest (deflate Avro, as Iceberg writes them) of `(status, content, path)` entries.
fn manifest(dir: &Path, name: &str, entries: &[(i32, i32, &str)]) -> String {
    let schema = AvroSchema::parse_str(MANIFEST_ENTRY).unwrap();
    let AvroSchema::Record(record_schema) = &schema else {
        unreachable!()
    };
    let file_schema = record_schema.fields[2].schema.clone();
    let mut writer = Writer::with_codec(&schema, Vec::new(), Codec::Deflate(Default::default()));
    for &(status, content, path) in entries {
        let mut data_file = Record::new(&file_schema).unwrap();
        data_file.put("content", content);
        data_file.put("file_path", path);
        data_file.put("file_format", "PARQUET");
        data_file.put("record_count", 2i64);
        data_file.put("file_size_in_bytes", 1_000i64);
        let mut entry = Record::new(&schema).unwrap();
        entry.put("status", status);
        entry.put("snapshot_id", Avro::Union(1, Box::new(Avro::Long(1))));
        entry.put("data_file", data_file);
        writer.append(entry).unwrap();
    }
    let path = dir.join(name);
    std::fs::write(&path, writer.into_inner().unwrap()).unwrap();
    format!("file://{}", path.display())
}

/// A manifest list of `(content, manifest)` entries.
fn manifest_list(dir: &Path, name: &str, manifests: &[(i32, &str)]) -> String {
    let schema = AvroSchema::parse_str(MANIFEST_FILE).unwrap();
    let mut writer = Writer::with_codec(&schema, Vec::new(), Codec::Deflate(Default::default()));
    for &(content, path) in manifests {
        let mut entry = Record::new(&schema).unwrap();
        entry.put("manifest_path", path);
        entry.put("manifest_length", 1_000i64);
        entry.put("partition_spec_id", 0);
        entry.put("content", content);
        entry.put("added_snapshot_id", 1i64);
        writer.append(entry).unwrap();
    }
    let path = dir.join(name);
    std::fs::write(&path, writer.into_inner().unwrap()).unwrap();
    format!("file://{}", path.display())
}

fn order_ids(batches: &[RecordBatch]) -> Vec<i64> {
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name("order_id").expect("named by field id");
            c.as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    ids.sort_unstable();
    ids
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
    let (url, stub) = start_stub().await;
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
        assert_eq!(headers["authorization"], format!("Bearer {TOKEN}"));
        assert_eq!(headers["x-iceberg-access-delegation"], "vended-credentials");
    }
}

#[tokio::test]
async fn the_loaded_table_carries_vended_credentials_and_never_shows_them() {
    let f = files();
    let (url, stub) = start_stub().await;
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
    let (url, stub) = start_stub().await;
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
