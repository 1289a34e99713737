//! What failures, drains and rotations do to a slot (seed section 6, PROTOCOL.md A.4, A.5, C).
//!
//! - A retryable failure closes the connection, keeps the slot's batches (the durable prefix of
//!   a partly acked one sliced off) and backs off, exponentially with seeded jitter; the next
//!   connection replays them in logical order. Other slots are untouched.
//! - A concurrency reject does the same, counted apart: traffic moves to the table's other
//!   slots because only READY slots are given new batches.
//! - A stream that stops acking drains (acks still applied) for `drain_budget`, then closes
//!   (counted as an ack timeout: the service is slow or the stream silently dead, not a stream
//!   that broke).
//! - Past the retry budget, the slot's batches are handed back, naming the last failure; when
//!   every slot of a table is past it, so are the table's batches still waiting for a slot.
//! - An auth rejection asks the driver to drop the table's cached token and retries the slot.
//!   The refresh is per connection attempt, not per table (PROTOCOL.md C.3): a rejection of a
//!   connection opened with a token that has since been refreshed only retries; a rejection of
//!   a connection opened with refreshed credentials, before any connection has become READY
//!   with them, fails the table, as does any fatal error, handing its batches back.
//! - A rotation pauses the slot, waits for acks up to what was sent (within the grace period
//!   less 500 ms), half-closes, reads late acks for up to 500 ms and reopens at once: a rotation
//!   is the service moving the stream (a pod draining), not a failure, so there is nothing to
//!   back off from (the official client sleeps its 2 s recovery backoff here only because its
//!   rotation goes through its generic recovery path; see ADR 0008).
//! - Whenever the core stops listening to a connection it says so with a `Close { graceful:
//!   false }`: exactly once per connection it opened.

use std::time::Duration;

use crate::batch::Batch;
use crate::classify::ErrorClass;
use crate::error::{FailureReason, ProtocolError, StreamError};
use crate::event::Output;
use crate::ids::{ConnGen, SlotId, TableId};
use crate::lane::Lane;
use crate::time::Time;
use crate::window::{Drain, Phase};

use super::{SinkCore, TableStatus};

/// How long a rotating stream's half-closed side may still deliver acks (the official
/// client's fixed drain window, PROTOCOL.md A.4).
pub(super) const HALF_CLOSE_DRAIN: Duration = Duration::from_millis(500);

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
        let conn = window.phase.conn().unwrap_or(ConnGen(0));
        let opened_epoch = window.opened_epoch;
        let table = window.table();
        let reason = FailureReason::Stream {
            slot,
            conn,
            error: error.clone(),
        };
        match error.class(live) {
            ErrorClass::Fatal => self.fail_table(now, table, error),
            ErrorClass::AuthRejected => {
                let t = &mut self.tables[table.index()];
                if opened_epoch < t.cred_epoch {
                    // Opened with a token refreshed since: retry with the new one.
                } else if t.refresh_unproven {
                    return self.fail_table(now, table, error);
                } else {
                    t.cred_epoch += 1;
                    t.refresh_unproven = true;
                    self.metrics.credential_refreshes += 1;
                    self.outputs
                        .push_back(Output::InvalidateCredentials { table });
                }
                self.metrics.auth_rejections += 1;
                self.restart(now, slot, reason, false);
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
                why: Drain::AckTimeout,
                ..
            } => self.end_ack_timeout_drain(now, slot),
            // Ending a call that should be live is a failure like any other (retryable).
            _ => self.on_stream_error(now, slot, StreamError::Eof),
        }
    }

    /// The service asked the slot's stream to rotate within `grace`; false if the stream was
    /// not live and ready (already draining).
    pub(super) fn on_rotate(&mut self, now: Time, slot: SlotId, grace: Duration) -> bool {
        let window = &mut self.slots[slot.index()];
        let Phase::Ready(live) = window.phase else {
            return false;
        };
        self.metrics.rotations += 1;
        let until = now + grace.saturating_sub(HALF_CLOSE_DRAIN);
        window.phase = Phase::Draining {
            live,
            until,
            why: Drain::Rotation { half_closed: false },
        };
        true
    }

    /// A forward ack ends the connection and hands its batches back (terminal for them, as in
    /// the official client, PROTOCOL.md A.3); the slot reconnects for later batches.
    pub(super) fn on_forward_ack(&mut self, now: Time, slot: SlotId, error: ProtocolError) {
        let reason = FailureReason::Protocol(error);
        self.close_connection(now, slot, false, true);
        if let Some(failed) = self.slots[slot.index()].fail_all(reason.clone()) {
            self.ended += failed.batches.len() as u64;
            self.outputs.push_back(Output::Failed(failed));
        }
        self.restart(now, slot, reason, false);
    }

    /// Ends the slot's connection, if it has one: unplaces its batches (the durable prefix
    /// sliced off), tells the driver, and counts it as failed if `failed`. `graceful`:
    /// half-close it and let the call end on its own, cutting it after 500 ms if it has not
    /// (the official client's drain window, PROTOCOL.md A.6); otherwise drop it now. A
    /// connection already half-closed (at shutdown or eviction) is cut.
    pub(super) fn close_connection(
        &mut self,
        now: Time,
        slot: SlotId,
        graceful: bool,
        failed: bool,
    ) {
        let window = &mut self.slots[slot.index()];
        if !graceful && let Some((closing, _)) = window.closing.take() {
            let conn = window.conn_id(closing);
            self.outputs.push_back(Output::Close {
                conn,
                graceful: false,
            });
        }
        let window = &mut self.slots[slot.index()];
        if let Some(generation) = window.rebase() {
            if failed {
                self.metrics.connections_failed += 1;
            }
            let conn = window.conn_id(generation);
            self.outputs.push_back(Output::Close { conn, graceful });
            if graceful {
                window.closing = Some((generation, now + HALF_CLOSE_DRAIN));
            }
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
        self.close_connection(now, slot, graceful, true);
        let window = &mut self.slots[slot.index()];
        window.failures = window.failures.saturating_add(1);
        if window.failures > policy.max_attempts && window.has_pending() {
            self.metrics.retry_budgets_spent += 1;
            let spent = FailureReason::RetryBudgetSpent {
                slot,
                attempts: window.failures,
                max_attempts: policy.max_attempts,
                last: Box::new(reason.clone()),
            };
            if let Some(failed) = window.fail_all(spent) {
                self.ended += failed.batches.len() as u64;
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
                max_attempts: policy.max_attempts,
                last: Box::new(reason),
            };
            if let Some(failed) = self.fail_unassigned(table, spent) {
                self.metrics.retry_budgets_spent += 1;
                self.ended += failed.batches.len() as u64;
                self.outputs.push_back(Output::Failed(failed));
            }
        }
    }

    /// A stream that stopped acking has drained (its budget ran out, or everything is acked):
    /// close it and reconnect. Counted at the timeout as `ack_timeouts`, not as `poisoned`.
    pub(super) fn end_ack_timeout_drain(&mut self, now: Time, slot: SlotId) {
        let window = &self.slots[slot.index()];
        let graceful = window.all_acked();
        let conn = window.phase.conn().unwrap_or(ConnGen(0));
        let reason = window
            .last_failure
            .clone()
            .unwrap_or(FailureReason::Stream {
                slot,
                conn,
                error: StreamError::Eof,
            });
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
                conn: window.conn_id(live.conn),
                graceful: true,
            });
            window.phase = Phase::Draining {
                live,
                until: now + HALF_CLOSE_DRAIN,
                why: Drain::Rotation { half_closed: true },
            };
        }
    }

    /// The rotated stream is done (the service ended the call, or the 500 ms after our
    /// half-close passed): forget it (a final `Close`) and replay on a new connection at once
    /// (no backoff: nothing failed).
    pub(super) fn finish_rotation(&mut self, now: Time, slot: SlotId) {
        let window = &mut self.slots[slot.index()];
        if let Some(generation) = window.rebase() {
            let conn = window.conn_id(generation);
            self.outputs.push_back(Output::Close {
                conn,
                graceful: false,
            });
        }
        window.phase = Phase::Backoff { until: now };
    }

    /// Fails the table: every slot closes for good and every batch comes back.
    pub(super) fn fail_table(&mut self, now: Time, table: TableId, error: StreamError) {
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
                now,
                SlotId(u16::try_from(index).unwrap_or(u16::MAX)),
                false,
                true,
            );
            let window = &mut self.slots[index];
            window.phase = Phase::Failed;
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
        crate::window::release_peak(&mut t.queue);
        Some(crate::event::Failed {
            table,
            slot: None,
            reason,
            batches,
        })
    }
}
