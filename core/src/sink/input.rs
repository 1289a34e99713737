//! What each input means: the protocol's rules for a connection, decided here and nowhere else
//! (PROTOCOL.md A.3, A.4, C), so that the simulator and the fuzz target exercise them.
//!
//! - The first `PutResult` must be READY, and only `ack_up_to_offset == -1` decides that (as in
//!   the official client); anything else first, or unparseable metadata first, fails the
//!   connection (retryable).
//! - After READY: a READY again changes nothing; an ack of zero rows, the same count again or a
//!   lower one changes nothing (the durable count is a monotonic maximum); an ack above what was
//!   sent is terminal for the connection's batches; a `close_stream_duration_ms` asks for a
//!   rotation (its ack fields apply first); unparseable metadata is ignored.
//! - The call ending without a status before READY is a failure; after READY it is a close.
//! - A status is classified by [`StreamError::class`] (with the `SCHEMA_VALIDATION_FAILED`
//!   rule applied by [`StreamError::normalized`]).

use crate::batch::Batch;
use crate::error::{Code, ProtocolError, StreamError};
use crate::event::{Handled, Ignored, Input, Output, PutResultMeta};
use crate::ids::{ConnGen, SlotId};
use crate::lane::Lane;
use crate::time::Time;
use crate::window::{AckOutcome, Phase};

use super::SinkCore;

impl<L: Lane, B: Batch> SinkCore<L, B> {
    pub(super) fn on_input(&mut self, now: Time, input: Input<L>) -> Handled {
        let conn = input.conn();
        let slot = conn.slot();
        let generation = conn.generation();
        let Some(window) = self
            .slots
            .get_mut(slot.index())
            .filter(|_| conn.sink == self.id)
        else {
            self.metrics.stale_inputs += 1;
            return Handled::Ignored(Ignored::Stale);
        };
        // A connection half-closed at shutdown or eviction: only its end matters.
        if window.closing.is_some_and(|(c, _)| c == generation) {
            return match input {
                Input::Closed { .. } | Input::Failed { .. } => {
                    window.closing = None;
                    self.outputs.push_back(Output::Close {
                        conn,
                        graceful: false,
                    });
                    Handled::Applied
                }
                _ => Handled::Ignored(Ignored::NoProgress),
            };
        }
        if window.phase.conn() != Some(generation) {
            self.metrics.stale_inputs += 1;
            return Handled::Ignored(Ignored::Stale);
        }
        match input {
            Input::Result { result, .. } => self.on_result(now, slot, generation, result),
            Input::Unreadable { reason, .. } => {
                if matches!(window.phase, Phase::Opening { .. }) {
                    self.unexpected_first(now, slot, generation, reason)
                } else {
                    Handled::Ignored(Ignored::Unreadable { reason })
                }
            }
            Input::Closed { .. } => {
                if matches!(window.phase, Phase::Opening { .. }) {
                    let error = StreamError::status(Code::Internal, "the call ended before READY");
                    self.on_stream_error(now, slot, error);
                } else {
                    self.on_server_closed(now, slot);
                }
                Handled::Applied
            }
            Input::Failed { error, .. } => {
                self.on_stream_error(now, slot, error.normalized());
                Handled::Applied
            }
        }
    }

    /// A `PutResult` on the slot's live (or opening) connection.
    fn on_result(
        &mut self,
        now: Time,
        slot: SlotId,
        generation: ConnGen,
        result: PutResultMeta,
    ) -> Handled {
        let window = &mut self.slots[slot.index()];
        if matches!(window.phase, Phase::Opening { .. }) {
            if result.ack_up_to_offset != -1 {
                let detail = format!("{result:?}");
                return self.unexpected_first(now, slot, generation, detail);
            }
            window.on_ready(now, generation);
            let epoch = window.opened_epoch;
            let t = &mut self.tables[window.table().index()];
            if epoch == t.cred_epoch {
                t.refresh_unproven = false;
            }
            t.ready_since.get_or_insert(now);
            return Handled::Applied;
        }
        let mut handled = if result.ack_up_to_offset == -1
            && result.ack_up_to_records == 0
            && result.close_stream_duration_ms.is_none()
        {
            Handled::Ignored(Ignored::DuplicateReady)
        } else if result.ack_up_to_records == 0 {
            Handled::Ignored(Ignored::NoProgress)
        } else {
            self.apply_ack(now, slot, generation, result.ack_up_to_records)
        };
        // A violation ended the connection: a rotation request beside it has nothing left to
        // rotate.
        if let Some(ms) = result.close_stream_duration_ms
            && !matches!(handled, Handled::Violation(_))
        {
            let grace = std::time::Duration::from_millis(ms);
            handled = if self.on_rotate(now, slot, grace) {
                Handled::Applied
            } else if handled == Handled::Applied {
                handled
            } else {
                Handled::Ignored(Ignored::RotationWhileDraining)
            };
        }
        handled
    }

    /// An ack of `records` (above zero) on the slot's READY or draining connection `generation`.
    fn apply_ack(&mut self, now: Time, slot: SlotId, generation: ConnGen, records: u64) -> Handled {
        let window = &mut self.slots[slot.index()];
        match window.on_ack(now, generation, records, &mut self.outputs) {
            AckOutcome::Nothing(why) => Handled::Ignored(why),
            AckOutcome::Progress(count) => {
                window.failures = 0;
                if count > 0
                    && let Some(Output::Confirmed(burst)) = self.outputs.back()
                {
                    self.metrics.acks_applied += 1;
                    self.metrics.coalesce.record(count as u64);
                    self.ended += count as u64;
                    for c in burst.iter() {
                        let latency = c.confirmed_at().saturating_since(c.submitted_at());
                        self.metrics
                            .delivery_latency_us
                            .record(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
                    }
                }
                Handled::Applied
            }
            AckOutcome::Violation(error) => {
                self.metrics.protocol_errors += 1;
                self.on_forward_ack(now, slot, error.clone());
                Handled::Violation(error)
            }
        }
    }

    /// The steady state's input, recognised without the general dispatch: an ack of some rows,
    /// with no rotation request, on a slot's READY connection (not one half-closed). Returns
    /// the slot, the connection and the cumulative rows acked, for
    /// [`steady_ack`](Self::steady_ack). `None` when the input is anything else, or the fast
    /// path is off; [`on_input`](Self::on_input) then decides it, by the same rules (the
    /// testkit's differential property compares the two, input by input).
    #[inline]
    pub(super) fn as_steady_ack(&self, input: &Input<L>) -> Option<(SlotId, ConnGen, u64)> {
        let Input::Result { conn, result } = input else {
            return None;
        };
        if !self.sched.enabled() {
            return None;
        }
        let (slot, generation) = (conn.slot(), conn.generation());
        let window = self.slots.get(slot.index())?;
        let steady = conn.sink == self.id
            && result.ack_up_to_records > 0
            && result.close_stream_duration_ms.is_none()
            && matches!(window.phase, Phase::Ready(live) if live.conn == generation)
            && window.closing.is_none_or(|(c, _)| c != generation);
        steady.then_some((slot, generation, result.ack_up_to_records))
    }

    /// Applies a steady state's ack ([`as_steady_ack`](Self::as_steady_ack)).
    #[inline]
    pub(super) fn steady_ack(
        &mut self,
        now: Time,
        slot: SlotId,
        generation: ConnGen,
        records: u64,
    ) -> Handled {
        let handled = self.apply_ack(now, slot, generation, records);
        self.after_input(slot, true, generation);
        handled
    }

    /// The first response was not READY: the connection fails (retryable, as the official
    /// client's `UnexpectedStreamResponseError`).
    fn unexpected_first(
        &mut self,
        now: Time,
        slot: SlotId,
        generation: ConnGen,
        detail: String,
    ) -> Handled {
        self.metrics.protocol_errors += 1;
        let error = ProtocolError::UnexpectedFirstResponse {
            slot,
            conn: generation,
            detail,
        };
        self.metrics.transient_failures += 1;
        self.restart(now, slot, error.clone().into(), false);
        Handled::Violation(error)
    }
}
