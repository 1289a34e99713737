//! What the handle asks of the driver: the one vocabulary both sides share, at the bottom of
//! the crate (the handle depends on it and on nothing of the driver's insides).
//!
//! A batch reaches the driver once, as a [`Handoff`]. The handle knows each schema's plan
//! after that schema's first batch, so it checks the rows itself and hands over a
//! [`Checked`] batch without waiting for an answer (one hand-off per batch); only a schema's
//! first batch, and any batch for a table that has failed, is an [`Ask`] the handle waits
//! for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arrow_array::RecordBatch;
use tokio::sync::oneshot;
use zerobus_sink::{Lane, Route, SchemaId, TableId, Token};

use crate::boundary::apply::{Origin, RowIds};
use crate::boundary::{ColumnRefusal, IsolatedRows, Plan};
use crate::error::{DeliveryError, FlushError, SendError};
use crate::health::SinkHealth;
use crate::receipt::Delivered;
use crate::report::Report;

/// Where a receipt's outcome goes.
pub(crate) type ReceiptTx = oneshot::Sender<Result<Delivered, DeliveryError>>;

/// What the handle learns from an [`Ask`]: the schema's plan, which it then applies itself.
pub(crate) type Learned<L> = Result<Option<Arc<Plan>>, SendError<L>>;

/// A batch handed to the driver.
pub(crate) enum Handoff<L: Lane> {
    /// The handle waits for the answer.
    Ask(Ask<L>),
    /// The handle has let go.
    Checked(Checked<L>),
}

/// A batch whose schema the handle has no plan for (its first batch, or a batch for a table
/// that has failed, whose refusal the caller should get from `send`). The driver plans the
/// schema if it has to, checks the rows and admits the batch, then answers with the plan or
/// the refusal; if nobody waits for the answer any more (the `send` future was dropped), a
/// refused batch goes to the confirmer's `failed`, so that its token is never lost.
pub(crate) struct Ask<L: Lane> {
    pub(crate) route: Route,
    pub(crate) batch: RecordBatch,
    pub(crate) token: Token<L>,
    pub(crate) receipt: ReceiptTx,
    pub(crate) reply: oneshot::Sender<Learned<L>>,
}

/// A batch the handle has checked against its schema's plan: what goes (the good rows, their
/// indices and origin) and the rows isolated from it. The driver admits it; a refusal (the
/// table failed or the sink closed after the handle let go) goes to the confirmer's `failed`
/// and the receipt.
pub(crate) struct Checked<L: Lane> {
    pub(crate) route: Route,
    /// The plan it was checked against; its batch carries it to the wire (and so keeps it
    /// until the batch has ended, whatever the handle forgets meanwhile).
    pub(crate) plan: Arc<Plan>,
    pub(crate) batch: RecordBatch,
    pub(crate) token: Token<L>,
    pub(crate) origin: Option<Arc<Origin>>,
    pub(crate) rows: RowIds,
    pub(crate) isolated: Option<IsolatedRows<L>>,
    pub(crate) receipt: ReceiptTx,
}

/// A schema's plan as the handle keeps it.
#[derive(Debug, Clone)]
pub(crate) enum Known {
    /// The rows are checked on the handle and the batch handed over.
    Ready(Arc<Plan>),
    /// Every batch of the schema is refused on the handle, naming these columns.
    Refused(Vec<ColumnRefusal>),
}

/// What the driver tells the handle without being asked: which tables have failed (their
/// batches then go as [`Ask`]s, so that `send` returns the core's refusal).
#[derive(Debug)]
pub(crate) struct Flags {
    failed: Box<[AtomicBool]>,
}

impl Flags {
    pub(crate) fn new(tables: usize) -> Flags {
        Flags {
            failed: (0..tables).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Marks `table` failed; set before the batches it handed back reach the confirmer.
    pub(crate) fn fail(&self, table: TableId) {
        if let Some(f) = self.failed.get(table.index()) {
            f.store(true, Ordering::Release);
        }
    }

    pub(crate) fn failed(&self, table: TableId) -> bool {
        self.failed
            .get(table.index())
            .is_some_and(|f| f.load(Ordering::Acquire))
    }
}

/// Everything else. These travel on their own channel, which the driver reads even while a
/// batch waits for room in a full window: a report or a close never queues behind it.
pub(crate) enum Control {
    Flush(oneshot::Sender<Result<(), FlushError>>),
    Report(oneshot::Sender<Report>),
    Health(oneshot::Sender<SinkHealth>),
    /// Rows the handle refused before send (the batch came back from `send`), for the report
    /// and the metrics.
    BadRows {
        table: TableId,
        rows: u64,
    },
    /// The handle no longer remembers `schema` of `table` (it sent
    /// [`SCHEMAS_KEPT`](crate::recent::SCHEMAS_KEPT) newer ones): the driver drops its plan
    /// once no batch of it is pending and the core has retired it.
    Retire {
        table: TableId,
        schema: SchemaId,
    },
    /// Sent before the handle lets go of its hand-off channel: the driver admits what was
    /// handed over before it, then closes, all within `within` of the request.
    Close {
        within: Duration,
        reply: oneshot::Sender<Report>,
    },
}

impl<L: Lane> Handoff<L> {
    pub(crate) fn table(&self) -> TableId {
        match self {
            Handoff::Ask(a) => a.route.table(),
            Handoff::Checked(c) => c.route.table(),
        }
    }
}

impl<L: Lane> std::fmt::Debug for Handoff<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, batch, token) = match self {
            Handoff::Ask(a) => ("Ask", &a.batch, &a.token),
            Handoff::Checked(c) => ("Checked", &c.batch, &c.token),
        };
        f.debug_struct(kind)
            .field("table", &self.table())
            .field("rows", &batch.num_rows())
            .field("token", token)
            .finish()
    }
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Control::Flush(_) => "Flush",
            Control::Report(_) => "Report",
            Control::Health(_) => "Health",
            Control::BadRows { .. } => "BadRows",
            Control::Retire { .. } => "Retire",
            Control::Close { .. } => "Close",
        })
    }
}
