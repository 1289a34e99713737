//! One slot's ack window: logical offsets, the live connection's row and wire accounting, and
//! the pending batches in offset order.
//!
//! Pending batches form a queue `[placed on the live connection ...][not yet placed ...]`. A
//! batch is *placed* when its wire messages are emitted; its rows then occupy
//! `[start_row, end_row)` of the connection's cumulative row count, which is what the service
//! acks (PROTOCOL.md A.3). An ack of `R` rows confirms, in order, every placed batch with
//! `end_row <= R`. A batch that is only partly covered stays pending; if the connection is lost,
//! [`SlotWindow::rebase`] slices off the durable prefix so only the suffix is ever resent or
//! handed back.

use std::collections::VecDeque;
use std::time::Duration;

use crate::batch::Batch;
use crate::config::WindowLimits;
use crate::error::{Bound, FailureReason, ProtocolError};
use crate::event::{Confirmed, Failed, FailedBatch, Transmit};
use crate::ids::{ConnGen, LogicalOffset, SlotId, WireOffset};
use crate::lane::{Confirmation, Lane, Token};
use crate::metrics::Watermarks;
use crate::time::Time;

struct Pending<L: Lane, B> {
    offset: LogicalOffset,
    /// The rows not yet durable (the submitted batch minus any durable prefix).
    batch: B,
    token: Token<L>,
    /// Rows and bytes as submitted: what the window was charged.
    rows: u64,
    bytes: u64,
    /// Rows of the submitted batch durable on an earlier connection.
    durable_rows: u64,
    submitted_at: Time,
    placed: Option<Placement>,
}

#[derive(Clone, Copy)]
struct Placement {
    start_row: u64,
    end_row: u64,
    sent_at: Time,
}

/// The slot's connection, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conn {
    /// No connection.
    Idle,
    /// Open requested; waiting for READY until `deadline`.
    Opening { conn: ConnGen, since: Time },
    /// READY: batches may be sent.
    Ready {
        conn: ConnGen,
        next_wire: u64,
        rows_sent: u64,
        rows_acked: u64,
    },
}

impl Conn {
    pub(crate) fn generation(self) -> Option<ConnGen> {
        match self {
            Conn::Idle => None,
            Conn::Opening { conn, .. } | Conn::Ready { conn, .. } => Some(conn),
        }
    }
}

/// What a slot's window holds: batches admitted and not yet ended (confirmed or failed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Batches.
    pub batches: u64,
    /// Bytes, as charged at admission.
    pub bytes: u64,
    /// Rows, as submitted.
    pub rows: u64,
}

pub(crate) struct SlotWindow<L: Lane, B> {
    id: SlotId,
    next_offset: u64,
    pending: VecDeque<Pending<L, B>>,
    /// How many batches at the front of `pending` are placed on the live connection.
    placed: usize,
    conn: Conn,
    usage: InFlight,
    marks: Watermarks,
}

/// The outcome of an ack.
pub(crate) enum AckOutcome<L: Lane> {
    /// Nothing new became durable (a repeat of the last ack).
    Nothing,
    /// These batches became durable.
    Confirmed(Confirmed<L>),
    /// The ack broke the protocol; `fatal` ones end the connection.
    Violation { error: ProtocolError, fatal: bool },
}

impl<L: Lane, B: Batch> SlotWindow<L, B> {
    pub(crate) fn new(id: SlotId) -> Self {
        SlotWindow {
            id,
            next_offset: 0,
            pending: VecDeque::new(),
            placed: 0,
            conn: Conn::Idle,
            usage: InFlight::default(),
            marks: Watermarks::default(),
        }
    }

    pub(crate) fn id(&self) -> SlotId {
        self.id
    }

    pub(crate) fn conn(&self) -> Conn {
        self.conn
    }

    pub(crate) fn usage(&self) -> InFlight {
        self.usage
    }

    pub(crate) fn marks(&self) -> Watermarks {
        self.marks
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub(crate) fn has_unplaced(&self) -> bool {
        self.placed < self.pending.len()
    }

    /// Which bound, if any, admitting `rows`/`bytes` more would exceed.
    pub(crate) fn exceeded_bound(
        &self,
        limits: &WindowLimits,
        rows: u64,
        bytes: u64,
    ) -> Option<(Bound, u64)> {
        if self.usage.batches >= u64::from(limits.max_batches) {
            Some((Bound::Batches, u64::from(limits.max_batches)))
        } else if self.usage.bytes.saturating_add(bytes) > limits.max_bytes {
            Some((Bound::Bytes, limits.max_bytes))
        } else if self.usage.rows.saturating_add(rows) > limits.max_rows {
            Some((Bound::Rows, limits.max_rows))
        } else {
            None
        }
    }

    /// Admits a batch the caller checked fits; it is sent once the connection is ready.
    pub(crate) fn admit(
        &mut self,
        now: Time,
        batch: B,
        token: Token<L>,
        rows: u64,
        bytes: u64,
    ) -> LogicalOffset {
        let offset = LogicalOffset(self.next_offset);
        self.next_offset += 1;
        self.pending.push_back(Pending {
            offset,
            batch,
            token,
            rows,
            bytes,
            durable_rows: 0,
            submitted_at: now,
            placed: None,
        });
        self.usage.batches += 1;
        self.usage.bytes += bytes;
        self.usage.rows += rows;
        self.marks.submitted += 1;
        self.marks.rows_submitted += rows;
        offset
    }

    pub(crate) fn begin_open(&mut self, conn: ConnGen, now: Time) {
        debug_assert!(self.conn == Conn::Idle);
        self.conn = Conn::Opening { conn, since: now };
    }

    /// READY for `conn`; false if `conn` is not the one being opened (stale).
    pub(crate) fn on_ready(&mut self, conn: ConnGen) -> bool {
        match self.conn {
            Conn::Opening { conn: live, .. } if live == conn => {
                self.conn = Conn::Ready {
                    conn,
                    next_wire: 0,
                    rows_sent: 0,
                    rows_acked: 0,
                };
                true
            }
            _ => false,
        }
    }

    /// Places every unplaced batch on the live connection, pushing one transmit per wire
    /// message (batches above `max_message_bytes` are split into row slices). Returns how many
    /// messages it produced.
    pub(crate) fn place_all(
        &mut self,
        now: Time,
        max_message_bytes: u64,
        out: &mut impl FnMut(Transmit<B>),
    ) -> u64 {
        let Conn::Ready {
            conn,
            ref mut next_wire,
            ref mut rows_sent,
            ..
        } = self.conn
        else {
            return 0;
        };
        let mut messages = 0;
        while let Some(item) = self.pending.get_mut(self.placed) {
            let rows = item.batch.rows();
            let start_row = *rows_sent;
            *rows_sent += rows;
            item.placed = Some(Placement {
                start_row,
                end_row: *rows_sent,
                sent_at: now,
            });
            let bytes = item.batch.bytes();
            let parts = bytes.div_ceil(max_message_bytes).clamp(1, rows.max(1));
            let per_part = rows.div_ceil(parts).max(1);
            let mut from = 0;
            loop {
                let len = per_part.min(rows - from);
                let batch = if parts == 1 {
                    item.batch.clone()
                } else {
                    item.batch.slice(from, len)
                };
                out(Transmit {
                    slot: self.id,
                    conn,
                    wire_offset: WireOffset(*next_wire),
                    offset: item.offset,
                    batch,
                    rows: len,
                });
                *next_wire += 1;
                messages += 1;
                from += len;
                if from >= rows {
                    break;
                }
            }
            self.placed += 1;
        }
        messages
    }

    /// Applies an ack of `up_to_records` cumulative rows on `conn`. The caller has checked that
    /// `conn` is this slot's live generation.
    pub(crate) fn on_ack(&mut self, now: Time, conn: ConnGen, up_to_records: u64) -> AckOutcome<L> {
        let slot = self.id;
        let Conn::Ready {
            rows_sent,
            ref mut rows_acked,
            ..
        } = self.conn
        else {
            return AckOutcome::Violation {
                error: ProtocolError::AckBeforeReady { slot, conn },
                fatal: true,
            };
        };
        if up_to_records > rows_sent {
            let error = ProtocolError::ForwardAck {
                slot,
                conn,
                acked: up_to_records,
                sent: rows_sent,
            };
            return AckOutcome::Violation { error, fatal: true };
        }
        if up_to_records < *rows_acked {
            let error = ProtocolError::AckRegressed {
                slot,
                conn,
                acked: up_to_records,
                previous: *rows_acked,
            };
            return AckOutcome::Violation {
                error,
                fatal: false,
            };
        }
        *rows_acked = up_to_records;
        let mut items = Vec::new();
        while let Some(front) = self.pending.front() {
            match front.placed {
                Some(p) if p.end_row <= up_to_records => {}
                _ => break,
            }
            let Some(done) = self.pending.pop_front() else {
                break;
            };
            self.placed -= 1;
            self.release(done.rows, done.bytes);
            self.marks.delivered += 1;
            self.marks.rows_delivered += done.rows;
            items.push(Confirmation::new(
                done.token,
                slot,
                done.offset,
                done.rows,
                done.submitted_at,
                now,
            ));
        }
        if items.is_empty() {
            AckOutcome::Nothing
        } else {
            AckOutcome::Confirmed(Confirmed { slot, conn, items })
        }
    }

    fn release(&mut self, rows: u64, bytes: u64) {
        self.usage.batches -= 1;
        self.usage.rows -= rows;
        self.usage.bytes -= bytes;
    }

    /// When the live connection must have made progress by: READY within `open_timeout`, the
    /// oldest placed batch acked within `ack_timeout` of being sent.
    pub(crate) fn deadline(&self, open_timeout: Duration, ack_timeout: Duration) -> Option<Time> {
        match self.conn {
            Conn::Idle => None,
            Conn::Opening { since, .. } => Some(since + open_timeout),
            Conn::Ready { .. } => self
                .pending
                .front()
                .and_then(|p| p.placed)
                .map(|p| p.sent_at + ack_timeout),
        }
    }

    /// The oldest pending batch's offset, for naming it in a timeout.
    pub(crate) fn oldest(&self) -> Option<LogicalOffset> {
        self.pending.front().map(|p| p.offset)
    }

    /// Forgets the live connection: slices the durable prefix off a partly acked batch and
    /// unplaces everything, so the pending batches can be replayed on a new connection or handed
    /// back. Returns the generation that was live.
    pub(crate) fn rebase(&mut self) -> Option<ConnGen> {
        let gone = self.conn.generation();
        if let Conn::Ready { rows_acked, .. } = self.conn {
            for item in self.pending.iter_mut() {
                let Some(p) = item.placed.take() else { break };
                if p.start_row < rows_acked && rows_acked < p.end_row {
                    let durable = rows_acked - p.start_row;
                    let left = p.end_row - rows_acked;
                    item.batch = item.batch.slice(durable, left);
                    item.durable_rows += durable;
                }
            }
        } else {
            for item in self.pending.iter_mut() {
                item.placed = None;
            }
        }
        self.placed = 0;
        self.conn = Conn::Idle;
        gone
    }

    /// Hands back every pending batch (after [`rebase`](Self::rebase)).
    pub(crate) fn fail_all(&mut self, reason: FailureReason) -> Option<Failed<L, B>> {
        debug_assert_eq!(self.placed, 0);
        if self.pending.is_empty() {
            return None;
        }
        let mut batches = Vec::with_capacity(self.pending.len());
        while let Some(p) = self.pending.pop_front() {
            self.release(p.rows, p.bytes);
            self.marks.failed += 1;
            batches.push(FailedBatch {
                offset: p.offset,
                batch: p.batch,
                token: p.token,
                durable_rows: p.durable_rows,
            });
        }
        Some(Failed {
            slot: self.id,
            reason,
            batches,
        })
    }

    /// Marks the live connection closed after a graceful close with nothing pending.
    pub(crate) fn close_idle(&mut self) -> Option<ConnGen> {
        debug_assert!(self.pending.is_empty());
        let gone = self.conn.generation();
        self.conn = Conn::Idle;
        gone
    }
}
