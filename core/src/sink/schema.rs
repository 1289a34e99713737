//! Tables provisioned through a catalog ([`TableSpec::reconciled`](crate::TableSpec)): every
//! new batch schema is reconciled with the table before any batch of it is given to a stream.
//!
//! - A batch of a schema the table has not seen is admitted to the table's queue and the core
//!   asks for one reconcile at a time ([`Output::Reconcile`]); the answer comes back through
//!   [`SinkCore::reconciled`]. Until then no batch of that schema leaves the queue, and a table
//!   with no reconciled schema opens no stream: nothing reaches a stream of a table whose
//!   schema was not reconciled.
//! - Each connection is opened for one schema ([`Output::Open`]'s `schema`) and sends only
//!   batches of it. When a slot's next batch has another (reconciled) schema, the slot drains
//!   what it sent, half-closes and reopens for the new schema at once (the rotation path: no
//!   backoff, nothing failed). Earlier batches confirm in order as before.
//! - A refused schema hands its queued batches back ([`FailureReason::SchemaRefused`]) and
//!   refuses later ones at admission; the table keeps serving its other schemas.
//! - A request unanswered after `reconcile_timeout` is asked again, so a driver that lost one
//!   cannot stall the table (liveness).
//! - A schema no batch refers to any more is retired on the driver's word
//!   ([`SinkCore::retire_schema`]): a table that drifts for months keeps only the schemas its
//!   pending batches and its idle streams need, and so can the driver's plans.

use std::collections::VecDeque;

use crate::batch::Batch;
use crate::error::{FailureReason, RejectReason};
use crate::event::{Failed, FailedBatch, Handled, Ignored, Output};
use crate::ids::{SchemaId, SlotId, TableId};
use crate::lane::Lane;
use crate::time::Time;
use crate::window::{Drain, Phase};

use super::SinkCore;

/// One table's schemas.
#[derive(Debug, Default)]
pub(crate) struct Schemas {
    /// Reconciled with the table: streams may be opened for them (an evolution only adds
    /// nullable columns, so an earlier schema stays writable).
    ok: Vec<SchemaId>,
    /// Refused by the catalog, with its words.
    refused: Vec<(SchemaId, String)>,
    /// Seen in admitted batches and not yet answered, in order of first admission.
    wanted: VecDeque<SchemaId>,
    /// The request outstanding and when it was (last) made.
    asked: Option<(SchemaId, Time)>,
    /// The most recently reconciled schema: what a slot with nothing to send opens with.
    latest: Option<SchemaId>,
}

impl Schemas {
    pub(crate) fn is_ok(&self, schema: SchemaId) -> bool {
        self.ok.contains(&schema)
    }

    /// Whether any schema is reconciled (the table may open streams).
    pub(crate) fn any_ok(&self) -> bool {
        self.latest.is_some()
    }

    /// When the outstanding request is due to be asked again.
    pub(crate) fn ask_again_at(&self, timeout: std::time::Duration) -> Option<Time> {
        self.asked.map(|(_, at)| at + timeout)
    }
}

impl<L: Lane, B: Batch> SinkCore<L, B> {
    /// Why a batch of `schema` cannot be admitted to a reconciled table, if it cannot.
    pub(super) fn schema_refusal(&self, table: TableId, schema: SchemaId) -> Option<RejectReason> {
        let t = self.tables.get(table.index())?;
        let (_, reason) = t.schemas.refused.iter().find(|(s, _)| *s == schema)?;
        Some(RejectReason::SchemaRefused {
            table,
            schema,
            reason: reason.clone(),
        })
    }

    /// Records an admitted batch's schema: a new one is wanted.
    pub(super) fn note_schema(&mut self, table: TableId, schema: SchemaId) {
        let s = &mut self.tables[table.index()].schemas;
        if !s.is_ok(schema) && !s.wanted.contains(&schema) {
            s.wanted.push_back(schema);
        }
    }

    /// Whether the slot is READY with its next batch to send of another schema than its
    /// connection's, one the table takes: the stream must drain and reopen for it.
    pub(super) fn wants_schema_switch(&self, index: usize) -> bool {
        let Some(window) = self.slots.get(index) else {
            return false;
        };
        let Some(next) = window.next_unplaced_schema().filter(|_| window.is_ready()) else {
            return false;
        };
        next != window.conn_schema && self.tables[window.table().index()].schemas.is_ok(next)
    }

    /// Asks for the next wanted schema of every table with no request outstanding, and asks
    /// again for one unanswered past `reconcile_timeout`.
    pub(super) fn ask_reconciles(&mut self, now: Time) {
        let timeout = self.config.reconcile_timeout;
        for index in 0..self.tables.len() {
            let table = TableId(u16::try_from(index).unwrap_or(u16::MAX));
            let s = &mut self.tables[index].schemas;
            let due = match s.asked {
                None => s.wanted.front().copied(),
                Some((schema, at)) if at + timeout <= now => Some(schema),
                Some(_) => None,
            };
            if let Some(schema) = due {
                s.asked = Some((schema, now));
                self.metrics.reconciles_asked += 1;
                self.outputs.push_back(Output::Reconcile { table, schema });
            }
        }
    }

    /// The driver's answer to an [`Output::Reconcile`]: `Ok` once the table takes batches of
    /// `schema` (created or evolved, and the sink registered as a writer); `Err` with the
    /// catalog's words (every refusal, each naming its column) when it refused. A refusal
    /// hands back the table's queued batches of that schema; they are never sent.
    ///
    /// Only an answer to the question outstanding (the last [`Output::Reconcile`] for the
    /// table, not yet answered) is applied ([`Handled::Applied`]). Every other answer changes
    /// nothing and says why: one for a schema the table has seen but not yet been asked about
    /// is ahead of its question ([`Ignored::NotAsked`]); one for a schema already answered is
    /// a duplicate or late ([`Ignored::AlreadyAnswered`]), so that it can never stand for a
    /// newer question; one for a schema never seen (or a table the sink does not have, or one
    /// taken as it is) is [`Ignored::UnknownSchema`].
    pub fn reconciled(
        &mut self,
        now: Time,
        table: TableId,
        schema: SchemaId,
        outcome: Result<(), String>,
    ) -> Handled {
        let Some(t) = self.tables.get_mut(table.index()) else {
            return Handled::Ignored(Ignored::UnknownSchema);
        };
        let s = &mut t.schemas;
        if s.asked.is_none_or(|(asked, _)| asked != schema) {
            let answered = s.is_ok(schema) || s.refused.iter().any(|(r, _)| *r == schema);
            let why = if answered {
                Ignored::AlreadyAnswered
            } else if s.wanted.contains(&schema) {
                Ignored::NotAsked
            } else {
                Ignored::UnknownSchema
            };
            return Handled::Ignored(why);
        }
        s.asked = None;
        s.wanted.retain(|w| *w != schema);
        self.sched.owe_full_pass();
        t.last_used = t.last_used.max(now);
        match outcome {
            Ok(()) => {
                s.ok.push(schema);
                s.latest = Some(schema);
                self.metrics.reconciles_ok += 1;
            }
            Err(reason) => {
                s.refused.push((schema, reason.clone()));
                self.metrics.schemas_refused += 1;
                let failure = FailureReason::SchemaRefused {
                    table,
                    schema,
                    reason,
                };
                if let Some(failed) = self.fail_queued_of(table, schema, failure) {
                    self.ended += failed.batches.len() as u64;
                    self.outputs.push_back(Output::Failed(failed));
                }
            }
        }
        Handled::Applied
    }

    /// Forgets `schema` of `table` (reconciled or refused), so that the driver may drop what
    /// it keeps for it (its plan, its wire schema): the table's memory of its schemas stays
    /// bounded however often the source drifts. Applied only when nothing can need the schema
    /// again: no batch of it is queued or pending on any of the table's streams (a replay
    /// reopens with its oldest pending batch's schema), no question about it is outstanding
    /// or wanted, and it is not the table's latest (an idle stream opens with that);
    /// otherwise [`Ignored::SchemaInUse`], changing nothing. A schema the table has not
    /// answered for is [`Ignored::UnknownSchema`].
    ///
    /// A batch of a retired schema submitted later is a new schema to the core: it is
    /// reconciled again before it is sent (the driver gives a schema it dropped a new id).
    pub fn retire_schema(&mut self, table: TableId, schema: SchemaId) -> Handled {
        let Some(t) = self.tables.get(table.index()) else {
            return Handled::Ignored(Ignored::UnknownSchema);
        };
        let s = &t.schemas;
        let refused = s.refused.iter().position(|(r, _)| *r == schema);
        if !s.is_ok(schema) && refused.is_none() {
            return Handled::Ignored(Ignored::UnknownSchema);
        }
        let in_use = s.latest == Some(schema)
            || s.asked.is_some_and(|(a, _)| a == schema)
            || s.wanted.contains(&schema)
            || t.queue.iter().any(|q| q.schema == schema)
            || t.slots().any(|i| self.slots[i].holds_schema(schema));
        if in_use {
            return Handled::Ignored(Ignored::SchemaInUse);
        }
        let s = &mut self.tables[table.index()].schemas;
        s.ok.retain(|o| *o != schema);
        if let Some(i) = refused {
            s.refused.swap_remove(i);
        }
        Handled::Applied
    }

    /// Hands back the table's queued batches of `schema` (in order; the others keep theirs).
    fn fail_queued_of(
        &mut self,
        table: TableId,
        schema: SchemaId,
        reason: FailureReason,
    ) -> Option<Failed<L, B>> {
        let t = self.tables.get_mut(table.index())?;
        let mut batches = Vec::new();
        let mut kept = VecDeque::with_capacity(t.queue.len());
        while let Some(q) = t.queue.pop_front() {
            if q.schema == schema {
                t.queued.remove(q.rows, q.bytes);
                t.failed_unassigned += 1;
                batches.push(FailedBatch {
                    offset: None,
                    batch: q.batch,
                    token: q.token,
                    durable_rows: 0,
                });
            } else {
                kept.push_back(q);
            }
        }
        t.queue = kept;
        (!batches.is_empty()).then_some(Failed {
            table,
            slot: None,
            reason,
            batches,
        })
    }

    /// The schema a new connection of `slot` is opened with: its oldest pending batch's (the
    /// replay), else the table's latest reconciled one.
    pub(super) fn open_schema(&self, slot: SlotId) -> crate::ids::SchemaId {
        let window = &self.slots[slot.index()];
        let t = &self.tables[window.table().index()];
        if !t.spec.reconciled {
            return SchemaId(0);
        }
        window
            .first_schema()
            .filter(|s| t.schemas.is_ok(*s))
            .or(t.schemas.latest)
            .unwrap_or_default()
    }

    /// READY slots whose next batch has another reconciled schema than their connection's
    /// drain and reopen for it (the rotation path: wait for acks, half-close, reopen at once).
    pub(super) fn switch_schemas(&mut self, now: Time) {
        for index in 0..self.slots.len() {
            if !self.wants_schema_switch(index) {
                continue;
            }
            let Phase::Ready(live) = self.slots[index].phase else {
                continue;
            };
            self.metrics.schema_switches += 1;
            let until = now + self.config.retry.drain_budget;
            self.slots[index].phase = Phase::Draining {
                live,
                until,
                why: Drain::Rotation { half_closed: false },
            };
        }
    }
}
