//! The vocabulary between the core and its driver: inputs in, outputs out.

use std::fmt;
use std::time::Duration;
use std::vec;

use crate::batch::Batch;
use crate::conn::ConnId;
use crate::error::{FailureReason, ProtocolError, StreamError};
use crate::ids::{LogicalOffset, SchemaId, SlotId, TableId, WireOffset};
use crate::lane::{Confirmation, Lane, Token};
use crate::time::Time;

/// The `app_metadata` of one `PutResult`, as parsed from its JSON (PROTOCOL.md A.3). The core,
/// not the driver, decides what it means: READY (only `ack_up_to_offset == -1` decides, as in
/// the official client), a durable ack, a rotation request, or a protocol violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutResultMeta {
    /// The last wire offset covered; `-1` before anything is durable (READY). Used only to
    /// recognise READY, as the official client does.
    pub ack_up_to_offset: i64,
    /// The cumulative number of durable rows on the connection: what completes batches.
    pub ack_up_to_records: u64,
    /// A rotation request: the grace period in milliseconds (PROTOCOL.md A.4).
    pub close_stream_duration_ms: Option<u64>,
}

impl PutResultMeta {
    /// READY: `{"ack_up_to_offset":-1,"ack_up_to_records":0}`.
    pub const READY: PutResultMeta = PutResultMeta {
        ack_up_to_offset: -1,
        ack_up_to_records: 0,
        close_stream_duration_ms: None,
    };
}

/// Something that happened on a connection, fed to [`SinkCore::handle`](crate::SinkCore::handle).
///
/// Every input names its connection with a [`ConnId`] the core minted, of the sink's lane: an
/// input of another lane does not compile, one of another sink or an old connection is ignored.
///
/// ```compile_fail,E0308
/// use zerobus_sink::{Derived, Input, Output, Raw, SinkConfig, SinkCore, Time};
/// let mut raw = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// let mut derived = SinkCore::<Derived, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// if let Output::Open { conn, .. } = derived.poll_output(Time::ZERO) {
///     // The derived sink's READY handed to the raw sink: mismatched types.
///     let _ = raw.handle(Time::ZERO, Input::ready(conn));
/// }
/// ```
///
/// Nor can a derived connection's failure (mismatched types):
///
/// ```compile_fail,E0308
/// use zerobus_sink::{Code, Derived, Input, Output, Raw, SinkConfig, SinkCore, StreamError, Time};
/// let mut raw = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// let mut derived = SinkCore::<Derived, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// if let Output::Open { conn, .. } = derived.poll_output(Time::ZERO) {
///     let error = StreamError::status(Code::Unavailable, "gone");
///     let _ = raw.handle(Time::ZERO, Input::<Raw>::Failed { conn, error });
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Input<L: Lane> {
    /// A `PutResult` arrived and its metadata parsed.
    Result {
        /// The connection.
        conn: ConnId<L>,
        /// Its fields.
        result: PutResultMeta,
    },
    /// A `PutResult` arrived whose metadata could not be parsed. Before READY the connection
    /// fails (retryable, as the official client's "unexpected first response"); after READY it
    /// is ignored, as the official client does.
    Unreadable {
        /// The connection.
        conn: ConnId<L>,
        /// What the parser said (for logs).
        reason: String,
    },
    /// The call ended without an error status (the response stream ended). Before READY that is
    /// a failure; after READY the connection is closed (and its unacked batches replayed).
    Closed {
        /// The connection.
        conn: ConnId<L>,
    },
    /// The call ended with an error status, or the connection could not be made or broke below
    /// gRPC, or credentials could not be had.
    Failed {
        /// The connection.
        conn: ConnId<L>,
        /// What the transport reported.
        error: StreamError,
    },
}

impl<L: Lane> Input<L> {
    /// The connection the input is about.
    #[must_use]
    pub fn conn(&self) -> ConnId<L> {
        match *self {
            Input::Result { conn, .. }
            | Input::Unreadable { conn, .. }
            | Input::Closed { conn }
            | Input::Failed { conn, .. } => conn,
        }
    }

    /// READY on `conn`.
    #[must_use]
    pub fn ready(conn: ConnId<L>) -> Input<L> {
        Input::Result {
            conn,
            result: PutResultMeta::READY,
        }
    }

    /// A durable ack of `up_to_records` cumulative rows on `conn`.
    #[must_use]
    pub fn acked(conn: ConnId<L>, up_to_records: u64) -> Input<L> {
        Input::Result {
            conn,
            result: PutResultMeta {
                ack_up_to_offset: 0,
                ack_up_to_records: up_to_records,
                close_stream_duration_ms: None,
            },
        }
    }

    /// A rotation request on `conn` with `grace`, carrying no ack.
    #[must_use]
    pub fn rotate(conn: ConnId<L>, grace: Duration) -> Input<L> {
        Input::Result {
            conn,
            result: PutResultMeta {
                ack_up_to_offset: 0,
                ack_up_to_records: 0,
                close_stream_duration_ms: Some(
                    u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                ),
            },
        }
    }
}

/// What [`SinkCore::handle`](crate::SinkCore::handle) did with an input. Nothing here asks the
/// caller to act: outputs do that. A driver logs [`Handled::Violation`] and may count the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Handled {
    /// The input changed the sink's state (drain outputs).
    Applied,
    /// The input was ignored, harmlessly, for the reason given.
    Ignored(Ignored),
    /// The remote side broke the protocol; the core has already acted on it (see each
    /// [`ProtocolError`] variant). Log it.
    Violation(ProtocolError),
}

/// Why an input changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ignored {
    /// The connection is not the slot's live one: it was closed, or it belongs to another sink
    /// (invariant 4).
    Stale,
    /// A READY on a connection that is already ready.
    DuplicateReady,
    /// An ack that makes nothing new durable (the same cumulative count again, or zero).
    NoProgress,
    /// The cumulative row count went backwards; the durable count is a monotonic maximum, as in
    /// the official client.
    AckRegressed {
        /// The count the ack claims.
        acked: u64,
        /// The count already acked.
        previous: u64,
    },
    /// A `PutResult` that could not be parsed, after READY (the official client logs and
    /// ignores it).
    Unreadable {
        /// What the parser said.
        reason: String,
    },
    /// A rotation request on a connection that is already draining.
    RotationWhileDraining,
    /// A reconcile answer ([`SinkCore::reconciled`](crate::SinkCore::reconciled)) for a schema
    /// the table has seen in admitted batches but not yet asked about (another schema's
    /// question is outstanding): an answer ahead of its question. The core asks in its turn;
    /// answer then.
    NotAsked,
    /// A reconcile answer for a schema already answered (reconciled or refused): a duplicate
    /// or a late answer. It cannot overturn the first answer nor stand for the question
    /// outstanding now, which is about another schema (or the same schema asked again
    /// after `reconcile_timeout`, which the first answer settled).
    AlreadyAnswered,
    /// A reconcile answer for a schema the table has never seen in an admitted batch (or for
    /// a table the sink does not have, or one taken as it is); a retirement of such a schema
    /// ([`SinkCore::retire_schema`](crate::SinkCore::retire_schema)).
    UnknownSchema,
    /// A retirement of a schema the table still needs: a batch of it is queued or pending on
    /// a stream (a replay would send it again), its question is outstanding, or it is the
    /// table's latest (what an idle stream opens with). Ask again once its batches ended.
    SchemaInUse,
}

/// What the driver must do next, pulled from [`SinkCore::poll_output`](crate::SinkCore::poll_output).
#[must_use = "outputs are effects the driver must perform"]
#[non_exhaustive]
pub enum Output<L: Lane, B: Batch> {
    /// Open a connection (one `DoPut`) for the slot; report every `PutResult` on it as an
    /// [`Input::Result`] (READY first).
    Open {
        /// The table (its name: [`SinkCore::table_name`](crate::SinkCore::table_name)).
        table: TableId,
        /// The new connection (and its slot); name it in every input about it.
        conn: ConnId<L>,
        /// The schema to open it with (its schema message): only batches of it are sent on
        /// it. Always `SchemaId(0)` for tables taken as they are.
        schema: SchemaId,
    },
    /// Make the table take batches of `schema`: reconcile it through the catalog (create it if
    /// absent, add columns, widen where allowed) and register the sink as a writer, then
    /// answer with [`SinkCore::reconciled`](crate::SinkCore::reconciled). Only for tables
    /// provisioned through a catalog ([`TableSpec::reconciled`](crate::TableSpec)); one
    /// request per table at a time; asked again after `reconcile_timeout` without an answer.
    Reconcile {
        /// The table (its name: [`SinkCore::table_name`](crate::SinkCore::table_name)).
        table: TableId,
        /// The schema (as the driver numbered it when routing the batch).
        schema: SchemaId,
    },
    /// Send one wire message on the slot's live connection.
    Send(Transmit<L, B>),
    /// Close the connection. `graceful`: half-close it (END_STREAM at a message boundary) and
    /// keep reading: late acks and the service's end of the call still count; if the call has
    /// not ended within 500 ms (PROTOCOL.md A.4, A.6) the core asks for a second `Close` with
    /// `graceful: false`. A half-close does not mean that everything sent is durable: a rotation
    /// half-closes with rows still unacked, and the core replays them on a new connection.
    /// Not `graceful`: drop the call now; nothing more from it counts.
    Close {
        /// The connection to close.
        conn: ConnId<L>,
        /// Half-close (keep reading) rather than drop.
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
    /// [`poll_output`](crate::SinkCore::poll_output) again then. The time may be early (then
    /// that call finds nothing due and says the next time), never late.
    Timeout(Option<Time>),
}

impl<L: Lane, B: Batch> fmt::Debug for Output<L, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Open {
                table,
                conn,
                schema,
            } => {
                write!(f, "Open({table}, {}, {}", conn.slot, conn.generation)?;
                if schema.0 != 0 {
                    write!(f, ", {schema}")?;
                }
                f.write_str(")")
            }
            Output::Reconcile { table, schema } => write!(f, "Reconcile({table}, {schema})"),
            Output::Send(t) => write!(
                f,
                "Send({}, {}, {}, {}, rows {})",
                t.conn.slot, t.conn.generation, t.wire_offset, t.offset, t.rows
            ),
            Output::Close { conn, graceful } => write!(
                f,
                "Close({}, {}, graceful: {graceful})",
                conn.slot, conn.generation
            ),
            Output::Confirmed(c) => write!(f, "Confirmed({}, {:?})", c.conn.slot, c.offsets()),
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
pub struct Transmit<L: Lane, B> {
    /// The table.
    pub table: TableId,
    /// The connection to send it on (and its slot).
    pub conn: ConnId<L>,
    /// Its `offset_id` on that connection.
    pub wire_offset: WireOffset,
    /// The logical offset of the batch it belongs to.
    pub offset: LogicalOffset,
    /// The rows to send.
    pub batch: B,
    /// Rows in `batch`.
    pub rows: u64,
}

impl<L: Lane, B: Batch> Transmit<L, B> {
    /// The slot.
    #[must_use]
    pub fn slot(&self) -> SlotId {
        self.conn.slot
    }
}

impl<L: Lane, B: Batch> fmt::Debug for Transmit<L, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transmit")
            .field("table", &self.table)
            .field("conn", &self.conn)
            .field("wire_offset", &self.wire_offset)
            .field("offset", &self.offset)
            .field("rows", &self.rows)
            .finish()
    }
}

/// One ack's worth of confirmations of one slot, in offset order.
///
/// A burst is consumed by iterating it, so its confirmations cannot be taken twice (use of
/// moved value):
///
/// ```compile_fail,E0382
/// use zerobus_sink::{Output, Raw, SinkConfig, SinkCore, Time};
/// let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// if let Output::Confirmed(burst) = sink.poll_output(Time::ZERO) {
///     for confirmation in burst {
///         let _ = confirmation.commit();
///     }
///     for confirmation in burst {
///         let _ = confirmation.commit();
///     }
/// }
/// ```
#[must_use = "confirmations must be committed"]
pub struct Confirmed<L: Lane> {
    pub(crate) table: TableId,
    pub(crate) conn: ConnId<L>,
    pub(crate) items: Items<L>,
}

/// A burst's confirmations: one inline (an ack that confirms one batch allocates nothing), or
/// several in a vector sized once.
pub(crate) enum Items<L: Lane> {
    One(Confirmation<L>),
    Many(Vec<Confirmation<L>>),
}

impl<L: Lane> Items<L> {
    fn as_slice(&self) -> &[Confirmation<L>] {
        match self {
            Items::One(c) => std::slice::from_ref(c),
            Items::Many(v) => v,
        }
    }
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
        self.conn.slot
    }

    /// The connection whose ack confirmed them.
    #[must_use]
    pub fn conn(&self) -> ConnId<L> {
        self.conn
    }

    /// How many batches this ack confirmed (the coalesce ratio of this ack).
    #[must_use]
    pub fn len(&self) -> usize {
        self.items.as_slice().len()
    }

    /// Whether the burst is empty (never, for a burst the core emits).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.as_slice().is_empty()
    }

    /// The logical offsets confirmed, in order.
    #[must_use]
    pub fn offsets(&self) -> Vec<LogicalOffset> {
        self.iter().map(Confirmation::offset).collect()
    }

    /// The confirmations, in offset order.
    pub fn iter(&self) -> std::slice::Iter<'_, Confirmation<L>> {
        self.items.as_slice().iter()
    }
}

impl<L: Lane> IntoIterator for Confirmed<L> {
    type Item = Confirmation<L>;
    type IntoIter = ConfirmedIter<L>;
    fn into_iter(self) -> ConfirmedIter<L> {
        ConfirmedIter(match self.items {
            Items::One(c) => IterItems::One(Some(c)),
            Items::Many(v) => IterItems::Many(v.into_iter()),
        })
    }
}

/// The confirmations of a [`Confirmed`] burst, in offset order (its `into_iter`).
pub struct ConfirmedIter<L: Lane>(IterItems<L>);

enum IterItems<L: Lane> {
    One(Option<Confirmation<L>>),
    Many(vec::IntoIter<Confirmation<L>>),
}

impl<L: Lane> Iterator for ConfirmedIter<L> {
    type Item = Confirmation<L>;
    #[inline]
    fn next(&mut self) -> Option<Confirmation<L>> {
        match &mut self.0 {
            IterItems::One(c) => c.take(),
            IterItems::Many(v) => v.next(),
        }
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.0 {
            IterItems::One(c) => usize::from(c.is_some()),
            IterItems::Many(v) => v.len(),
        };
        (n, Some(n))
    }
}

impl<L: Lane> ExactSizeIterator for ConfirmedIter<L> {}

impl<L: Lane> std::iter::FusedIterator for ConfirmedIter<L> {}

impl<L: Lane> fmt::Debug for ConfirmedIter<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfirmedIter")
            .field("remaining", &self.len())
            .finish()
    }
}

impl<L: Lane> fmt::Debug for Confirmed<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confirmed")
            .field("conn", &self.conn)
            .field("items", &self.items.as_slice())
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
