//! The oracle: an independent model of what the core may and may not do, checked after every
//! step by the simulator, the quickcheck properties and the fuzz target.
//!
//! It watches admissions, every output and every ack the core accepts, and tracks per admitted
//! batch how many of its rows (a prefix) an ack on a live or half-closed connection made
//! durable. From that alone it decides whether each confirmation was earned (invariant 2),
//! whether one ack confirmed every covered batch in order (3), whether anything went to a stale
//! connection (4), whether every batch ends exactly once, with only its non-durable rows handed
//! back (5, 9), whether a slot ever has two connections, the sink more streams than its cap, or
//! a slot reopens sooner than the minimum backoff after a failure (7), and whether the windows
//! stay in their bounds (8).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use zerobus_sink::{
    Batch, ConnGen, Failed, LogicalOffset, Output, Raw, SinkConfig, SinkCore, SlotId, TableId,
    Time, Transmit, Watermarks,
};

use crate::batch::SimBatch;

/// An invariant the core broke, with what the oracle saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The DESIGN.md invariant number.
    pub invariant: u8,
    /// What happened.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant {} violated: {}", self.invariant, self.message)
    }
}

impl std::error::Error for Violation {}

fn violation(invariant: u8, message: impl Into<String>) -> Violation {
    Violation {
        invariant,
        message: message.into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Confirmed,
    Failed,
}

#[derive(Debug)]
struct Record {
    rows: u64,
    table: TableId,
    /// Where the core put it, learnt from its first send.
    placed: Option<(SlotId, LogicalOffset)>,
    /// Rows (a prefix) that an ack on a live connection made durable.
    durable: u64,
    end: Option<End>,
}

#[derive(Debug, Default)]
struct ConnLog {
    /// (batch id, first row of the batch in the message, rows) per wire message, in order.
    messages: Vec<(u64, u64, u64)>,
    rows_sent: u64,
    acked: u64,
}

/// Counts of how batches ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Batches admitted.
    pub admitted: u64,
    /// Batches confirmed.
    pub confirmed: u64,
    /// Batches handed back.
    pub failed: u64,
    /// Acks that confirmed at least one batch.
    pub bursts: u64,
}

/// The invariant checker. See the module docs.
#[derive(Debug)]
pub struct Oracle {
    config: SinkConfig,
    now: Time,
    records: BTreeMap<u64, Record>,
    live: BTreeMap<SlotId, ConnGen>,
    /// Connections half-closed gracefully: late acks on them still count, until the slot opens
    /// again.
    half_closed: BTreeMap<SlotId, ConnGen>,
    conns: BTreeMap<ConnGen, ConnLog>,
    last_confirmed: BTreeMap<SlotId, LogicalOffset>,
    /// When each slot's connection last failed (closed not gracefully).
    failed_at: BTreeMap<SlotId, Time>,
    seen_conns: BTreeSet<ConnGen>,
    marks: Watermarks,
    tally: Tally,
}

impl Oracle {
    /// An oracle for a sink built with `config`.
    #[must_use]
    pub fn new(config: SinkConfig) -> Oracle {
        Oracle {
            config,
            now: Time::ZERO,
            records: BTreeMap::new(),
            live: BTreeMap::new(),
            half_closed: BTreeMap::new(),
            conns: BTreeMap::new(),
            last_confirmed: BTreeMap::new(),
            failed_at: BTreeMap::new(),
            seen_conns: BTreeSet::new(),
            marks: Watermarks::default(),
            tally: Tally::default(),
        }
    }

    /// How batches have ended so far.
    #[must_use]
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// The time of the outputs that follow.
    pub fn set_now(&mut self, now: Time) {
        self.now = now;
    }

    /// Batch `id` of `rows` rows was admitted for `table`.
    pub fn admitted(&mut self, id: u64, rows: u64, table: TableId) -> Result<(), Violation> {
        let record = Record {
            rows,
            table,
            placed: None,
            durable: 0,
            end: None,
        };
        if self.records.insert(id, record).is_some() {
            return Err(violation(5, format!("batch {id} admitted twice")));
        }
        self.tally.admitted += 1;
        Ok(())
    }

    fn counts_acks(&self, slot: SlotId, conn: ConnGen) -> bool {
        self.live.get(&slot) == Some(&conn) || self.half_closed.get(&slot) == Some(&conn)
    }

    /// The core accepted an ack of `up_to` cumulative rows on `slot`/`conn` without error.
    pub fn acked(&mut self, slot: SlotId, conn: ConnGen, up_to: u64) {
        if !self.counts_acks(slot, conn) {
            return; // stale: the core must ignore it, so it makes nothing durable for the oracle
        }
        let Some(log) = self.conns.get_mut(&conn) else {
            return;
        };
        if up_to <= log.acked || up_to > log.rows_sent {
            return;
        }
        log.acked = up_to;
        let mut row = 0;
        for &(id, first, rows) in &log.messages {
            if row >= up_to {
                break;
            }
            let covered = rows.min(up_to - row);
            if let Some(r) = self.records.get_mut(&id) {
                r.durable = r.durable.max(first + covered);
            }
            row += rows;
        }
    }

    /// Checks one output and, for confirmations, consumes it; returns the ids of the batches it
    /// ended (confirmed or handed back).
    pub fn output(&mut self, output: Output<Raw, SimBatch>) -> Result<Vec<u64>, Violation> {
        match output {
            Output::Open { slot, conn, .. } => self.open(slot, conn)?,
            Output::Send(t) => self.send(&t)?,
            Output::Close {
                slot,
                conn,
                graceful,
            } => {
                // A half-closed connection may still be dropped (e.g. at the close deadline).
                let aborts_half_closed = !graceful && self.half_closed.get(&slot) == Some(&conn);
                if self.live.get(&slot) != Some(&conn) && !aborts_half_closed {
                    return Err(violation(
                        4,
                        format!("{slot} closed {conn}, which is not its live connection"),
                    ));
                }
                self.live.remove(&slot);
                if aborts_half_closed {
                    self.half_closed.remove(&slot);
                }
                if graceful {
                    self.half_closed.insert(slot, conn);
                } else {
                    self.failed_at.insert(slot, self.now);
                }
            }
            Output::Confirmed(burst) => {
                let slot = burst.slot();
                if !self.counts_acks(slot, burst.conn()) {
                    return Err(violation(
                        4,
                        format!("{slot} confirmed on stale {}", burst.conn()),
                    ));
                }
                self.tally.bursts += 1;
                let mut ids = Vec::with_capacity(burst.len());
                for c in burst {
                    let offset = c.offset();
                    let id = u64::try_from(c.commit().offset).unwrap_or(u64::MAX);
                    self.confirm(slot, offset, id)?;
                    ids.push(id);
                }
                return Ok(ids);
            }
            Output::Failed(failed) => return self.failed(&failed),
            Output::InvalidateCredentials { .. } | Output::Timeout(_) => {}
            _ => return Err(violation(10, "an output kind the oracle does not know")),
        }
        Ok(Vec::new())
    }

    fn open(&mut self, slot: SlotId, conn: ConnGen) -> Result<(), Violation> {
        if let Some(old) = self.live.insert(slot, conn) {
            return Err(violation(
                7,
                format!("{slot} opened {conn} while {old} was live"),
            ));
        }
        if !self.seen_conns.insert(conn) {
            return Err(violation(4, format!("{conn} opened twice")));
        }
        let open = self.live.len();
        if open > usize::from(self.config.max_open_streams) {
            return Err(violation(
                7,
                format!("{open} streams open, cap {}", self.config.max_open_streams),
            ));
        }
        let r = &self.config.retry;
        let min_backoff = r.initial_backoff.mul_f64(1.0 - r.jitter);
        if let Some(&failed) = self.failed_at.get(&slot)
            && self.now < failed + min_backoff
        {
            return Err(violation(
                7,
                format!(
                    "{slot} reopened {:?} after a failure, before the minimum backoff {min_backoff:?}",
                    self.now - failed
                ),
            ));
        }
        self.half_closed.remove(&slot);
        self.conns.insert(conn, ConnLog::default());
        Ok(())
    }

    fn send(&mut self, t: &Transmit<SimBatch>) -> Result<(), Violation> {
        if self.live.get(&t.slot) != Some(&t.conn) {
            return Err(violation(
                4,
                format!("send on {} {}, not the live connection", t.slot, t.conn),
            ));
        }
        let record = self
            .records
            .get_mut(&t.batch.id)
            .ok_or_else(|| violation(5, "send of an unknown batch"))?;
        if record.end.is_some() {
            return Err(violation(
                5,
                format!("send of batch {} which already ended", t.batch.id),
            ));
        }
        match record.placed {
            None => record.placed = Some((t.slot, t.offset)),
            Some(placed) if placed != (t.slot, t.offset) => {
                return Err(violation(
                    5,
                    format!(
                        "batch {} sent as {} {}, first as {placed:?}",
                        t.batch.id, t.slot, t.offset
                    ),
                ));
            }
            Some(_) => {}
        }
        if t.batch.start < record.durable {
            return Err(violation(
                9,
                format!(
                    "batch {} resent from row {} though {} rows are durable",
                    t.batch.id, t.batch.start, record.durable
                ),
            ));
        }
        if t.rows != t.batch.rows() || t.rows == 0 {
            return Err(violation(
                5,
                format!("send of {} rows labelled {}", t.batch.rows(), t.rows),
            ));
        }
        let log = self.conns.entry(t.conn).or_default();
        if t.wire_offset.get() != log.messages.len() as u64 {
            return Err(violation(
                4,
                format!(
                    "{} sent {} after {} messages",
                    t.conn,
                    t.wire_offset,
                    log.messages.len()
                ),
            ));
        }
        log.messages.push((t.batch.id, t.batch.start, t.rows));
        log.rows_sent += t.rows;
        Ok(())
    }

    fn confirm(&mut self, slot: SlotId, offset: LogicalOffset, id: u64) -> Result<(), Violation> {
        let r = self
            .records
            .get_mut(&id)
            .ok_or_else(|| violation(2, format!("confirmed unknown batch {id}")))?;
        if r.end.is_some() {
            return Err(violation(
                9,
                format!(
                    "batch {id} ({slot} {offset}) confirmed after it ended ({:?})",
                    r.end
                ),
            ));
        }
        if r.durable < r.rows {
            return Err(violation(
                2,
                format!(
                    "batch {id} confirmed with {} of {} rows durable",
                    r.durable, r.rows
                ),
            ));
        }
        if r.placed != Some((slot, offset)) {
            return Err(violation(
                2,
                format!(
                    "batch {id} confirmed as {slot} {offset}, sent as {:?}",
                    r.placed
                ),
            ));
        }
        if let Some(last) = self.last_confirmed.insert(slot, offset)
            && offset <= last
        {
            return Err(violation(
                3,
                format!("{slot} confirmed {offset} after {last}"),
            ));
        }
        r.end = Some(End::Confirmed);
        self.tally.confirmed += 1;
        Ok(())
    }

    fn failed(&mut self, failed: &Failed<Raw, SimBatch>) -> Result<Vec<u64>, Violation> {
        let mut ids = Vec::with_capacity(failed.batches.len());
        for b in &failed.batches {
            let id = u64::try_from(b.token.position().offset).unwrap_or(u64::MAX);
            let r = self
                .records
                .get_mut(&id)
                .ok_or_else(|| violation(5, format!("handed back unknown batch {id}")))?;
            if r.end.is_some() {
                return Err(violation(
                    5,
                    format!("batch {id} handed back after it ended ({:?})", r.end),
                ));
            }
            if r.table != failed.table {
                return Err(violation(
                    5,
                    format!("batch {id} of {} handed back as {}", r.table, failed.table),
                ));
            }
            if b.batch.id != id
                || b.batch.start != b.durable_rows
                || b.batch.start + b.batch.rows != r.rows
            {
                return Err(violation(
                    5,
                    format!(
                        "batch {id} handed back as rows {}+{} of {}",
                        b.batch.start, b.batch.rows, r.rows
                    ),
                ));
            }
            if b.durable_rows > r.durable {
                return Err(violation(
                    5,
                    format!(
                        "batch {id} handed back claiming {} durable rows, only {} were",
                        b.durable_rows, r.durable
                    ),
                ));
            }
            r.end = Some(End::Failed);
            self.tally.failed += 1;
            ids.push(id);
        }
        Ok(ids)
    }

    /// Checks the sink's state after a full drain.
    pub fn check(&mut self, sink: &SinkCore<Raw, SimBatch>) -> Result<(), Violation> {
        let m = sink.watermarks();
        let before = self.marks;
        if m.submitted < before.submitted
            || m.delivered < before.delivered
            || m.rows_delivered < before.rows_delivered
        {
            return Err(violation(
                2,
                format!("watermarks went backwards: {before:?} -> {m:?}"),
            ));
        }
        if m.delivered > m.submitted || m.rows_delivered > m.rows_submitted {
            return Err(violation(2, format!("delivered above submitted: {m:?}")));
        }
        if m.submitted != self.tally.admitted
            || m.delivered != self.tally.confirmed
            || m.failed != self.tally.failed
        {
            return Err(violation(
                5,
                format!(
                    "sink counts {m:?} disagree with the oracle's {:?}",
                    self.tally
                ),
            ));
        }
        self.marks = m;
        if sink.open_streams() > usize::from(self.config.max_open_streams) {
            return Err(violation(
                7,
                format!(
                    "{} streams held, cap {}",
                    sink.open_streams(),
                    self.config.max_open_streams
                ),
            ));
        }
        let limits = self.config.window;
        for slot in sink.slot_ids() {
            let held = sink.in_flight(slot).unwrap_or_default();
            if held.batches > u64::from(limits.max_batches)
                || held.bytes > limits.max_bytes
                || held.rows > limits.max_rows
            {
                return Err(violation(
                    8,
                    format!("{slot} holds {held:?}, limits {limits:?}"),
                ));
            }
        }
        for table in sink.table_ids() {
            let n = sink.table_slots(table).count() as u64;
            let q = sink.queued(table).unwrap_or_default();
            if q.batches > u64::from(limits.max_batches) * n
                || q.bytes > limits.max_bytes * n
                || q.rows > limits.max_rows * n
            {
                return Err(violation(
                    8,
                    format!("{table} queues {q:?} beyond {n} x {limits:?}"),
                ));
            }
        }
        if let Some((id, r)) = self
            .records
            .iter()
            .find(|(_, r)| r.end.is_none() && r.durable >= r.rows)
        {
            return Err(violation(
                3,
                format!("batch {id} ({:?}) is durable but not confirmed", r.placed),
            ));
        }
        Ok(())
    }

    /// Checks that every admitted batch has ended, once the sink is closed.
    pub fn finish(&self, sink: &SinkCore<Raw, SimBatch>) -> Result<Tally, Violation> {
        if !sink.is_closed() {
            return Err(violation(5, "sink did not close by its deadline"));
        }
        if let Some((id, r)) = self.records.iter().find(|(_, r)| r.end.is_none()) {
            return Err(violation(
                5,
                format!("batch {id} ({} {:?}) never ended", r.table, r.placed),
            ));
        }
        Ok(self.tally)
    }
}
