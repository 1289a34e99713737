//! A call's request body: the schema message, then each batch the driver hands the connection,
//! encoded when HTTP/2 asks for the next message (as the official client encodes), in wire
//! order, until a half-close. Encoding here rather than in the connection's task saves a task
//! hop per batch; large batches are still encoded on other threads ([`Encoder`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use arrow_flight::FlightData;
use futures::Stream;
use tokio::sync::{mpsc, oneshot};

use super::Command;
use crate::encode::{EncodeError, Encoder};

/// The request body. An encoding that fails ends it and is reported on `failure`.
pub(crate) struct Body {
    schema: Option<FlightData>,
    commands: mpsc::UnboundedReceiver<Command>,
    encoder: Encoder,
    /// A half-close was asked for (or the driver is gone): end once every message taken is
    /// sent.
    ending: bool,
    failure: Option<oneshot::Sender<EncodeError>>,
}

impl Body {
    pub(crate) fn new(
        schema: FlightData,
        commands: mpsc::UnboundedReceiver<Command>,
        encoder: Encoder,
        failure: oneshot::Sender<EncodeError>,
    ) -> Body {
        Body {
            schema: Some(schema),
            commands,
            encoder,
            ending: false,
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
        loop {
            if let Some(data) = this.encoder.ready() {
                return Poll::Ready(Some(data));
            }
            // The next message is encoding elsewhere, or none is taken: take what the driver
            // has handed over meanwhile, so that large batches encode side by side.
            if !this.ending {
                match this.commands.poll_recv(cx) {
                    Poll::Ready(Some(Command::Send { batch, wire_offset })) => {
                        if let Err(e) = this.encoder.push(batch, wire_offset) {
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
