//! The oracle: an independent model of what the core may and may not do, checked after every
//! step by the simulator, the quickcheck properties and the fuzz target.
//!
//! It watches admissions, refusals, every output and every ack the driver feeds the core, and
//! keeps its own books: per admitted batch how many of its rows (a prefix) an ack on a live or
//! half-closed connection made durable, where the batch sits (table queue or slot), and when
//! anything last ended. From those books alone, never from the core's counters, it decides:
//!
//! | invariant | check |
//! |---|---|
//! | 1 | every refused submit met a bound, computed from the oracle's own window books |
//! | 2 | a confirmation only after a durable ack covered every row; watermarks only grow |
//! | 3 | confirmations in offset order per slot; nothing durable stays unconfirmed after a drain |
//! | 4 | sends, closes and confirmations only on the live (or half-closed) connection; wire offsets from 0, one per message; every connection opened once |
//! | 5 | every admitted batch ends exactly once, handed back with exactly its non-durable rows |
//! | 7 | one live connection per slot; streams held within the cap; no reopen sooner than the minimum backoff after a failure; opens per slot per minute within the bound the config implies |
//! | 8 | windows within their bounds: a slot's batches within `WindowLimits`, a table's queue within its slots times them, the whole sink within twice the sum |
//! | 9 | nothing confirmed after it ended; durable rows never resent |
//! | 11 | liveness: no `Timeout(None)` while work is pending; once the driver says faults have stopped, some batch ends within the configured bound of the last one (or of the stop) while work is pending; no \`Timeout\` later than a live connection's ack deadline (its oldest unacked message's send time, plus \`ack_timeout\` and the drain budget; connections asked to rotate aside), so that acks without progress (a repeated offset) cannot hold off recovery |
//! | 12 | provisioned before sent: a stream of a table provisioned through a catalog is opened only for a schema the driver reported reconciled, and every batch sent on a stream has the schema the stream was opened with (read from the batch itself); a refusal for a refused schema only; a schema is retired only while no batch of it is pending, and a stream opens for it again only once it is reconciled again |
//! | 13 | a drain reaches a fixed point: once `poll_output` has answered `Timeout(at)`, a second call at the same `now` answers `Timeout(at)` again and changes nothing the sink shows (its count of full passes, a cost, aside); and no table waits, beyond that instant, with work, no streams and room under the cap for its pool and the pools of the tables in line before it ([`Oracle::longest_wait_with_room`]) |
//!
//! Each check can be switched on alone ([`Checks`]), so that a property or a test that breaks
//! one thing on purpose sees that check, and not another, fire.

mod books;
mod liveness;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

use zerobus_sink::{
    Batch, ConnId, Failed, InFlight, LogicalOffset, Metrics, Output, Raw, RejectReason, SinkConfig,
    SinkCore, SlotId, TableId, Time, Transmit, Watermarks,
};

use crate::batch::SimBatch;

pub use books::Books;
pub use liveness::Liveness;

/// An invariant the core broke, with what the oracle saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The DESIGN.md invariant number (11: liveness).
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

pub(crate) fn violation(invariant: u8, message: impl Into<String>) -> Violation {
    Violation {
        invariant,
        message: message.into(),
    }
}

/// Which invariants the oracle checks (by DESIGN.md number; 11 is liveness).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checks(u16);

impl Checks {
    /// Every check.
    pub const ALL: Checks = Checks(u16::MAX);

    /// Only the checks of `invariant`.
    #[must_use]
    pub const fn only(invariant: u8) -> Checks {
        Checks(1 << (invariant as u16 % 16))
    }

    /// Whether `invariant` is checked.
    #[must_use]
    pub const fn has(self, invariant: u8) -> bool {
        self.0 & (1 << (invariant as u16 % 16)) != 0
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
    /// Where the core put it, learnt from its first send (or from the key, for keyed tables).
    placed: Option<(SlotId, LogicalOffset)>,
    /// Rows (a prefix) that an ack on a live connection made durable.
    durable: u64,
    end: Option<End>,
}

#[derive(Debug, Default)]
struct ConnLog {
    /// (batch id, first row of the batch in the message, rows) per wire message, in order.
    messages: Vec<(u64, u64, u64)>,
    /// When each message was sent.
    sent_at: Vec<Time>,
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
    checks: Checks,
    now: Time,
    records: BTreeMap<u64, Record>,
    live: BTreeMap<SlotId, ConnId<Raw>>,
    /// Connections half-closed gracefully: late acks on them still count, until the core cuts
    /// them (a `Close` with `graceful: false`).
    half_closed: BTreeMap<SlotId, ConnId<Raw>>,
    conns: BTreeMap<ConnId<Raw>, ConnLog>,
    last_confirmed: BTreeMap<SlotId, LogicalOffset>,
    /// When each slot's connection last failed (closed not gracefully while live).
    failed_at: BTreeMap<SlotId, Time>,
    /// Open times per slot in the last minute, and rotations the service asked for.
    opens: BTreeMap<SlotId, VecDeque<Time>>,
    rotations: BTreeMap<SlotId, VecDeque<Time>>,
    seen_conns: BTreeSet<ConnId<Raw>>,
    failed_tables: BTreeSet<TableId>,
    closing: bool,
    marks: Watermarks,
    tally: Tally,
    books: Books,
    liveness: Liveness,
    /// Invariant 12: tables provisioned through a catalog, the schemas the driver reported
    /// reconciled or refused for each, and the schema each connection was opened with.
    provisioned: BTreeSet<TableId>,
    schemas_ok: BTreeSet<(TableId, u32)>,
    schemas_refused: BTreeSet<(TableId, u32)>,
    /// The schema of each batch of a provisioned table, by batch id (while it is pending).
    batch_schemas: BTreeMap<u64, (TableId, u32)>,
    conn_schema: BTreeMap<ConnId<Raw>, u32>,
    /// Invariant 11: connections the service asked to rotate (they drain for its grace), and
    /// when a drain first saw a connection's oldest unacked message (by index) past its ack
    /// timeout.
    rotating: BTreeSet<ConnId<Raw>>,
    overdue: BTreeMap<(ConnId<Raw>, usize), Time>,
    /// Invariant 13: the answer of the last `Timeout` the driver saw, while nothing else came
    /// after it; each table's pool; since when each table has waited for streams with room
    /// for it under the cap; the longest such wait.
    last_timeout: Option<Option<Time>>,
    pools: BTreeMap<TableId, u64>,
    room_since: BTreeMap<TableId, Time>,
    longest_wait_with_room: Duration,
}

/// What a sink shows through its getters, to tell whether a call changed it (invariant 13).
#[derive(Debug, PartialEq)]
struct Observed {
    slots: Vec<(Option<Watermarks>, Option<InFlight>)>,
    tables: Vec<(Option<Watermarks>, Option<InFlight>, bool, usize)>,
    open: usize,
    closed: bool,
    metrics: Metrics,
}

impl Observed {
    fn of(sink: &SinkCore<Raw, SimBatch>) -> Observed {
        Observed {
            slots: sink
                .slot_ids()
                .map(|s| (sink.slot_watermarks(s), sink.in_flight(s)))
                .collect(),
            tables: sink
                .table_ids()
                .map(|t| {
                    (
                        sink.table_watermarks(t),
                        sink.queued(t),
                        sink.table_failed(t),
                        sink.table_streams(t),
                    )
                })
                .collect(),
            open: sink.open_streams(),
            closed: sink.is_closed(),
            // The count of full passes is a cost, not state: a second call may make one.
            metrics: Metrics {
                full_passes: 0,
                ..sink.metrics().clone()
            },
        }
    }
}

impl Oracle {
    /// An oracle for a sink built with `config`, checking everything.
    #[must_use]
    pub fn new(config: SinkConfig) -> Oracle {
        Oracle::with_checks(config, Checks::ALL)
    }

    /// An oracle that checks only `checks`.
    #[must_use]
    pub fn with_checks(config: SinkConfig, checks: Checks) -> Oracle {
        Oracle {
            config,
            checks,
            now: Time::ZERO,
            records: BTreeMap::new(),
            live: BTreeMap::new(),
            half_closed: BTreeMap::new(),
            conns: BTreeMap::new(),
            last_confirmed: BTreeMap::new(),
            failed_at: BTreeMap::new(),
            opens: BTreeMap::new(),
            rotations: BTreeMap::new(),
            seen_conns: BTreeSet::new(),
            failed_tables: BTreeSet::new(),
            closing: false,
            marks: Watermarks::default(),
            tally: Tally::default(),
            books: Books::new(config.window),
            liveness: Liveness::default(),
            provisioned: BTreeSet::new(),
            schemas_ok: BTreeSet::new(),
            schemas_refused: BTreeSet::new(),
            batch_schemas: BTreeMap::new(),
            conn_schema: BTreeMap::new(),
            rotating: BTreeSet::new(),
            overdue: BTreeMap::new(),
            last_timeout: None,
            pools: BTreeMap::new(),
            room_since: BTreeMap::new(),
            longest_wait_with_room: Duration::ZERO,
        }
    }

    /// `table` is provisioned through a catalog: a stream of it may only be opened for a
    /// schema the driver reported reconciled (invariant 12).
    pub fn provisioned(&mut self, table: TableId) {
        self.provisioned.insert(table);
        self.books.provisioned(table);
    }

    /// The driver answered a reconcile of `table` to `schema`: `ok`, or refused.
    pub fn reconciled(&mut self, table: TableId, schema: u32, ok: bool) {
        if ok {
            self.schemas_ok.insert((table, schema));
        } else {
            self.schemas_refused.insert((table, schema));
        }
    }

    /// Batch `id`, admitted for the provisioned `table`, has `schema`.
    pub fn schema_of(&mut self, id: u64, table: TableId, schema: u32) {
        self.batch_schemas.insert(id, (table, schema));
    }

    /// The core retired `schema` of `table` ([`SinkCore::retire_schema`] applied): no batch of
    /// it may be pending (a replay would reopen with it), and from now on no stream of the
    /// table may open with it until the driver reports it reconciled again (invariant 12).
    pub fn retired(&mut self, table: TableId, schema: u32) -> Result<(), Violation> {
        let records = &self.records;
        self.batch_schemas
            .retain(|id, _| records.get(id).is_some_and(|r| r.end.is_none()));
        let pending = self
            .batch_schemas
            .iter()
            .find(|(_, s)| **s == (table, schema))
            .map(|(id, _)| *id);
        self.ensure(12, pending.is_none(), || {
            format!("schema #{schema} of {table} retired while batch {pending:?} of it is pending")
        })?;
        self.schemas_ok.remove(&(table, schema));
        self.schemas_refused.remove(&(table, schema));
        Ok(())
    }

    /// The longest time a table waited for streams (no streams, work to carry, its schema
    /// reconciled if it is provisioned) while the cap had room for its pool and for the pools
    /// of every table ahead of it in line, measured from the end of one drain to the
    /// end of a later one (invariant 13). 0 when each drain hands freed streams out at once.
    #[must_use]
    pub fn longest_wait_with_room(&self) -> Duration {
        self.longest_wait_with_room
    }

    /// How batches have ended so far.
    #[must_use]
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// The oracle's own window books.
    #[must_use]
    pub fn books(&self) -> &Books {
        &self.books
    }

    /// `table` has `slots` slots (the bound of its queue, and its share of the sink's).
    pub fn register_table(&mut self, table: TableId, slots: u64) {
        self.books.register(table, slots);
        self.pools.insert(table, slots);
    }

    /// The time of the outputs that follow.
    pub fn set_now(&mut self, now: Time) {
        self.now = now;
    }

    /// The driver asked the sink to close: refusals as `Closed` are now expected.
    pub fn closing(&mut self) {
        self.closing = true;
    }

    /// The service stops injecting faults from now on: the liveness bound applies (see
    /// [`Liveness`]). `bound` is how long pending work may go without any batch ending.
    pub fn faults_stopped(&mut self, bound: Duration) {
        self.liveness.faults_stopped(self.now, bound);
    }

    /// The service asked `slot`'s stream to rotate: the reopen that follows is not counted
    /// against the slot's open budget.
    pub fn rotation_requested(&mut self, slot: SlotId) {
        self.rotations.entry(slot).or_default().push_back(self.now);
        if let Some(&conn) = self.live.get(&slot) {
            self.rotating.insert(conn);
        }
    }

    /// Batch `id` of `rows` rows and `bytes` bytes was admitted for `table`; `slot` is the slot
    /// its key routes it to, for keyed tables (`None`: it waits in the table's queue).
    pub fn admitted(
        &mut self,
        id: u64,
        rows: u64,
        bytes: u64,
        table: TableId,
        slot: Option<SlotId>,
    ) -> Result<(), Violation> {
        let record = Record {
            rows,
            table,
            placed: None,
            durable: 0,
            end: None,
        };
        if self.records.insert(id, record).is_some() {
            return self.fail(5, format!("batch {id} admitted twice"));
        }
        self.books.admit(id, rows, bytes, table, slot);
        self.liveness.admitted(self.now, self.pending());
        self.tally.admitted += 1;
        Ok(())
    }

    /// A submit of `rows`/`bytes` for `table` (keyed to `slot`, for keyed tables) was refused
    /// with `reason`: checks that the refusal was justified by the oracle's own books. (A table
    /// that failed while it held no batch handed nothing back; for it the oracle takes the
    /// sink's public [`SinkCore::table_failed`], which a refusal must then agree with.)
    #[allow(clippy::too_many_arguments)]
    pub fn refused(
        &self,
        sink: &SinkCore<Raw, SimBatch>,
        rows: u64,
        bytes: u64,
        table: TableId,
        slot: Option<SlotId>,
        slots_of_table: u64,
        reason: &RejectReason,
    ) -> Result<(), Violation> {
        let justified = match reason {
            RejectReason::Empty => rows == 0,
            RejectReason::Closed => self.closing,
            RejectReason::TableFailed { .. } => {
                self.failed_tables.contains(&table) || sink.table_failed(table)
            }
            RejectReason::Full { .. } => self.books.full(table, slot, slots_of_table, rows, bytes),
            RejectReason::SchemaRefused { schema, .. } => {
                self.schemas_refused.contains(&(table, schema.0))
            }
            _ => false,
        };
        if justified {
            Ok(())
        } else {
            self.fail(
                1,
                format!(
                    "submit of {rows} rows ({bytes} bytes) to {table} refused ({reason}) though \
                     the oracle's books say it fits: {:?}",
                    self.books.describe(table, slot)
                ),
            )
        }
    }

    fn fail<T>(&self, invariant: u8, message: impl Into<String>) -> Result<T, Violation> {
        Err(violation(invariant, message))
    }

    /// `Err` if `invariant` is checked and `bad`.
    fn ensure(
        &self,
        invariant: u8,
        ok: bool,
        message: impl FnOnce() -> String,
    ) -> Result<(), Violation> {
        if !ok && self.checks.has(invariant) {
            return Err(violation(invariant, message()));
        }
        Ok(())
    }

    fn counts_acks(&self, conn: ConnId<Raw>) -> bool {
        let slot = conn.slot();
        self.live.get(&slot) == Some(&conn) || self.half_closed.get(&slot) == Some(&conn)
    }

    /// The core accepted an ack of `up_to` cumulative rows on `conn` (the driver fed it).
    pub fn acked(&mut self, conn: ConnId<Raw>, up_to: u64) {
        if !self.counts_acks(conn) {
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

    fn pending(&self) -> u64 {
        self.tally.admitted - self.tally.confirmed - self.tally.failed
    }

    /// The earliest time by which a live connection with unacked messages must have been given
    /// up on: its oldest unacked message's send time plus `ack_timeout`, or the first drain
    /// that saw that time pass if the driver woke later (a jump of time), plus the drain
    /// budget. Connections the service asked to rotate drain for their grace instead, and are
    /// left out.
    fn ack_deadline(&mut self) -> Option<(ConnId<Raw>, Time)> {
        let (timeout, drain, now) = (
            self.config.ack_timeout,
            self.config.retry.drain_budget,
            self.now,
        );
        let mut earliest: Option<(ConnId<Raw>, Time)> = None;
        for conn in self.live.values() {
            if self.rotating.contains(conn) {
                continue;
            }
            let Some(log) = self.conns.get(conn) else {
                continue;
            };
            let mut end = 0;
            let oldest =
                log.messages
                    .iter()
                    .zip(&log.sent_at)
                    .enumerate()
                    .find_map(|(i, (m, at))| {
                        end += m.2;
                        (end > log.acked).then_some((i, *at))
                    });
            let Some((index, sent)) = oldest else {
                continue;
            };
            let base = sent + timeout;
            let noticed = if now >= base {
                *self.overdue.entry((*conn, index)).or_insert(now)
            } else {
                base
            };
            let due = base.max(noticed) + drain;
            if earliest.is_none_or(|(_, e)| due < e) {
                earliest = Some((*conn, due));
            }
        }
        earliest
    }

    /// Checks one output and, for confirmations, consumes it; returns the ids of the batches it
    /// ended (confirmed or handed back).
    pub fn output(&mut self, output: Output<Raw, SimBatch>) -> Result<Vec<u64>, Violation> {
        self.last_timeout = match output {
            Output::Timeout(at) => Some(at),
            _ => None,
        };
        match output {
            Output::Open {
                table,
                conn,
                schema,
            } => {
                self.conn_schema.insert(conn, schema.0);
                let allowed = !self.provisioned.contains(&table)
                    || self.schemas_ok.contains(&(table, schema.0));
                self.ensure(12, allowed, || {
                    format!("{conn} of {table} opened for {schema}, which is not reconciled (or retired)")
                })?;
                self.open(conn)?;
            }
            Output::Send(t) => self.send(&t)?,
            Output::Close { conn, graceful } => self.close(conn, graceful)?,
            Output::Confirmed(burst) => {
                let slot = burst.slot();
                let conn = burst.conn();
                self.ensure(4, self.counts_acks(conn), || {
                    format!("{slot} confirmed on stale {conn}")
                })?;
                self.tally.bursts += 1;
                let mut ids = Vec::with_capacity(burst.len());
                for c in burst {
                    let offset = c.offset();
                    let id = u64::try_from(c.commit().offset).unwrap_or(u64::MAX);
                    self.confirm(slot, offset, id)?;
                    ids.push(id);
                }
                self.ended(&ids);
                return Ok(ids);
            }
            Output::Failed(failed) => {
                let ids = self.failed(&failed)?;
                self.ended(&ids);
                return Ok(ids);
            }
            Output::Timeout(None) => {
                let pending = self.pending();
                self.ensure(11, pending == 0, || {
                    format!("Timeout(None) with {pending} batches pending: the driver would sleep for ever")
                })?;
            }
            Output::Timeout(Some(at)) => {
                let now = self.now;
                self.ensure(11, at > now, || {
                    format!("Timeout({at}) is not in the future (now {now})")
                })?;
                if let Some((conn, due)) = self.ack_deadline() {
                    self.ensure(11, at <= due, || {
                        format!(
                            "Timeout({at}) sleeps past {conn}'s ack deadline {due}: its oldest \
                             unacked message waits unrecovered"
                        )
                    })?;
                }
            }
            Output::InvalidateCredentials { .. } => {}
            Output::Reconcile { table, schema } => {
                let provisioned = self.provisioned.contains(&table);
                self.ensure(12, provisioned, || {
                    format!("a reconcile of {table} ({schema}), which is taken as it is")
                })?;
            }
            _ => return self.fail(10, "an output kind the oracle does not know"),
        }
        Ok(Vec::new())
    }

    fn ended(&mut self, ids: &[u64]) {
        for &id in ids {
            self.books.end(id);
        }
        if !ids.is_empty() {
            self.liveness.progress(self.now);
        }
    }

    fn open(&mut self, conn: ConnId<Raw>) -> Result<(), Violation> {
        let slot = conn.slot();
        let old = self.live.insert(slot, conn);
        self.ensure(7, old.is_none(), || {
            format!("{slot} opened {conn} while {old:?} was live")
        })?;
        let fresh = self.seen_conns.insert(conn);
        self.ensure(4, fresh, || format!("{conn} opened twice"))?;
        let held = self.live.len() + self.half_closed.len();
        let cap = usize::from(self.config.max_open_streams);
        self.ensure(7, held <= cap, || {
            format!("{held} streams held (live or half-closed), cap {cap}")
        })?;
        let r = &self.config.retry;
        let min_backoff = r.initial_backoff.mul_f64(1.0 - r.jitter);
        let now = self.now;
        if let Some(&failed) = self.failed_at.get(&slot) {
            self.ensure(7, now >= failed + min_backoff, || {
                format!(
                    "{slot} reopened {:?} after a failure, before the minimum backoff {min_backoff:?}",
                    now - failed
                )
            })?;
        }
        self.ensure(7, !self.half_closed.contains_key(&slot), || {
            format!("{slot} opened {conn} while its half-closed call was not cut")
        })?;
        self.opens_within_budget(slot, min_backoff)?;
        self.conns.insert(conn, ConnLog::default());
        Ok(())
    }

    /// Opens of one slot in any minute: at most one per minimum backoff (failures), one per
    /// `min_residency` (evictions), one per rotation the service asked for, plus one.
    fn opens_within_budget(
        &mut self,
        slot: SlotId,
        min_backoff: Duration,
    ) -> Result<(), Violation> {
        let minute = Duration::from_secs(60);
        let now = self.now;
        let since = |t: &Time| now.saturating_since(*t) < minute;
        let opens = self.opens.entry(slot).or_default();
        opens.push_back(now);
        while opens.front().is_some_and(|t| !since(t)) {
            opens.pop_front();
        }
        let count = opens.len() as u64;
        let rotations = self.rotations.entry(slot).or_default();
        while rotations.front().is_some_and(|t| !since(t)) {
            rotations.pop_front();
        }
        let per = |d: Duration| (minute.as_secs_f64() / d.as_secs_f64().max(1e-3)).ceil() as u64;
        let budget = per(min_backoff) + per(self.config.min_residency) + rotations.len() as u64 + 1;
        self.ensure(7, count <= budget, || {
            format!("{slot} opened {count} times in a minute, over the budget of {budget}")
        })
    }

    fn close(&mut self, conn: ConnId<Raw>, graceful: bool) -> Result<(), Violation> {
        let slot = conn.slot();
        let live = self.live.get(&slot) == Some(&conn);
        let half_closed = self.half_closed.get(&slot) == Some(&conn);
        self.ensure(4, live || (half_closed && !graceful), || {
            format!(
                "{slot} closed {conn} (graceful: {graceful}), which is neither live nor half-closed"
            )
        })?;
        if live {
            self.live.remove(&slot);
            if graceful {
                self.half_closed.insert(slot, conn);
            } else {
                self.failed_at.insert(slot, self.now);
            }
        } else {
            self.half_closed.remove(&slot);
        }
        Ok(())
    }

    fn send(&mut self, t: &Transmit<Raw, SimBatch>) -> Result<(), Violation> {
        let slot = t.slot();
        let live = self.live.get(&slot) == Some(&t.conn);
        self.ensure(4, live, || {
            format!("send on {}, not the live connection", t.conn)
        })?;
        let opened_for = self.conn_schema.get(&t.conn).copied();
        self.ensure(12, opened_for == Some(t.batch.schema), || {
            format!(
                "batch {} of schema #{} sent on {}, opened for schema #{opened_for:?}",
                t.batch.id, t.batch.schema, t.conn
            )
        })?;
        let Some(record) = self.records.get_mut(&t.batch.id) else {
            return self.fail(5, format!("send of unknown batch {}", t.batch.id));
        };
        if record.end.is_some() {
            return self.fail(
                5,
                format!("send of batch {} which already ended", t.batch.id),
            );
        }
        let first_send = record.placed.is_none();
        let placed = *record.placed.get_or_insert((slot, t.offset));
        let durable = record.durable;
        if placed != (slot, t.offset) {
            return self.fail(
                5,
                format!(
                    "batch {} sent as {slot} {}, first as {placed:?}",
                    t.batch.id, t.offset
                ),
            );
        }
        self.ensure(9, t.batch.start >= durable, || {
            format!(
                "batch {} resent from row {} though {durable} rows are durable",
                t.batch.id, t.batch.start
            )
        })?;
        if t.rows != t.batch.rows() || t.rows == 0 {
            return self.fail(
                5,
                format!("send of {} rows labelled {}", t.batch.rows(), t.rows),
            );
        }
        if first_send {
            self.books.place(t.batch.id, slot);
        }
        let log = self.conns.entry(t.conn).or_default();
        let expected = log.messages.len() as u64;
        log.messages.push((t.batch.id, t.batch.start, t.rows));
        log.sent_at.push(self.now);
        log.rows_sent += t.rows;
        let wire = t.wire_offset.get();
        self.ensure(4, wire == expected, || {
            format!(
                "{} sent wire offset {wire} after {expected} messages",
                t.conn
            )
        })
    }

    fn confirm(&mut self, slot: SlotId, offset: LogicalOffset, id: u64) -> Result<(), Violation> {
        let Some(r) = self.records.get_mut(&id) else {
            return self.fail(2, format!("confirmed unknown batch {id}"));
        };
        let (end, durable, rows, placed) = (r.end, r.durable, r.rows, r.placed);
        r.end = Some(End::Confirmed);
        self.ensure(9, end.is_none(), || {
            format!("batch {id} ({slot} {offset}) confirmed after it ended ({end:?})")
        })?;
        self.ensure(2, durable >= rows, || {
            format!("batch {id} confirmed with {durable} of {rows} rows durable")
        })?;
        self.ensure(2, placed == Some((slot, offset)), || {
            format!("batch {id} confirmed as {slot} {offset}, sent as {placed:?}")
        })?;
        let last = self.last_confirmed.insert(slot, offset);
        self.ensure(3, last.is_none_or(|l| offset > l), || {
            format!("{slot} confirmed {offset} after {last:?}")
        })?;
        self.tally.confirmed += 1;
        Ok(())
    }

    fn failed(&mut self, failed: &Failed<Raw, SimBatch>) -> Result<Vec<u64>, Violation> {
        if matches!(
            failed.reason,
            zerobus_sink::FailureReason::TableFailed { .. }
        ) {
            self.failed_tables.insert(failed.table);
        }
        let mut ids = Vec::with_capacity(failed.batches.len());
        for b in &failed.batches {
            let id = u64::try_from(b.token.position().offset).unwrap_or(u64::MAX);
            let Some(r) = self.records.get_mut(&id) else {
                return self.fail(5, format!("handed back unknown batch {id}"));
            };
            let (end, table, rows, durable) = (r.end, r.table, r.rows, r.durable);
            r.end = Some(End::Failed);
            self.ensure(5, end.is_none(), || {
                format!("batch {id} handed back after it ended ({end:?})")
            })?;
            self.ensure(5, table == failed.table, || {
                format!("batch {id} of {table} handed back as {}", failed.table)
            })?;
            let exact = b.batch.id == id
                && b.batch.start == b.durable_rows
                && b.batch.start + b.batch.rows == rows;
            self.ensure(5, exact, || {
                format!(
                    "batch {id} handed back as rows {}+{} of {rows}",
                    b.batch.start, b.batch.rows
                )
            })?;
            self.ensure(5, b.durable_rows <= durable, || {
                format!(
                    "batch {id} handed back claiming {} durable rows, only {durable} were",
                    b.durable_rows
                )
            })?;
            self.tally.failed += 1;
            ids.push(id);
        }
        Ok(ids)
    }

    /// Checks the sink's state after a full drain. With invariant 13 checked, it calls
    /// `poll_output` once more at the same instant, which must answer the drain's `Timeout`
    /// again and change nothing (so it takes the sink mutably).
    pub fn check(&mut self, sink: &mut SinkCore<Raw, SimBatch>) -> Result<(), Violation> {
        if self.checks.has(13) {
            self.check_fixed_point(sink)?;
            self.measure_waits(sink);
        }
        let m = sink.watermarks();
        let before = self.marks;
        self.ensure(
            2,
            m.submitted >= before.submitted
                && m.delivered >= before.delivered
                && m.rows_delivered >= before.rows_delivered,
            || format!("watermarks went backwards: {before:?} -> {m:?}"),
        )?;
        self.ensure(
            2,
            m.delivered <= m.submitted && m.rows_delivered <= m.rows_submitted,
            || format!("delivered above submitted: {m:?}"),
        )?;
        let tally = self.tally;
        self.ensure(
            5,
            m.submitted == tally.admitted
                && m.delivered == tally.confirmed
                && m.failed == tally.failed,
            || format!("sink counts {m:?} disagree with the oracle's {tally:?}"),
        )?;
        self.marks = m;
        if self.checks.has(8) {
            self.books.check()?;
        }
        if self.checks.has(3)
            && let Some((id, r)) = self
                .records
                .iter()
                .find(|(_, r)| r.end.is_none() && r.durable >= r.rows)
        {
            return self.fail(
                3,
                format!("batch {id} ({:?}) is durable but not confirmed", r.placed),
            );
        }
        if self.checks.has(11) {
            self.liveness.check(self.now, self.pending())?;
        }
        Ok(())
    }

    /// Invariant 13: after the drain's `Timeout(at)`, a second `poll_output` at the same
    /// instant answers `Timeout(at)` and changes nothing the sink shows.
    fn check_fixed_point(&mut self, sink: &mut SinkCore<Raw, SimBatch>) -> Result<(), Violation> {
        let Some(first) = self.last_timeout else {
            return Ok(()); // the driver did not drain to a Timeout: nothing to compare with
        };
        let before = Observed::of(sink);
        let now = self.now;
        match sink.poll_output(now) {
            Output::Timeout(at) if at == first => {}
            other => {
                return self.fail(
                    13,
                    format!(
                        "after Timeout({first:?}) at {now}, a second poll_output at the same \
                         instant returned {other:?}: work was ready when the drain ended"
                    ),
                );
            }
        }
        let after = Observed::of(sink);
        self.ensure(13, before == after, || {
            format!(
                "a second poll_output at {now} after Timeout({first:?}) changed the sink:\n\
                 before {before:?}\nafter  {after:?}"
            )
        })
    }

    /// Invariant 13's statistic: how long tables wait for streams with room for them. The
    /// order of the line is the core's (first come, first served, by
    /// [`SinkCore::table_place_in_line`]); whether the cap has room, whether a table has work
    /// and holds no stream, are the oracle's own reading of the sink.
    fn measure_waits(&mut self, sink: &SinkCore<Raw, SimBatch>) {
        let now = self.now;
        let mut line: Vec<(u64, TableId)> = sink
            .table_ids()
            .filter_map(|t| Some((sink.table_place_in_line(t)?, t)))
            .collect();
        line.sort_unstable();
        let cap = u64::from(self.config.max_open_streams);
        let free = cap.saturating_sub(sink.open_streams() as u64);
        let mut need = 0;
        let mut with_room = BTreeSet::new();
        for (_, table) in line {
            need += self.pools.get(&table).copied().unwrap_or(1);
            let held: u64 = sink
                .table_slots(table)
                .filter_map(|s| sink.in_flight(s))
                .map(|f| f.batches)
                .sum();
            let work = sink.queued(table).map_or(0, |q| q.batches) + held > 0;
            let schema = !self.provisioned.contains(&table)
                || self
                    .schemas_ok
                    .range((table, 0)..=(table, u32::MAX))
                    .next()
                    .is_some();
            let cold = sink.table_streams(table) == 0 && !sink.table_failed(table);
            if need <= free && work && schema && cold {
                with_room.insert(table);
            }
        }
        // A wait ends (or goes on) now: count it up to now either way.
        for &since in self.room_since.values() {
            self.longest_wait_with_room = self.longest_wait_with_room.max(now - since);
        }
        self.room_since.retain(|t, _| with_room.contains(t));
        for table in with_room {
            self.room_since.entry(table).or_insert(now);
        }
    }

    /// Checks that every admitted batch has ended, once the sink is closed.
    pub fn finish(&self, sink: &SinkCore<Raw, SimBatch>) -> Result<Tally, Violation> {
        if !sink.is_closed() {
            return self.fail(5, "sink did not close by its deadline");
        }
        if let Some((id, r)) = self.records.iter().find(|(_, r)| r.end.is_none()) {
            return self.fail(
                5,
                format!("batch {id} ({} {:?}) never ended", r.table, r.placed),
            );
        }
        Ok(self.tally)
    }
}
