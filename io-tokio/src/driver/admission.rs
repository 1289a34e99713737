//! Admission: what happens to a send before the core sees it. A table's first batch of each
//! schema waits while the schema is planned (provisioned tables: the table described and
//! reconciled in a task, [`crate::provision`]); every batch then passes the write boundary
//! ([`crate::boundary`]): bad rows fail the batch or are isolated, and what remains goes to
//! the core with its stamps (origin, row indices).

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use zerobus_sink::{
    Admitted, FailureReason, Lane, RejectReason, Route, SchemaId, TableId, Time, Token,
};
use zerobus_sink_catalog::TableCatalog;

use super::{Blocked, Driver, Pending, Planned, Tagged};
use crate::boundary::apply::{Origin, RowIds};
use crate::boundary::check::{self, Judged};
use crate::boundary::{self, ColumnRefusal, IsolatedRows, Plan};
use crate::config::role_of;
use crate::confirmer::Confirmer;
use crate::conn::TableWire;
use crate::driver::command::{Ask, Handoff};
use crate::error::{DeliveryError, SendError};
use crate::provision::{self, Answer};

impl<L: Lane, C: Confirmer<L>, P: TableCatalog + Send + Sync + 'static> Driver<L, C, P> {
    /// A batch from the handle.
    pub(super) fn take(&mut self, now: Time, handoff: Handoff<L>) {
        match handoff {
            Handoff::Ask(ask) => self.submit(now, ask),
            Handoff::Checked(c) => {
                if let Some(rows) = c.isolated {
                    self.isolated(c.route.table(), rows);
                }
                let tagged = self.tag(c.batch, c.route, c.origin, c.rows, Some(c.plan));
                let pending = Pending {
                    receipt: c.receipt,
                    reply: None,
                    plan: None,
                };
                self.admit(now, tagged, c.token, pending);
            }
        }
    }

    /// A batch the handle waits for: its schema's plan (asked for at the schema's first
    /// batch, which waits for it as for a full window), the write boundary's checks, then the
    /// core; the answer carries the plan, which the handle applies to the schema's later
    /// batches itself.
    pub(super) fn submit(&mut self, now: Time, s: Ask<L>) {
        let table = s.route.table();
        let key = (table, s.route.schema_id());
        let closed = self.closing.is_some() || self.handle_gone;
        if !closed {
            match self.shapes.plans.get(&key) {
                Some(Planned::Asking) => {
                    self.blocked = Some(Blocked::Unplanned(s));
                    return;
                }
                None if self.provisioning.is_some() => {
                    self.ask(key, s.batch.schema());
                    self.blocked = Some(Blocked::Unplanned(s));
                    return;
                }
                _ => {}
            }
        }
        let Ask {
            route,
            batch,
            token,
            receipt,
            reply,
        } = s;
        let mut pending = Pending {
            receipt,
            reply: Some(reply),
            plan: None,
        };
        let plan = match self.shapes.plans.get(&key) {
            Some(Planned::Ready(plan, _)) if !closed => plan.clone(),
            Some(Planned::Refused(columns)) if !closed => {
                let error = SendError::Unreconcilable {
                    table: self.table_name(table),
                    columns: columns.clone(),
                    batch,
                    token,
                };
                return self.refuse(route, pending, error);
            }
            None if !closed && self.provisioning.is_none() => match self.wire(table) {
                Some(wire) => {
                    let plan = Arc::new(Plan::identity(&wire.schema));
                    self.shapes
                        .plans
                        .insert(key, Planned::Ready(plan.clone(), wire));
                    plan
                }
                None => {
                    // The core names the unknown table.
                    let tagged = self.tag(batch, route, None, RowIds::From(0), None);
                    return self.admit(now, tagged, token, pending);
                }
            },
            _ => {
                // Closed: the core refuses it, whatever its schema.
                let tagged = self.tag(batch, route, None, RowIds::From(0), None);
                return self.admit(now, tagged, token, pending);
            }
        };
        pending.plan = Some(plan.clone());
        let name = self.table_name(table);
        let policy = self
            .definitions
            .get(table.index())
            .map(|d| d.bad_rows)
            .unwrap_or_default();
        match check::judged(&plan, batch, token, self.max_row_bytes, policy, &name) {
            Judged::Go {
                batch,
                token,
                origin,
                rows,
                isolated,
            } => {
                if let Some(isolated) = isolated {
                    self.isolated(table, isolated);
                }
                let tagged = self.tag(batch, route, origin, rows, Some(plan));
                self.admit(now, tagged, token, pending);
            }
            Judged::Refused(error) => {
                self.refused_rows(table, &error);
                self.refuse(route, pending, error);
            }
        }
    }

    /// Rows isolated from a batch: counted, logged, and given to the confirmer (before the
    /// batch's token is confirmed).
    fn isolated(&mut self, table: TableId, rows: IsolatedRows<L>) {
        let name = self.table_name(table);
        let n = rows.batch.num_rows() as u64;
        self.report.bad_rows(table, n, true);
        self.telemetry.bad_rows(table, n, true);
        tracing::warn!(
            table = %name,
            rows = n,
            faults = %boundary::describe(&rows.faults),
            "rows isolated before send"
        );
        self.confirmer.isolated(&name, rows);
    }

    /// A batch refused for its rows, counted (the handle's refusals arrive as
    /// [`Control::BadRows`](crate::driver::command::Control)).
    pub(super) fn refused_rows(&mut self, table: TableId, error: &SendError<L>) {
        if let SendError::BadRows { faults, .. } = error {
            let rows = boundary::rows_named(faults) as u64;
            self.report.bad_rows(table, rows, false);
            self.telemetry.bad_rows(table, rows, false);
        }
    }

    fn tag(
        &mut self,
        batch: RecordBatch,
        route: Route,
        origin: Option<Arc<Origin>>,
        rows: RowIds,
        plan: Option<Arc<Plan>>,
    ) -> Tagged {
        let id = self.next_id;
        self.next_id += 1;
        Tagged {
            batch,
            id,
            route,
            origin,
            rows,
            plan,
        }
    }

    /// A batch refused before the core: the error goes back to `send` if it waits; if nobody
    /// waits for it (the handle handed it over checked, or the future was dropped), the batch
    /// goes to the confirmer's `failed` and its receipt fails, so that its token is never
    /// lost.
    fn refuse(&mut self, route: Route, pending: Pending<L>, error: SendError<L>) {
        let error = match pending.reply {
            Some(reply) => match reply.send(Err(error)) {
                Ok(()) => return,
                Err(Err(error)) => error,
                Err(Ok(_)) => return,
            },
            None => error,
        };
        let table = route.table();
        let reason = match &error {
            SendError::Rejected { reason, .. } => reason.clone(),
            SendError::Unreconcilable { .. } => RejectReason::SchemaRefused {
                table,
                schema: route.schema_id(),
                reason: error.to_string(),
            },
            other => RejectReason::BadRows {
                table,
                detail: other.to_string(),
            },
        };
        if let Some((batch, token)) = error.into_parts() {
            let reason = self.not_admitted(table, reason);
            self.hand_over(table, batch, token, 0, None, &reason);
            let _ = pending.receipt.send(Err(DeliveryError::Failed {
                reason,
                durable_rows: 0,
            }));
        }
    }

    /// Why a batch the core refused comes back. A table that failed with nothing in flight
    /// handed nothing back, so neither the handle's flag nor the confirmer has heard: the
    /// flag is set here (the handle's next `send` asks, and returns the refusal), and the
    /// batch comes back with the table's own failure, as the batches in flight did.
    pub(super) fn not_admitted(&mut self, table: TableId, reason: RejectReason) -> FailureReason {
        if let RejectReason::TableFailed { .. } = reason
            && let Some(error) = self.core.table_failure(table)
        {
            self.flags.fail(table);
            return FailureReason::TableFailed {
                table,
                error: error.clone(),
            };
        }
        FailureReason::NotAdmitted { table, reason }
    }

    /// Gives a checked batch to the core.
    fn admit(&mut self, now: Time, tagged: Tagged, token: Token<L>, pending: Pending<L>) {
        let id = tagged.id;
        let route = tagged.route;
        match self.core.submit(now, route, tagged, token) {
            Ok(Admitted { .. }) => {
                self.telemetry.backpressured = None;
                self.receipts.insert(id, pending.receipt);
                if let Some(reply) = pending.reply {
                    // If the sender has given up waiting, the token still reaches the
                    // confirmer.
                    let _ = reply.send(Ok(pending.plan));
                }
            }
            Err(rejected) if matches!(rejected.reason, RejectReason::Full { .. }) => {
                // The backpressure: hold the batch (and stop taking hand-offs, so that the
                // handle's channel fills and `send` waits) until the window has room.
                // Reports, flushes and closes still get through.
                self.telemetry.blocked(route.table());
                self.blocked = Some(Blocked::Full {
                    tagged: rejected.batch,
                    token: rejected.token,
                    pending,
                });
            }
            Err(rejected) => {
                let error = SendError::Rejected {
                    reason: rejected.reason,
                    batch: rejected.batch.batch,
                    token: rejected.token,
                };
                self.refuse(route, pending, error);
            }
        }
    }

    pub(super) fn retry_blocked(&mut self, now: Time) {
        match self.blocked.take() {
            Some(Blocked::Unplanned(s)) => self.submit(now, s),
            Some(Blocked::Full {
                tagged,
                token,
                pending,
            }) => self.admit(now, tagged, token, pending),
            None => {}
        }
    }

    /// The core asks whether a schema's batches may go: the driver knows (it planned the
    /// schema before admitting its first batch).
    pub(super) fn reconcile(&mut self, now: Time, table: TableId, schema: SchemaId) {
        let outcome = match self.shapes.plans.get(&(table, schema)) {
            Some(Planned::Ready(..)) => Ok(()),
            Some(Planned::Refused(columns)) => Err(boundary::joined(columns, usize::MAX)),
            // Still asking: the core asks again after its reconcile timeout.
            _ => return,
        };
        let _ = self.core.reconciled(now, table, schema, outcome);
    }

    /// Describes and reconciles the table for a new batch schema in a task; the answer comes
    /// back on `answers`. A catalog that cannot be reached is asked again, backing off, until
    /// it answers (the schema's first send waits; reports and closes do not).
    pub(super) fn ask(&mut self, key: (TableId, SchemaId), batch_schema: SchemaRef) {
        let Some(p) = self.provisioning.clone() else {
            return;
        };
        let (table, schema) = key;
        self.shapes.batch.insert(key, batch_schema.clone());
        self.shapes.plans.insert(key, Planned::Asking);
        let d = self
            .definitions
            .get(table.index())
            .cloned()
            .unwrap_or_default();
        let request = provision::Request {
            table: self.table_name(table),
            schema: batch_schema,
            contract: d.contract,
            role: role_of(d.primary_raw.is_some()),
            conversions: d.conversions,
            register: !self.shapes.registered.contains(&table),
        };
        tracing::debug!(table = %request.table, %schema, "reconciling");
        let answers = self.answers_tx.clone();
        let quiescer = provision::Quiescer {
            table,
            tx: self.quiesce_tx.clone(),
            publication_wait: p.publication_wait,
        };
        let span = tracing::info_span!("table", table = %request.table);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let mut wait = Duration::from_secs(1);
                let answer = loop {
                    let answer =
                        provision::reconcile(&p.catalog, &p.sink, &p.policy, &request, &quiescer)
                            .await;
                    if answer.is_some() {
                        break answer;
                    }
                    if answers.is_closed() {
                        // The sink has stopped: nobody waits for this schema any more.
                        return;
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(30));
                };
                let _ = answers.send((table, schema, answer));
            },
            span,
        ));
    }

    /// A reconcile's answer: the schema's plan, or every refusal.
    pub(super) fn answered(&mut self, table: TableId, schema: SchemaId, answer: Answer) {
        let Some(answer) = answer else {
            return;
        };
        let name = self.table_name(table);
        let planned = match answer {
            Ok((live, executed)) => {
                self.shapes.registered.insert(table);
                let Some(batch_schema) = self.shapes.batch.get(&(table, schema)) else {
                    return;
                };
                let conversions = self
                    .definitions
                    .get(table.index())
                    .map(|d| d.conversions)
                    .unwrap_or_default();
                match Plan::new(batch_schema, &live, conversions) {
                    Ok(plan) => {
                        let kinds: Vec<_> = plan.kinds().collect();
                        self.report.planned(table, kinds.iter().copied(), [].iter());
                        self.telemetry.planned(table, &kinds, 0);
                        tracing::info!(table = %name, %schema, ?executed, "table reconciled");
                        let wire = Arc::new(TableWire {
                            name: name.clone(),
                            schema: plan.schema.clone(),
                            provisioned: true,
                        });
                        Planned::Ready(Arc::new(plan), wire)
                    }
                    Err(refusals) => Planned::Refused(refusals),
                }
            }
            Err(refusals) => Planned::Refused(refusals),
        };
        if let Planned::Refused(refusals) = &planned {
            self.report
                .planned(table, std::iter::empty(), refusals.iter());
            let kinds: Vec<_> = refusals.iter().map(ColumnRefusal::kind).collect();
            let loud = refusals.iter().filter(|r| r.is_loud()).count() as u64;
            self.telemetry.planned(table, &kinds, loud);
            tracing::error!(
                table = %name,
                %schema,
                refused = %boundary::joined(refusals, usize::MAX),
                "schema refused; its batches come back from send"
            );
        }
        self.report
            .reconciled(table, matches!(planned, Planned::Ready(..)));
        self.shapes.plans.insert((table, schema), planned);
        if !self.shapes.retiring.is_empty() {
            self.sweep_schemas();
        }
    }
}
