//! The driver: the one task that owns the core. It feeds the core submits, connection events
//! and the time, and performs what the core asks (open, send, close, confirm, fail, invalidate
//! credentials). Connections run in their own tasks ([`crate::conn`]). Batches the core hands
//! back for a reason a later attempt can fix are submitted again here, as the
//! [`ResubmitPolicy`] says, before the confirmer hears of them. Every batch passes the write
//! boundary ([`crate::boundary`]) before the core sees it; for a sink that provisions through
//! a catalog, a table's first batch of each schema waits while a task describes and reconciles
//! the table ([`crate::provision`]) and the schema is planned, and each batch is sent
//! converted and stamped by its plan.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zerobus_sink::{
    Batch, ConnId, FailedBatch, FailureReason, Handled, Ignored, Input, Lane, LogicalOffset,
    Output, RejectReason, Route, SchemaId, SinkCore, SlotId, TableId, Time, Token,
};
use zerobus_sink_catalog::{Contract, PrimaryRawShape, TableCatalog, TableRef};

mod admission;
pub(crate) mod command;
mod quiesce;
mod retire;
mod role;

use crate::boundary::apply::{Origin, RowIds, StampCache, Stamps};
use crate::boundary::{BadRows, ColumnRefusal, Conversions, Plan};

use crate::config::ResubmitPolicy;
use crate::confirmer::Confirmer;
use crate::conn::{self, TableWire};
use crate::driver::command::{Ask, Control, Flags, Handoff, Learned, ReceiptTx};
use crate::error::{DeliveryError, FlushError};
use crate::health::{SinkHealth, StreamHealth, TableHealth};
use crate::provision::{Answer, Provisioning};
use crate::receipt::Delivered;
use crate::report::Report;
use crate::telemetry::Telemetry;
use crate::telemetry::outage::Outages;

/// A table's name: its shared description's, or its id where it has none.
enum Label {
    Wire(Arc<TableWire>),
    Id(String),
}

impl Label {
    fn as_str(&self) -> &str {
        match self {
            Label::Wire(wire) => &wire.name,
            Label::Id(id) => id,
        }
    }
}

/// A batch with the id of its receipt and its route, and what its rows are stamped with
/// (where they came from, their indices in the batch as sent); slices keep all of it.
#[derive(Clone, Debug)]
pub(crate) struct Tagged {
    pub(crate) batch: RecordBatch,
    pub(crate) id: u64,
    pub(crate) route: Route,
    pub(crate) origin: Option<Arc<Origin>>,
    pub(crate) rows: RowIds,
    /// Its schema's plan (none for a batch the core refuses): a pending batch keeps its plan
    /// alive, so that a schema is retired only once its last batch has ended.
    pub(crate) plan: Option<Arc<Plan>>,
}

impl Batch for Tagged {
    fn rows(&self) -> u64 {
        self.batch.rows()
    }
    fn bytes(&self) -> u64 {
        Batch::bytes(&self.batch)
    }
    fn slice(&self, offset: u64, len: u64) -> Tagged {
        Tagged {
            batch: Batch::slice(&self.batch, offset, len),
            id: self.id,
            route: self.route,
            origin: self.origin.clone(),
            rows: self.rows.skip(offset),
            plan: self.plan.clone(),
        }
    }
}

/// A handed-back batch waiting to be submitted again.
struct Again<L: Lane> {
    batch: Tagged,
    token: Token<L>,
    reason: FailureReason,
    durable_rows: u64,
}

/// What the driver needs at start; see [`Driver::new`].
pub(crate) struct Parts<L: Lane, C, P> {
    pub(crate) core: SinkCore<L, Tagged>,
    pub(crate) confirmer: C,
    pub(crate) shared: Arc<conn::Shared>,
    pub(crate) tables: Vec<Arc<TableWire>>,
    pub(crate) submits: mpsc::Receiver<Handoff<L>>,
    /// What the driver tells the handle (tables that failed).
    pub(crate) flags: Arc<Flags>,
    pub(crate) control: mpsc::UnboundedReceiver<Control>,
    pub(crate) resubmit: ResubmitPolicy,
    /// The catalog, for a sink that provisions its tables.
    pub(crate) provisioning: Option<Provisioning<P>>,
    /// Per table: what provisioning and the write boundary need.
    pub(crate) definitions: Vec<Definition>,
    /// The largest row sent.
    pub(crate) max_row_bytes: u64,
    /// How often primary-raw tables are checked again.
    pub(crate) primary_raw_recheck: Duration,
}

/// What provisioning and the write boundary need of a table's definition.
#[derive(Debug, Clone, Default)]
pub(crate) struct Definition {
    pub(crate) contract: Option<Contract>,
    /// The primary-raw role: the table and the shape its preconditions are checked against.
    pub(crate) primary_raw: Option<(TableRef, PrimaryRawShape)>,
    pub(crate) conversions: Conversions,
    pub(crate) bad_rows: BadRows,
}

/// A batch schema's plan, as far as the driver knows it.
enum Planned {
    /// The table is being described and reconciled for it (its first batch waits).
    Asking,
    /// Its plan, and the connection description with its wire schema.
    Ready(Arc<Plan>, Arc<TableWire>),
    /// Refused, every column named.
    Refused(Vec<ColumnRefusal>),
}

/// The tables' schemas as the driver knows them.
#[derive(Default)]
struct Shapes {
    /// Each batch schema seen, by the id the handle gave it (provisioned tables).
    batch: HashMap<(TableId, SchemaId), SchemaRef>,
    /// Each schema's plan.
    plans: HashMap<(TableId, SchemaId), Planned>,
    /// Tables the sink has registered itself with as a writer.
    registered: HashSet<TableId>,
    /// Schemas the handle no longer remembers, whose plans go once nothing needs them.
    retiring: Vec<(TableId, SchemaId)>,
}

/// A batch the driver holds: its schema's plan is not known yet, or the window is full.
enum Blocked<L: Lane> {
    Unplanned(Ask<L>),
    Full {
        tagged: Tagged,
        token: Token<L>,
        pending: Pending<L>,
    },
}

/// Who hears of a batch's admission: its receipt, and the handle if it waits (with the
/// schema's plan, which the handle applies to the schema's later batches itself).
struct Pending<L: Lane> {
    receipt: ReceiptTx,
    reply: Option<oneshot::Sender<Learned<L>>>,
    plan: Option<Arc<Plan>>,
}

/// The most hand-offs the driver takes in one pass of the core.
const BULK: usize = 64;

pub(crate) struct Driver<L: Lane, C, P> {
    core: SinkCore<L, Tagged>,
    confirmer: C,
    shared: Arc<conn::Shared>,
    tables: Vec<Arc<TableWire>>,
    submits: mpsc::Receiver<Handoff<L>>,
    /// The handle has let go of its hand-off channel (dropped, or closing).
    submits_ended: bool,
    control: mpsc::UnboundedReceiver<Control>,
    control_ended: bool,
    flags: Arc<Flags>,
    resubmit: ResubmitPolicy,
    epoch: Instant,
    conns: HashMap<ConnId<L>, conn::Handle>,
    events_tx: mpsc::UnboundedSender<Input<L>>,
    events: mpsc::UnboundedReceiver<Input<L>>,
    receipts: HashMap<u64, ReceiptTx>,
    /// Each batch sent: its receipt id and the bytes the window counted for it.
    sent: HashMap<(SlotId, LogicalOffset), (u64, u64)>,
    /// Resubmissions so far and rows already durable (prefixes sliced off on earlier
    /// attempts), per receipt id.
    attempts: HashMap<u64, (u32, u64)>,
    /// Handed-back batches to submit again, by due time (and a sequence number).
    again: BTreeMap<(Instant, u64), Again<L>>,
    /// The first of `again` was refused for want of room: it waits for the next event (an
    /// ack, a stream opened, a core timer), not for its due time, which has passed (waking
    /// for that would spin a core for as long as the window stays full).
    again_waits_for_room: bool,
    next_id: u64,
    blocked: Option<Blocked<L>>,
    flushes: Vec<oneshot::Sender<Result<(), FlushError>>>,
    failed_since_flush: u64,
    /// A close asked for and not begun (the hand-offs before it are admitted first), with
    /// its deadline.
    close_asked: Option<(Time, oneshot::Sender<Report>)>,
    /// The core is closing.
    closing: Option<oneshot::Sender<Report>>,
    handle_gone: bool,
    outages: Outages,
    telemetry: Telemetry,
    report: Report,
    provisioning: Option<Arc<Provisioning<P>>>,
    definitions: Vec<Definition>,
    max_row_bytes: u64,
    shapes: Shapes,
    stamp_cache: StampCache,
    answers_tx: mpsc::UnboundedSender<(TableId, SchemaId, Answer)>,
    answers: mpsc::UnboundedReceiver<(TableId, SchemaId, Answer)>,
    /// Reconcile tasks asking for a table to be quiesced (`quiesce.rs`), and those waiting.
    quiesce_tx: mpsc::UnboundedSender<(TableId, oneshot::Sender<()>)>,
    quiesce_rx: mpsc::UnboundedReceiver<(TableId, oneshot::Sender<()>)>,
    quiescing: Vec<(TableId, oneshot::Sender<()>)>,
    recheck: role::Recheck,
}

impl<L: Lane, C: Confirmer<L>, P: TableCatalog + Send + Sync + 'static> Driver<L, C, P> {
    pub(crate) fn new(parts: Parts<L, C, P>) -> Driver<L, C, P> {
        let (events_tx, events) = mpsc::unbounded_channel();
        let (answers_tx, answers) = mpsc::unbounded_channel();
        let (quiesce_tx, quiesce_rx) = mpsc::unbounded_channel();
        let report = Report::for_tables(parts.tables.iter().map(|t| t.name.clone()));
        let telemetry = Telemetry::new::<L>(parts.tables.iter().map(|t| t.name.clone()));
        let (recheck_tx, recheck_rx) = mpsc::unbounded_channel();
        let any_primary_raw = parts.definitions.iter().any(|d| d.primary_raw.is_some());
        let recheck = role::Recheck {
            every: parts.primary_raw_recheck,
            next: any_primary_raw.then(|| Instant::now() + parts.primary_raw_recheck),
            tx: recheck_tx,
            rx: recheck_rx,
        };
        Driver {
            core: parts.core,
            confirmer: parts.confirmer,
            shared: parts.shared,
            tables: parts.tables,
            submits: parts.submits,
            submits_ended: false,
            control: parts.control,
            control_ended: false,
            flags: parts.flags,
            resubmit: parts.resubmit,
            epoch: Instant::now(),
            conns: HashMap::new(),
            events_tx,
            events,
            receipts: HashMap::new(),
            sent: HashMap::new(),
            attempts: HashMap::new(),
            again: BTreeMap::new(),
            again_waits_for_room: false,
            next_id: 0,
            blocked: None,
            flushes: Vec::new(),
            failed_since_flush: 0,
            close_asked: None,
            closing: None,
            handle_gone: false,
            outages: Outages::default(),
            telemetry,
            report,
            provisioning: parts.provisioning.map(Arc::new),
            definitions: parts.definitions,
            max_row_bytes: parts.max_row_bytes,
            shapes: Shapes::default(),
            stamp_cache: StampCache::default(),
            answers_tx,
            answers,
            quiesce_tx,
            quiesce_rx,
            quiescing: Vec::new(),
            recheck,
        }
    }

    fn now(&self) -> Time {
        Time::from_duration(self.epoch.elapsed())
    }

    fn instant(&self, at: Time) -> Instant {
        self.epoch + Duration::from_micros(at.as_micros())
    }

    /// The table's wire description (the core only names tables the driver registered).
    fn wire(&self, table: TableId) -> Option<Arc<TableWire>> {
        self.tables.get(table.index()).cloned()
    }

    fn table_name(&self, table: TableId) -> String {
        self.label(table).as_str().to_owned()
    }

    /// The table's name as [`table_name`](Self::table_name) gives it, without copying it: for
    /// what runs on every ack.
    fn label(&self, table: TableId) -> Label {
        match self.wire(table) {
            Some(wire) => Label::Wire(wire),
            None => Label::Id(table.to_string()),
        }
    }

    /// Runs until the sink is closed (by `close`, or because the handle was dropped).
    pub(crate) async fn run(mut self) {
        loop {
            self.report.wakeups += 1;
            let now = self.now();
            self.retry_blocked(now);
            self.take_handoffs(now);
            self.close_when_due(now);
            self.resubmit_due(now);
            self.recheck_due();
            let wake = self.drain(now);
            self.settle_flushes();
            self.settle_quiesces();
            let ended = self.closing.is_some() || self.handle_gone;
            if ended && self.core.is_closed() && self.all_taken() {
                break;
            }
            let accepting = self.blocked.is_none() && !self.submits_ended;
            let wake = wake.map(|t| self.instant(t));
            let again = match self.again_waits_for_room {
                true => None,
                false => self.again.keys().next().map(|(at, _)| *at),
            };
            let close_by = self.close_asked.as_ref().map(|(by, _)| self.instant(*by));
            let at = [wake, again, self.recheck.next, close_by]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                Some(input) = self.events.recv() => self.input(input),
                Some((table, schema, answer)) = self.answers.recv() => {
                    self.answered(table, schema, answer);
                }
                Some((table, done)) = self.quiesce_rx.recv() => self.quiesce(table, done),
                Some((table, result)) = self.recheck.rx.recv() => self.rechecked(table, result),
                control = self.control.recv(), if !self.control_ended => match control {
                    Some(c) => self.control(c),
                    None => self.control_ended = true,
                },
                handoff = self.submits.recv(), if accepting => match handoff {
                    Some(h) => {
                        let now = self.now();
                        self.take(now, h);
                        // And in bulk what the handle queued meanwhile: one pass of the core.
                        self.take_handoffs(now);
                    }
                    None => self.submits_ended(),
                },
                () = sleep(at) => {}
            }
        }
        // The core has ended every call (each half-closed one within its 500 ms drain window):
        // nothing is left to wait for.
        self.conns.clear();
        let report = self.snapshot();
        for f in self.flushes.drain(..) {
            let _ = f.send(Ok(()));
        }
        if let Some(reply) = self.closing.take() {
            let _ = reply.send(report);
        }
    }

    /// Whether every batch the handle handed over has reached the core (or been refused).
    fn all_taken(&self) -> bool {
        self.submits_ended && self.blocked.is_none()
    }

    /// Gives the core what the handle has handed over, in order, until a window is full (the
    /// rest stays in the channel, whose capacity is the handle's backpressure), at most
    /// [`BULK`] at a time.
    fn take_handoffs(&mut self, now: Time) {
        for _ in 0..BULK {
            if self.blocked.is_some() || self.submits_ended {
                return;
            }
            match self.submits.try_recv() {
                Ok(handoff) => self.take(now, handoff),
                Err(mpsc::error::TryRecvError::Empty) => return,
                Err(mpsc::error::TryRecvError::Disconnected) => return self.submits_ended(),
            }
        }
    }

    /// A close begins once everything handed over before it has reached the core, or at its
    /// deadline: then what is still held is refused as closed (to the confirmer's `failed`).
    fn close_when_due(&mut self, now: Time) {
        let due = match &self.close_asked {
            Some((by, _)) => self.all_taken() || now >= *by,
            None => false,
        };
        if !due {
            return;
        }
        if let Some((by, reply)) = self.close_asked.take() {
            // A close waits for everything too: the streams finish together.
            self.core.flush(now);
            self.core.close(now, by.max(now));
            self.closing = Some(reply);
            // What waits for room will not get it: refused as closed, and the batches
            // waiting for resubmission are handed back.
            self.retry_blocked(now);
            self.take_handoffs(now);
            self.fail_resubmissions();
        }
    }

    /// The handle let go of its hand-off channel: `close` (which asked first, on the control
    /// channel) or a drop.
    fn submits_ended(&mut self) {
        self.submits_ended = true;
        if self.close_asked.is_some() || self.closing.is_some() {
            return;
        }
        // A close's request is already on the control channel: read what is there.
        while let Ok(c) = self.control.try_recv() {
            self.control(c);
        }
        if self.close_asked.is_none() && self.closing.is_none() {
            self.handle_dropped();
        }
    }

    fn handle_dropped(&mut self) {
        if !self.handle_gone {
            self.handle_gone = true;
            let now = self.now();
            self.core.close(now, now + Duration::from_secs(30));
            self.fail_resubmissions();
        }
    }

    fn input(&mut self, input: Input<L>) {
        let now = self.now();
        let conn = input.conn();
        // The table's description, shared: its name without a copy on every ack.
        let label = self.core.slot_table(conn.slot()).map(|t| self.label(t));
        let name = label.as_ref().map_or("", Label::as_str);
        self.outages.before(name, &input);
        let change = Telemetry::change_of(&input);
        let ready = matches!(&input, Input::Result { result, .. } if result.ack_up_to_offset == -1);
        let handled = self.core.handle(now, input);
        if let Some(change) = change.filter(|_| !matches!(handled, Handled::Ignored(_))) {
            self.telemetry.applied(&self.core, conn.slot(), change);
        }
        self.telemetry.settle(&self.core, conn.slot());
        match handled {
            Handled::Violation(e) => tracing::warn!(error = %e, %conn, "protocol violation"),
            Handled::Ignored(Ignored::Unreadable { reason }) => {
                tracing::warn!(%reason, %conn, "ignoring a PutResult");
            }
            Handled::Ignored(why) => tracing::trace!(?why, %conn, "input ignored"),
            Handled::Applied if ready => self.outages.ready(name, conn),
            _ => {}
        }
    }

    fn control(&mut self, control: Control) {
        let now = self.now();
        match control {
            Control::Flush(reply) => {
                // The streams finish together: the queue is dealt over them.
                self.core.flush(now);
                self.flushes.push(reply);
            }
            Control::Report(reply) => {
                self.sweep_schemas();
                let _ = reply.send(self.snapshot());
            }
            Control::Retire { table, schema } => {
                self.shapes.retiring.push((table, schema));
                self.sweep_schemas();
            }
            Control::Health(reply) => {
                let _ = reply.send(self.health());
            }
            Control::BadRows { table, rows } => {
                self.report.bad_rows(table, rows, false);
                self.telemetry.bad_rows(table, rows, false);
            }
            Control::Close { within, reply } => {
                if self.closing.is_none() && self.close_asked.is_none() {
                    self.close_asked = Some((now + within, reply));
                }
            }
        }
    }

    /// Submits the handed-back batches whose wait is over, in due order, while the windows
    /// take them.
    fn resubmit_due(&mut self, now: Time) {
        let due = Instant::now();
        self.again_waits_for_room = false;
        while let Some(entry) = self.again.first_entry() {
            if entry.key().0 > due || self.closing.is_some() {
                break;
            }
            let (key, again) = entry.remove_entry();
            let route = again.batch.route;
            match self.core.submit(now, route, again.batch, again.token) {
                Ok(_) => self.report.resubmitted(route.table()),
                Err(rejected) if matches!(rejected.reason, RejectReason::Full { .. }) => {
                    // Not now: keep its place at the front and try again after the next
                    // event (a confirmation frees room; so may a stream that opens).
                    self.again_waits_for_room = true;
                    self.again.insert(
                        key,
                        Again {
                            batch: rejected.batch,
                            token: rejected.token,
                            ..again
                        },
                    );
                    break;
                }
                Err(rejected) => {
                    let table = route.table();
                    let reason = self.not_admitted(table, rejected.reason);
                    let id = rejected.batch.id;
                    let batch = rejected.batch.batch;
                    self.hand_over(
                        table,
                        batch,
                        rejected.token,
                        again.durable_rows,
                        Some(id),
                        &reason,
                    );
                }
            }
        }
    }

    /// Hands every batch waiting for resubmission to the confirmer (the sink is closing).
    fn fail_resubmissions(&mut self) {
        while let Some((_, again)) = self.again.pop_first() {
            let table = again.batch.route.table();
            let id = again.batch.id;
            self.hand_over(
                table,
                again.batch.batch,
                again.token,
                again.durable_rows,
                Some(id),
                &again.reason,
            );
        }
    }

    fn settle_flushes(&mut self) {
        // A flush follows the sends it waits for, which may still be in the channel.
        if self.receipts.is_empty()
            && self.blocked.is_none()
            && self.submits.is_empty()
            && self.again.is_empty()
            && !self.flushes.is_empty()
        {
            let failed = std::mem::take(&mut self.failed_since_flush);
            self.sweep_schemas();
            for f in self.flushes.drain(..) {
                let _ = f.send(if failed == 0 {
                    Ok(())
                } else {
                    Err(FlushError::Failed { batches: failed })
                });
            }
        }
    }

    fn snapshot(&self) -> Report {
        let mut r = self.report.clone();
        r.elapsed = self.epoch.elapsed();
        r.metrics = self.core.metrics().clone();
        r.watermarks = self.core.watermarks();
        r.open_streams = self.core.open_streams();
        r.waiting_to_resubmit = self.again.len();
        self.count_schemas(&mut r);
        r
    }

    /// The health tree, from the core's state and the telemetry's per-stream view.
    fn health(&self) -> SinkHealth {
        let tables = self
            .core
            .table_ids()
            .map(|table| {
                let streams = self
                    .core
                    .table_slots(table)
                    .enumerate()
                    .map(|(stream, slot)| {
                        let state = self.telemetry.stream_state(slot);
                        StreamHealth {
                            stream,
                            phase: state.map_or(crate::health::Phase::Idle, |s| s.phase),
                            last_ack_age: state.and_then(|s| s.last_ack).map(|at| at.elapsed()),
                            window_fill: crate::telemetry::window_fill(&self.core, slot),
                            pending_batches: self
                                .core
                                .slot_watermarks(slot)
                                .map_or(0, |w| w.pending()),
                            last_error: state.and_then(|s| s.last_error.clone()),
                        }
                    })
                    .collect();
                TableHealth {
                    name: self.table_name(table),
                    failed: self.core.table_failed(table),
                    backpressure: self.telemetry.backpressured == Some(table),
                    queued_batches: self.core.queued(table).map_or(0, |q| q.batches),
                    streams,
                }
            })
            .collect();
        SinkHealth {
            lane: L::NAME,
            uptime: self.epoch.elapsed(),
            closing: self.closing.is_some() || self.close_asked.is_some() || self.handle_gone,
            open_streams: self.core.open_streams(),
            waiting_to_resubmit: self.again.len(),
            tables,
        }
    }

    /// Whether a hand-back for `reason` is worth another attempt: a slot spent its retry
    /// budget (an outage), not a final verdict on the batch or the table.
    fn transient(reason: &FailureReason) -> bool {
        matches!(reason, FailureReason::RetryBudgetSpent { .. })
    }

    /// A batch will not be confirmed: its receipt fails and the confirmer gets it.
    fn hand_over(
        &mut self,
        table: TableId,
        batch: RecordBatch,
        token: Token<L>,
        durable_rows: u64,
        id: Option<u64>,
        reason: &FailureReason,
    ) {
        let name = self.table_name(table);
        self.report.failed(table);
        self.telemetry.handed_back(table, reason);
        self.failed_since_flush += 1;
        let failed = FailedBatch {
            offset: None,
            batch,
            token,
            durable_rows,
        };
        // The confirmer first: when a receipt resolves, the confirmer has heard.
        self.confirmer.failed(&name, failed, reason);
        if let Some(tx) = id.and_then(|id| self.receipts.remove(&id)) {
            let _ = tx.send(Err(DeliveryError::Failed {
                reason: reason.clone(),
                durable_rows,
            }));
        }
        if let Some(id) = id {
            self.attempts.remove(&id);
        }
    }

    /// Performs the core's outputs until it has nothing to do; returns when to wake it.
    fn drain(&mut self, now: Time) -> Option<Time> {
        loop {
            match self.core.poll_output(now) {
                Output::Open {
                    table,
                    conn,
                    schema,
                } => {
                    let wire = match self.shapes.plans.get(&(table, schema)) {
                        Some(Planned::Ready(_, wire)) => wire.clone(),
                        _ => match self.wire(table) {
                            Some(wire) => wire,
                            None => continue,
                        },
                    };
                    tracing::debug!(table = %wire.name, %conn, "opening");
                    let gate = self.open_gate(table);
                    let events = self.events_tx.clone();
                    let handle = conn::spawn(self.shared.clone(), wire, conn, events, gate);
                    self.conns.insert(conn, handle);
                    self.telemetry.opened(&self.core, conn.slot());
                }
                Output::Send(t) => {
                    let bytes = Batch::bytes(&t.batch);
                    self.sent.insert((t.slot(), t.offset), (t.batch.id, bytes));
                    self.telemetry.settle(&self.core, t.slot());
                    let batch = match &t.batch.plan {
                        Some(plan) if !plan.identity => {
                            let stamps = Stamps {
                                emit_micros: emit_micros(),
                                origin: t.batch.origin.as_deref(),
                                rows: &t.batch.rows,
                            };
                            let cache = &mut self.stamp_cache;
                            plan.apply(&t.batch.batch, &stamps, cache)
                                .unwrap_or_else(|e| {
                                    // Cannot happen (the plan was made from this schema and its
                                    // rows checked); the service will refuse and name it.
                                    tracing::error!(error = %e, "converting a batch for the wire");
                                    t.batch.batch.clone()
                                })
                        }
                        _ => t.batch.batch,
                    };
                    if let Some(h) = self.conns.get(&t.conn) {
                        let _ = h.commands.send(conn::Command::Send { batch });
                    }
                }
                Output::Reconcile { table, schema } => self.reconcile(now, table, schema),
                Output::Close { conn, graceful } => {
                    self.telemetry.closed(&self.core, conn.slot(), graceful);
                    if graceful {
                        if let Some(h) = self.conns.get(&conn) {
                            let _ = h.commands.send(conn::Command::HalfClose);
                        }
                    } else {
                        // Dropping the handle aborts the call (it may have ended already).
                        self.conns.remove(&conn);
                    }
                }
                Output::Confirmed(burst) => {
                    let table = burst.table();
                    let label = self.label(table);
                    let name = label.as_str();
                    let bytes = burst
                        .iter()
                        .filter_map(|c| self.sent.get(&(c.slot(), c.offset())))
                        .map(|(_, bytes)| bytes)
                        .sum();
                    self.telemetry.confirmed(&self.core, &burst, bytes);
                    for c in burst {
                        let id = self.sent.remove(&(c.slot(), c.offset())).map(|(id, _)| id);
                        let delivered = Delivered {
                            slot: c.slot(),
                            offset: c.offset(),
                            rows: c.rows(),
                            latency: c.confirmed_at().saturating_since(c.submitted_at()),
                        };
                        self.report.confirmed(table, c.rows());
                        // The confirmer first: when a receipt resolves, the confirmer has heard.
                        self.confirmer.confirmed(name, c);
                        if let Some(tx) = id.and_then(|id| self.receipts.remove(&id)) {
                            let _ = tx.send(Ok(delivered));
                        }
                        if let Some(id) = id {
                            self.attempts.remove(&id);
                        }
                    }
                }
                Output::Failed(failed) => self.failed(failed),
                Output::InvalidateCredentials { table } => {
                    if let Some(wire) = self.wire(table) {
                        self.shared.tokens.invalidate(&wire.name);
                    }
                }
                Output::Timeout(at) => {
                    // The core has nothing more to do: give back what a backlog's peak (a
                    // reconnect, an outage) left in the per-batch maps.
                    release_peak(&mut self.receipts);
                    release_peak(&mut self.sent);
                    release_peak(&mut self.attempts);
                    return at;
                }
                _ => {}
            }
        }
    }

    /// Batches handed back: transient ones wait to be submitted again, the rest (and those out
    /// of attempts) go to the confirmer.
    fn failed(&mut self, failed: zerobus_sink::Failed<L, Tagged>) {
        let name = self.table_name(failed.table);
        if self.core.table_failed(failed.table) {
            // Before the confirmer hears: the handle's next batch for it asks, and `send`
            // returns the refusal.
            self.flags.fail(failed.table);
        }
        let retry = Self::transient(&failed.reason);
        tracing::warn!(
            table = %name,
            reason = %failed.reason,
            batches = failed.batches.len(),
            resubmitting = retry,
            "batches handed back"
        );
        for b in failed.batches {
            if let (Some(slot), Some(offset)) = (failed.slot, b.offset) {
                self.sent.remove(&(slot, offset));
            }
            let id = b.batch.id;
            let (attempts, durable) = self.attempts.entry(id).or_default();
            *durable += b.durable_rows;
            let durable_rows = *durable;
            if retry && *attempts < self.resubmit.max_attempts && self.closing.is_none() {
                *attempts += 1;
                let due = Instant::now() + self.resubmit.backoff * *attempts;
                let again = Again {
                    batch: b.batch,
                    token: b.token,
                    reason: failed.reason.clone(),
                    durable_rows,
                };
                let seq = self.next_id;
                self.next_id += 1;
                self.again.insert((due, seq), again);
            } else {
                self.hand_over(
                    failed.table,
                    b.batch.batch,
                    b.token,
                    durable_rows,
                    Some(id),
                    &failed.reason,
                );
            }
        }
    }
}

/// The wall clock in µs since the epoch, for `_twg_emit_ts`.
fn emit_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

async fn sleep(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Entries a per-batch map keeps room for whatever its past peak.
const KEEP: usize = 1024;

/// Gives back the capacity a backlog's peak left in a per-batch map once it holds less than an
/// eighth of it (a `HashMap` never shrinks on its own: each larger backlog raised what the sink
/// held for its life). Maps that stay under `4 * KEEP` are never touched.
pub(crate) fn release_peak<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 4 * KEEP && map.len() * 8 < map.capacity() {
        map.shrink_to((map.len() * 2).max(KEEP));
    }
}
