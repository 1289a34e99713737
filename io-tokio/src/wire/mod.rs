//! The Zerobus Arrow wire format (PROTOCOL.md A.2, A.3): encoding the schema and batch messages,
//! and parsing `PutResult` metadata into typed responses. Parsing never panics: malformed
//! metadata is a [`MetadataError`].

pub(crate) mod encode;

use arrow_array::RecordBatch;
use arrow_flight::{FlightData, PutResult, SchemaAsIpc};
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_schema::{ArrowError, Schema};
use serde::Deserialize;
use zerobus_sink::PutResultMeta;

/// The IPC body compression of batch messages (PROTOCOL.md A.2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Zstandard, the official client's default.
    #[default]
    Zstd,
    /// LZ4 frame.
    Lz4,
    /// No compression (64-byte alignment, as the IPC defaults).
    None,
}

/// IPC write options as the official client makes them (PROTOCOL.md A.2): the IPC defaults
/// (64-byte alignment, V5) plus the codec, named in each batch header.
pub(crate) fn write_options(compression: Compression) -> Result<IpcWriteOptions, ArrowError> {
    let codec = match compression {
        Compression::Zstd => CompressionType::ZSTD,
        Compression::Lz4 => CompressionType::LZ4_FRAME,
        Compression::None => return Ok(IpcWriteOptions::default()),
    };
    IpcWriteOptions::default().try_with_compression(Some(codec))
}

/// Message 0 of every call: the schema, with empty `app_metadata` and no descriptor.
pub(crate) fn schema_message(schema: &Schema, options: &IpcWriteOptions) -> FlightData {
    SchemaAsIpc::new(schema, options).into()
}

thread_local! {
    /// The compression context and scratch buffers [`encode_batch`] uses: one per thread that
    /// encodes, shared by every stream whose task runs there, rather than one per stream. A
    /// zstd context's tables are large; with a context per stream, 50 streams encoding in turn
    /// kept evicting each other's tables from the cache (the `compare` bench's 50-tables cell
    /// at 0 ms: 4.5 ms of CPU per MB with a context per stream, 3.4 with one per thread, one
    /// run each), and held their memory for each stream's life. The context carries nothing
    /// from one message to the next but reused allocations, so any stream may use it.
    static CONTEXT: std::cell::RefCell<IpcWriteContext> =
        std::cell::RefCell::new(IpcWriteContext::default());
}

/// [`batch_message`] with this thread's encoding context.
pub(crate) fn encode_batch(
    batch: &RecordBatch,
    wire_offset: u64,
    options: &IpcWriteOptions,
) -> Result<FlightData, ArrowError> {
    CONTEXT.with_borrow_mut(|context| batch_message(batch, wire_offset, options, context))
}

/// One batch as one message with `{"offset_id":N}`. The core has already split batches above
/// the message limit, so this never splits (a split would need a second wire offset).
pub(crate) fn batch_message(
    batch: &RecordBatch,
    wire_offset: u64,
    options: &IpcWriteOptions,
    context: &mut IpcWriteContext,
) -> Result<FlightData, ArrowError> {
    let mut tracker = DictionaryTracker::new(false);
    let (dictionaries, encoded) =
        IpcDataGenerator::default().encode(batch, &mut tracker, options, context)?;
    if !dictionaries.is_empty() {
        return Err(ArrowError::InvalidArgumentError(
            "dictionary-encoded columns must be hydrated before sending".into(),
        ));
    }
    let data: FlightData = encoded.into();
    Ok(data.with_app_metadata(format!("{{\"offset_id\":{wire_offset}}}").into_bytes()))
}

/// Why a `PutResult` could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// The metadata is empty.
    #[error("PutResult has empty app_metadata")]
    Empty,
    /// The metadata is not the expected JSON object.
    #[error("PutResult app_metadata is not a valid ack ({reason}): {excerpt:?}")]
    Malformed {
        /// What the JSON parser said.
        reason: String,
        /// The first bytes of the metadata, lossily decoded.
        excerpt: String,
    },
}

#[derive(Deserialize)]
struct AckJson {
    ack_up_to_offset: i64,
    ack_up_to_records: u64,
    #[serde(default)]
    close_stream_duration_ms: Option<u64>,
}

/// Parses a `PutResult`'s `app_metadata` (PROTOCOL.md A.3) into its fields. What they mean
/// (READY, an ack, a rotation) is the core's decision, not this parser's.
pub(crate) fn parse(result: &PutResult) -> Result<PutResultMeta, MetadataError> {
    let bytes = &result.app_metadata;
    if bytes.is_empty() {
        return Err(MetadataError::Empty);
    }
    let ack: AckJson = serde_json::from_slice(bytes).map_err(|e| MetadataError::Malformed {
        reason: e.to_string(),
        excerpt: String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned(),
    })?;
    Ok(PutResultMeta {
        ack_up_to_offset: ack.ack_up_to_offset,
        ack_up_to_records: ack.ack_up_to_records,
        close_stream_duration_ms: ack.close_stream_duration_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_body_buffer_is_aligned_to_64_bytes_as_the_official_client_writes_it() {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, Int8Array, StringArray};
        // Odd lengths: with 8-byte alignment the second buffer would start at 8 or 16.
        let small: ArrayRef = Arc::new(Int8Array::from(vec![1, 2, 3]));
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("abcde")]));
        let batch = RecordBatch::try_from_iter([("small", small), ("text", text)]).unwrap();
        for compression in [Compression::Zstd, Compression::Lz4, Compression::None] {
            let options = write_options(compression).unwrap();
            let data = batch_message(&batch, 0, &options, &mut IpcWriteContext::default()).unwrap();
            let message = arrow_ipc::root_as_message(&data.data_header).unwrap();
            let header = message.header_as_record_batch().unwrap();
            let buffers = header.buffers().unwrap();
            assert!(buffers.len() >= 5, "{compression:?}");
            for b in buffers {
                assert_eq!(
                    b.offset() % 64,
                    0,
                    "{compression:?}: buffer at {}",
                    b.offset()
                );
            }
            assert_eq!(data.data_body.len() % 64, 0, "{compression:?}");
            assert_eq!(
                header.compression().is_some(),
                compression != Compression::None,
                "the codec is named in the header"
            );
        }
    }

    fn put(json: &str) -> PutResult {
        PutResult {
            app_metadata: json.as_bytes().to_vec().into(),
        }
    }

    fn meta(offset: i64, records: u64, close: Option<u64>) -> PutResultMeta {
        PutResultMeta {
            ack_up_to_offset: offset,
            ack_up_to_records: records,
            close_stream_duration_ms: close,
        }
    }

    #[test]
    fn ready_ack_and_rotation_parse_into_their_fields() {
        assert_eq!(
            parse(&put(r#"{"ack_up_to_offset":-1,"ack_up_to_records":0}"#)),
            Ok(PutResultMeta::READY)
        );
        assert_eq!(
            parse(&put(r#"{"ack_up_to_offset":99,"ack_up_to_records":5000}"#)),
            Ok(meta(99, 5000, None))
        );
        assert_eq!(
            parse(&put(
                r#"{"ack_up_to_offset":5,"ack_up_to_records":100,"close_stream_duration_ms":2000}"#
            )),
            Ok(meta(5, 100, Some(2000)))
        );
    }

    #[test]
    fn malformed_metadata_is_a_typed_error_not_a_panic() {
        assert_eq!(parse(&put("")), Err(MetadataError::Empty));
        for bad in [
            "{",
            "null",
            "[]",
            r#"{"ack_up_to_offset":"x","ack_up_to_records":1}"#,
            r#"{"ack_up_to_offset":1,"ack_up_to_records":-5}"#,
            "\u{0}\u{ff}garbage",
        ] {
            assert!(
                matches!(parse(&put(bad)), Err(MetadataError::Malformed { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn batch_messages_carry_sequential_offset_metadata_and_the_codec() {
        use arrow_array::{ArrayRef, Int64Array};
        use std::sync::Arc;
        let col: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let batch = RecordBatch::try_from_iter([("id", col)]).unwrap();
        for (compression, codec) in [
            (Compression::Zstd, Some(CompressionType::ZSTD)),
            (Compression::Lz4, Some(CompressionType::LZ4_FRAME)),
            (Compression::None, None),
        ] {
            let options = write_options(compression).unwrap();
            let data = batch_message(&batch, 7, &options, &mut IpcWriteContext::default()).unwrap();
            assert_eq!(&data.app_metadata[..], br#"{"offset_id":7}"#);
            let message = arrow_ipc::root_as_message(&data.data_header).unwrap();
            let header = message.header_as_record_batch().unwrap();
            assert_eq!(header.length(), 1000);
            assert_eq!(header.compression().map(|c| c.codec()), codec);
            let schema = schema_message(&batch.schema(), &options);
            assert!(schema.app_metadata.is_empty() && schema.data_body.is_empty());
        }
    }
}
