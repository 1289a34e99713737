//! Decoding what a client sends, without trusting it: every check that can fail on hostile
//! input returns a status, nothing allocates more than the limits allow (DEPENDENCIES.md trap 7:
//! a compressed IPC buffer declares its own decompressed size, and arrow allocates it), and the
//! arrow decoder runs under `catch_unwind` so that a decoder bug is a status, not a crash.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::FlightData;
use arrow_ipc::CompressionType;
use arrow_schema::{DataType, SchemaRef};
use tonic::Status;

/// One decoded record batch message.
#[derive(Debug)]
pub(crate) struct DecodedBatch {
    /// Rows, from the IPC header (and checked against the decoded batch).
    pub(crate) rows: u64,
    /// The body codec, if the message was compressed.
    pub(crate) codec: Option<CompressionType>,
    /// The rows.
    pub(crate) batch: RecordBatch,
}

/// The `offset_id` of a post-schema message's `app_metadata` (`{"offset_id":N}`).
pub(crate) fn offset_id(app_metadata: &[u8]) -> Result<u64, Status> {
    let value: serde_json::Value = serde_json::from_slice(app_metadata).map_err(|e| {
        Status::invalid_argument(format!(
            "app_metadata is not JSON ({e}); expected {{\"offset_id\":N}}"
        ))
    })?;
    value
        .get("offset_id")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| {
            Status::invalid_argument("app_metadata has no non-negative integer offset_id")
        })
}

/// The schema of the first message of a call.
pub(crate) fn schema(data: &FlightData) -> Result<SchemaRef, Status> {
    if !data.app_metadata.is_empty() {
        return Err(Status::invalid_argument(
            "the first message must be the schema, with empty app_metadata",
        ));
    }
    let message = arrow_ipc::root_as_message(&data.data_header).map_err(|e| {
        Status::invalid_argument(format!("first message is not an IPC message: {e}"))
    })?;
    let fb = message
        .header_as_schema()
        .ok_or_else(|| Status::invalid_argument("the first message must be an IPC Schema"))?;
    let schema = catch_unwind(AssertUnwindSafe(|| arrow_ipc::convert::fb_to_schema(fb)))
        .map_err(|_| Status::invalid_argument("the schema message could not be decoded"))?;
    if let Some(f) = schema
        .fields()
        .iter()
        .find(|f| matches!(f.data_type(), DataType::Dictionary(..)))
    {
        return Err(Status::invalid_argument(format!(
            "field {} is dictionary-encoded; Zerobus expects hydrated dictionaries",
            f.name()
        )));
    }
    Ok(Arc::new(schema))
}

/// A record batch message, checked against `max_decoded_bytes` before anything is allocated.
pub(crate) fn batch(
    data: &FlightData,
    schema: &SchemaRef,
    max_decoded_bytes: u64,
) -> Result<DecodedBatch, Status> {
    let message = arrow_ipc::root_as_message(&data.data_header)
        .map_err(|e| Status::invalid_argument(format!("not an IPC message: {e}")))?;
    let header = message
        .header_as_record_batch()
        .ok_or_else(|| Status::invalid_argument("expected an IPC RecordBatch message"))?;
    let rows = u64::try_from(header.length())
        .map_err(|_| Status::invalid_argument("negative row count in the IPC header"))?;
    let body = &data.data_body;
    let codec = header.compression().map(|c| c.codec());
    let mut decoded: u64 = 0;
    for buffer in header.buffers().into_iter().flatten() {
        let (offset, length) = (buffer.offset(), buffer.length());
        let end = offset
            .checked_add(length)
            .filter(|_| offset >= 0 && length >= 0);
        let Some(end) = end
            .and_then(|e| usize::try_from(e).ok())
            .filter(|e| *e <= body.len())
        else {
            return Err(Status::invalid_argument(format!(
                "IPC buffer [{offset}, +{length}) lies outside the {}-byte body",
                body.len()
            )));
        };
        let start = usize::try_from(offset).unwrap_or(end);
        let size = match codec {
            Some(_) if end - start >= 8 => {
                let mut prefix = [0u8; 8];
                prefix.copy_from_slice(&body[start..start + 8]);
                match i64::from_le_bytes(prefix) {
                    -1 => (end - start - 8) as u64,
                    n => u64::try_from(n).map_err(|_| {
                        Status::invalid_argument(format!("bad uncompressed length {n}"))
                    })?,
                }
            }
            _ => (end - start) as u64,
        };
        decoded = decoded.saturating_add(size);
    }
    if decoded > max_decoded_bytes {
        return Err(Status::resource_exhausted(format!(
            "the message decodes to {decoded} bytes, above the limit of {max_decoded_bytes}"
        )));
    }
    let none = HashMap::new();
    let batch = catch_unwind(AssertUnwindSafe(|| {
        arrow_flight::utils::flight_data_to_arrow_batch(data, schema.clone(), &none)
    }))
    .map_err(|_| Status::invalid_argument("the IPC record batch could not be decoded"))?
    .map_err(|e| Status::invalid_argument(format!("bad IPC record batch: {e}")))?;
    if batch.num_rows() as u64 != rows {
        return Err(Status::invalid_argument(format!(
            "IPC header says {rows} rows, the body holds {}",
            batch.num_rows()
        )));
    }
    Ok(DecodedBatch { rows, codec, batch })
}
