//! The emulator refuses hostile input with an error status and keeps serving: bad metadata,
//! offset gaps, a batch before the schema, garbage IPC, and a compressed buffer that claims a
//! terabyte (DEPENDENCIES.md trap 7) must each end that call, not the server or its memory.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, PutResult, SchemaAsIpc};
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_ipc::{CompressionType, MetadataVersion};
use tonic::{Code, Status};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};

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
    SchemaAsIpc::new(&batch().schema(), &options()).into()
}

fn batch_message(offset: u64) -> FlightData {
    let (_, encoded) = IpcDataGenerator::default()
        .encode(
            &batch(),
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
