//! A call's request body: the schema message, then the batches the driver hands the
//! connection, encoded when HTTP/2 asks for the next message (as the official client encodes),
//! in order, until a half-close. Encoding here rather than in the connection's task saves a
//! task hop per batch; large batches are still encoded on other threads ([`Encoder`]).
//!
//! **Small batches go together.** The batches handed over since the body was last polled, each
//! below `ZerobusConfig::coalesce_bytes` (256 KiB by default), leave as one wire message (their
//! rows concatenated, up to that many bytes of Arrow data, or the sink's `max_message_bytes` if
//! lower; 0 sends each batch alone). Nothing waits to be grouped: a group is what has queued up
//! while HTTP/2 was sending, so a stream at low rates sends each batch alone, and a busy one
//! pays the per-message costs (a frame, an IPC header, a compression frame, the service's
//! decoding and ack) once per group rather than once per batch, which the official client, one
//! message per `ingest_batch`, does not. Acks complete batches by rows (`ack_up_to_records`),
//! so the core does not see where messages begin; the body numbers the messages it sends
//! (`offset_id` from 0 on each call, rising by 1).

use std::pin::Pin;
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use arrow_flight::FlightData;
use futures::Stream;
use tokio::sync::{mpsc, oneshot};
use zerobus_sink::Batch;

use super::Command;
use crate::wire::encode::{EncodeError, Encoder};

/// The request body. An encoding that fails ends it and is reported on `failure`.
pub(crate) struct Body {
    schema: Option<FlightData>,
    commands: mpsc::UnboundedReceiver<Command>,
    encoder: Encoder,
    /// Small batches handed over and not yet given to the encoder, in order.
    group: Vec<RecordBatch>,
    /// Their Arrow bytes.
    group_bytes: u64,
    /// The most Arrow bytes of a group.
    coalesce_bytes: u64,
    /// The next message's `offset_id`.
    next_wire: u64,
    /// A half-close was asked for (or the driver is gone): end once every message taken is
    /// sent.
    ending: bool,
    /// A message was just given to HTTP/2: the next poll yields first (see `poll_next`).
    yield_next: bool,
    failure: Option<oneshot::Sender<EncodeError>>,
}

impl Body {
    pub(crate) fn new(
        schema: FlightData,
        commands: mpsc::UnboundedReceiver<Command>,
        encoder: Encoder,
        coalesce_bytes: u64,
        failure: oneshot::Sender<EncodeError>,
    ) -> Body {
        Body {
            schema: Some(schema),
            commands,
            encoder,
            group: Vec::new(),
            group_bytes: 0,
            coalesce_bytes,
            next_wire: 0,
            ending: false,
            yield_next: false,
            failure: Some(failure),
        }
    }

    fn fail(&mut self, error: EncodeError) -> Poll<Option<FlightData>> {
        if let Some(failure) = self.failure.take() {
            let _ = failure.send(error);
        }
        self.ending = true;
        Poll::Ready(None)
    }

    /// Whether there is more to send at once: messages taken, batches held, or batches handed
    /// over and not yet taken.
    fn more(&self) -> bool {
        !self.encoder.is_empty() || !self.group.is_empty() || !self.commands.is_empty()
    }

    /// Gives `batch` (`bytes` of Arrow data) to the encoder as the next message.
    fn push(&mut self, batch: RecordBatch, bytes: u64) -> Result<(), EncodeError> {
        let wire_offset = self.next_wire;
        self.next_wire += 1;
        self.encoder.push(batch, bytes, wire_offset)
    }

    /// Takes a batch the driver handed over: held with the small ones before it while they
    /// fit in a group, else after them as a message of its own.
    fn take(&mut self, batch: RecordBatch) -> Result<(), EncodeError> {
        let bytes = Batch::bytes(&batch);
        if self.group_bytes + bytes > self.coalesce_bytes {
            self.send_group()?;
        }
        if bytes >= self.coalesce_bytes {
            return self.push(batch, bytes);
        }
        self.group_bytes += bytes;
        self.group.push(batch);
        Ok(())
    }

    /// Gives the held batches to the encoder as one message (each alone if their rows cannot
    /// be concatenated, which batches of one connection's schema always can).
    fn send_group(&mut self) -> Result<(), EncodeError> {
        let bytes = std::mem::take(&mut self.group_bytes);
        if self.group.len() <= 1 {
            return match self.group.pop() {
                Some(one) => self.push(one, bytes),
                None => Ok(()),
            };
        }
        match arrow_select::concat::concat_batches(&self.group[0].schema(), &self.group) {
            Ok(one) => {
                self.group.clear();
                self.push(one, bytes)
            }
            Err(e) => {
                tracing::debug!(error = %e, "small batches sent one by one");
                let group: Vec<RecordBatch> = self.group.drain(..).collect();
                group.into_iter().try_for_each(|b| {
                    let bytes = Batch::bytes(&b);
                    self.push(b, bytes)
                })
            }
        }
    }
}

impl Stream for Body {
    type Item = FlightData;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<FlightData>> {
        let this = self.get_mut();
        if let Some(schema) = this.schema.take() {
            return Poll::Ready(Some(schema));
        }
        if this.failure.is_none() {
            return Poll::Ready(None);
        }
        // Let the connection write the message just given before encoding the next. HTTP/2
        // takes it on the task polling this body, which wakes the connection's task; tokio
        // runs that task next on this worker (its LIFO slot, which no other worker takes),
        // so while this body keeps answering, nothing reaches the socket: at a burst's start
        // the first bytes waited until all that was handed over was encoded (3-10 ms in the
        // compare bench). A wake from inside a poll puts this task at the back of the queue,
        // behind the connection's. With nothing more to send the body answers pending anyway,
        // and a yield would only cost a poll.
        if std::mem::take(&mut this.yield_next) && this.more() {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        loop {
            if let Some(data) = this.encoder.ready() {
                this.yield_next = true;
                return Poll::Ready(Some(data));
            }
            // The next message is encoding elsewhere, or none is taken: take what the driver
            // has handed over meanwhile, so that large batches encode side by side and small
            // ones go together.
            if !this.ending {
                match this.commands.poll_recv(cx) {
                    Poll::Ready(Some(Command::Send { batch })) => {
                        if let Err(e) = this.take(batch) {
                            return this.fail(e);
                        }
                        continue;
                    }
                    // The driver gone: nothing will read what the call reports.
                    Poll::Ready(Some(Command::HalfClose) | None) => {
                        tracing::debug!("half-closing");
                        this.ending = true;
                    }
                    Poll::Pending => {}
                }
            }
            // Nothing more handed over for now: what is held leaves as one message.
            if !this.group.is_empty() {
                if let Err(e) = this.send_group() {
                    return this.fail(e);
                }
                continue;
            }
            if this.encoder.waiting() {
                match this.encoder.poll_finish_next(cx) {
                    Poll::Ready(Ok(())) => continue,
                    Poll::Ready(Err(e)) => return this.fail(e),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if this.ending && this.encoder.is_empty() {
                return Poll::Ready(None);
            }
            return Poll::Pending;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema, SchemaRef};
    use futures::StreamExt;

    use super::*;
    use crate::wire;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("text", DataType::Utf8, false),
        ]))
    }

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let ids = Int64Array::from_iter_values(from..from + rows);
        let text = StringArray::from_iter_values((from..from + rows).map(|i| format!("row {i}")));
        RecordBatch::try_new(schema(), vec![Arc::new(ids), Arc::new(text)]).unwrap()
    }

    /// A body grouping up to `coalesce_bytes`, and the sender the driver would hold.
    fn body(coalesce_bytes: u64) -> (Body, mpsc::UnboundedSender<Command>) {
        let options = wire::write_options(wire::Compression::Zstd).unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let (failure, _) = oneshot::channel();
        let schema = wire::schema_message(&schema(), &options);
        let body = Body::new(schema, rx, Encoder::new(options), coalesce_bytes, failure);
        (body, tx)
    }

    /// A message's `offset_id` and the ids of its rows.
    fn decoded(data: &FlightData) -> (u64, Vec<i64>) {
        let meta: serde_json::Value = serde_json::from_slice(&data.app_metadata).unwrap();
        let batch =
            arrow_flight::utils::flight_data_to_arrow_batch(data, schema(), &HashMap::new())
                .unwrap();
        let ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec();
        (meta["offset_id"].as_u64().unwrap(), ids)
    }

    fn send(tx: &mpsc::UnboundedSender<Command>, b: RecordBatch) {
        tx.send(Command::Send { batch: b }).unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn small_batches_handed_over_together_leave_as_one_message_numbered_in_order() {
        let (mut body, tx) = body(crate::config::COALESCE_BYTES);
        assert!(
            body.next().await.unwrap().app_metadata.is_empty(),
            "schema first"
        );
        for k in 0..3 {
            send(&tx, batch(k * 10, 10));
        }
        let (offset, ids) = decoded(&body.next().await.unwrap());
        assert_eq!(offset, 0);
        assert_eq!(
            ids,
            (0..30).collect::<Vec<i64>>(),
            "three batches, one message"
        );
        // One batch handed over alone leaves alone, as the next message.
        send(&tx, batch(30, 10));
        let (offset, ids) = decoded(&body.next().await.unwrap());
        assert_eq!((offset, ids), (1, (30..40).collect::<Vec<i64>>()));
        tx.send(Command::HalfClose).unwrap();
        assert!(body.next().await.is_none(), "half-closed once all is sent");
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self
                .0
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn after_a_message_the_body_yields_once_if_more_is_waiting_so_the_connection_writes_it() {
        let (mut body, tx) = body(0);
        assert!(
            body.next().await.unwrap().app_metadata.is_empty(),
            "schema first"
        );
        send(&tx, batch(0, 10));
        send(&tx, batch(10, 10));
        let wakes = Arc::new(Wakes::default());
        let waker = futures::task::waker(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let mut poll = || Pin::new(&mut body).poll_next(&mut cx);
        let Poll::Ready(Some(first)) = poll() else {
            panic!("the first batch is ready to encode");
        };
        assert_eq!(decoded(&first).0, 0);
        assert!(poll().is_pending(), "a yield before the next message");
        assert_eq!(
            wakes.count(),
            1,
            "woken at once: the yield waits for nothing"
        );
        let Poll::Ready(Some(second)) = poll() else {
            panic!("the second batch follows the yield");
        };
        assert_eq!(decoded(&second).0, 1);
        assert!(poll().is_pending(), "nothing more handed over");
        let no_yield = "no yield with nothing more to send: the body waits for the driver";
        assert_eq!(wakes.count(), 1, "{no_yield}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_group_stops_at_its_bytes_and_a_large_batch_leaves_alone_in_its_place() {
        let small = Batch::bytes(&batch(0, 10));
        // Room for two small batches in a group; a batch of 100 rows is past it.
        let (mut body, tx) = body(2 * small + small / 2);
        assert!(
            body.next().await.unwrap().app_metadata.is_empty(),
            "schema first"
        );
        send(&tx, batch(0, 10));
        send(&tx, batch(10, 10));
        send(&tx, batch(20, 10));
        send(&tx, batch(30, 100));
        send(&tx, batch(130, 10));
        tx.send(Command::HalfClose).unwrap();
        let mut messages = Vec::new();
        while let Some(data) = body.next().await {
            messages.push(decoded(&data));
        }
        let sizes: Vec<(u64, usize, i64)> = messages
            .iter()
            .map(|(o, ids)| (*o, ids.len(), ids[0]))
            .collect();
        assert_eq!(
            sizes,
            vec![(0, 20, 0), (1, 10, 20), (2, 100, 30), (3, 10, 130)],
            "(offset, rows, first id) of each message"
        );
    }
}
