//! The vocabulary between the core and its driver: inputs in, outputs out.

use std::fmt;
use std::time::Duration;
use std::vec;

use crate::batch::Batch;
use crate::error::{FailureReason, StreamError};
use crate::ids::{ConnGen, LogicalOffset, SlotId, TableId, WireOffset};
use crate::lane::{Confirmation, Lane, Token};
use crate::time::Time;

impl Input {
    /// The slot and connection the input is about.
    #[must_use]
    pub fn target(&self) -> (SlotId, ConnGen) {
        match *self {
            Input::Ready { slot, conn }
            | Input::Acked { slot, conn, .. }
            | Input::Failed { slot, conn, .. }
            | Input::Closed { slot, conn }
            | Input::Rotate { slot, conn, .. } => (slot, conn),
        }
    }
}

/// Something that happened on a connection, fed to [`SinkCore::handle`](crate::SinkCore::handle).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Input {
    /// The connection reported READY (`{"ack_up_to_offset":-1,"ack_up_to_records":0}`).
    Ready {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
    },
    /// A `PutResult` with a durable ack: `ack_up_to_records` is the cumulative number of durable
    /// rows on this connection (PROTOCOL.md A.3).
    Acked {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
        /// Cumulative durable rows on the connection.
        up_to_records: u64,
    },
    /// The connection failed.
    Failed {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
        /// What the transport reported.
        error: StreamError,
    },
    /// The service ended the call with an OK status.
    Closed {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
    },
    /// The service asked for a graceful rotation (`close_stream_duration_ms`, PROTOCOL.md
    /// A.4). Feed any ack fields of the same `PutResult` first, as an [`Input::Acked`].
    Rotate {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
        /// The grace period the service gave.
        grace: Duration,
    },
}

/// What the driver must do next, pulled from [`SinkCore::poll_output`](crate::SinkCore::poll_output).
#[must_use = "outputs are effects the driver must perform"]
#[non_exhaustive]
pub enum Output<L: Lane, B: Batch> {
    /// Open a connection (one `DoPut`) for the slot; report [`Input::Ready`] once READY arrives.
    Open {
        /// The table (its name: [`SinkCore::table_name`](crate::SinkCore::table_name)).
        table: TableId,
        /// The slot.
        slot: SlotId,
        /// The new connection's generation; tag every input for it with this.
        conn: ConnGen,
    },
    /// Send one wire message on the slot's live connection.
    Send(Transmit<B>),
    /// Close the connection: half-close if `graceful` (keep reading: late acks and the
    /// server's end of the call still count), otherwise drop it. A half-closed connection may
    /// later be dropped too (a second `Close` with `graceful: false`).
    Close {
        /// The slot.
        slot: SlotId,
        /// The connection to close.
        conn: ConnGen,
        /// Whether everything sent on it is durable.
        graceful: bool,
    },
    /// Batches now durable: commit their tokens, in this order.
    Confirmed(Confirmed<L>),
    /// Batches that will never be confirmed, handed back with their tokens.
    Failed(Failed<L, B>),
    /// The service refused the table's credentials: drop any cached token for it, so that the
    /// next open mints a new one. The slot reopens once; a second refusal fails the table.
    InvalidateCredentials {
        /// The table.
        table: TableId,
    },
    /// Nothing to do until this time (`None`: until the next input or submit). Call
    /// [`poll_output`](crate::SinkCore::poll_output) again then.
    Timeout(Option<Time>),
}

impl<L: Lane, B: Batch> fmt::Debug for Output<L, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Open { table, slot, conn } => write!(f, "Open({table}, {slot}, {conn})"),
            Output::Send(t) => write!(
                f,
                "Send({}, {}, {}, {}, rows {})",
                t.slot, t.conn, t.wire_offset, t.offset, t.rows
            ),
            Output::Close {
                slot,
                conn,
                graceful,
            } => {
                write!(f, "Close({slot}, {conn}, graceful: {graceful})")
            }
            Output::Confirmed(c) => write!(f, "Confirmed({}, {:?})", c.slot, c.offsets()),
            Output::Failed(x) => write!(
                f,
                "Failed({}, {:?}, {:?}: {})",
                x.table,
                x.slot,
                x.offsets(),
                x.reason
            ),
            Output::InvalidateCredentials { table } => write!(f, "InvalidateCredentials({table})"),
            Output::Timeout(at) => write!(f, "Timeout({at:?})"),
        }
    }
}

/// One wire message: a batch, or a row slice of one when the batch exceeds the message limit.
#[must_use = "a transmit must be sent on its connection"]
pub struct Transmit<B> {
    /// The table.
    pub table: TableId,
    /// The slot.
    pub slot: SlotId,
    /// The connection to send it on.
    pub conn: ConnGen,
    /// Its `offset_id` on that connection.
    pub wire_offset: WireOffset,
    /// The logical offset of the batch it belongs to.
    pub offset: LogicalOffset,
    /// The rows to send.
    pub batch: B,
    /// Rows in `batch`.
    pub rows: u64,
}

impl<B: Batch> fmt::Debug for Transmit<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transmit")
            .field("table", &self.table)
            .field("slot", &self.slot)
            .field("conn", &self.conn)
            .field("wire_offset", &self.wire_offset)
            .field("offset", &self.offset)
            .field("rows", &self.rows)
            .finish()
    }
}

/// One ack's worth of confirmations of one slot, in offset order.
#[must_use = "confirmations must be committed"]
pub struct Confirmed<L: Lane> {
    pub(crate) table: TableId,
    pub(crate) slot: SlotId,
    pub(crate) conn: ConnGen,
    pub(crate) items: Vec<Confirmation<L>>,
}

impl<L: Lane> Confirmed<L> {
    /// The table.
    #[must_use]
    pub fn table(&self) -> TableId {
        self.table
    }

    /// The slot.
    #[must_use]
    pub fn slot(&self) -> SlotId {
        self.slot
    }

    /// The connection whose ack confirmed them.
    #[must_use]
    pub fn conn(&self) -> ConnGen {
        self.conn
    }

    /// How many batches this ack confirmed (the coalesce ratio of this ack).
    #[must_use]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the burst is empty (never, for a burst the core emits).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The logical offsets confirmed, in order.
    #[must_use]
    pub fn offsets(&self) -> Vec<LogicalOffset> {
        self.items.iter().map(Confirmation::offset).collect()
    }

    /// The confirmations, in offset order.
    pub fn iter(&self) -> std::slice::Iter<'_, Confirmation<L>> {
        self.items.iter()
    }
}

impl<L: Lane> IntoIterator for Confirmed<L> {
    type Item = Confirmation<L>;
    type IntoIter = vec::IntoIter<Confirmation<L>>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

impl<L: Lane> fmt::Debug for Confirmed<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confirmed")
            .field("slot", &self.slot)
            .field("items", &self.items)
            .finish()
    }
}

/// A batch that will not be confirmed, handed back: only the rows that are not durable, with the
/// token. The caller may resubmit it (at-least-once) or fail its pipeline.
#[must_use = "a failed batch must be retried or reported; dropping it loses data"]
pub struct FailedBatch<L: Lane, B> {
    /// The logical offset it had, if it had been given to a slot.
    pub offset: Option<LogicalOffset>,
    /// Its rows that are not known durable (the whole batch unless an ack covered a prefix).
    pub batch: B,
    /// The batch's token, never confirmed.
    pub token: Token<L>,
    /// Rows of the original batch already durable (a prefix): resubmitting only `batch` avoids
    /// duplicating them.
    pub durable_rows: u64,
}

impl<L: Lane, B: Batch> fmt::Debug for FailedBatch<L, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailedBatch")
            .field("offset", &self.offset)
            .field("rows", &self.batch.rows())
            .field("durable_rows", &self.durable_rows)
            .field("token", &self.token)
            .finish()
    }
}

/// Batches of one table (and slot, if they had been given one) that failed for one reason.
#[must_use = "failed batches must be retried or reported; dropping them loses data"]
pub struct Failed<L: Lane, B> {
    /// The table.
    pub table: TableId,
    /// The slot, or `None` for batches still waiting for one.
    pub slot: Option<SlotId>,
    /// Why.
    pub reason: FailureReason,
    /// The batches, in offset order.
    pub batches: Vec<FailedBatch<L, B>>,
}

impl<L: Lane, B> Failed<L, B> {
    /// The logical offsets handed back, in order (`None` for batches not yet given a slot).
    #[must_use]
    pub fn offsets(&self) -> Vec<Option<LogicalOffset>> {
        self.batches.iter().map(|b| b.offset).collect()
    }
}

impl<L: Lane, B: Batch> fmt::Debug for Failed<L, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failed")
            .field("table", &self.table)
            .field("slot", &self.slot)
            .field("reason", &self.reason)
            .field("offsets", &self.offsets())
            .finish()
    }
}
