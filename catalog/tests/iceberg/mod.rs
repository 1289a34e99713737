//! What the Iceberg recovery tests share: a loopback stub of Unity Catalog's Iceberg REST
//! `loadTable` (ours, answering as the Iceberg REST specification describes it, with the
//! storage configuration and credentials a test sets), and the files an Iceberg writer makes
//! (Avro manifests and zstd Parquet, written following the Iceberg table specification's
//! schemas; they share our reading of that specification).
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

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
use zerobus_sink_catalog::TableRef;
use zerobus_sink_catalog::unity::{Auth, Secret, UnityCatalog, UnityConfig};

/// The workspace token the catalog sends.
pub const TOKEN: &str = "dapi-test-token-0123456789";

/// The columns: field id, Iceberg name, Arrow type (the physical Parquet names are `col-<id>`,
/// as a column-mapped table writes them).
pub const COLUMNS: [(i32, &str, DataType); 6] = [
    (1, "order_id", DataType::Int64),
    (2, "_twg_source_topic", DataType::Utf8),
    (3, "_twg_source_partition", DataType::Int32),
    (4, "_twg_source_start", DataType::Int64),
    (5, "_twg_source_end", DataType::Int64),
    (6, "_twg_source_row", DataType::Int32),
];

/// What the stub serves and what it was asked.
#[derive(Default)]
pub struct Stub {
    /// The snapshots so far: each one's manifest list.
    pub snapshots: Vec<String>,
    /// Every request: its path and headers.
    pub requests: Vec<(String, HashMap<String, String>)>,
    /// The storage configuration (credentials included) each load answers with.
    pub config: Value,
    /// Configurations for the next loads, in order (each load takes one; then `config` stays).
    pub next_configs: VecDeque<Value>,
}

/// The stub, shared with its server.
pub type Shared = Arc<Mutex<Stub>>;

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
    if let Some(next) = stub.next_configs.pop_front() {
        stub.config = next;
    }
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
        "config": stub.config.clone(),
    }))
}

/// Starts the stub on loopback, answering with `config`; returns its URL.
pub async fn start_stub(config: Value) -> (String, Shared) {
    let stub = Shared::default();
    stub.lock().unwrap().config = config;
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

/// A Unity Catalog backend at `url`.
pub fn catalog(url: &str) -> UnityCatalog {
    UnityCatalog::new(UnityConfig::new(
        url,
        "warehouse-1",
        Auth::Bearer(Secret::new(TOKEN)),
    ))
    .unwrap()
}

/// The raw table the tests read.
pub fn raw() -> TableRef {
    TableRef::parse("main.raw.orders").unwrap()
}

/// A zstd Parquet data file of derived batches (order ids from `first`, two rows per span),
/// physical names `col-<id>` with the field ids.
pub fn parquet_file(spans: &[(i64, i64)], first: i64) -> Vec<u8> {
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
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    out
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
pub fn manifest(entries: &[(i32, i32, &str)]) -> Vec<u8> {
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
    writer.into_inner().unwrap()
}

/// A manifest list of `(content, manifest)` entries.
pub fn manifest_list(manifests: &[(i32, &str)]) -> Vec<u8> {
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
    writer.into_inner().unwrap()
}

/// The `order_id`s of `batches`, sorted.
pub fn order_ids(batches: &[RecordBatch]) -> Vec<i64> {
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
