//! What `poll_output` must look at, so that the steady state (batches admitted, sent and acked
//! on open streams) costs the same per batch whatever the number of tables and slots:
//! quinn-proto's approach, dirty flags and a timer heap instead of scans.
//!
//! Two ways through `poll_output`:
//! - A **full pass** (`pump.rs`: every timer, every table and every slot, to a fixed point)
//!   runs after anything that can change which tables hold streams or what a slot's phase is: a
//!   stream becoming READY, failing, draining, rotating or ending; a table warming, failing or
//!   being evicted; a schema reconciled; a table added; `close`; a timer falling due. It ends by
//!   settling: the timer heap is rebuilt from every slot's deadline, and the sink is found
//!   *calm* or not (calm: not closing, no table evicting, no table waiting for streams).
//! - Between full passes, while the sink is calm, the two events of the steady state take the
//!   **fast path**: a batch admitted for a warm table (of a schema its streams may carry) marks
//!   that table dirty, or with a key the slot it went to; an ack applied on a READY connection
//!   that stays READY marks its slot and table dirty. `poll_output` then assigns queued batches
//!   for the dirty tables, places batches for the dirty slots and re-arms their timers, and
//!   nothing else. Every other input and mutator asks for a full pass.
//!
//! Timers are armed lazily: a slot's heap entry is pushed again only when its deadline moves
//! earlier (a send on an idle stream); a deadline that moved later (an ack) or went (the slot
//! idle) keeps its entry. So the heap's top is at or before every slot's deadline, never after
//! one: it may come due with nothing due, and then the full pass it brings fires nothing and
//! rebuilds the heap from the real deadlines (about once per `ack_timeout` in a steady state).
//! In the steady state the heap holds one entry per slot and is not touched per batch.
//!
//! Half of a steady state's `poll_output` calls find nothing to do (the caller drains until
//! `Timeout`): those are answered by [`SinkCore::idle_until`], inlined into the caller, without
//! entering the fast path; and the fast path returns the first message it places instead of
//! queueing it and popping it again.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::batch::Batch;
use crate::event::Output;
use crate::ids::{SlotId, TableId};
use crate::lane::Lane;
use crate::time::{Time, earliest};
use crate::window::Phase;

use super::{SinkCore, TableStatus};

/// Indices marked for a look, each once.
#[derive(Debug, Default)]
struct Dirty {
    list: Vec<usize>,
    flag: Vec<bool>,
}

impl Dirty {
    #[inline]
    fn mark(&mut self, index: usize) {
        if let Some(flag) = self.flag.get_mut(index)
            && !*flag
        {
            *flag = true;
            self.list.push(index);
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<usize> {
        let index = self.list.pop()?;
        if let Some(flag) = self.flag.get_mut(index) {
            *flag = false;
        }
        Some(index)
    }

    /// Forgets every mark and sizes the flags for `len` indices.
    fn reset(&mut self, len: usize) {
        self.list.clear();
        self.flag.clear();
        self.flag.resize(len, false);
        self.list.reserve(len);
    }
}

/// [`Sched::state`]: whether the fast path may be taken at all (see
/// [`SinkCore::set_fast_path`]).
const ENABLED: u8 = 1;
/// [`Sched::state`]: a full pass is owed.
const FULL: u8 = 2;
/// [`Sched::state`]: the last full pass left the sink calm, so the fast path may be taken.
const CALM: u8 = 4;
/// [`Sched::state`] when the fast path runs: enabled, calm, no full pass owed.
const FAST: u8 = ENABLED | CALM;

/// The scheduler's state (see the module documentation).
#[derive(Debug)]
pub(crate) struct Sched {
    /// [`ENABLED`], [`FULL`] and [`CALM`] in one byte: the fast path is taken only when it is
    /// exactly [`FAST`], which every `poll_output` checks with one compare.
    state: u8,
    tables: Dirty,
    slots: Dirty,
    /// Slot deadlines, earliest first; an entry is current only while it equals `armed`.
    timers: BinaryHeap<Reverse<(Time, usize)>>,
    /// Per slot, the deadline its current heap entry carries.
    armed: Vec<Option<Time>>,
    /// The sink's own next deadline (a reconcile request to ask again), as of the last full
    /// pass: nothing on the fast path changes it.
    global: Option<Time>,
}

impl Default for Sched {
    fn default() -> Sched {
        Sched {
            state: ENABLED | FULL,
            tables: Dirty::default(),
            slots: Dirty::default(),
            timers: BinaryHeap::new(),
            armed: Vec::new(),
            global: None,
        }
    }
}

impl Sched {
    /// Something changed that only a full pass may act on.
    pub(super) fn owe_full_pass(&mut self) {
        self.state |= FULL;
    }

    /// Whether a full pass is owed.
    #[inline]
    fn full(&self) -> bool {
        self.state & FULL != 0
    }

    /// Whether the fast path may run: enabled, calm, and no full pass owed.
    #[inline]
    fn fast(&self) -> bool {
        self.state == FAST
    }

    /// The slot was given a batch to place.
    #[inline]
    pub(super) fn mark_slot(&mut self, slot: usize) {
        self.slots.mark(slot);
    }

    /// Whether a batch admitted for a warm table may go straight to a slot.
    #[inline]
    pub(super) fn enabled(&self) -> bool {
        self.state & ENABLED != 0
    }

    /// A batch was admitted for `table` (or given to `slot`, keyed): `fast` when the table is
    /// warm and its streams may carry the batch's schema; `waiting` when the table's queue
    /// holds batches for a slot.
    #[inline]
    pub(super) fn admitted(
        &mut self,
        table: TableId,
        slot: Option<usize>,
        fast: bool,
        waiting: bool,
    ) {
        match (fast, slot) {
            (false, _) => self.owe_full_pass(),
            (true, Some(slot)) => self.slots.mark(slot),
            (true, None) if waiting => self.tables.mark(table.index()),
            (true, None) => {}
        }
    }
}

impl<L: Lane, B: Batch> SinkCore<L, B> {
    /// Turns the fast path on (the default) or off. Off, every batch admitted waits in its
    /// table's queue for the next `poll_output`, every `poll_output` that has no output
    /// queued makes a full pass over every timer, table and slot, and every input, the steady
    /// state's acks too, goes through the general dispatch: the behaviour the fast path must
    /// reproduce, which the testkit's differential property compares it with.
    pub fn set_fast_path(&mut self, on: bool) {
        let enabled = if on { ENABLED } else { 0 };
        self.sched.state = (self.sched.state & !ENABLED) | enabled | FULL;
    }

    /// The READY connection of a slot, if it has one.
    pub(super) fn ready_conn(&self, slot: SlotId) -> Option<crate::ids::ConnGen> {
        match self.slots.get(slot.index())?.phase {
            Phase::Ready(live) => Some(live.conn),
            _ => None,
        }
    }

    /// After an input on `slot`'s connection `generation`: the fast path if it was an ack on a
    /// READY connection that is still READY, else a full pass.
    #[inline]
    pub(super) fn after_input(
        &mut self,
        slot: SlotId,
        was_ready: bool,
        generation: crate::ids::ConnGen,
    ) {
        let still = self.ready_conn(slot) == Some(generation);
        match self.slots.get(slot.index()) {
            Some(window) if was_ready && still => {
                // The ack moved the slot's deadline later (corrected lazily) and made room:
                // for its own unsent batches, and for its table's queue.
                let table = window.table().index();
                if window.has_unplaced() {
                    self.sched.slots.mark(slot.index());
                }
                if self.tables.get(table).is_some_and(|t| !t.queue.is_empty()) {
                    self.sched.tables.mark(table);
                }
            }
            _ => self.sched.owe_full_pass(),
        }
    }

    /// The next output on the fast path, or `None` when a full pass must run instead.
    pub(super) fn fast_output(&mut self, now: Time) -> Option<Output<L, B>> {
        if !self.sched.fast() {
            return None;
        }
        let due = |at: Option<Time>| at.is_some_and(|at| at <= now);
        let mut next = self.next_timer();
        if due(next) || due(self.sched.global) {
            self.sched.owe_full_pass();
            return None;
        }
        while let Some(table) = self.sched.tables.pop() {
            self.assign_queued_of(table, now);
        }
        let mut first = None;
        while let Some(index) = self.sched.slots.pop() {
            self.place_slot_into(index, now, &mut first);
            // Placing only moves a deadline earlier (a send on an idle stream), and the top
            // checked above is at or before every other deadline: the smaller of the two is
            // still such a bound, no heap walk.
            if let Some(at) = self.arm(index) {
                next = earliest(next, Some(at));
            }
            // Placing stops at a batch of another schema: the stream must drain and reopen,
            // which a full pass does.
            if self.wants_schema_switch(index) {
                self.sched.owe_full_pass();
            }
        }
        if first.is_some() {
            return first;
        }
        if let Some(out) = self.outputs.pop_front() {
            return Some(out);
        }
        if self.sched.full() {
            return None;
        }
        Some(Output::Timeout(earliest(next, self.sched.global)))
    }

    /// `Some(next deadline)` when the fast path has nothing to do and nothing is due: no full
    /// pass owed, the sink calm, nothing marked, the heap's top current and not due. It is what
    /// [`fast_output`](Self::fast_output) answers then, without its mutations (a superseded top
    /// is left to it); `None` sends the caller there.
    #[inline]
    pub(super) fn idle_until(&self, now: Time) -> Option<Option<Time>> {
        let sched = &self.sched;
        if !sched.fast() || !sched.tables.list.is_empty() || !sched.slots.list.is_empty() {
            return None;
        }
        let next = match sched.timers.peek() {
            None => None,
            Some(&Reverse((at, index))) => {
                if sched.armed.get(index).copied().flatten() != Some(at) || at <= now {
                    return None;
                }
                Some(at)
            }
        };
        if sched.global.is_some_and(|global| global <= now) {
            return None;
        }
        Some(earliest(next, sched.global))
    }

    /// After a full pass: no marks left, the heap rebuilt, calm or not.
    pub(super) fn settle(&mut self) {
        self.metrics.full_passes += 1;
        let timeouts = self.timeouts;
        let sched = &mut self.sched;
        sched.state &= !FULL;
        sched.tables.reset(self.tables.len());
        sched.slots.reset(self.slots.len());
        sched.timers.clear();
        sched.armed.clear();
        for (index, window) in self.slots.iter().enumerate() {
            let at = window.deadline(timeouts);
            sched.armed.push(at);
            if let Some(at) = at {
                sched.timers.push(Reverse((at, index)));
            }
        }
        sched.global = self
            .tables
            .iter()
            .filter_map(|t| t.schemas.ask_again_at(self.config.reconcile_timeout))
            .min();
        let calm = self.close_deadline.is_none()
            && !self
                .tables
                .iter()
                .any(|t| t.status == TableStatus::Evicting)
            && self.first_waiting().is_none();
        self.sched.state = (self.sched.state & !CALM) | if calm { CALM } else { 0 };
    }

    /// Pushes the slot's deadline if it moved earlier than its armed entry (or it had none),
    /// and returns the slot's deadline.
    fn arm(&mut self, index: usize) -> Option<Time> {
        let window = self.slots.get(index)?;
        let at = window.deadline(self.timeouts)?;
        let armed = self.sched.armed.get_mut(index)?;
        if armed.is_none_or(|armed| at < armed) {
            *armed = Some(at);
            self.sched.timers.push(Reverse((at, index)));
        }
        Some(at)
    }

    /// A time at or before every slot's deadline: the earliest current heap entry. Entries
    /// superseded by an earlier one of their slot are dropped on the way. An entry whose
    /// slot's deadline moved later (an ack) or went (the slot idle) is left standing: it is
    /// still a lower bound, and when it comes due the fast path gives way to a full pass,
    /// which fires nothing that is not due and rebuilds the heap from the real deadlines.
    /// So in the steady state the heap is not touched per batch; the price is a full pass
    /// about once per `ack_timeout` and a `Timeout` that may come before anything is due.
    fn next_timer(&mut self) -> Option<Time> {
        loop {
            let Reverse((at, index)) = *self.sched.timers.peek()?;
            if self.sched.armed.get(index).copied().flatten() == Some(at) {
                return Some(at);
            }
            self.sched.timers.pop();
        }
    }
}
