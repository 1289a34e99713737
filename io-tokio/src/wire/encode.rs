//! One stream's encoder: a large batch is encoded on another worker thread (several at once,
//! up to the runtime's workers; the rest wait their turn), a small one where the call's
//! request body is polled, and every message leaves in wire order. A stream whose batches are
//! large is CPU-bound by compression (zstd is most of a client's CPU); encoding them one after
//! another where the body is polled would hold the stream to one core however many the runtime
//! has. A large batch that finds every worker busy waits for one rather than being encoded
//! where the body is polled: encoded there, it held up the messages already encoded behind it
//! and the body's taking of the next batches, and one stream of 1 MB batches ran at 0.86 of
//! one core's rate (docs/performance.md, "Tried and not kept").

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use arrow_flight::FlightData;
use arrow_ipc::writer::IpcWriteOptions;
use tokio::task::JoinHandle;

use crate::wire;

/// Batches of at least this many bytes of Arrow data are encoded on another worker thread:
/// well above the cost of a task (a few µs against ~2 ms of zstd for 1 MiB).
pub(crate) const PARALLEL_BYTES: u64 = 256 * 1024;

/// The encoder of one stream. See the module docs.
pub(crate) struct Encoder {
    options: IpcWriteOptions,
    /// Messages in wire order, encoded or being encoded.
    queue: VecDeque<Message>,
    /// Encodings running on other threads (the queue's `Encoding` messages).
    running: usize,
    /// The most that may run at once: the runtime's workers (1 on a current-thread runtime,
    /// where nothing runs elsewhere).
    most: usize,
}

enum Message {
    Ready(FlightData),
    Encoding {
        wire_offset: u64,
        job: JoinHandle<Result<FlightData, arrow_schema::ArrowError>>,
    },
    /// A large batch waiting for a worker: started once fewer than `most` encodings run.
    Waiting {
        wire_offset: u64,
        batch: RecordBatch,
    },
}

/// An encoding that failed, naming the message's wire offset.
#[derive(Debug, thiserror::Error)]
#[error("encoding wire offset {wire_offset}: {reason}")]
pub(crate) struct EncodeError {
    pub(crate) wire_offset: u64,
    pub(crate) reason: String,
}

impl Encoder {
    pub(crate) fn new(options: IpcWriteOptions) -> Encoder {
        let most = tokio::runtime::Handle::try_current()
            .map_or(1, |h| h.metrics().num_workers())
            .max(1);
        Encoder {
            options,
            queue: VecDeque::new(),
            running: 0,
            most,
        }
    }

    /// Takes the batch, `bytes` of Arrow data as its caller counted them, for wire message
    /// `wire_offset` (offsets arrive in order).
    pub(crate) fn push(
        &mut self,
        batch: RecordBatch,
        bytes: u64,
        wire_offset: u64,
    ) -> Result<(), EncodeError> {
        if self.most > 1 && bytes >= PARALLEL_BYTES {
            let message = if self.running < self.most {
                self.spawn(batch, wire_offset)
            } else {
                Message::Waiting { wire_offset, batch }
            };
            self.queue.push_back(message);
            return Ok(());
        }
        let data =
            wire::encode_batch(&batch, wire_offset, &self.options).map_err(|e| EncodeError {
                wire_offset,
                reason: e.to_string(),
            })?;
        self.queue.push_back(Message::Ready(data));
        Ok(())
    }

    /// Starts encoding `batch` on another worker.
    fn spawn(&mut self, batch: RecordBatch, wire_offset: u64) -> Message {
        let options = self.options.clone();
        let job = tokio::spawn(async move { wire::encode_batch(&batch, wire_offset, &options) });
        self.running += 1;
        Message::Encoding { wire_offset, job }
    }

    /// The next message to send, if it is encoded (and every one before it was taken).
    pub(crate) fn ready(&mut self) -> Option<FlightData> {
        match self.queue.front() {
            Some(Message::Ready(_)) => match self.queue.pop_front() {
                Some(Message::Ready(data)) => Some(data),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether the next message is being encoded elsewhere or waits for a worker
    /// ([`Self::poll_finish_next`] waits for it).
    pub(crate) fn waiting(&self) -> bool {
        matches!(
            self.queue.front(),
            Some(Message::Encoding { .. } | Message::Waiting { .. })
        )
    }

    /// Whether every message taken was sent.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Waits for the next message's encoding. Cancel-safe: the job keeps running and is
    /// waited for again.
    #[cfg(test)]
    pub(crate) async fn finish_next(&mut self) -> Result<(), EncodeError> {
        std::future::poll_fn(|cx| self.poll_finish_next(cx)).await
    }

    /// Polls the encodings running elsewhere, starting a waiting batch's for each one done:
    /// ready once the next message is encoded (at once if it is not encoding elsewhere).
    /// An encoding that failed is reported as soon as it is found, naming its wire offset.
    pub(crate) fn poll_finish_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), EncodeError>> {
        let mut index = 0;
        while let Some(message) = self.queue.get_mut(index) {
            match message {
                Message::Ready(_) => {}
                Message::Encoding { wire_offset, job } => {
                    if let Poll::Ready(done) = Pin::new(job).poll(cx) {
                        let wire_offset = *wire_offset;
                        self.running -= 1;
                        let failed = |reason: String| EncodeError {
                            wire_offset,
                            reason,
                        };
                        *message = match done {
                            Ok(Ok(data)) => Message::Ready(data),
                            Ok(Err(e)) => return Poll::Ready(Err(failed(e.to_string()))),
                            Err(e) => {
                                let reason = format!("the encoding task ended: {e}");
                                return Poll::Ready(Err(failed(reason)));
                            }
                        };
                    }
                }
                Message::Waiting { .. } if self.running >= self.most => break,
                Message::Waiting { wire_offset, batch } => {
                    let (wire_offset, batch) = (*wire_offset, batch.clone());
                    self.queue[index] = self.spawn(batch, wire_offset);
                    // Polled at the same index next, so that its end wakes the body.
                    continue;
                }
            }
            index += 1;
        }
        match self.queue.front() {
            Some(Message::Encoding { .. } | Message::Waiting { .. }) => Poll::Pending,
            Some(Message::Ready(_)) | None => Poll::Ready(Ok(())),
        }
    }
}

impl Drop for Encoder {
    fn drop(&mut self) {
        for message in &self.queue {
            if let Message::Encoding { job, .. } = message {
                job.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use zerobus_sink::Batch;

    use super::*;

    fn batch(rows: usize, seed: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("text", DataType::Utf8, false),
        ]));
        let ids = Int64Array::from_iter_values((0..rows).map(|i| (i * seed) as i64));
        let text = StringArray::from_iter_values((0..rows).map(|i| format!("row {i} of {seed}")));
        RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(text)]).unwrap()
    }

    fn offset_of(data: &FlightData) -> u64 {
        let meta: serde_json::Value = serde_json::from_slice(&data.app_metadata).unwrap();
        meta["offset_id"].as_u64().unwrap()
    }

    /// Drains the encoder as the connection does: in order, waiting for what runs elsewhere.
    async fn drain(encoder: &mut Encoder, sent: &mut Vec<FlightData>) {
        loop {
            while let Some(data) = encoder.ready() {
                sent.push(data);
            }
            if !encoder.waiting() {
                return;
            }
            encoder.finish_next().await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_and_small_batches_leave_in_wire_order_with_the_bytes_of_an_inline_encoding() {
        let options = wire::write_options(wire::Compression::Zstd).unwrap();
        let mut encoder = Encoder::new(options.clone());
        assert_eq!(encoder.most, 2);
        let batches: Vec<_> = (0..12)
            .map(|i| batch(if i % 3 == 0 { 10 } else { 40_000 }, i + 1))
            .collect();
        let large = batches
            .iter()
            .filter(|b| Batch::bytes(*b) >= PARALLEL_BYTES)
            .count();
        assert_eq!(large, 8, "the schedule mixes large and small batches");
        let mut sent = Vec::new();
        let mut at_once = 0;
        for (offset, b) in batches.iter().enumerate() {
            encoder
                .push(b.clone(), Batch::bytes(b), offset as u64)
                .unwrap();
            at_once = at_once.max(encoder.running);
            // Drain every third push only: several encodings run at once meanwhile.
            if offset % 3 == 2 {
                drain(&mut encoder, &mut sent).await;
            }
        }
        drain(&mut encoder, &mut sent).await;
        assert!(encoder.is_empty());
        assert_eq!(
            at_once, 2,
            "two large batches were encoded elsewhere at once"
        );
        let offsets: Vec<u64> = sent.iter().map(offset_of).collect();
        assert_eq!(offsets, (0..12).collect::<Vec<u64>>());
        for (offset, (data, b)) in sent.iter().zip(&batches).enumerate() {
            let inline = wire::batch_message(
                b,
                offset as u64,
                &options,
                &mut arrow_ipc::writer::IpcWriteContext::default(),
            )
            .unwrap();
            assert_eq!(data.data_header, inline.data_header, "offset {offset}");
            assert_eq!(data.data_body, inline.data_body, "offset {offset}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_batch_finding_every_worker_busy_waits_for_one_rather_than_encoding_inline() {
        let options = wire::write_options(wire::Compression::Zstd).unwrap();
        let mut encoder = Encoder::new(options);
        for offset in 0..5 {
            let large = batch(40_000, offset + 1);
            let bytes = Batch::bytes(&large);
            encoder.push(large, bytes, offset as u64).unwrap();
        }
        let waiting = encoder
            .queue
            .iter()
            .filter(|m| matches!(m, Message::Waiting { .. }))
            .count();
        assert_eq!(encoder.running, 2, "as many encodings as workers");
        assert_eq!(
            waiting, 3,
            "the other large batches wait, none is encoded inline"
        );
        let mut sent = Vec::new();
        drain(&mut encoder, &mut sent).await;
        assert_eq!(encoder.running, 0);
        let offsets: Vec<u64> = sent.iter().map(offset_of).collect();
        assert_eq!(offsets, (0..5).collect::<Vec<u64>>());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn on_a_current_thread_runtime_every_batch_is_encoded_inline() {
        let options = wire::write_options(wire::Compression::Zstd).unwrap();
        let mut encoder = Encoder::new(options);
        let large = batch(40_000, 1);
        let bytes = Batch::bytes(&large);
        encoder.push(large, bytes, 0).unwrap();
        assert!(!encoder.waiting());
        assert_eq!(encoder.ready().map(|d| offset_of(&d)), Some(0));
        assert!(encoder.is_empty());
    }
}
