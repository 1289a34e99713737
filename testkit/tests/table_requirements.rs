//! zerobus-local refuses a table that breaks the service's table requirements (PROTOCOL.md E),
//! over loopback TCP against real Delta tables on disk: a table name of other characters, a
//! column name of other characters, a table that is not managed, catalog-managed commits (each
//! `INVALID_ARGUMENT` at open, before READY), and a table recreated while a stream writes
//! (`FAILED_PRECONDITION`, before anything more is logged or acked). Each refusal is counted by
//! requirement.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, PutResult, SchemaAsIpc};
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_schema::{DataType, Field, Schema};
use futures::channel::mpsc;
use tonic::{Code, Status, Streaming};
use zerobus_sink_catalog::local::{LocalDelta, TABLE_TYPE_PROPERTY};
use zerobus_sink_catalog::{DesiredTable, Policy, Role, TableCatalog, TableRef};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};

const TABLE: &str = "main.bronze.orders";

/// 100 rows of ids from `first`; the table's only column (nullable, so nothing else is needed).
fn ids(first: i64) -> RecordBatch {
    let col: ArrayRef = Arc::new(Int64Array::from_iter_values(first..first + 100));
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
        vec![col],
    )
    .unwrap()
}

fn schema_message() -> FlightData {
    SchemaAsIpc::new(&ids(0).schema(), &IpcWriteOptions::default()).into()
}

fn message(first: i64, offset: u64) -> FlightData {
    let (_, encoded) = IpcDataGenerator::default()
        .encode(
            &ids(first),
            &mut DictionaryTracker::new(false),
            &IpcWriteOptions::default(),
            &mut IpcWriteContext::default(),
        )
        .unwrap();
    FlightData::from(encoded).with_app_metadata(format!("{{\"offset_id\":{offset}}}").into_bytes())
}

/// A table of one nullable BIGINT `id`, made by the local catalog backend.
async fn create_table(root: &Path) {
    let schema = Schema::new(vec![Field::new("id", DataType::Int64, true)]);
    let desired = DesiredTable::from_arrow(
        TableRef::parse(TABLE).unwrap(),
        &schema,
        None,
        Role::Standard,
    )
    .unwrap();
    // The reserved stamp columns are NOT NULL: make them nullable, so plain ids fit.
    let mut desired = desired;
    for c in &mut desired.columns {
        c.nullable = true;
    }
    LocalDelta::new(root)
        .reconcile(&desired, &Policy::default())
        .await
        .unwrap();
}

async fn table_id(root: &Path) -> String {
    LocalDelta::new(root)
        .describe(&TableRef::parse(TABLE).unwrap())
        .await
        .unwrap()
        .unwrap()
        .table_id
        .unwrap()
}

struct Rig {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    emulator: Emulator,
}

impl Rig {
    async fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tables");
        let emulator =
            Emulator::start(EmulatorConfig::new(dir.path().join("wal")).delta_root(&root))
                .await
                .unwrap();
        // The tables change under the tests' hands: nothing is appended to them meanwhile.
        emulator.hold_materialization(true);
        Rig {
            _dir: dir,
            root,
            emulator,
        }
    }

    /// A call on `table` whose messages the test sends one by one; its replies.
    async fn open(&self, table: &str) -> (mpsc::UnboundedSender<FlightData>, Streaming<PutResult>) {
        let channel = tonic::transport::Endpoint::from_shared(self.emulator.url())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let (tx, rx) = mpsc::unbounded();
        let mut request = tonic::Request::new(rx);
        request
            .metadata_mut()
            .insert("x-databricks-zerobus-table-name", table.parse().unwrap());
        let replies = FlightServiceClient::new(channel)
            .do_put(request)
            .await
            .unwrap()
            .into_inner();
        (tx, replies)
    }

    /// Opens a call on `table` with the schema and one batch: the status it ends with, after
    /// checking that it got no READY.
    async fn refused_at_open(&self, table: &str) -> Status {
        let (tx, mut replies) = self.open(table).await;
        // The emulator may refuse the call before it reads a message (a table name it cannot
        // write is refused from the header): then these sends find the call gone.
        let _ = tx.unbounded_send(schema_message());
        let _ = tx.unbounded_send(message(0, 0));
        let status = replies.message().await.expect_err("refused before READY");
        let stats = self.emulator.stats();
        assert_eq!((stats.ready, stats.rows), (0, 0), "{stats:?}");
        status
    }

    /// How many streams were refused for `requirement`.
    fn refusals(&self, requirement: &str) -> u64 {
        self.emulator
            .stats()
            .table_refusals
            .get(requirement)
            .copied()
            .unwrap_or(0)
    }
}

fn assert_status(status: &Status, code: Code, words: &[&str]) {
    assert_eq!(status.code(), code, "{status:?}");
    for w in words {
        assert!(status.message().contains(w), "{w:?} in {status:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_name_of_other_characters_is_refused_at_open() {
    let rig = Rig::new().await;
    let status = rig.refused_at_open("main.bronze.or-ders").await;
    assert_status(
        &status,
        Code::InvalidArgument,
        &[
            "Table name \"main.bronze.or-ders\" is invalid",
            "only table names with ASCII letters, digits, and underscores are supported",
        ],
    );
    assert_eq!(rig.refusals("table_name"), 1);
    assert_eq!(
        rig.emulator.stats().errors,
        1,
        "counted as the call's error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_name_of_other_characters_is_refused_at_open() {
    use deltalake::kernel::{DataType as Kernel, StructField};
    let rig = Rig::new().await;
    let location = LocalDelta::new(&rig.root).location(&TableRef::parse(TABLE).unwrap());
    std::fs::create_dir_all(&location).unwrap();
    let url = url::Url::from_directory_path(location.canonicalize().unwrap()).unwrap();
    deltalake::DeltaTable::try_from_url(url)
        .await
        .unwrap()
        .create()
        .with_columns([
            StructField::new("id", Kernel::LONG, true),
            StructField::new("prix_€", Kernel::DOUBLE, true),
        ])
        .await
        .unwrap();
    let status = rig.refused_at_open(TABLE).await;
    assert_status(
        &status,
        Code::InvalidArgument,
        &[
            "Table \"main.bronze.orders\" cannot be a Zerobus target",
            "column \"prix_€\"",
            "only column names with ASCII letters, digits, and underscores are supported",
        ],
    );
    assert_eq!(rig.refusals("column_name"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_is_not_managed_is_refused_at_open_and_counted_in_the_metrics() {
    let rig = Rig::new().await;
    create_table(&rig.root).await;
    LocalDelta::new(&rig.root)
        .set_properties(
            &TableRef::parse(TABLE).unwrap(),
            [(TABLE_TYPE_PROPERTY.to_owned(), "EXTERNAL".to_owned())],
        )
        .await
        .unwrap();
    let status = rig.refused_at_open(TABLE).await;
    assert_status(
        &status,
        Code::InvalidArgument,
        &[
            "Table \"main.bronze.orders\" cannot be a Zerobus target",
            "only managed Delta tables are supported; this table is EXTERNAL",
        ],
    );
    assert_eq!(rig.refusals("managed_delta"), 1);
    let metrics = rig.emulator.stats().prometheus();
    assert!(
        metrics.contains("\nzerobus_local_table_refusals_total{requirement=\"managed_delta\"} 1\n"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_with_catalog_managed_commits_is_refused_at_open() {
    let rig = Rig::new().await;
    create_table(&rig.root).await;
    let log = LocalDelta::new(&rig.root)
        .location(&TableRef::parse(TABLE).unwrap())
        .join("_delta_log");
    let next = std::fs::read_dir(&log)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    std::fs::write(
        log.join(format!("{next:020}.json")),
        concat!(
            r#"{"commitInfo":{"timestamp":1700000000000,"inCommitTimestamp":1700000000000,"operation":"UPGRADE PROTOCOL"}}"#,
            "\n",
            r#"{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["catalogOwned-preview"],"writerFeatures":["catalogOwned-preview","inCommitTimestamp"]}}"#,
            "\n"
        ),
    )
    .unwrap();
    let status = rig.refused_at_open(TABLE).await;
    assert_status(
        &status,
        Code::InvalidArgument,
        &[
            "Table \"main.bronze.orders\" cannot be a Zerobus target",
            "catalog-managed commits are not supported",
            "catalogOwned-preview",
        ],
    );
    assert_eq!(rig.refusals("catalog_managed_commits"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_recreated_while_a_stream_writes_ends_that_stream_before_more_is_acked() {
    let rig = Rig::new().await;
    create_table(&rig.root).await;
    let first = table_id(&rig.root).await;
    let (tx, mut replies) = rig.open(TABLE).await;
    tx.unbounded_send(schema_message()).unwrap();
    tx.unbounded_send(message(0, 0)).unwrap();
    let ready = replies.message().await.unwrap().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ready.app_metadata),
        r#"{"ack_up_to_offset":-1,"ack_up_to_records":0}"#
    );
    let acked = replies.message().await.unwrap().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&acked.app_metadata),
        r#"{"ack_up_to_offset":0,"ack_up_to_records":100}"#
    );
    // Dropped and made again under the same name while the stream is open.
    std::fs::remove_dir_all(LocalDelta::new(&rig.root).location(&TableRef::parse(TABLE).unwrap()))
        .unwrap();
    create_table(&rig.root).await;
    let now = table_id(&rig.root).await;
    assert_ne!(first, now);
    tx.unbounded_send(message(100, 1)).unwrap();
    let status = replies
        .message()
        .await
        .expect_err("the stream ends at its next write");
    assert_status(
        &status,
        Code::FailedPrecondition,
        &[
            "Table \"main.bronze.orders\" was recreated while this stream was writing to it",
            &first,
            &now,
            "recreating a target table is not supported",
        ],
    );
    let stats = rig.emulator.stats();
    assert_eq!(
        (stats.rows, stats.acks),
        (100, 1),
        "nothing after the recreation logged or acked: {stats:?}"
    );
    assert_eq!(rig.refusals("recreated"), 1);
    // A new stream opens on the new table.
    let (tx, mut replies) = rig.open(TABLE).await;
    tx.unbounded_send(schema_message()).unwrap();
    tx.unbounded_send(message(100, 0)).unwrap();
    drop(tx);
    let mut last = String::new();
    while let Some(r) = replies.message().await.unwrap() {
        last = String::from_utf8_lossy(&r.app_metadata).into_owned();
    }
    assert_eq!(last, r#"{"ack_up_to_offset":0,"ack_up_to_records":100}"#);
}
