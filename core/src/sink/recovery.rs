//! What failures, drains and rotations do to a slot (seed section 6, PROTOCOL.md A.4, A.5, C).
//!
//! - A retryable failure closes the connection, keeps the slot's batches (the durable prefix of
//!   a partly acked one sliced off) and backs off, exponentially with seeded jitter; the next
//!   connection replays them in logical order. Other slots are untouched.
//! - A concurrency reject does the same, counted apart: traffic moves to the table's other
//!   slots because only READY slots are given new batches.
//! - A stream that stops acking drains (acks still applied) for `drain_budget`, then closes.
//! - Past the retry budget, the slot's batches are handed back, naming the last failure; when
//!   every slot of a table is past it, so are the table's batches still waiting for a slot.
//! - An auth rejection asks the driver to drop its cached token and retries once; a second
//!   rejection, or any fatal error, fails the whole table and hands its batches back.
//! - A rotation pauses the slot, waits for acks up to what was sent (within the grace period
//!   less 500 ms), half-closes, reads late acks for up to 500 ms and reopens at once.

use std::time::Duration;

use crate::batch::Batch;
use crate::classify::ErrorClass;
use crate::error::{FailureReason, ProtocolError, StreamError};
use crate::event::Output;
use crate::ids::{SlotId, TableId};
use crate::lane::Lane;
use crate::time::Time;
use crate::window::{Drain, Phase};

use super::{SinkCore, TableStatus};

/// How long a rotating stream's half-closed side may still deliver acks (the official
/// client's fixed drain window, PROTOCOL.md A.4).
pub(super) const ROTATION_DRAIN: Duration = Duration::from_millis(500);

impl<L: Lane, B: Batch> SinkCore<L, B> {
    /// An error reported on the slot's live (or opening) connection.
    pub(super) fn on_stream_error(&mut self, now: Time, slot: SlotId, error: StreamError) {
        let window = &self.slots[slot.index()];
        if let Phase::Draining {
            why: Drain::Rotation { half_closed: true },
            ..
        } = window.phase
        {
            // The rotating stream ended after our half-close: that is the rotation's end.
            return self.finish_rotation(now, slot);
        }
        let live = matches!(window.phase, Phase::Ready(_) | Phase::Draining { .. });
        let conn = window.phase.conn().unwrap_or(crate::ConnGen::FIRST);
        let table = window.table();
        let reason = FailureReason::Stream {
            slot,
            conn,
            error: error.clone(),
        };
        match error.class(live) {
            ErrorClass::Fatal => self.fail_table(table, error),
            ErrorClass::AuthRejected => {
                let t = &mut self.tables[table.index()];
                if t.auth_refreshed {
                    self.fail_table(table, error);
                } else {
                    t.auth_refreshed = true;
                    self.metrics.credential_refreshes += 1;
                    self.outputs
                        .push_back(Output::InvalidateCredentials { table });
                    self.restart(now, slot, reason, false);
                }
            }
            ErrorClass::ConcurrencyReject => {
                self.metrics.concurrency_rejects += 1;
                self.restart(now, slot, reason, false);
            }
            ErrorClass::Poison => {
                self.metrics.poisoned += 1;
                self.restart(now, slot, reason, false);
            }
            _ => {
                self.metrics.transient_failures += 1;
                self.restart(now, slot, reason, false);
            }
        }
    }

    /// The service ended the call with OK.
    pub(super) fn on_server_closed(&mut self, now: Time, slot: SlotId) {
        match self.slots[slot.index()].phase {
            Phase::Draining {
                why: Drain::Rotation { half_closed: true },
                ..
            } => self.finish_rotation(now, slot),
            Phase::Draining {
                why: Drain::Poison, ..
            } => self.end_poison_drain(now, slot),
            // Ending a call that should be live is a failure like any other (retryable).
            _ => self.on_stream_error(now, slot, StreamError::Eof),
        }
    }

    /// The service asked the slot's stream to rotate within `grace`.
    pub(super) fn on_rotate(&mut self, now: Time, slot: SlotId, grace: Duration) {
        let window = &mut self.slots[slot.index()];
        if let Phase::Ready(live) = window.phase {
            self.metrics.rotations += 1;
            let until = now + grace.saturating_sub(ROTATION_DRAIN);
            window.phase = Phase::Draining {
                live,
                until,
                why: Drain::Rotation { half_closed: false },
            };
        }
    }

    /// A fatal protocol violation in an ack: a forward ack ends the connection and hands its
    /// batches back (terminal, as in the official client); an ack before READY only restarts.
    pub(super) fn on_protocol_violation(&mut self, now: Time, slot: SlotId, error: ProtocolError) {
        let hand_back = matches!(error, ProtocolError::ForwardAck { .. });
        let reason = FailureReason::Protocol(error);
        if hand_back {
            self.close_connection(slot, false, true);
            if let Some(failed) = self.slots[slot.index()].fail_all(reason.clone()) {
                self.outputs.push_back(Output::Failed(failed));
            }
        }
        self.restart(now, slot, reason, false);
    }

    /// Drops the slot's connection, if it has one: unplaces its batches (the durable prefix
    /// sliced off), tells the driver, and counts it as failed if `failed`.
    pub(super) fn close_connection(&mut self, slot: SlotId, graceful: bool, failed: bool) {
        if let Some(conn) = self.slots[slot.index()].rebase() {
            if failed {
                self.metrics.connections_failed += 1;
            }
            self.outputs.push_back(Output::Close {
                slot,
                conn,
                graceful,
            });
        }
    }

    /// Closes the slot's connection, keeps its batches for replay (or hands them back once the
    /// retry budget is spent) and backs off.
    pub(super) fn restart(
        &mut self,
        now: Time,
        slot: SlotId,
        reason: FailureReason,
        graceful: bool,
    ) {
        let policy = self.config.retry;
        self.close_connection(slot, graceful, true);
        let window = &mut self.slots[slot.index()];
        window.failures = window.failures.saturating_add(1);
        if window.failures > policy.max_attempts && window.has_pending() {
            self.metrics.retry_budgets_spent += 1;
            let spent = FailureReason::RetryBudgetSpent {
                slot,
                attempts: window.failures,
                last: Box::new(reason.clone()),
            };
            if let Some(failed) = window.fail_all(spent) {
                self.outputs.push_back(Output::Failed(failed));
            }
        }
        window.last_failure = Some(reason.clone());
        let delay = self.jitter.delay(&policy, window.failures.min(32));
        window.retry_at = now + delay;
        window.phase = Phase::Backoff {
            until: window.retry_at,
        };
        // When no slot of the table can connect, batches waiting for a slot would wait for
        // ever: hand them back too.
        let table = window.table();
        let spent = |w: &crate::window::SlotWindow<L, B>| w.failures > policy.max_attempts;
        if self.slots[self.tables[table.index()].slots()]
            .iter()
            .all(spent)
        {
            let attempts = self.slots[slot.index()].failures;
            let spent = FailureReason::RetryBudgetSpent {
                slot,
                attempts,
                last: Box::new(reason),
            };
            if let Some(failed) = self.fail_unassigned(table, spent) {
                self.metrics.retry_budgets_spent += 1;
                self.outputs.push_back(Output::Failed(failed));
            }
        }
    }

    /// A poisoned stream's drain is over (its budget ran out, or everything is acked).
    pub(super) fn end_poison_drain(&mut self, now: Time, slot: SlotId) {
        let window = &self.slots[slot.index()];
        let graceful = window.all_acked();
        let conn = window.phase.conn().unwrap_or(crate::ConnGen::FIRST);
        let reason = window
            .last_failure
            .clone()
            .unwrap_or(FailureReason::Stream {
                slot,
                conn,
                error: StreamError::Eof,
            });
        self.metrics.poisoned += 1;
        self.restart(now, slot, reason, graceful);
    }

    /// A rotating stream has its acks (or its grace is over): half-close it and read late acks.
    pub(super) fn half_close_rotation(&mut self, now: Time, slot: SlotId) {
        let window = &mut self.slots[slot.index()];
        if let Phase::Draining {
            live,
            why: Drain::Rotation { half_closed: false },
            ..
        } = window.phase
        {
            self.outputs.push_back(Output::Close {
                slot,
                conn: live.conn,
                graceful: true,
            });
            window.phase = Phase::Draining {
                live,
                until: now + ROTATION_DRAIN,
                why: Drain::Rotation { half_closed: true },
            };
        }
    }

    /// The rotated stream is gone: replay on a new connection at once (no backoff: nothing
    /// failed).
    pub(super) fn finish_rotation(&mut self, now: Time, slot: SlotId) {
        let window = &mut self.slots[slot.index()];
        window.rebase();
        window.phase = Phase::Backoff { until: now };
    }

    /// Fails the table: every slot closes for good and every batch comes back.
    pub(super) fn fail_table(&mut self, table: TableId, error: StreamError) {
        let Some(t) = self.tables.get_mut(table.index()) else {
            return;
        };
        if matches!(t.status, TableStatus::Failed(_)) {
            return;
        }
        t.status = TableStatus::Failed(error.clone());
        self.metrics.tables_failed += 1;
        let reason = FailureReason::TableFailed { table, error };
        for index in t.slots() {
            self.close_connection(
                SlotId(u16::try_from(index).unwrap_or(u16::MAX)),
                false,
                true,
            );
            let window = &mut self.slots[index];
            window.phase = Phase::Failed;
            if let Some(failed) = window.fail_all(reason.clone()) {
                self.outputs.push_back(Output::Failed(failed));
            }
        }
        if let Some(failed) = self.fail_unassigned(table, reason) {
            self.outputs.push_back(Output::Failed(failed));
        }
    }

    /// Hands back a table's batches that were never given a slot.
    pub(super) fn fail_unassigned(
        &mut self,
        table: TableId,
        reason: FailureReason,
    ) -> Option<crate::event::Failed<L, B>> {
        let t = self.tables.get_mut(table.index())?;
        if t.queue.is_empty() {
            return None;
        }
        let mut batches = Vec::with_capacity(t.queue.len());
        while let Some(q) = t.queue.pop_front() {
            t.queued.remove(q.rows, q.bytes);
            t.failed_unassigned += 1;
            batches.push(crate::event::FailedBatch {
                offset: None,
                batch: q.batch,
                token: q.token,
                durable_rows: 0,
            });
        }
        Some(crate::event::Failed {
            table,
            slot: None,
            reason,
            batches,
        })
    }
}
