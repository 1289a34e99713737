//! One slot's ack window: logical offsets, the connection's phase with its row and wire
//! accounting, and the slot's batches in offset order.
//!
//! Pending batches form a queue `[placed on the live connection ...][not yet placed ...]`. A
//! batch is *placed* when its wire messages are emitted; its rows then occupy
//! `[start_row, end_row)` of the connection's cumulative row count, which is what the service
//! acks (PROTOCOL.md A.3). An ack of `R` rows confirms, in order, every placed batch with
//! `end_row <= R`. A batch only partly covered stays pending; when the connection goes,
//! [`SlotWindow::rebase`] slices off the durable prefix and unplaces everything, so the next
//! connection replays exactly the unacked suffix, in logical order.

use std::collections::VecDeque;
use std::time::Duration;

use crate::batch::Batch;
use crate::config::WindowLimits;
use crate::conn::ConnId;
use crate::error::{Bound, FailureReason, ProtocolError};
use crate::event::Ignored;
use crate::event::{Confirmed, Failed, FailedBatch, Items, Output, Transmit};
use crate::ids::{ConnGen, LogicalOffset, SchemaId, SlotId, TableId, WireOffset};
use crate::lane::{Confirmation, Lane, Token};
use crate::metrics::Watermarks;
use crate::time::{Time, earliest};

/// Capacity a queue keeps whatever its past peak: above what a steady state uses, so that
/// giving back a peak never makes the steady state reallocate.
const KEEP: usize = 64;

/// Gives back at once most of the capacity a large backlog left in `queue` once it has drained
/// below an eighth of it (amortized: a shrink copies at most an eighth of the capacity, after
/// seven eighths were popped). Queues that never pass `4 * KEEP` are left to [`Peak`] (and
/// where no time is at hand, as a failure empties a queue, kept).
pub(crate) fn release_peak<T>(queue: &mut VecDeque<T>) {
    if queue.capacity() > 4 * KEEP && queue.len() * 8 < queue.capacity() {
        queue.shrink_to((queue.len() * 2).max(KEEP));
    }
}

/// How long a queue's high-water mark is watched before the capacity above it is given back.
const PEAK_PERIOD_MICROS: u64 = 10_000_000;

/// The least capacity [`Peak`] leaves a queue.
const PEAK_FLOOR: usize = 16;

/// A queue's recent high-water mark, sampled where the queue drains (its length just before,
/// which is its local maximum: pushes only add between two drains), so that the capacity a
/// backlog's peak left (a reconnect's replay, an outage) is given back within two periods
/// (10-20 s of the sink's time) after the backlog ends.
///
/// A `VecDeque` keeps its high-water mark for the sink's life: before this the soak's live
/// heap rose at each `kill -9` with the rows pending then, and stayed (issue 50; a rule by
/// fractions of the capacity alone still kept up to 256 entries in every slot and table,
/// +6 MiB over the hour's 100 slots). In a steady state the capacity stays below twice the
/// period's high (a `VecDeque` doubles), and a shrink needs it above four times: a steady
/// state never shrinks, so it never grows again either.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Peak {
    high: usize,
    since: Time,
}

impl Peak {
    /// Notes `len_before` (the queue's length before this drain) and, once a period has passed
    /// since the last look, gives back what is above twice the period's high.
    #[inline]
    pub(crate) fn release<T>(&mut self, queue: &mut VecDeque<T>, len_before: usize, now: Time) {
        self.high = self.high.max(len_before);
        if now < self.since.plus_micros(PEAK_PERIOD_MICROS) {
            return;
        }
        let keep = self.high.saturating_mul(2).max(PEAK_FLOOR);
        if queue.capacity() > keep.saturating_mul(2) {
            queue.shrink_to(keep);
        }
        self.high = queue.len();
        self.since = now;
    }
}

/// A batch admitted for a table and not yet given to a slot.
pub(crate) struct Queued<L: Lane, B> {
    pub(crate) batch: B,
    pub(crate) token: Token<L>,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
    pub(crate) submitted_at: Time,
    pub(crate) schema: SchemaId,
}

struct Pending<L: Lane, B> {
    offset: LogicalOffset,
    schema: SchemaId,
    /// The rows not yet durable (the submitted batch minus any durable prefix).
    batch: B,
    token: Token<L>,
    /// Rows and bytes as submitted: what the window was charged.
    rows: u64,
    bytes: u64,
    /// Rows of the submitted batch made durable on earlier connections.
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

/// A READY connection's accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Live {
    pub(crate) conn: ConnGen,
    pub(crate) next_wire: u64,
    pub(crate) rows_sent: u64,
    pub(crate) rows_acked: u64,
    /// Its pace, for a flush's deal ([`SlotWindow::left`]): the time and cumulative rows of
    /// the first ack since it last had nothing in flight, and the time of the last ack.
    pub(crate) paced_from: Option<(Time, u64)>,
    pub(crate) acked_at: Time,
}

/// Why a live connection is draining (no sends; acks still applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drain {
    /// The stream stopped acking (ack timeout): close at `until` or once everything is acked.
    AckTimeout,
    /// The server asked to rotate: wait for acks, half-close, read late acks, reopen.
    Rotation { half_closed: bool },
}

/// The slot's connection phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No connection (never opened, or closed for shutdown or eviction).
    Idle,
    /// Open requested; waiting for READY.
    Opening { conn: ConnGen, since: Time },
    /// READY: batches may be sent.
    Ready(Live),
    /// Sends stopped; acks still applied until `until`.
    Draining { live: Live, until: Time, why: Drain },
    /// Waiting before reopening.
    Backoff { until: Time },
    /// The table failed; the slot never opens again.
    Failed,
}

impl Phase {
    pub(crate) fn conn(self) -> Option<ConnGen> {
        match self {
            Phase::Opening { conn, .. } => Some(conn),
            Phase::Ready(live) | Phase::Draining { live, .. } => Some(live.conn),
            Phase::Idle | Phase::Backoff { .. } | Phase::Failed => None,
        }
    }

    /// Whether the slot holds (or is about to hold) a stream, for the global cap.
    pub(crate) fn holds_stream(self) -> bool {
        !matches!(self, Phase::Idle | Phase::Failed)
    }
}

/// What a slot's window holds: batches assigned to it and not yet ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Batches.
    pub batches: u64,
    /// Bytes, as charged at admission.
    pub bytes: u64,
    /// Rows, as submitted.
    pub rows: u64,
}

impl InFlight {
    #[inline]
    pub(crate) fn add(&mut self, rows: u64, bytes: u64) {
        self.batches += 1;
        self.rows += rows;
        self.bytes += bytes;
    }

    #[inline]
    pub(crate) fn remove(&mut self, rows: u64, bytes: u64) {
        self.batches -= 1;
        self.rows -= rows;
        self.bytes -= bytes;
    }

    /// Which bound, if any, one more batch of `rows`/`bytes` would exceed, with `scale` times
    /// the per-slot limits. An empty window takes any one batch, even one larger than the
    /// limits alone (it then holds that batch and nothing else): a batch is never refused for
    /// its size, and the wire splits it into messages (PROTOCOL.md A.2).
    #[inline]
    pub(crate) fn exceeded(
        &self,
        limits: &WindowLimits,
        scale: u64,
        rows: u64,
        bytes: u64,
    ) -> Option<(Bound, u64)> {
        if self.batches == 0 {
            return None;
        }
        let max_batches = u64::from(limits.max_batches).saturating_mul(scale);
        let max_bytes = limits.max_bytes.saturating_mul(scale);
        let max_rows = limits.max_rows.saturating_mul(scale);
        if self.batches >= max_batches {
            Some((Bound::Batches, max_batches))
        } else if self.bytes.saturating_add(bytes) > max_bytes {
            Some((Bound::Bytes, max_bytes))
        } else if self.rows.saturating_add(rows) > max_rows {
            Some((Bound::Rows, max_rows))
        } else {
            None
        }
    }
}

/// A slot's two timeouts in microseconds, converted from the config's `Duration`s once rather
/// than on every deadline (the steady state asks for one per batch).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// READY within this of opening.
    open_us: u64,
    /// The oldest placed batch acked within this of being sent.
    ack_us: u64,
}

impl Timeouts {
    pub(crate) fn new(open: Duration, ack: Duration) -> Timeouts {
        Timeouts {
            open_us: Time::from_duration(open).as_micros(),
            ack_us: Time::from_duration(ack).as_micros(),
        }
    }
}

pub(crate) struct SlotWindow<L: Lane, B> {
    /// The sink's identity, minted into every [`ConnId`] of the slot.
    sink: u32,
    id: SlotId,
    table: TableId,
    next_offset: u64,
    pending: VecDeque<Pending<L, B>>,
    /// `pending`'s recent high-water mark: a replay's peak is given back once it is over.
    pending_peak: Peak,
    /// How many batches at the front of `pending` are placed on the live connection.
    placed: usize,
    pub(crate) phase: Phase,
    usage: InFlight,
    marks: Watermarks,
    /// Consecutive failures since the last progress (an ack that advanced).
    pub(crate) failures: u32,
    /// The most recent failure, named when the retry budget is spent.
    pub(crate) last_failure: Option<FailureReason>,
    /// The earliest time the slot may open again after a failure. Kept when the slot rests
    /// (its table evicted), so that re-warming the table cannot skip a backoff.
    pub(crate) retry_at: Time,
    /// A connection half-closed at shutdown or eviction whose call has not ended yet, and when
    /// the core cuts it if it still has not. The slot does not open again before it is gone.
    pub(crate) closing: Option<(ConnGen, Time)>,
    /// The table's credential epoch when the live (or last) connection was opened.
    pub(crate) opened_epoch: u64,
    /// The schema the live (or last) connection was opened with: only batches of it are sent.
    pub(crate) conn_schema: SchemaId,
}

/// The outcome of an ack.
pub(crate) enum AckOutcome {
    /// Nothing new became durable.
    Nothing(Ignored),
    /// The durable count advanced; this many batches (possibly none) became durable, and
    /// their burst was pushed to the output queue.
    Progress(usize),
    /// The ack claims more than was sent: terminal for the connection's batches.
    Violation(ProtocolError),
}

impl<L: Lane, B: Batch> SlotWindow<L, B> {
    pub(crate) fn new(sink: u32, id: SlotId, table: TableId) -> Self {
        SlotWindow {
            sink,
            id,
            table,
            next_offset: 0,
            pending: VecDeque::new(),
            pending_peak: Peak::default(),
            placed: 0,
            phase: Phase::Idle,
            usage: InFlight::default(),
            marks: Watermarks::default(),
            failures: 0,
            last_failure: None,
            retry_at: Time::ZERO,
            closing: None,
            opened_epoch: 0,
            conn_schema: SchemaId(0),
        }
    }

    /// The id of this slot's connection of generation `generation`.
    pub(crate) fn conn_id(&self, generation: ConnGen) -> ConnId<L> {
        ConnId::new(self.sink, self.id, generation)
    }

    pub(crate) fn id(&self) -> SlotId {
        self.id
    }

    pub(crate) fn table(&self) -> TableId {
        self.table
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

    /// Whether batches are on the wire and not yet durable.
    pub(crate) fn has_placed(&self) -> bool {
        self.placed > 0
    }

    /// What a READY stream has left to make durable at `now`, and its pace, for a flush's deal:
    /// `(rows, rows per second)`. The pace is the rows acked between the first and the last ack
    /// since the stream last had nothing in flight (from the first ack, so the time to
    /// durability does not count as slowness); the rows left are those pending less what that
    /// pace has made durable since the last ack (acks come in steps, and a stream whose ack is
    /// due has less left than its pending rows say). `None` until two acks give a pace, or
    /// when not READY.
    pub(crate) fn left(&self, now: Time) -> Option<(u64, u64)> {
        let Phase::Ready(live) = self.phase else {
            return None;
        };
        let (from, from_rows) = live.paced_from?;
        let paced = live.acked_at.saturating_since(from).as_micros();
        let rows = live.rows_acked.saturating_sub(from_rows);
        if rows == 0 || paced == 0 {
            return None;
        }
        let per_sec = u128::from(rows) * 1_000_000 / paced;
        let since = now.saturating_since(live.acked_at).as_micros();
        let done = per_sec.saturating_mul(since) / 1_000_000;
        let pending = self.usage.rows;
        let left = pending.saturating_sub(u64::try_from(done).unwrap_or(u64::MAX));
        Some((left, u64::try_from(per_sec).unwrap_or(u64::MAX).max(1)))
    }

    pub(crate) fn is_ready(&self) -> bool {
        matches!(self.phase, Phase::Ready(_))
    }

    /// Gives the slot a batch; it is sent once the connection is ready.
    #[inline]
    pub(crate) fn assign(&mut self, q: Queued<L, B>) -> LogicalOffset {
        let offset = LogicalOffset(self.next_offset);
        self.next_offset += 1;
        self.usage.add(q.rows, q.bytes);
        self.marks.submitted += 1;
        self.marks.rows_submitted += q.rows;
        self.pending.push_back(Pending {
            offset,
            schema: q.schema,
            batch: q.batch,
            token: q.token,
            rows: q.rows,
            bytes: q.bytes,
            durable_rows: 0,
            submitted_at: q.submitted_at,
            placed: None,
        });
        offset
    }

    /// READY for `conn` at `now`: false if `conn` is not the one being opened.
    pub(crate) fn on_ready(&mut self, now: Time, conn: ConnGen) -> bool {
        match self.phase {
            Phase::Opening { conn: opening, .. } if opening == conn => {
                self.phase = Phase::Ready(Live {
                    conn,
                    next_wire: 0,
                    rows_sent: 0,
                    rows_acked: 0,
                    paced_from: None,
                    acked_at: now,
                });
                true
            }
            _ => false,
        }
    }

    /// The schema of the first batch not yet placed, if any.
    pub(crate) fn next_unplaced_schema(&self) -> Option<SchemaId> {
        self.pending.get(self.placed).map(|p| p.schema)
    }

    /// Whether a pending batch (sent or not) has `schema`.
    pub(crate) fn holds_schema(&self, schema: SchemaId) -> bool {
        self.pending.iter().any(|p| p.schema == schema)
    }

    /// The schema of the oldest pending batch, if any.
    pub(crate) fn first_schema(&self) -> Option<SchemaId> {
        self.pending.front().map(|p| p.schema)
    }

    /// Places every unplaced batch of the connection's schema on the READY connection, in
    /// order, stopping at the first of another schema (which needs a stream of its own); one
    /// transmit per wire message (batches above `max_message_bytes` become several row
    /// slices). Returns the message count.
    pub(crate) fn place_all(
        &mut self,
        table: TableId,
        now: Time,
        max_message_bytes: u64,
        out: &mut impl FnMut(Transmit<L, B>),
    ) -> u64 {
        let Phase::Ready(ref mut live) = self.phase else {
            return 0;
        };
        if live.rows_sent == live.rows_acked && self.placed < self.pending.len() {
            // Nothing in flight: a new run of sends, whose pace the next acks tell.
            live.paced_from = None;
        }
        let mut messages = 0;
        while let Some(item) = self.pending.get_mut(self.placed) {
            if item.schema != self.conn_schema {
                break;
            }
            // A batch not yet sliced by a rebase is the one admitted, whose counts are known:
            // asking it again can be dear (an Arrow batch sums its buffers for `bytes`).
            let (rows, bytes) = if item.durable_rows == 0 {
                (item.rows, item.bytes)
            } else {
                (item.batch.rows(), item.batch.bytes())
            };
            let start_row = live.rows_sent;
            live.rows_sent += rows;
            item.placed = Some(Placement {
                start_row,
                end_row: live.rows_sent,
                sent_at: now,
            });
            let (parts, per_part) = if bytes <= max_message_bytes {
                (1, rows.max(1))
            } else {
                let parts = bytes
                    .div_ceil(max_message_bytes.max(1))
                    .clamp(1, rows.max(1));
                (parts, rows.div_ceil(parts).max(1))
            };
            let mut from = 0;
            loop {
                let len = per_part.min(rows - from);
                let batch = if parts == 1 {
                    item.batch.clone()
                } else {
                    item.batch.slice(from, len)
                };
                out(Transmit {
                    table,
                    conn: ConnId::new(self.sink, self.id, live.conn),
                    wire_offset: WireOffset(live.next_wire),
                    offset: item.offset,
                    batch,
                    rows: len,
                });
                live.next_wire += 1;
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

    /// Applies an ack of `up_to_records` cumulative rows on the live connection `conn`.
    /// The confirmed batches' burst is pushed straight onto `out` (built in place: a burst is
    /// moved once, not passed up through the callers).
    #[inline]
    pub(crate) fn on_ack(
        &mut self,
        now: Time,
        conn: ConnGen,
        up_to_records: u64,
        out: &mut VecDeque<Output<L, B>>,
    ) -> AckOutcome {
        let slot = self.id;
        let live = match self.phase {
            Phase::Ready(ref mut live) | Phase::Draining { ref mut live, .. } => live,
            _ => return AckOutcome::Nothing(Ignored::Stale),
        };
        if up_to_records > live.rows_sent {
            let error = ProtocolError::ForwardAck {
                slot,
                conn,
                acked: up_to_records,
                sent: live.rows_sent,
            };
            return AckOutcome::Violation(error);
        }
        if up_to_records < live.rows_acked {
            return AckOutcome::Nothing(Ignored::AckRegressed {
                acked: up_to_records,
                previous: live.rows_acked,
            });
        }
        if up_to_records == live.rows_acked {
            return AckOutcome::Nothing(Ignored::NoProgress);
        }
        live.rows_acked = up_to_records;
        live.acked_at = now;
        live.paced_from.get_or_insert((now, up_to_records));
        let count = self
            .pending
            .iter()
            .take_while(|p| p.placed.is_some_and(|p| p.end_row <= up_to_records))
            .count();
        let mut confirm = |done: Pending<L, B>| {
            self.usage.remove(done.rows, done.bytes);
            self.marks.delivered += 1;
            self.marks.rows_delivered += done.rows;
            Confirmation::new(
                done.token,
                slot,
                done.offset,
                done.rows,
                done.submitted_at,
                now,
            )
        };
        let before = self.pending.len();
        let items = if count > 1 {
            Items::Many(self.pending.drain(..count).map(&mut confirm).collect())
        } else if count == 1
            && let Some(done) = self.pending.pop_front()
        {
            Items::One(confirm(done))
        } else {
            return AckOutcome::Progress(0);
        };
        self.placed -= count;
        release_peak(&mut self.pending);
        self.pending_peak.release(&mut self.pending, before, now);
        out.push_back(Output::Confirmed(Confirmed {
            table: self.table,
            conn: ConnId::new(self.sink, slot, conn),
            items,
        }));
        AckOutcome::Progress(count)
    }

    /// Room the pending queue keeps (tests: a backlog's peak is given back).
    #[cfg(test)]
    pub(crate) fn pending_capacity(&self) -> usize {
        self.pending.capacity()
    }

    /// Whether every row sent on the live connection is acked.
    pub(crate) fn all_acked(&self) -> bool {
        match self.phase {
            Phase::Ready(live) | Phase::Draining { live, .. } => live.rows_acked == live.rows_sent,
            _ => true,
        }
    }

    /// When the slot must next be looked at: READY within `open_timeout`; the oldest placed
    /// batch acked within `ack_timeout` of being sent; the end of a drain or of a backoff.
    pub(crate) fn deadline(&self, timeouts: Timeouts) -> Option<Time> {
        earliest(
            self.phase_deadline(timeouts),
            self.closing.map(|(_, at)| at),
        )
    }

    fn phase_deadline(&self, timeouts: Timeouts) -> Option<Time> {
        match self.phase {
            Phase::Idle | Phase::Failed => None,
            Phase::Opening { since, .. } => Some(since.plus_micros(timeouts.open_us)),
            Phase::Ready(_) => self
                .pending
                .front()
                .and_then(|p| p.placed)
                .map(|p| p.sent_at.plus_micros(timeouts.ack_us)),
            Phase::Draining { until, .. } | Phase::Backoff { until } => Some(until),
        }
    }

    /// The oldest pending batch's offset, for naming it in a timeout.
    pub(crate) fn oldest(&self) -> Option<LogicalOffset> {
        self.pending.front().map(|p| p.offset)
    }

    /// Forgets the connection: slices the durable prefix off a partly acked batch and unplaces
    /// everything, so the batches can be replayed on a new connection or handed back. The phase
    /// becomes `Idle`. Returns the generation that was open, if any.
    pub(crate) fn rebase(&mut self) -> Option<ConnGen> {
        let gone = self.phase.conn();
        if let Phase::Ready(live) | Phase::Draining { live, .. } = self.phase {
            for item in self.pending.iter_mut() {
                let Some(p) = item.placed.take() else { break };
                if p.start_row < live.rows_acked && live.rows_acked < p.end_row {
                    let durable = live.rows_acked - p.start_row;
                    item.batch = item.batch.slice(durable, p.end_row - live.rows_acked);
                    item.durable_rows += durable;
                }
            }
        }
        self.placed = 0;
        if self.phase != Phase::Failed {
            self.phase = Phase::Idle;
        }
        gone
    }

    /// Hands back every pending batch (call [`rebase`](Self::rebase) first).
    pub(crate) fn fail_all(&mut self, reason: FailureReason) -> Option<Failed<L, B>> {
        if self.pending.is_empty() {
            return None;
        }
        debug_assert_eq!(self.placed, 0, "rebase before handing back");
        let mut batches = Vec::with_capacity(self.pending.len());
        while let Some(p) = self.pending.pop_front() {
            self.usage.remove(p.rows, p.bytes);
            self.marks.failed += 1;
            batches.push(FailedBatch {
                offset: Some(p.offset),
                batch: p.batch,
                token: p.token,
                durable_rows: p.durable_rows,
            });
        }
        self.placed = 0;
        release_peak(&mut self.pending);
        Some(Failed {
            table: self.table,
            slot: Some(self.id),
            reason,
            batches,
        })
    }
}
