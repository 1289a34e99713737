//! [`SinkCore`]: the pool of slot windows behind one input/output interface.

use std::collections::VecDeque;
use std::fmt;

use crate::batch::Batch;
use crate::config::SinkConfig;
use crate::error::{
    ConfigError, FailureReason, ProtocolError, RejectReason, Rejected, StreamError,
};
use crate::event::{Input, Output};
use crate::ids::{ConnGen, LogicalOffset, SlotId};
use crate::lane::{Lane, Token};
use crate::metrics::{Metrics, Watermarks};
use crate::time::Time;
use crate::window::{AckOutcome, Conn, InFlight, SlotWindow};

/// Where an admitted batch went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The slot whose stream will carry it.
    pub slot: SlotId,
    /// Its logical offset in that slot.
    pub offset: LogicalOffset,
}

/// The sans-IO Zerobus sink: a pool of stream slots, each with an ack window, for one target
/// table and one lane `L`, over batches of type `B`.
///
/// Methods come in four kinds, as in quinn-proto:
/// - **getters** (`&self`): [`watermarks`](Self::watermarks), [`metrics`](Self::metrics),
///   [`slot_watermarks`](Self::slot_watermarks), [`is_closed`](Self::is_closed);
/// - **inputs**: [`submit`](Self::submit) (a batch from the pipeline) and
///   [`handle`](Self::handle) (an event from a connection);
/// - **mutators**: [`close`](Self::close);
/// - **outputs**: [`poll_output`](Self::poll_output).
///
/// The drain contract: after every input, mutator call, and whenever the time it last returned
/// in [`Output::Timeout`] is reached, call `poll_output` until it returns `Output::Timeout`.
/// Every call takes the current time; the core never reads a clock.
pub struct SinkCore<L: Lane, B: Batch> {
    config: SinkConfig,
    slots: Vec<SlotWindow<L, B>>,
    /// Round-robin cursor: the slot tried first by the next submit.
    cursor: usize,
    next_conn: u64,
    outputs: VecDeque<Output<L, B>>,
    metrics: Metrics,
    /// Set by [`close`](Self::close): admission stopped; batches not durable by then fail.
    close_deadline: Option<Time>,
}

impl<L: Lane, B: Batch> fmt::Debug for SinkCore<L, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkCore")
            .field("lane", &L::NAME)
            .field("slots", &self.slots.len())
            .field("watermarks", &self.watermarks())
            .field("closing", &self.close_deadline)
            .finish()
    }
}

impl<L: Lane, B: Batch> SinkCore<L, B> {
    /// A sink with `config`, or an error naming the first invalid field. Nothing is opened until
    /// the first batch is submitted.
    pub fn new(config: SinkConfig) -> Result<SinkCore<L, B>, ConfigError> {
        config.validate()?;
        Ok(SinkCore {
            slots: (0..config.slots)
                .map(|i| SlotWindow::new(SlotId(i)))
                .collect(),
            config,
            cursor: 0,
            next_conn: 0,
            outputs: VecDeque::new(),
            metrics: Metrics::default(),
            close_deadline: None,
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &SinkConfig {
        &self.config
    }

    /// Watermarks summed over every slot.
    #[must_use]
    pub fn watermarks(&self) -> Watermarks {
        self.slots
            .iter()
            .map(SlotWindow::marks)
            .fold(Watermarks::default(), |a, m| Watermarks {
                submitted: a.submitted + m.submitted,
                delivered: a.delivered + m.delivered,
                failed: a.failed + m.failed,
                rows_submitted: a.rows_submitted + m.rows_submitted,
                rows_delivered: a.rows_delivered + m.rows_delivered,
            })
    }

    /// One slot's watermarks, or `None` if the pool has no such slot.
    #[must_use]
    pub fn slot_watermarks(&self, slot: SlotId) -> Option<Watermarks> {
        self.slots.get(slot.index()).map(SlotWindow::marks)
    }

    /// The slots of the pool.
    pub fn slot_ids(&self) -> impl Iterator<Item = SlotId> + '_ {
        self.slots.iter().map(SlotWindow::id)
    }

    /// What one slot's window holds in flight, or `None` if the pool has no such slot.
    #[must_use]
    pub fn in_flight(&self, slot: SlotId) -> Option<InFlight> {
        self.slots.get(slot.index()).map(SlotWindow::usage)
    }

    /// Metrics so far.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether [`close`](Self::close) was called and every batch has ended and every connection
    /// is closed. Once closed, every input is a no-op.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.close_deadline.is_some()
            && self.outputs.is_empty()
            && self
                .slots
                .iter()
                .all(|s| !s.has_pending() && s.conn() == Conn::Idle)
    }

    /// Admits a batch, fire-and-forget: returns at once with its slot and logical offset; the
    /// token comes back in an [`Output::Confirmed`] once the batch is durable, or in an
    /// [`Output::Failed`]. Never waits for an ack. When every window is full the batch and
    /// token are handed back ([`RejectReason::Full`]): that is the backpressure.
    pub fn submit(
        &mut self,
        now: Time,
        batch: B,
        token: Token<L>,
    ) -> Result<Admitted, Rejected<L, B>> {
        let rows = batch.rows();
        let bytes = batch.bytes();
        let reject = |batch, token, reason| {
            Err(Rejected {
                batch,
                token,
                reason,
            })
        };
        if self.close_deadline.is_some() {
            return reject(batch, token, RejectReason::Closed);
        }
        if rows == 0 {
            return reject(batch, token, RejectReason::Empty);
        }
        let limits = self.config.window;
        if let Some((bound, value, limit)) = [
            (crate::error::Bound::Bytes, bytes, limits.max_bytes),
            (crate::error::Bound::Rows, rows, limits.max_rows),
        ]
        .into_iter()
        .find(|(_, value, limit)| value > limit)
        {
            return reject(
                batch,
                token,
                RejectReason::TooLarge {
                    bound,
                    value,
                    limit,
                },
            );
        }
        let n = self.slots.len();
        let mut first_bound = None;
        for i in 0..n {
            let index = (self.cursor + i) % n;
            match self.slots[index].exceeded_bound(&limits, rows, bytes) {
                None => {
                    self.cursor = (index + 1) % n;
                    let slot = &mut self.slots[index];
                    let offset = slot.admit(now, batch, token, rows, bytes);
                    let admitted = Admitted {
                        slot: slot.id(),
                        offset,
                    };
                    let pending = self.watermarks().pending();
                    self.metrics.max_pending = self.metrics.max_pending.max(pending);
                    return Ok(admitted);
                }
                Some(bound) => {
                    first_bound.get_or_insert(bound);
                }
            }
        }
        self.metrics.backpressured += 1;
        let (bound, limit) = first_bound.unwrap_or((crate::error::Bound::Batches, 0));
        reject(batch, token, RejectReason::Full { bound, limit })
    }

    /// Feeds an event from a connection. Events naming a connection generation that is not the
    /// slot's live one are ignored (invariant 4). A protocol violation is returned for the
    /// driver to log; the core has already acted on it (a fatal one fails the connection and
    /// hands its batches back through [`poll_output`](Self::poll_output)).
    pub fn handle(&mut self, now: Time, input: Input) -> Result<(), ProtocolError> {
        let (slot, conn) = input.target();
        let Some(window) = self.slots.get_mut(slot.index()) else {
            self.metrics.protocol_errors += 1;
            let slots = u16::try_from(self.slots.len()).unwrap_or(u16::MAX);
            return Err(ProtocolError::UnknownSlot {
                slot: slot.0,
                slots,
            });
        };
        if window.conn().generation() != Some(conn) {
            self.metrics.stale_inputs += 1;
            return Ok(());
        }
        match input {
            Input::Ready { .. } => {
                window.on_ready(conn);
                Ok(())
            }
            Input::Acked { up_to_records, .. } => match window.on_ack(now, conn, up_to_records) {
                AckOutcome::Nothing => Ok(()),
                AckOutcome::Confirmed(burst) => {
                    self.metrics.acks_applied += 1;
                    self.metrics.coalesce.record(burst.len() as u64);
                    for c in burst.iter() {
                        let latency = c.confirmed_at().saturating_since(c.submitted_at());
                        self.metrics
                            .delivery_latency_us
                            .record(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
                    }
                    self.outputs.push_back(Output::Confirmed(burst));
                    Ok(())
                }
                AckOutcome::Violation { error, fatal } => {
                    self.metrics.protocol_errors += 1;
                    if fatal {
                        self.fail_connection(slot, FailureReason::Protocol(error.clone()));
                    }
                    Err(error)
                }
            },
            Input::Failed { error, .. } => {
                self.fail_connection(slot, FailureReason::Stream { slot, conn, error });
                Ok(())
            }
            Input::Closed { .. } => {
                if window.has_pending() {
                    self.fail_connection(
                        slot,
                        FailureReason::Stream {
                            slot,
                            conn,
                            error: StreamError::Eof,
                        },
                    );
                } else if let Some(conn) = window.close_idle() {
                    // Tell the driver too, so that its side of the call is dropped before the
                    // slot opens a new connection.
                    self.outputs.push_back(Output::Close {
                        slot,
                        conn,
                        graceful: true,
                    });
                }
                Ok(())
            }
        }
    }

    /// Stops admission and drains: every slot closes gracefully once its batches are durable;
    /// batches still pending at `deadline` are handed back as failed. Idempotent; a later call
    /// cannot extend the first deadline.
    pub fn close(&mut self, now: Time, deadline: Time) {
        let _ = now;
        self.close_deadline.get_or_insert(deadline);
    }

    /// The next effect to perform. See the drain contract on [`SinkCore`].
    pub fn poll_output(&mut self, now: Time) -> Output<L, B> {
        self.fire_timers(now);
        self.pump(now);
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        Output::Timeout(self.next_deadline())
    }

    /// Fails connections whose deadline has passed, and everything pending at the close
    /// deadline. Spurious calls do nothing.
    fn fire_timers(&mut self, now: Time) {
        for index in 0..self.slots.len() {
            let window = &self.slots[index];
            let slot = window.id();
            if window
                .deadline(self.config.open_timeout, self.config.ack_timeout)
                .is_some_and(|at| at <= now)
            {
                let reason = match window.conn() {
                    Conn::Opening { conn, since } => FailureReason::OpenTimeout {
                        slot,
                        conn,
                        waited: now.saturating_since(since),
                    },
                    Conn::Ready { conn, .. } => FailureReason::AckTimeout {
                        slot,
                        conn,
                        offset: window.oldest().unwrap_or(LogicalOffset(0)),
                        waited: self.config.ack_timeout,
                    },
                    Conn::Idle => continue,
                };
                self.fail_connection(slot, reason);
            }
        }
        if self.close_deadline.is_some_and(|at| at <= now) {
            for index in 0..self.slots.len() {
                if self.slots[index].has_pending() {
                    let slot = self.slots[index].id();
                    self.fail_connection(slot, FailureReason::CloseDeadline { slot });
                }
            }
        }
    }

    /// Opens connections for slots with work, places unsent batches on ready connections, and
    /// closes drained connections when closing.
    fn pump(&mut self, now: Time) {
        let closing = self.close_deadline.is_some();
        for window in &mut self.slots {
            match window.conn() {
                Conn::Idle if window.has_pending() => {
                    let conn = ConnGen(self.next_conn);
                    self.next_conn += 1;
                    window.begin_open(conn, now);
                    self.metrics.connections_opened += 1;
                    self.outputs.push_back(Output::Open {
                        slot: window.id(),
                        conn,
                    });
                }
                Conn::Ready { .. } if window.has_unplaced() => {
                    let outputs = &mut self.outputs;
                    let sent = window.place_all(now, self.config.max_message_bytes, &mut |t| {
                        outputs.push_back(Output::Send(t))
                    });
                    self.metrics.messages_sent += sent;
                }
                Conn::Opening { .. } | Conn::Ready { .. } if closing && !window.has_pending() => {
                    if let Some(conn) = window.close_idle() {
                        self.outputs.push_back(Output::Close {
                            slot: window.id(),
                            conn,
                            graceful: true,
                        });
                    }
                }
                _ => {}
            }
        }
    }

    fn next_deadline(&self) -> Option<Time> {
        let conn_deadlines = self
            .slots
            .iter()
            .filter_map(|s| s.deadline(self.config.open_timeout, self.config.ack_timeout));
        let close = self
            .close_deadline
            .filter(|_| self.slots.iter().any(SlotWindow::has_pending));
        conn_deadlines.chain(close).min()
    }

    /// Drops the slot's connection and hands back its pending batches.
    fn fail_connection(&mut self, slot: SlotId, reason: FailureReason) {
        let Some(window) = self.slots.get_mut(slot.index()) else {
            return;
        };
        if let Some(conn) = window.rebase() {
            self.metrics.connections_failed += 1;
            self.outputs.push_back(Output::Close {
                slot,
                conn,
                graceful: false,
            });
        }
        if let Some(failed) = window.fail_all(reason) {
            self.outputs.push_back(Output::Failed(failed));
        }
    }
}
