//! Receipts: futures that resolve when a sent batch is durable (or handed back).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;
use zerobus_sink::{LogicalOffset, SlotId, TableId};

use crate::error::DeliveryError;

/// A batch made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// The slot (stream) that carried it.
    pub slot: SlotId,
    /// Its logical offset in the slot.
    pub offset: LogicalOffset,
    /// Its rows.
    pub rows: u64,
    /// From submit to the durable ack.
    pub latency: Duration,
}

/// Proof that a batch was admitted, and a future of its fate. Awaiting it is optional: the
/// token travels to the confirmer either way.
#[pin_project::pin_project]
#[derive(Debug)]
#[must_use = "a receipt is the batch's delivery status; await it or drop it knowingly"]
pub struct Receipt {
    table: TableId,
    seq: u64,
    #[pin]
    rx: oneshot::Receiver<Result<Delivered, DeliveryError>>,
}

impl Receipt {
    pub(crate) fn new(
        table: TableId,
        seq: u64,
        rx: oneshot::Receiver<Result<Delivered, DeliveryError>>,
    ) -> Receipt {
        Receipt { table, seq, rx }
    }

    /// The table.
    #[must_use]
    pub fn table(&self) -> TableId {
        self.table
    }

    /// The batch's number among those `send` accepted for its table, from 0, in the order of
    /// the calls (given by the handle when it hands the batch over; a batch the core refuses
    /// after that still has its number).
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

impl Future for Receipt {
    type Output = Result<Delivered, DeliveryError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .rx
            .poll(cx)
            .map(|r| r.unwrap_or(Err(DeliveryError::Stopped)))
    }
}
