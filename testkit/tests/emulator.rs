//! The emulator refuses hostile input with an error status and keeps serving: bad metadata,
//! offset gaps, a batch before the schema, garbage IPC, and a compressed buffer that claims a
//! terabyte (DEPENDENCIES.md trap 7) must each end that call, not the server or its memory.
//! With a Delta root it checks streams against real Delta tables and materializes acked rows
//! into them exactly once, across crashes.

use std::sync::Arc;

use std::time::Duration;

use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, PutResult, SchemaAsIpc};
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_ipc::{CompressionType, MetadataVersion};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use tonic::{Code, Status};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::{DesiredTable, Policy, Role, TableCatalog, TableRef};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig, delta};

const TABLE: &str = "main.bronze.hostile";

fn batch() -> RecordBatch {
    let col: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
    RecordBatch::try_from_iter([("id", col)]).unwrap()
}

fn options() -> IpcWriteOptions {
    IpcWriteOptions::try_new(8, false, MetadataVersion::V5)
        .unwrap()
        .try_with_compression(Some(CompressionType::ZSTD))
        .unwrap()
}

fn schema_message() -> FlightData {
    schema_of(&batch())
}

fn batch_message(offset: u64) -> FlightData {
    message_of(&batch(), offset)
}

fn schema_of(batch: &RecordBatch) -> FlightData {
    SchemaAsIpc::new(&batch.schema(), &options()).into()
}

fn message_of(batch: &RecordBatch, offset: u64) -> FlightData {
    let (_, encoded) = IpcDataGenerator::default()
        .encode(
            batch,
            &mut DictionaryTracker::new(false),
            &options(),
            &mut IpcWriteContext::default(),
        )
        .unwrap();
    FlightData::from(encoded).with_app_metadata(format!("{{\"offset_id\":{offset}}}").into_bytes())
}

/// The schema message, then batch messages with offsets 0 to 4 (1,000 rows each).
fn schema_and_five_batches() -> Vec<FlightData> {
    std::iter::once(schema_message())
        .chain((0..5).map(batch_message))
        .collect()
}

/// Each reply's `app_metadata`, as text.
fn metadata(replies: &[PutResult]) -> Vec<String> {
    replies
        .iter()
        .map(|r| String::from_utf8_lossy(&r.app_metadata).into_owned())
        .collect()
}

/// One DoPut with `messages`; the results until the call ended, or its error status.
async fn call(
    emu: &Emulator,
    table: Option<&str>,
    messages: Vec<FlightData>,
) -> Result<Vec<PutResult>, Status> {
    let channel = tonic::transport::Endpoint::from_shared(emu.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightServiceClient::new(channel);
    let mut request = tonic::Request::new(futures::stream::iter(messages));
    if let Some(t) = table {
        request
            .metadata_mut()
            .insert("x-databricks-zerobus-table-name", t.parse().unwrap());
    }
    let mut responses = client.do_put(request).await?.into_inner();
    let mut out = Vec::new();
    while let Some(r) = responses.message().await? {
        out.push(r);
    }
    Ok(out)
}

fn refused(result: Result<Vec<PutResult>, Status>, code: Code, needle: &str) {
    let status = result.expect_err("the call must end with an error status");
    assert_eq!(status.code(), code, "{status:?}");
    assert!(status.message().contains(needle), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_gets_an_error_status_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let emu = Emulator::start(EmulatorConfig::new(dir.path()))
        .await
        .unwrap();

    refused(
        call(&emu, None, vec![schema_message()]).await,
        Code::InvalidArgument,
        "table-name",
    );
    refused(
        call(&emu, Some(TABLE), vec![batch_message(0)]).await,
        Code::InvalidArgument,
        "schema",
    );
    refused(
        call(
            &emu,
            Some(TABLE),
            vec![schema_message(), batch_message(0), batch_message(2)],
        )
        .await,
        Code::InvalidArgument,
        "Non-incremental offset: expected 1, got 2",
    );
    let bad_metadata = batch_message(0).with_app_metadata(b"{offset_id: zero}".to_vec());
    refused(
        call(&emu, Some(TABLE), vec![schema_message(), bad_metadata]).await,
        Code::InvalidArgument,
        "JSON",
    );
    let garbage = FlightData::new()
        .with_data_header(vec![0xffu8; 64])
        .with_data_body(vec![1u8; 16])
        .with_app_metadata(b"{\"offset_id\":0}".to_vec());
    refused(
        call(&emu, Some(TABLE), vec![schema_message(), garbage]).await,
        Code::InvalidArgument,
        "IPC",
    );

    // Every compressed buffer claims 1 TiB once decompressed.
    let mut bomb = batch_message(0);
    let message = arrow_ipc::root_as_message(&bomb.data_header).unwrap();
    let buffers: Vec<(usize, usize)> = message
        .header_as_record_batch()
        .unwrap()
        .buffers()
        .unwrap()
        .iter()
        .map(|b| (b.offset() as usize, b.length() as usize))
        .collect();
    let mut body = bomb.data_body.to_vec();
    for (offset, _) in buffers.into_iter().filter(|(_, length)| *length >= 8) {
        body[offset..offset + 8].copy_from_slice(&(1i64 << 40).to_le_bytes());
    }
    bomb.data_body = body.into();
    refused(
        call(&emu, Some(TABLE), vec![schema_message(), bomb]).await,
        Code::ResourceExhausted,
        "decodes to",
    );

    // Still serving: READY, then one ack of 1000 rows, then OK at the half-close.
    let ok = call(&emu, Some(TABLE), vec![schema_message(), batch_message(0)])
        .await
        .unwrap();
    assert_eq!(
        metadata(&ok),
        [
            r#"{"ack_up_to_offset":-1,"ack_up_to_records":0}"#,
            r#"{"ack_up_to_offset":0,"ack_up_to_records":1000}"#
        ]
    );
    // Logged: the valid message 0 of the gap case, and this call's. Nothing hostile.
    assert_eq!(emu.stats().rows, 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_are_cumulative_rows_and_batch_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let one_per_ack =
        Emulator::start(EmulatorConfig::new(dir.path().join("a")).max_messages_per_ack(1))
            .await
            .unwrap();
    let replies = call(&one_per_ack, Some(TABLE), schema_and_five_batches())
        .await
        .unwrap();
    let expected: Vec<String> =
        std::iter::once(r#"{"ack_up_to_offset":-1,"ack_up_to_records":0}"#.to_owned())
            .chain((0..5).map(|i| {
                format!(
                    r#"{{"ack_up_to_offset":{i},"ack_up_to_records":{}}}"#,
                    (i + 1) * 1000
                )
            }))
            .collect();
    assert_eq!(
        metadata(&replies),
        expected,
        "one ack per message, cumulative rows"
    );

    // With a latency, messages that arrive meanwhile share an ack.
    let batched = Emulator::start(
        EmulatorConfig::new(dir.path().join("b"))
            .ack_latency(std::time::Duration::from_millis(200)),
    )
    .await
    .unwrap();
    let replies = call(&batched, Some(TABLE), schema_and_five_batches())
        .await
        .unwrap();
    let last = metadata(&replies).pop().unwrap();
    assert_eq!(last, r#"{"ack_up_to_offset":4,"ack_up_to_records":5000}"#);
    assert!(
        replies.len() < 6,
        "fewer acks than messages: {}",
        replies.len() - 1
    );
    assert_eq!(batched.stats().acks as usize, replies.len() - 1);
}

// ---- Delta tables (a catalog root) ----

/// `rows` rows with ids from `first`, stamped as the sink stamps them.
fn stamped(first: i64, rows: i64) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(first..first + rows));
    let ts: ArrayRef = Arc::new(
        TimestampMicrosecondArray::from(vec![1_700_000_000_000_000; rows as usize])
            .with_timezone("UTC"),
    );
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new(
                "_twg_emit_ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
            Field::new("_twg_source_topic", DataType::Utf8, false),
            Field::new("_twg_source_partition", DataType::Int32, false),
            Field::new("_twg_source_start", DataType::Int64, false),
            Field::new("_twg_source_end", DataType::Int64, false),
            Field::new("_twg_source_row", DataType::Int32, false),
        ])),
        vec![
            ids,
            ts,
            Arc::new(StringArray::from(vec!["ids"; rows as usize])),
            Arc::new(Int32Array::from(vec![0; rows as usize])),
            Arc::new(Int64Array::from(vec![first; rows as usize])),
            Arc::new(Int64Array::from(vec![first + rows - 1; rows as usize])),
            Arc::new(Int32Array::from_iter_values(0..rows as i32)),
        ],
    )
    .unwrap()
}

/// The schema message and `n` batches of 100 rows, ids from `first`.
fn stamped_call(first: i64, n: u64) -> Vec<FlightData> {
    std::iter::once(schema_of(&stamped(0, 1)))
        .chain((0..n).map(|i| message_of(&stamped(first + i as i64 * 100, 100), i)))
        .collect()
}

/// Creates `table` under `root` with the local catalog backend, for batches of `stamped`.
async fn create_table(root: &std::path::Path, table: &str) {
    let schema = Schema::new(vec![Field::new("id", DataType::Int64, false)]);
    let desired = DesiredTable::from_arrow(
        TableRef::parse(table).unwrap(),
        &schema,
        None,
        Role::Standard,
    )
    .unwrap();
    LocalDelta::new(root)
        .reconcile(&desired, &Policy::default())
        .await
        .unwrap();
}

/// Every id in the Delta table, read back through delta-rs.
async fn ids_in_table(root: &std::path::Path, table: &str) -> Vec<i64> {
    let (batches, _) = delta::read_table(root, table).await.unwrap();
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let col = b.column_by_name("id").unwrap();
            col.as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_delta_root_streams_are_checked_against_their_table() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tables");
    create_table(&root, TABLE).await;
    let emu = Emulator::start(EmulatorConfig::new(dir.path().join("wal")).delta_root(&root))
        .await
        .unwrap();
    // A table that does not exist: NOT_FOUND, naming it (permanent, PROTOCOL.md C.1).
    refused(
        call(&emu, Some("main.bronze.nowhere"), stamped_call(0, 1)).await,
        Code::NotFound,
        "main.bronze.nowhere does not exist",
    );
    // A stream without the stamped NOT NULL column, and with a column the table lacks: the
    // service's schema rejection, with its ErrorInfo naming both causes.
    let extra = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("surprise", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
    ])
    .unwrap();
    let status = call(
        &emu,
        Some(TABLE),
        vec![schema_of(&extra), message_of(&extra, 0)],
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let info = tonic_types::StatusExt::get_details_error_info(&status).expect("ErrorInfo");
    assert_eq!(info.reason, "SCHEMA_VALIDATION_FAILED");
    assert_eq!(info.domain, "zerobus.databricks.com");
    let causes = &info.metadata["causes"];
    assert!(
        causes.contains("FIELD_NOT_IN_TABLE") && causes.contains("MISSING_REQUIRED_COLUMN"),
        "{causes}"
    );
    assert!(status.message().contains("surprise"), "{status:?}");
    // A type the column does not have.
    let wrong = RecordBatch::try_from_iter([(
        "id",
        Arc::new(arrow_array::StringArray::from(vec!["1"])) as ArrayRef,
    )])
    .unwrap();
    let status = call(&emu, Some(TABLE), vec![schema_of(&wrong)])
        .await
        .unwrap_err();
    let info = tonic_types::StatusExt::get_details_error_info(&status).expect("ErrorInfo");
    assert!(
        info.metadata["causes"].contains("TYPE_INCOMPATIBLE"),
        "{status:?}"
    );
    // The right schema is served.
    let replies = call(&emu, Some(TABLE), stamped_call(0, 2)).await.unwrap();
    assert_eq!(
        metadata(&replies).last().unwrap(),
        r#"{"ack_up_to_offset":1,"ack_up_to_records":200}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_rows_land_in_the_delta_table_exactly_once_across_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let (root, wal) = (dir.path().join("tables"), dir.path().join("wal"));
    create_table(&root, TABLE).await;
    let quick = || {
        EmulatorConfig::new(&wal)
            .delta_root(&root)
            .materialize_lag(Duration::from_millis(20))
    };
    let emu = Emulator::start(quick()).await.unwrap();
    call(&emu, Some(TABLE), stamped_call(0, 5)).await.unwrap();
    emu.until_materialized(TABLE).await;
    assert_eq!(
        ids_in_table(&root, TABLE).await,
        (0..500).collect::<Vec<_>>()
    );
    // Logged and acked, then a crash before the next round: nothing is in the table yet...
    let addr = emu.addr();
    let slow = || {
        EmulatorConfig::new(&wal)
            .delta_root(&root)
            .materialize_lag(Duration::from_secs(3600))
    };
    emu.kill().await;
    let emu = Emulator::bind(addr, slow()).await.unwrap();
    call(&emu, Some(TABLE), stamped_call(500, 5)).await.unwrap();
    assert_eq!(
        ids_in_table(&root, TABLE).await.len(),
        500,
        "not materialized yet"
    );
    emu.kill().await;
    // ...and the next start resumes from the position recorded in the table's last commit:
    // the new rows land once, the old ones are not appended again.
    let emu = Emulator::bind(addr, quick()).await.unwrap();
    emu.until_materialized(TABLE).await;
    assert_eq!(
        ids_in_table(&root, TABLE).await,
        (0..1000).collect::<Vec<_>>()
    );
    assert_eq!(emu.stats().materialized_rows, 500);
    // A graceful stop materializes what is logged, and a restart after it adds nothing.
    let emu2 = {
        emu.kill().await;
        Emulator::bind(addr, slow()).await.unwrap()
    };
    call(&emu2, Some(TABLE), stamped_call(1000, 3))
        .await
        .unwrap();
    emu2.shutdown().await;
    assert_eq!(
        ids_in_table(&root, TABLE).await,
        (0..1300).collect::<Vec<_>>()
    );
    let emu3 = Emulator::bind(addr, quick()).await.unwrap();
    emu3.until_materialized(TABLE).await;
    assert_eq!(emu3.stats().materialized_rows, 0);
    assert_eq!(ids_in_table(&root, TABLE).await.len(), 1300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_counts_its_log_from_the_headers_and_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (root, wal) = (dir.path().join("tables"), dir.path().join("wal"));
    create_table(&root, TABLE).await;
    // As zerobus-local runs: the batches are not kept in memory.
    let lean = || {
        EmulatorConfig::new(&wal)
            .delta_root(&root)
            .materialize_lag(Duration::from_millis(20))
            .keep_batches(false)
    };
    let emu = Emulator::start(lean()).await.unwrap();
    call(&emu, Some(TABLE), stamped_call(0, 5)).await.unwrap();
    let addr = emu.addr();
    let log = emu.wal_path(TABLE);
    emu.kill().await;
    // A crash in the middle of an append: a frame that claims a 100-byte header, and 10 bytes.
    let whole = std::fs::metadata(&log).unwrap().len();
    let mut torn = vec![1u8, 100, 0, 0, 0, 0, 0, 0, 0];
    torn.extend_from_slice(&[7; 10]);
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&torn);
    std::fs::write(&log, &bytes).unwrap();

    let emu = Emulator::bind(addr, lean()).await.unwrap();
    let stats = emu.stats();
    assert_eq!(
        (stats.recovered_messages, stats.messages, stats.rows),
        (5, 5, 500),
        "counted from the headers"
    );
    assert!(emu.batches(TABLE).is_empty(), "nothing kept in memory");
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        whole,
        "the torn tail is cut"
    );
    // What is appended next follows a complete record: the log reads back whole, and the
    // materializer (resuming from the table's commit) lands every row once.
    call(&emu, Some(TABLE), stamped_call(500, 5)).await.unwrap();
    emu.until_materialized(TABLE).await;
    assert_eq!(
        ids_in_table(&root, TABLE).await,
        (0..1000).collect::<Vec<_>>()
    );
    let read = zerobus_sink_testkit::emulator::wal::read(&log).unwrap();
    assert_eq!(read.iter().map(RecordBatch::num_rows).sum::<usize>(), 1000);
    emu.kill().await;
    // With the batches kept, a restart holds all of them again.
    let emu = Emulator::bind(addr, lean().keep_batches(true))
        .await
        .unwrap();
    assert_eq!(emu.batches(TABLE).len(), 10);
}
