//! The driver: the one task that owns the core. It feeds the core submits, connection events
//! and the time, and performs what the core asks (open, send, close, confirm, fail, invalidate
//! credentials). Connections run in their own tasks ([`crate::conn`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zerobus_sink::{
    Admitted, Batch, ConnId, FailedBatch, Handled, Ignored, Input, Lane, LogicalOffset, Output,
    RejectReason, Route, SinkCore, SlotId, TableId, Time, Token,
};

use crate::conn::{self, TableWire};
use crate::error::{DeliveryError, FlushError, SendError};
use crate::receipt::{Delivered, Receipt};
use crate::report::Report;
use crate::sink::Confirmer;

/// A batch with the id of its receipt; slices keep the id.
#[derive(Clone, Debug)]
pub(crate) struct Tagged {
    pub(crate) batch: RecordBatch,
    pub(crate) id: u64,
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
        }
    }
}

pub(crate) struct Submit<L: Lane> {
    pub(crate) route: Route,
    pub(crate) batch: RecordBatch,
    pub(crate) token: Token<L>,
    pub(crate) reply: oneshot::Sender<Result<Receipt, SendError<L>>>,
}

/// From the handle to the driver.
pub(crate) enum Command<L: Lane> {
    Submit(Submit<L>),
    Flush(oneshot::Sender<Result<(), FlushError>>),
    Report(oneshot::Sender<Report>),
    Close {
        within: Duration,
        reply: oneshot::Sender<Report>,
    },
}

pub(crate) struct Driver<L: Lane, C> {
    pub(crate) core: SinkCore<L, Tagged>,
    pub(crate) confirmer: C,
    pub(crate) shared: Arc<conn::Shared>,
    pub(crate) tables: Vec<Arc<TableWire>>,
    pub(crate) commands: mpsc::Receiver<Command<L>>,
    pub(crate) epoch: Instant,
    conns: HashMap<ConnId<L>, conn::Handle>,
    events_tx: mpsc::UnboundedSender<Input<L>>,
    events: mpsc::UnboundedReceiver<Input<L>>,
    receipts: HashMap<u64, oneshot::Sender<Result<Delivered, DeliveryError>>>,
    sent: HashMap<(SlotId, LogicalOffset), u64>,
    next_id: u64,
    blocked: Option<Submit<L>>,
    flushes: Vec<oneshot::Sender<Result<(), FlushError>>>,
    failed_since_flush: u64,
    closing: Option<oneshot::Sender<Report>>,
    handle_gone: bool,
    report: Report,
}

impl<L: Lane, C: Confirmer<L>> Driver<L, C> {
    pub(crate) fn new(
        core: SinkCore<L, Tagged>,
        confirmer: C,
        shared: Arc<conn::Shared>,
        tables: Vec<Arc<TableWire>>,
        commands: mpsc::Receiver<Command<L>>,
    ) -> Driver<L, C> {
        let (events_tx, events) = mpsc::unbounded_channel();
        Driver {
            core,
            confirmer,
            shared,
            tables,
            commands,
            epoch: Instant::now(),
            conns: HashMap::new(),
            events_tx,
            events,
            receipts: HashMap::new(),
            sent: HashMap::new(),
            next_id: 0,
            blocked: None,
            flushes: Vec::new(),
            failed_since_flush: 0,
            closing: None,
            handle_gone: false,
            report: Report::default(),
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

    /// Runs until the sink is closed (by `close`, or because the handle was dropped).
    pub(crate) async fn run(mut self) {
        loop {
            let now = self.now();
            self.retry_blocked(now);
            let wake = self.drain(now);
            self.settle_flushes();
            if (self.closing.is_some() || self.handle_gone) && self.core.is_closed() {
                break;
            }
            let accepting = self.blocked.is_none() && !self.handle_gone;
            let at = wake.map(|t| self.instant(t));
            tokio::select! {
                Some(input) = self.events.recv() => {
                    let now = self.now();
                    let conn = input.conn();
                    match self.core.handle(now, input) {
                        Handled::Violation(e) => {
                            tracing::warn!(error = %e, %conn, "protocol violation");
                        }
                        Handled::Ignored(Ignored::Unreadable { reason }) => {
                            tracing::warn!(%reason, %conn, "ignoring a PutResult");
                        }
                        Handled::Ignored(why) => tracing::trace!(?why, %conn, "input ignored"),
                        _ => {}
                    }
                }
                command = self.commands.recv(), if accepting => match command {
                    Some(c) => self.command(c),
                    None => {
                        self.handle_gone = true;
                        let now = self.now();
                        self.core.close(now, now + Duration::from_secs(30));
                    }
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

    fn command(&mut self, command: Command<L>) {
        let now = self.now();
        match command {
            Command::Submit(s) => self.submit(now, s),
            Command::Flush(reply) => self.flushes.push(reply),
            Command::Report(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Command::Close { within, reply } => {
                self.core.close(now, now + within);
                self.closing = Some(reply);
            }
        }
    }

    fn submit(&mut self, now: Time, s: Submit<L>) {
        let id = self.next_id;
        self.next_id += 1;
        let tagged = Tagged { batch: s.batch, id };
        match self.core.submit(now, s.route, tagged, s.token) {
            Ok(Admitted { table, seq }) => {
                let (tx, rx) = oneshot::channel();
                self.receipts.insert(id, tx);
                let _ = s.reply.send(Ok(Receipt::new(table, seq, rx)));
            }
            Err(rejected) if matches!(rejected.reason, RejectReason::Full { .. }) => {
                // The backpressure: hold the send (and stop taking commands) until the window
                // has room.
                self.blocked = Some(Submit {
                    route: s.route,
                    batch: rejected.batch.batch,
                    token: rejected.token,
                    reply: s.reply,
                });
            }
            Err(rejected) => {
                let _ = s.reply.send(Err(SendError::Rejected {
                    reason: rejected.reason,
                    batch: rejected.batch.batch,
                    token: rejected.token,
                }));
            }
        }
    }

    fn retry_blocked(&mut self, now: Time) {
        if let Some(s) = self.blocked.take() {
            self.submit(now, s);
        }
    }

    fn settle_flushes(&mut self) {
        if self.receipts.is_empty() && self.blocked.is_none() && !self.flushes.is_empty() {
            let failed = std::mem::take(&mut self.failed_since_flush);
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
        r
    }

    /// Performs the core's outputs until it has nothing to do; returns when to wake it.
    fn drain(&mut self, now: Time) -> Option<Time> {
        loop {
            match self.core.poll_output(now) {
                Output::Open { table, conn } => {
                    let Some(wire) = self.wire(table) else {
                        continue;
                    };
                    tracing::debug!(table = %wire.name, %conn, "opening");
                    let handle =
                        conn::spawn(self.shared.clone(), wire, conn, self.events_tx.clone());
                    self.conns.insert(conn, handle);
                }
                Output::Send(t) => {
                    self.sent.insert((t.slot(), t.offset), t.batch.id);
                    if let Some(h) = self.conns.get(&t.conn) {
                        let _ = h.commands.send(conn::Command::Send {
                            batch: t.batch.batch,
                            wire_offset: t.wire_offset.get(),
                        });
                    }
                }
                Output::Close { conn, graceful } => {
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
                    let wire = self.wire(burst.table());
                    let name = wire.as_deref().map_or("?", |w| w.name.as_str());
                    for c in burst {
                        if let Some(tx) = self
                            .sent
                            .remove(&(c.slot(), c.offset()))
                            .and_then(|id| self.receipts.remove(&id))
                        {
                            let _ = tx.send(Ok(Delivered {
                                slot: c.slot(),
                                offset: c.offset(),
                                rows: c.rows(),
                                latency: c.confirmed_at().saturating_since(c.submitted_at()),
                            }));
                        }
                        self.report.rows += c.rows();
                        self.report.batches += 1;
                        self.confirmer.confirmed(name, c);
                    }
                }
                Output::Failed(failed) => {
                    let wire = self.wire(failed.table);
                    let name = wire.as_deref().map_or("?", |w| w.name.as_str());
                    tracing::warn!(table = %name, reason = %failed.reason, batches = failed.batches.len(), "batches handed back");
                    for b in failed.batches {
                        if let (Some(slot), Some(offset)) = (failed.slot, b.offset) {
                            self.sent.remove(&(slot, offset));
                        }
                        if let Some(tx) = self.receipts.remove(&b.batch.id) {
                            let _ = tx.send(Err(DeliveryError::Failed {
                                reason: failed.reason.clone(),
                                durable_rows: b.durable_rows,
                            }));
                        }
                        self.report.failed_batches += 1;
                        self.failed_since_flush += 1;
                        let batch = FailedBatch {
                            offset: b.offset,
                            batch: b.batch.batch,
                            token: b.token,
                            durable_rows: b.durable_rows,
                        };
                        self.confirmer.failed(name, batch, &failed.reason);
                    }
                }
                Output::InvalidateCredentials { table } => {
                    if let Some(wire) = self.wire(table) {
                        self.shared.tokens.invalidate(&wire.name);
                    }
                }
                Output::Timeout(at) => return at,
                _ => {}
            }
        }
    }
}

async fn sleep(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
