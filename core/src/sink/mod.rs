//! [`SinkCore`]: tables, their pools of slot windows, and the one input/output interface.
//!
//! This file holds the public surface; `input.rs` what each input means (the protocol's rules:
//! READY first, acks, rotation requests, the end of a call); `recovery.rs` the transitions that
//! failures, drains and rotations cause; `pump.rs` the work a full pass of `poll_output` does
//! (timers, warming and evicting tables, assigning and placing batches, closing idle streams);
//! `sched.rs` what lets the steady state skip it (dirty slots and tables, a timer heap).

mod deal;
mod input;
#[cfg(test)]
mod peak_tests;
mod pump;
mod recovery;
mod sched;
mod schema;

use std::collections::VecDeque;
use std::fmt;

use crate::backoff::Jitter;
use crate::batch::Batch;
use crate::config::SinkConfig;
use crate::error::{ConfigError, RejectReason, Rejected, StreamError};
use crate::event::{Handled, Input, Output};
use crate::ids::{Route, SlotId, TableId};
use crate::lane::{Lane, Token};
use crate::metrics::{Metrics, Watermarks};
use crate::sizing::SizedPool;
use crate::table::TableSpec;
use crate::time::Time;
use crate::window::{InFlight, Phase, Queued, SlotWindow, Timeouts};

/// Where an admitted batch went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The table.
    pub table: TableId,
    /// Its admission number within the table, from 0.
    pub seq: u64,
}

/// A table's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TableStatus {
    /// No streams: never written, or evicted.
    Cold,
    /// Its pool is open (or opening, or backing off).
    Warm,
    /// Draining to durable and closing, to make room under the global stream cap.
    Evicting,
    /// Failed fatally: admits nothing, opens nothing.
    Failed(StreamError),
}

pub(crate) struct TableState<L: Lane, B> {
    spec: TableSpec,
    pool: SizedPool,
    /// Its slots are `first_slot .. first_slot + pool.slots` of the sink's slot list.
    first_slot: usize,
    status: TableStatus,
    /// Admitted batches not yet given to a slot (order-agnostic tables only).
    queue: VecDeque<Queued<L, B>>,
    /// `queue`'s recent high-water mark: a backlog's peak is given back once it is over.
    queue_peak: crate::window::Peak,
    queued: InFlight,
    /// Round-robin position among the table's slots.
    cursor: usize,
    /// While a flush deals the queue ([`SinkCore::flush`]): each of its slots' pace when the
    /// deal was made, in rows per second (0 for a slot outside the deal), by slot within the
    /// table; empty otherwise.
    deal: Vec<u64>,
    last_used: Time,
    /// When its pool was last opened.
    warm_since: Time,
    /// When the first of its streams became READY since it was last warmed: it keeps its
    /// streams for `min_residency` from here (see [`SinkCore::evictable_at`]).
    ready_since: Option<Time>,
    /// Its place in line since it has had batches but no streams: cold tables warm in this
    /// order (a sequence number, so that two tables that start waiting at the same instant
    /// keep the order in which they did).
    waiting_since: Option<u64>,
    /// The table's credential epoch: raised each time the core asks the driver to drop the
    /// table's cached token. A connection remembers the epoch it opened with.
    cred_epoch: u64,
    /// Whether the current epoch's credentials came from a refresh after a rejection and no
    /// connection has become READY with them yet (a rejection then is final).
    refresh_unproven: bool,
    admitted: u64,
    rows_admitted: u64,
    failed_unassigned: u64,
    /// Its schemas, for tables provisioned through a catalog.
    schemas: schema::Schemas,
}

impl<L: Lane, B> TableState<L, B> {
    fn slots(&self) -> std::ops::Range<usize> {
        self.first_slot..self.first_slot + usize::from(self.pool.slots)
    }
}

/// The sans-IO Zerobus sink: tables, each with a pool of stream slots, each slot with an ack
/// window; one lane `L`; batches of type `B`.
///
/// Methods come in four kinds, as in quinn-proto:
/// - **getters** (`&self`): [`watermarks`](Self::watermarks), [`metrics`](Self::metrics),
///   [`table_watermarks`](Self::table_watermarks), [`is_closed`](Self::is_closed), ...;
/// - **inputs**: [`submit`](Self::submit) (a batch from the pipeline) and
///   [`handle`](Self::handle) (an event from a connection);
/// - **mutators**: [`add_table`](Self::add_table), [`close`](Self::close);
/// - **outputs**: [`poll_output`](Self::poll_output).
///
/// The drain contract: after every input, mutator call, and whenever the time it last returned
/// in [`Output::Timeout`] is reached, call `poll_output` until it returns `Output::Timeout`.
/// Every call takes the current time; the core never reads a clock. A drain ends at a fixed
/// point (invariant 13): once `poll_output` has answered `Timeout(at)`, calling it again at the
/// same `now` answers `Timeout(at)` again and changes no state, so a driver that sleeps until
/// `at` leaves no work waiting.
///
/// A sink cannot be duplicated (two copies would mint the same connection ids and confirm the
/// same tokens twice; no `Clone`):
///
/// ```compile_fail,E0599
/// use zerobus_sink::{Raw, SinkConfig, SinkCore};
/// let sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
/// let copy = sink.clone();
/// ```
pub struct SinkCore<L: Lane, B: Batch> {
    /// This sink's identity, minted into every connection id it hands out.
    id: u32,
    config: SinkConfig,
    /// The config's open and ack timeouts in microseconds, for the slots' deadlines.
    timeouts: Timeouts,
    tables: Vec<TableState<L, B>>,
    slots: Vec<SlotWindow<L, B>>,
    next_conn: u64,
    /// Hands out places in the line of cold tables waiting for streams.
    next_in_line: u64,
    outputs: VecDeque<Output<L, B>>,
    metrics: Metrics,
    jitter: Jitter,
    /// Set by [`close`](Self::close): admission stopped; batches not durable by then fail.
    close_deadline: Option<Time>,
    /// Batches admitted, and batches ended (confirmed or handed back), over every table: the
    /// sink's pending count without a pass over the tables.
    admitted: u64,
    ended: u64,
    /// What `poll_output` must look at: dirty slots and tables, the timer heap (`sched.rs`).
    sched: sched::Sched,
}

impl<L: Lane, B: Batch> fmt::Debug for SinkCore<L, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkCore")
            .field("lane", &L::NAME)
            .field("tables", &self.tables.len())
            .field("slots", &self.slots.len())
            .field("watermarks", &self.watermarks())
            .field("closing", &self.close_deadline)
            .finish()
    }
}

impl<L: Lane, B: Batch> SinkCore<L, B> {
    /// A sink with `config` and no tables yet, or an error naming the first invalid field.
    pub fn new(config: SinkConfig) -> Result<SinkCore<L, B>, ConfigError> {
        config.validate()?;
        Ok(SinkCore {
            id: crate::conn::next_sink(),
            jitter: Jitter::new(config.retry.jitter_seed),
            timeouts: Timeouts::new(config.open_timeout, config.ack_timeout),
            config,
            tables: Vec::new(),
            slots: Vec::new(),
            next_conn: 0,
            next_in_line: 0,
            outputs: VecDeque::new(),
            metrics: Metrics::default(),
            close_deadline: None,
            admitted: 0,
            ended: 0,
            sched: sched::Sched::default(),
        })
    }

    /// Registers a table and sizes its pool. Nothing is opened until its first batch.
    pub fn add_table(&mut self, spec: TableSpec) -> Result<TableId, ConfigError> {
        if spec.name.is_empty() {
            return Err(ConfigError::OutOfRange {
                field: "table.name",
                reason: "must not be empty",
            });
        }
        if spec.keyed && spec.reconciled {
            return Err(ConfigError::KeyedReconciled { table: spec.name });
        }
        let pool = spec.sizing.size();
        if pool.slots > self.config.max_open_streams {
            return Err(ConfigError::PoolAboveCap {
                table: spec.name,
                slots: pool.slots,
                cap: self.config.max_open_streams,
            });
        }
        let id = u16::try_from(self.tables.len())
            .map_err(|_| ConfigError::TooMany { what: "tables" })?;
        let first_slot = self.slots.len();
        if first_slot + usize::from(pool.slots) > usize::from(u16::MAX) {
            return Err(ConfigError::TooMany { what: "slots" });
        }
        let table = TableId(id);
        self.sched.owe_full_pass();
        for i in 0..pool.slots {
            let slot = u16::try_from(first_slot).unwrap_or(u16::MAX) + i;
            self.slots
                .push(SlotWindow::new(self.id, SlotId(slot), table));
        }
        self.tables.push(TableState {
            spec,
            pool,
            first_slot,
            status: TableStatus::Cold,
            queue: VecDeque::new(),
            queue_peak: crate::window::Peak::default(),
            queued: InFlight::default(),
            cursor: 0,
            deal: Vec::new(),
            last_used: Time::ZERO,
            warm_since: Time::ZERO,
            ready_since: None,
            waiting_since: None,
            cred_epoch: 0,
            refresh_unproven: false,
            admitted: 0,
            rows_admitted: 0,
            failed_unassigned: 0,
            schemas: schema::Schemas::default(),
        });
        Ok(table)
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &SinkConfig {
        &self.config
    }

    /// The tables, in order of registration.
    pub fn table_ids(&self) -> impl Iterator<Item = TableId> + '_ {
        (0..self.tables.len()).map(|i| TableId(u16::try_from(i).unwrap_or(u16::MAX)))
    }

    /// A table's full name, as its `x-databricks-zerobus-table-name` header wants it.
    #[must_use]
    pub fn table_name(&self, table: TableId) -> Option<&str> {
        self.tables.get(table.index()).map(|t| t.spec.name.as_str())
    }

    /// A table's derived pool size and the terms it came from (to log at start).
    #[must_use]
    pub fn table_pool(&self, table: TableId) -> Option<SizedPool> {
        self.tables.get(table.index()).map(|t| t.pool)
    }

    /// A table's slots.
    pub fn table_slots(&self, table: TableId) -> impl Iterator<Item = SlotId> + '_ {
        let range = self
            .tables
            .get(table.index())
            .map(TableState::slots)
            .unwrap_or(0..0);
        range.map(|i| SlotId(u16::try_from(i).unwrap_or(u16::MAX)))
    }

    /// Every slot of every table.
    pub fn slot_ids(&self) -> impl Iterator<Item = SlotId> + '_ {
        self.slots.iter().map(SlotWindow::id)
    }

    /// The table a slot belongs to.
    #[must_use]
    pub fn slot_table(&self, slot: SlotId) -> Option<TableId> {
        self.slots.get(slot.index()).map(SlotWindow::table)
    }

    /// Whether the table failed fatally.
    #[must_use]
    pub fn table_failed(&self, table: TableId) -> bool {
        self.table_failure(table).is_some()
    }

    /// Why the table failed fatally (`None` while it has not).
    #[must_use]
    pub fn table_failure(&self, table: TableId) -> Option<&StreamError> {
        match &self.tables.get(table.index())?.status {
            TableStatus::Failed(error) => Some(error),
            _ => None,
        }
    }

    /// Watermarks summed over every table.
    #[must_use]
    pub fn watermarks(&self) -> Watermarks {
        self.table_ids()
            .filter_map(|t| self.table_watermarks(t))
            .fold(Watermarks::default(), Watermarks::plus)
    }

    /// One table's watermarks (`submitted` counts admissions, including batches not yet given
    /// to a slot).
    #[must_use]
    pub fn table_watermarks(&self, table: TableId) -> Option<Watermarks> {
        let t = self.tables.get(table.index())?;
        let slots = self.slots[t.slots()]
            .iter()
            .map(SlotWindow::marks)
            .fold(Watermarks::default(), Watermarks::plus);
        Some(Watermarks {
            submitted: t.admitted,
            rows_submitted: t.rows_admitted,
            failed: slots.failed + t.failed_unassigned,
            ..slots
        })
    }

    /// One slot's watermarks (`submitted` counts batches given to the slot).
    #[must_use]
    pub fn slot_watermarks(&self, slot: SlotId) -> Option<Watermarks> {
        self.slots.get(slot.index()).map(SlotWindow::marks)
    }

    /// What one slot's window holds in flight.
    #[must_use]
    pub fn in_flight(&self, slot: SlotId) -> Option<InFlight> {
        self.slots.get(slot.index()).map(SlotWindow::usage)
    }

    /// What a table holds that is not yet given to a slot.
    #[must_use]
    pub fn queued(&self, table: TableId) -> Option<InFlight> {
        self.tables.get(table.index()).map(|t| t.queued)
    }

    /// Streams open, opening, backing off or half-closed and not yet ended, across every
    /// table (never above `max_open_streams`).
    #[must_use]
    pub fn open_streams(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.phase.holds_stream() || s.closing.is_some())
            .count()
    }

    /// Streams one table holds against the cap: open, opening, backing off, or half-closed
    /// and not yet ended (0 for a cold table, and for a table the sink does not have).
    #[must_use]
    pub fn table_streams(&self, table: TableId) -> usize {
        self.tables.get(table.index()).map_or(0, |t| {
            self.slots[t.slots()]
                .iter()
                .filter(|s| s.phase.holds_stream() || s.closing.is_some())
                .count()
        })
    }

    /// While the table waits for streams (cold, with batches its streams could carry), its
    /// place in the first-come-first-served line of such tables: lower numbers warm first,
    /// and nobody goes ahead of a table whose pool the cap cannot take yet. `None` while it
    /// does not wait. Updated by each full pass of [`poll_output`](Self::poll_output).
    #[must_use]
    pub fn table_place_in_line(&self, table: TableId) -> Option<u64> {
        let t = self.tables.get(table.index())?;
        (t.status == TableStatus::Cold)
            .then_some(t.waiting_since)
            .flatten()
    }

    /// Metrics so far.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether [`close`](Self::close) was called and every batch has ended and every stream is
    /// closed. Once closed, every input is a no-op.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.close_deadline.is_some()
            && self.outputs.is_empty()
            && self.tables.iter().all(|t| t.queue.is_empty())
            && self.slots.iter().all(|s| {
                !s.has_pending()
                    && s.closing.is_none()
                    && matches!(s.phase, Phase::Idle | Phase::Failed)
            })
    }

    /// Admits a batch for a table, fire-and-forget: returns at once; the token comes back in an
    /// [`Output::Confirmed`] once the batch is durable, or in an [`Output::Failed`]. Never waits
    /// for an ack and never opens a stream itself. When the table's windows are full the batch
    /// and token are handed back ([`RejectReason::Full`]): that is the backpressure.
    ///
    /// Route with the [`TableId`] for order-agnostic tables (the batch goes to the next ready
    /// slot, round-robin) or with [`TableId::key`] for keyed ones (one key hash, one slot).
    pub fn submit(
        &mut self,
        now: Time,
        route: impl Into<Route>,
        batch: B,
        token: Token<L>,
    ) -> Result<Admitted, Rejected<L, B>> {
        let route = route.into();
        let (rows, bytes) = (batch.rows(), batch.bytes());
        if let Err(reason) = self.admissible(route, rows, bytes) {
            if matches!(reason, RejectReason::Full { .. }) {
                self.metrics.backpressured += 1;
            }
            return Err(Rejected {
                batch,
                token,
                reason,
            });
        }
        let reconciled = self.tables[route.table.index()].spec.reconciled;
        // A table taken as it is has one schema: whatever the route says.
        let schema = if reconciled {
            route.schema
        } else {
            crate::ids::SchemaId(0)
        };
        if reconciled {
            self.note_schema(route.table, schema);
        }
        let queued = Queued {
            batch,
            token,
            rows,
            bytes,
            submitted_at: now,
            schema,
        };
        let t = &mut self.tables[route.table.index()];
        // The fast path serves a warm table whose streams may carry the batch's schema.
        let fast = self.sched.enabled()
            && t.status == TableStatus::Warm
            && (!reconciled || t.schemas.is_ok(schema));
        let slot = match route.key {
            Some(hash) => {
                let n = u64::from(t.pool.slots.max(1));
                let index = t.first_slot + usize::try_from(hash % n).unwrap_or(0);
                self.slots[index].assign(queued);
                Some(index)
            }
            None if fast => match self.assign_at_once(route.table.index(), queued, now) {
                Ok(()) => None,
                Err(queued) => {
                    let t = &mut self.tables[route.table.index()];
                    t.queued.add(rows, bytes);
                    t.queue.push_back(queued);
                    None
                }
            },
            None => {
                t.queued.add(rows, bytes);
                t.queue.push_back(queued);
                None
            }
        };
        let t = &mut self.tables[route.table.index()];
        let seq = t.admitted;
        t.admitted += 1;
        t.rows_admitted += rows;
        t.last_used = now;
        let waiting = !t.queue.is_empty();
        self.admitted += 1;
        let pending = self.admitted - self.ended;
        debug_assert_eq!(
            pending,
            self.watermarks().pending(),
            "pending count drifted"
        );
        self.metrics.max_pending = self.metrics.max_pending.max(pending);
        self.sched.admitted(route.table, slot, fast, waiting);
        Ok(Admitted {
            table: route.table,
            seq,
        })
    }

    /// Why a batch of `rows`/`bytes` cannot be admitted on `route`, if it cannot.
    fn admissible(&self, route: Route, rows: u64, bytes: u64) -> Result<(), RejectReason> {
        let table = route.table;
        if self.close_deadline.is_some() {
            return Err(RejectReason::Closed);
        }
        if rows == 0 {
            return Err(RejectReason::Empty);
        }
        let t = self
            .tables
            .get(table.index())
            .ok_or(RejectReason::UnknownTable { table })?;
        if let TableStatus::Failed(error) = &t.status {
            return Err(RejectReason::TableFailed {
                table,
                reason: error.to_string(),
            });
        }
        if t.spec.reconciled
            && let Some(refused) = self.schema_refusal(table, route.schema)
        {
            return Err(refused);
        }
        if t.spec.keyed != route.key.is_some() {
            let expectation = if t.spec.keyed {
                "routes every batch by an ordering key: submit with TableId::key(hash)"
            } else {
                "has no ordering key: submit with the TableId alone"
            };
            return Err(RejectReason::Routing { table, expectation });
        }
        let limits = self.config.window;
        let held = match route.key {
            Some(hash) => {
                let index = t.first_slot
                    + usize::try_from(hash % u64::from(t.pool.slots.max(1))).unwrap_or(0);
                self.slots[index].usage().exceeded(&limits, 1, rows, bytes)
            }
            None => t
                .queued
                .exceeded(&limits, u64::from(t.pool.slots), rows, bytes),
        };
        match held {
            Some((bound, limit)) => Err(RejectReason::Full { bound, limit }),
            None => Ok(()),
        }
    }

    /// Feeds an event from a connection. The core applies the protocol's rules to it (READY
    /// first, cumulative acks, rotation requests, the end of a call; see [`Input`]) and says
    /// what it did. Inputs naming a connection that is not the slot's live one (closed, or of
    /// another sink) are ignored (invariant 4). Nothing it returns needs an answer: drain
    /// [`poll_output`](Self::poll_output) next, and log a [`Handled::Violation`].
    pub fn handle(&mut self, now: Time, input: Input<L>) -> Handled {
        if let Some((slot, generation, records)) = self.as_steady_ack(&input) {
            return self.steady_ack(now, slot, generation, records);
        }
        self.handle_any(now, input)
    }

    /// [`handle`](Self::handle) for every input but the steady state's ack.
    #[inline(never)]
    fn handle_any(&mut self, now: Time, input: Input<L>) -> Handled {
        let conn = input.conn();
        let ours = conn.sink == self.id;
        let was_ready = ours
            && matches!(input, Input::Result { .. })
            && self.ready_conn(conn.slot()) == Some(conn.generation());
        let handled = self.on_input(now, input);
        if handled != Handled::Ignored(crate::event::Ignored::Stale) {
            self.after_input(conn.slot(), was_ready, conn.generation());
        }
        handled
    }

    /// Says the caller now waits at `now` for everything admitted so far to be durable (a
    /// flush). Each order-agnostic table's queued batches (and those queued after, until the
    /// queue is given out) are then dealt over its READY streams: each goes to the stream whose
    /// last row would be due first with it, by what each has left and its pace, so that the
    /// streams finish together; otherwise the last batches go to whichever stream frees room
    /// first, and the flush waits for the one that took the most (up to an ack's rows more than
    /// the others). A batch waits for that stream's room only while the stream has batches in
    /// flight (their acks bring it); when it has none, or no stream in the deal is READY, or
    /// the queue is given out, placement is first come first served again. Optional: nothing
    /// is lost or late without it.
    pub fn flush(&mut self, now: Time) {
        for table in 0..self.tables.len() {
            self.deal(table, now);
        }
        self.sched.owe_full_pass();
    }

    /// Stops admission and drains: every slot closes gracefully once its table's batches are
    /// durable; batches still pending at `deadline` are handed back as failed, each naming its
    /// table. Idempotent; a later call cannot extend the first deadline.
    pub fn close(&mut self, now: Time, deadline: Time) {
        self.close_deadline.get_or_insert(deadline.max(now));
        self.sched.owe_full_pass();
    }

    /// The next effect to perform. See the drain contract on [`SinkCore`]. Expired timers fire
    /// before anything else is decided, so `Output::Timeout(Some(at))` is always in the future.
    #[inline]
    pub fn poll_output(&mut self, now: Time) -> Output<L, B> {
        // The two answers most calls get, small enough to inline into the caller's drain loop:
        // what is queued, or nothing to do until a deadline (half of a steady state's calls).
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        if let Some(at) = self.idle_until(now) {
            crate::window::release_peak(&mut self.outputs);
            return Output::Timeout(at);
        }
        self.poll_work(now)
    }

    /// [`poll_output`](Self::poll_output) when there may be work: the fast path, or a full
    /// pass.
    #[inline(never)]
    fn poll_work(&mut self, now: Time) -> Output<L, B> {
        if let Some(out) = self.fast_output(now) {
            return out;
        }
        // A full pass. Each round fires what is due and pumps to a fixed point; a round that leaves a
        // deadline at or before `now` (a timer armed by the pump itself, e.g. an immediate
        // reopen after a rotation) runs again. Every round changes a slot's phase, so a few
        // rounds suffice; the bound only guards against a bug turning into a busy loop.
        for _ in 0..16 {
            if let Some(out) = self.outputs.pop_front() {
                return out;
            }
            self.fire_timers(now);
            self.pump_to_fixed_point(now);
            self.settle();
            if !self.outputs.is_empty() {
                continue;
            }
            match self.next_deadline(now) {
                Some(at) if at <= now => continue,
                at => {
                    crate::window::release_peak(&mut self.outputs);
                    return Output::Timeout(at);
                }
            }
        }
        self.outputs.pop_front().unwrap_or(Output::Timeout(Some(
            now + std::time::Duration::from_micros(1),
        )))
    }
}
