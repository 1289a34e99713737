//! Admission: what happens to a send before the core sees it. A table's first batch of each
//! schema waits while the schema is planned (provisioned tables: the table described and
//! reconciled in a task, [`crate::provision`]); every batch then passes the write boundary
//! ([`crate::boundary`]): bad rows fail the batch or are isolated, and what remains goes to
//! the core with its stamps (origin, row indices).

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use tokio::sync::oneshot;
use zerobus_sink::{
    Admitted, FailureReason, Lane, RejectReason, Route, SchemaId, TableId, Time, Token,
};
use zerobus_sink_catalog::TableCatalog;

use super::{Blocked, Driver, Planned, Tagged};
use crate::boundary::ColumnRefusal;
use crate::boundary::apply::{Origin, RowIds};
use crate::boundary::rows::{self, Verdict};
use crate::boundary::{self, IsolatedRows, Plan};
use crate::command::Submit;
use crate::config::role_of;
use crate::confirmer::Confirmer;
use crate::conn::TableWire;
use crate::error::SendError;
use crate::provision::{self, Answer};
use crate::receipt::Receipt;

impl<L: Lane, C: Confirmer<L>, P: TableCatalog + Send + Sync + 'static> Driver<L, C, P> {
    /// A send from the handle: its schema's plan (asked for at the schema's first batch, which
    /// waits for it as for a full window), the write boundary's checks, then the core.
    pub(super) fn submit(&mut self, now: Time, s: Submit<L>) {
        let table = s.route.table();
        if self.closing.is_some() || self.handle_gone {
            // The core refuses it as closed, whatever its schema.
            let tagged = self.tag(s.batch, s.route, None, RowIds::From(0));
            return self.admit(now, tagged, s.token, s.reply);
        }
        let key = (table, s.route.schema_id());
        let plan = match self.shapes.plans.get(&key) {
            Some(Planned::Ready(plan, _)) => plan.clone(),
            Some(Planned::Refused(columns)) => {
                let error = SendError::Unreconcilable {
                    table: self.table_name(table),
                    columns: columns.clone(),
                    batch: s.batch,
                    token: s.token,
                };
                return self.refuse(s.route, s.reply, error);
            }
            Some(Planned::Asking) => {
                self.blocked = Some(Blocked::Unplanned(s));
                return;
            }
            None if self.provisioning.is_some() => {
                self.ask(key, s.batch.schema());
                self.blocked = Some(Blocked::Unplanned(s));
                return;
            }
            None => {
                let Some(wire) = self.wire(table) else {
                    // The core names the unknown table.
                    let tagged = self.tag(s.batch, s.route, None, RowIds::From(0));
                    return self.admit(now, tagged, s.token, s.reply);
                };
                let plan = Arc::new(Plan::identity(&wire.schema));
                self.shapes
                    .plans
                    .insert(key, Planned::Ready(plan.clone(), wire));
                plan
            }
        };
        let name = self.table_name(table);
        let policy = self
            .definitions
            .get(table.index())
            .map(|d| d.bad_rows)
            .unwrap_or_default();
        let verdict =
            rows::judge(&plan, &s.batch, self.max_row_bytes, policy).unwrap_or_else(|e| {
                // The cast the plan chose failed outright: the service will name it.
                tracing::error!(table = %name, error = %e, "checking a batch's rows");
                Verdict::Clean
            });
        let origin = (!plan.identity).then(|| Arc::new(Origin::of(s.token.position())));
        let faults = match verdict {
            Verdict::Clean => {
                let tagged = self.tag(s.batch, s.route, origin, RowIds::From(0));
                return self.admit(now, tagged, s.token, s.reply);
            }
            Verdict::Isolate {
                good,
                ids,
                bad,
                faults,
            } => {
                self.report.bad_rows(table, bad.num_rows() as u64, true);
                self.telemetry.bad_rows(table, bad.num_rows() as u64, true);
                tracing::warn!(
                    table = %name,
                    rows = bad.num_rows(),
                    faults = %boundary::describe(&faults),
                    "rows isolated before send"
                );
                let isolated = IsolatedRows {
                    position: s.token.position().clone(),
                    batch: bad,
                    faults,
                };
                // The confirmer first: the token's confirmation comes after.
                self.confirmer.isolated(&name, isolated);
                let tagged = self.tag(good, s.route, origin, RowIds::Listed(ids, 0));
                return self.admit(now, tagged, s.token, s.reply);
            }
            Verdict::Fail(faults) => faults,
        };
        let rows = boundary::rows_named(&faults);
        self.report.bad_rows(table, rows as u64, false);
        self.telemetry.bad_rows(table, rows as u64, false);
        tracing::warn!(
            table = %name,
            rows,
            faults = %boundary::describe(&faults),
            "batch refused before send: rows the table would refuse"
        );
        let error = SendError::BadRows {
            table: name,
            faults,
            batch: s.batch,
            token: s.token,
        };
        self.refuse(s.route, s.reply, error);
    }

    fn tag(
        &mut self,
        batch: RecordBatch,
        route: Route,
        origin: Option<Arc<Origin>>,
        rows: RowIds,
    ) -> Tagged {
        let id = self.next_id;
        self.next_id += 1;
        Tagged {
            batch,
            id,
            route,
            origin,
            rows,
        }
    }

    /// A send refused before the core: the error goes back to `send`; if nobody waits for it
    /// any more (the future was dropped), the batch goes to the confirmer's `failed`, so that
    /// its token is never lost.
    fn refuse(
        &mut self,
        route: Route,
        reply: oneshot::Sender<Result<Receipt, SendError<L>>>,
        error: SendError<L>,
    ) {
        let Err(Err(error)) = reply.send(Err(error)) else {
            return;
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
            let reason = FailureReason::NotAdmitted { table, reason };
            self.hand_over(table, batch, token, 0, None, &reason);
        }
    }

    /// Gives a checked batch to the core.
    fn admit(
        &mut self,
        now: Time,
        tagged: Tagged,
        token: Token<L>,
        reply: oneshot::Sender<Result<Receipt, SendError<L>>>,
    ) {
        let id = tagged.id;
        let route = tagged.route;
        match self.core.submit(now, route, tagged, token) {
            Ok(Admitted { table, seq }) => {
                self.telemetry.backpressured = None;
                let (tx, rx) = oneshot::channel();
                self.receipts.insert(id, tx);
                // If the sender has given up waiting, the token still reaches the confirmer.
                let _ = reply.send(Ok(Receipt::new(table, seq, rx)));
            }
            Err(rejected) if matches!(rejected.reason, RejectReason::Full { .. }) => {
                // The backpressure: hold the send (and stop taking submits) until the window
                // has room. Reports, flushes and closes still get through.
                self.telemetry.blocked(route.table());
                self.blocked = Some(Blocked::Full {
                    tagged: rejected.batch,
                    token: rejected.token,
                    reply,
                });
            }
            Err(rejected) => {
                let error = SendError::Rejected {
                    reason: rejected.reason,
                    batch: rejected.batch.batch,
                    token: rejected.token,
                };
                self.refuse(route, reply, error);
            }
        }
    }

    pub(super) fn retry_blocked(&mut self, now: Time) {
        match self.blocked.take() {
            Some(Blocked::Unplanned(s)) => self.submit(now, s),
            Some(Blocked::Full {
                tagged,
                token,
                reply,
            }) => self.admit(now, tagged, token, reply),
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
        let span = tracing::info_span!("table", table = %request.table);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let mut wait = Duration::from_secs(1);
                let answer = loop {
                    let answer =
                        provision::reconcile(&p.catalog, &p.sink, &p.policy, &request).await;
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
    }
}
