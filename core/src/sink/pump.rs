//! The work behind `poll_output`: expired timers first, then warming and evicting tables,
//! giving queued batches to ready slots, placing batches on the wire, and closing streams that
//! have nothing left to do.

use crate::batch::Batch;
use crate::error::FailureReason;
use crate::event::Output;
use crate::ids::{ConnGen, LogicalOffset, SlotId, TableId};
use crate::lane::Lane;
use crate::time::Time;
use crate::window::{Drain, Phase};

use super::{SinkCore, TableStatus};
use crate::window::Queued;

impl<L: Lane, B: Batch> SinkCore<L, B> {
    /// Acts on every deadline at or before `now`. Spurious calls do nothing.
    pub(super) fn fire_timers(&mut self, now: Time) {
        for index in 0..self.slots.len() {
            let window = &mut self.slots[index];
            let slot = window.id();
            if window.deadline(self.timeouts).is_none_or(|at| at > now) {
                continue;
            }
            // A half-closed call that has not ended within its drain window is cut.
            if let Some((generation, until)) = window.closing
                && until <= now
            {
                window.closing = None;
                let conn = window.conn_id(generation);
                self.outputs.push_back(Output::Close {
                    conn,
                    graceful: false,
                });
            }
            let window = &mut self.slots[index];
            if window.deadline(self.timeouts).is_none_or(|at| at > now) {
                continue;
            }
            match window.phase {
                Phase::Opening { conn, since } => {
                    self.metrics.transient_failures += 1;
                    let reason = FailureReason::OpenTimeout {
                        slot,
                        conn,
                        waited: now.saturating_since(since),
                    };
                    self.restart(now, slot, reason, false);
                }
                Phase::Ready(live) => {
                    // The stream stopped acking: let its last acks arrive, then rebuild.
                    self.metrics.ack_timeouts += 1;
                    window.last_failure = Some(FailureReason::AckTimeout {
                        slot,
                        conn: live.conn,
                        offset: window.oldest().unwrap_or(LogicalOffset(0)),
                        waited: self.config.ack_timeout,
                    });
                    let until = now + self.config.retry.drain_budget;
                    window.phase = Phase::Draining {
                        live,
                        until,
                        why: Drain::AckTimeout,
                    };
                }
                Phase::Draining {
                    why: Drain::AckTimeout,
                    ..
                } => self.end_ack_timeout_drain(now, slot),
                Phase::Draining {
                    why: Drain::Rotation { half_closed: false },
                    ..
                } => self.half_close_rotation(now, slot),
                Phase::Draining {
                    why: Drain::Rotation { half_closed: true },
                    ..
                } => self.finish_rotation(now, slot),
                Phase::Backoff { .. } => self.reopen_or_rest(now, slot),
                Phase::Idle | Phase::Failed => {}
            }
        }
        if self.close_deadline.is_some_and(|at| at <= now) {
            for index in 0..self.tables.len() {
                self.hand_back_at_close(now, TableId(u16::try_from(index).unwrap_or(u16::MAX)));
            }
        }
    }

    /// Drops the slot's connection (not gracefully) without counting a failure; it may open
    /// again only after the minimum backoff, so that no cancel-and-reopen churn is possible.
    fn cancel(&mut self, now: Time, slot: SlotId) {
        let had_connection = self.slots[slot.index()].phase.conn().is_some();
        self.close_connection(now, slot, false, false);
        if had_connection {
            let window = &mut self.slots[slot.index()];
            window.retry_at = window.retry_at.max(now + self.config.retry.initial_backoff);
        }
    }

    /// The close deadline passed: everything of `table` not yet durable comes back.
    fn hand_back_at_close(&mut self, now: Time, table: TableId) {
        let reason = FailureReason::CloseDeadline { table };
        for index in self.tables[table.index()].slots() {
            self.cancel(now, SlotId(u16::try_from(index).unwrap_or(u16::MAX)));
            let window = &mut self.slots[index];
            if let Some(failed) = window.fail_all(reason.clone()) {
                self.ended += failed.batches.len() as u64;
                self.outputs.push_back(Output::Failed(failed));
            }
        }
        if let Some(failed) = self.fail_unassigned(table, reason) {
            self.ended += failed.batches.len() as u64;
            self.outputs.push_back(Output::Failed(failed));
        }
    }

    /// The table's pool is still wanted: open a new connection (once the slot's previous call,
    /// half-closed, has ended). Otherwise (evicting, cold, or shutting down with nothing left)
    /// the slot rests.
    fn reopen_or_rest(&mut self, now: Time, slot: SlotId) {
        let table = self.slots[slot.index()].table();
        let wanted = self.tables[table.index()].status == TableStatus::Warm
            && !self.quiet_for_close(table, slot);
        if !wanted {
            self.slots[slot.index()].phase = Phase::Idle;
        } else if let Some((_, until)) = self.slots[slot.index()].closing {
            self.slots[slot.index()].phase = Phase::Backoff { until };
        } else {
            self.open_slot(now, slot);
        }
    }

    fn open_slot(&mut self, now: Time, slot: SlotId) {
        let generation = ConnGen(self.next_conn);
        self.next_conn += 1;
        let window = &mut self.slots[slot.index()];
        let table = window.table();
        window.phase = Phase::Opening {
            conn: generation,
            since: now,
        };
        window.opened_epoch = self.tables[table.index()].cred_epoch;
        let schema = self.open_schema(slot);
        let window = &mut self.slots[slot.index()];
        window.conn_schema = schema;
        self.metrics.connections_opened += 1;
        let conn = window.conn_id(generation);
        self.outputs.push_back(Output::Open {
            table,
            conn,
            schema,
        });
    }

    /// Whether shutdown leaves nothing for this slot to do.
    fn quiet_for_close(&self, table: TableId, slot: SlotId) -> bool {
        self.close_deadline.is_some()
            && self.tables[table.index()].queue.is_empty()
            && !self.slots[slot.index()].has_pending()
    }

    /// Passes until one changes nothing (invariant 13: after the drain's `Timeout`, a second
    /// `poll_output` at the same instant finds nothing to do). A pass's later steps can make
    /// work ready for its earlier ones: closing quiet streams frees stream capacity, with or
    /// without the evicted table going cold (a slot of an evicting table that was backing off,
    /// or whose opening call is cancelled, rests at once), which warming hands to a waiting
    /// table; a drain that ends, a hand-back, a table going cold all change what warming and
    /// assigning see; and a flush's deal picks a slot by estimates that placing changes. So a
    /// pass that queued an output, moved stream capacity, ended a batch, gave a queued batch
    /// to a slot or changed a table's state is followed by another. Each such pass moves a
    /// slot or a table one step along its lifecycle within this instant, so a few suffice;
    /// the bound only guards against a bug turning into a busy loop.
    pub(super) fn pump_to_fixed_point(&mut self, now: Time) {
        let bound = 2 * (self.tables.len() + 1);
        let mut mark = self.pass_mark();
        for _ in 0..bound {
            self.pump(now);
            let after = self.pass_mark();
            if after == mark {
                break;
            }
            mark = after;
        }
    }

    /// What a pass may change that another pass could act on: outputs queued, streams held
    /// under the cap, batches ended, batches still queued for a slot, and the number of
    /// tables cold, warm and evicting.
    fn pass_mark(&self) -> (usize, usize, u64, u64, [usize; 3]) {
        let mut statuses = [0; 3];
        let mut queued = 0;
        for t in &self.tables {
            queued += t.queued.batches;
            match t.status {
                TableStatus::Cold => statuses[0] += 1,
                TableStatus::Warm => statuses[1] += 1,
                TableStatus::Evicting => statuses[2] += 1,
                TableStatus::Failed(_) => {}
            }
        }
        (
            self.outputs.len(),
            self.open_streams(),
            self.ended,
            queued,
            statuses,
        )
    }

    /// One pass. Its order makes the steps it can a fixed point in one pass: placing stops at
    /// a batch of another schema, so schemas switch after placing, and a stream that starts
    /// draining with everything acked half-closes in the same pass. What a later step frees
    /// for an earlier one, the next pass hands out ([`Self::pump_to_fixed_point`]).
    fn pump(&mut self, now: Time) {
        self.ask_reconciles(now);
        self.warm_tables(now);
        self.assign_queued(now);
        self.place(now);
        self.switch_schemas(now);
        self.advance_drains(now);
        self.close_quiet_streams(now);
    }

    /// Drains whose acks are all in end early.
    fn advance_drains(&mut self, now: Time) {
        for index in 0..self.slots.len() {
            let window = &self.slots[index];
            let slot = window.id();
            match window.phase {
                Phase::Draining {
                    why: Drain::AckTimeout,
                    ..
                } if window.all_acked() => self.end_ack_timeout_drain(now, slot),
                Phase::Draining {
                    why: Drain::Rotation { half_closed: false },
                    ..
                } if window.all_acked() => {
                    self.half_close_rotation(now, slot);
                }
                _ => {}
            }
        }
    }

    /// Opens the pools of cold tables that have batches, all of a table's slots at once, first
    /// come first served (by how long each has waited), while the global stream cap allows.
    /// When the first in line does not fit, nobody behind it goes ahead; instead the least
    /// recently used warm table that may be evicted ([`Self::evictable_at`]) is drained and
    /// closed. The fairness rule: the line is first come first served, a table evicted for
    /// another joins the back of it (if it still has work), and every table keeps its streams
    /// for `min_residency` after they first became READY. So each waiting table gets its turn
    /// within a bound (the residency, plus the victim's drain), and tables under pressure take
    /// turns instead of evicting each other before anything is written.
    fn warm_tables(&mut self, now: Time) {
        let mut line: Vec<usize> = Vec::new();
        for index in 0..self.tables.len() {
            if self.tables[index].status != TableStatus::Cold {
                continue;
            }
            if !self.wants_streams(index) {
                // It left the line (its batches were handed back, or its schema refused): it
                // keeps no place ahead of the tables that waited while it did not.
                self.tables[index].waiting_since = None;
                continue;
            }
            if self.tables[index].waiting_since.is_none() {
                self.tables[index].waiting_since = Some(self.next_in_line);
                self.next_in_line += 1;
            }
            line.push(index);
        }
        line.sort_by_key(|&i| (self.tables[i].waiting_since, i));
        for index in line {
            let need = usize::from(self.tables[index].pool.slots);
            let free =
                usize::from(self.config.max_open_streams).saturating_sub(self.open_streams());
            if free < need {
                self.evict_for(index, now);
                return;
            }
            let t = &mut self.tables[index];
            t.status = TableStatus::Warm;
            t.warm_since = now;
            t.ready_since = None;
            t.waiting_since = None;
            for slot in self.tables[index].slots() {
                // Not before a failure's backoff is over, nor while the slot's previous call,
                // half-closed, has not ended.
                let window = &self.slots[slot];
                let retry_at = window
                    .closing
                    .map_or(window.retry_at, |(_, until)| until.max(window.retry_at));
                if retry_at > now {
                    self.slots[slot].phase = Phase::Backoff { until: retry_at };
                } else {
                    self.open_slot(now, SlotId(u16::try_from(slot).unwrap_or(u16::MAX)));
                }
            }
        }
    }

    /// Starts evicting the least recently used warm table past its residency, unless one is
    /// already being evicted. When that table still has work (batches queued or unacked) and
    /// another warm table has carried all it had (READY, nothing queued or unacked), the idle
    /// one gives way instead, even within its residency: a busy table evicted goes to the back
    /// of the line and waits for every table ahead of it, while the idle one would only hold
    /// its streams unused. (At 1,000 tables under a cap of 200 the tables just seated were all
    /// idle and within their residency, so the busy ones, past theirs, were evicted again and
    /// again: the `many_tables` example, docs/performance.md.)
    fn evict_for(&mut self, waiting: usize, now: Time) {
        // One eviction at a time, until its streams are back: an evicted table goes cold
        // while its half-closed calls still count against the cap (issue 50: without the
        // second test, each turn evicted two tables for one).
        let freeing = |t: &super::TableState<L, B>| {
            t.status == TableStatus::Evicting
                || (t.status == TableStatus::Cold
                    && self.slots[t.slots()].iter().any(|s| s.closing.is_some()))
        };
        if self.tables.iter().any(freeing) {
            return;
        }
        let warm = |i: usize| i != waiting && self.tables[i].status == TableStatus::Warm;
        let lru = (0..self.tables.len())
            .filter(|&i| warm(i))
            .filter(|&i| now >= self.evictable_at(i))
            .min_by_key(|&i| (self.tables[i].last_used, i));
        let victim = match lru {
            Some(busy) if self.has_work(busy) => (0..self.tables.len())
                .filter(|&i| warm(i))
                .filter(|&i| self.tables[i].ready_since.is_some() && !self.has_work(i))
                .min_by_key(|&i| (self.tables[i].last_used, i))
                .or(Some(busy)),
            lru => lru,
        };
        if let Some(victim) = victim {
            self.tables[victim].status = TableStatus::Evicting;
            self.metrics.evictions += 1;
        }
    }

    /// When a warm table may be evicted for another: `min_residency` after the first of its
    /// streams became READY (so it has carried work first), or, if none ever did, once a full
    /// `open_timeout` plus `min_residency` have passed since it was warmed (so a table that
    /// cannot connect does not hold the cap for ever).
    pub(super) fn evictable_at(&self, table: usize) -> Time {
        let t = &self.tables[table];
        let residency = self.config.min_residency;
        match t.ready_since {
            Some(ready) => ready + residency,
            None => t.warm_since + self.config.open_timeout + residency,
        }
    }

    /// The first table in line for streams, if one waits.
    pub(super) fn first_waiting(&self) -> Option<usize> {
        (0..self.tables.len())
            .filter(|&i| self.tables[i].status == TableStatus::Cold && self.wants_streams(i))
            .min_by_key(|&i| (self.tables[i].waiting_since, i))
    }

    /// Whether a table has work its streams could carry: a table provisioned through a
    /// catalog opens none before a schema of it is reconciled.
    fn wants_streams(&self, table: usize) -> bool {
        let t = &self.tables[table];
        self.has_work(table) && (!t.spec.reconciled || t.schemas.any_ok())
    }

    fn has_work(&self, table: usize) -> bool {
        let t = &self.tables[table];
        !t.queue.is_empty() || self.slots[t.slots()].iter().any(|s| s.has_pending())
    }

    /// Gives queued batches to the tables' READY slots.
    fn assign_queued(&mut self, now: Time) {
        for index in 0..self.tables.len() {
            self.assign_queued_of(index, now);
        }
    }

    /// Gives the table's queued batches to its READY slots while they have room, round-robin
    /// or, during a flush's deal, each to the slot due first ([`super::deal::pick`]); marks
    /// each slot that took one for placing.
    pub(super) fn assign_queued_of(&mut self, table: usize, now: Time) {
        let limits = self.config.window;
        if let Some(t) = self.tables.get_mut(table) {
            if t.status != TableStatus::Warm {
                return;
            }
            let n = usize::from(t.pool.slots);
            let before = t.queue.len();
            while let Some(front) = t.queue.front() {
                // Nothing leaves the queue for a stream before its schema is reconciled.
                if t.spec.reconciled && !t.schemas.is_ok(front.schema) {
                    break;
                }
                let size = (front.rows, front.bytes);
                let Some(k) = super::deal::pick(t, &self.slots, &limits, size, now) else {
                    break;
                };
                let Some(q) = t.queue.pop_front() else { break };
                t.queued.remove(q.rows, q.bytes);
                t.cursor = next_cursor(k, n);
                self.slots[t.first_slot + k].assign(q);
                self.sched.mark_slot(t.first_slot + k);
            }
            crate::window::release_peak(&mut t.queue);
            t.queue_peak.release(&mut t.queue, before, now);
            // A deal hands out the queue: once it is given out, it is over.
            if t.queue.is_empty() {
                t.deal.clear();
            }
        }
    }

    /// An order-agnostic table's batch admitted while nothing waits in its queue goes straight
    /// to a READY slot with room, as the queue would give it; returns it back otherwise.
    pub(super) fn assign_at_once(
        &mut self,
        table: usize,
        queued: Queued<L, B>,
        now: Time,
    ) -> Result<(), Queued<L, B>> {
        let limits = self.config.window;
        let Some(t) = self.tables.get_mut(table) else {
            return Err(queued);
        };
        if t.status != TableStatus::Warm || !t.queue.is_empty() || !t.deal.is_empty() {
            return Err(queued);
        }
        let Some(k) = super::deal::room_in(t, &self.slots, &limits, queued.rows, queued.bytes)
        else {
            return Err(queued);
        };
        t.cursor = next_cursor(k, usize::from(t.pool.slots));
        // The queue is empty and stays so on this path: what a past backlog left in it goes
        // back here, once a period has passed.
        t.queue_peak.release(&mut t.queue, 0, now);
        self.slots[t.first_slot + k].assign(queued);
        self.sched.mark_slot(t.first_slot + k);
        Ok(())
    }

    /// Puts every unsent batch of a READY slot of a warm table on the wire.
    fn place(&mut self, now: Time) {
        for index in 0..self.slots.len() {
            self.place_slot(index, now);
        }
    }

    /// Puts the slot's unsent batches on the wire if it is READY and its table warm.
    pub(super) fn place_slot(&mut self, index: usize, now: Time) {
        let mut first = None;
        self.place_slot_into(index, now, &mut first);
        if let Some(out) = first {
            self.outputs.push_front(out);
        }
    }

    /// [`place_slot`](Self::place_slot), keeping the first message in `first` when it is empty
    /// and nothing is queued (the fast path returns it without queueing it).
    pub(super) fn place_slot_into(
        &mut self,
        index: usize,
        now: Time,
        first: &mut Option<Output<L, B>>,
    ) {
        let max_message_bytes = self.config.max_message_bytes;
        let Some(window) = self.slots.get_mut(index) else {
            return;
        };
        let table = window.table();
        if !window.is_ready()
            || !window.has_unplaced()
            || self.tables[table.index()].status != TableStatus::Warm
        {
            return;
        }
        let outputs = &mut self.outputs;
        let sent = window.place_all(table, now, max_message_bytes, &mut |t| {
            if first.is_none() && outputs.is_empty() {
                *first = Some(Output::Send(t));
            } else {
                outputs.push_back(Output::Send(t));
            }
        });
        self.metrics.messages_sent += sent;
    }

    /// Closes streams with nothing left to do: when the table is being evicted (nothing on the
    /// wire), or at shutdown (nothing pending for the table). An evicted table goes cold once
    /// every slot rests.
    fn close_quiet_streams(&mut self, now: Time) {
        for index in 0..self.slots.len() {
            let window = &self.slots[index];
            let (slot, table) = (window.id(), window.table());
            let evicting = self.tables[table.index()].status == TableStatus::Evicting;
            let quiet = (evicting && !window.has_placed()) || self.quiet_for_close(table, slot);
            if !quiet {
                continue;
            }
            let window = &mut self.slots[index];
            match window.phase {
                Phase::Ready(_) => self.close_connection(now, slot, true, false),
                Phase::Opening { .. } => self.cancel(now, slot),
                Phase::Backoff { .. } => window.phase = Phase::Idle,
                _ => {}
            }
        }
        for index in 0..self.tables.len() {
            let t = &self.tables[index];
            if t.status == TableStatus::Evicting
                && self.slots[t.slots()].iter().all(|s| s.phase == Phase::Idle)
            {
                self.tables[index].status = TableStatus::Cold;
            }
        }
    }

    /// The next time something is due: a slot's timer, the close deadline while work is left,
    /// and, while a table waits for streams that the cap holds, the moment a warm table becomes
    /// evictable (without it a driver that sleeps until the next deadline would sleep for ever).
    pub(super) fn next_deadline(&self, now: Time) -> Option<Time> {
        let slots = self.slots.iter().filter_map(|s| s.deadline(self.timeouts));
        let work = (0..self.tables.len()).any(|i| self.has_work(i));
        let close = self.close_deadline.filter(|_| work);
        let evicting = self
            .tables
            .iter()
            .any(|t| t.status == TableStatus::Evicting);
        let turn = match self.first_waiting() {
            Some(waiting) if !evicting => (0..self.tables.len())
                .filter(|&i| i != waiting && self.tables[i].status == TableStatus::Warm)
                .map(|i| self.evictable_at(i))
                .filter(|&at| at > now)
                .min(),
            _ => None,
        };
        let reconcile = self
            .tables
            .iter()
            .filter_map(|t| t.schemas.ask_again_at(self.config.reconcile_timeout));
        slots.chain(close).chain(turn).chain(reconcile).min()
    }
}

/// The round-robin position after slot `k` of `n`: `(k + 1) % n` without the division.
fn next_cursor(k: usize, n: usize) -> usize {
    if k + 1 >= n { 0 } else { k + 1 }
}
