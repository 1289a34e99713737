//! A batch against its schema's plan, wherever it is checked: on the handle for a schema it
//! knows (the batch is then handed over once, checked), or in the driver for a schema's first
//! batch.

use std::sync::Arc;

use arrow_array::RecordBatch;
use zerobus_sink::{Lane, Token};

use super::apply::{Origin, RowIds};
use super::rows::{self, Verdict};
use super::{BadRows, IsolatedRows, Plan};
use crate::error::SendError;

/// What goes to the core, or why nothing does.
pub(crate) enum Judged<L: Lane> {
    /// The batch (its good rows, if some were isolated) with its stamps.
    Go {
        batch: RecordBatch,
        token: Token<L>,
        /// Where the rows came from (stamped on each), for a plan that converts.
        origin: Option<Arc<Origin>>,
        /// The rows' indices in the batch as sent.
        rows: RowIds,
        /// The rows isolated from it, for the confirmer (before the token is confirmed).
        isolated: Option<IsolatedRows<L>>,
    },
    /// The batch fails whole ([`SendError::BadRows`]), logged here.
    Refused(SendError<L>),
}

/// Checks `batch`'s rows under `plan` and `policy` for `table`.
pub(crate) fn judged<L: Lane>(
    plan: &Plan,
    batch: RecordBatch,
    token: Token<L>,
    max_row_bytes: u64,
    policy: BadRows,
    table: &str,
) -> Judged<L> {
    let verdict = rows::judge(plan, &batch, max_row_bytes, policy).unwrap_or_else(|e| {
        // The cast the plan chose failed outright: the service will name it.
        tracing::error!(table, error = %e, "checking a batch's rows");
        Verdict::Clean
    });
    let origin = (!plan.identity).then(|| Arc::new(Origin::of(token.position())));
    match verdict {
        Verdict::Clean => Judged::Go {
            batch,
            token,
            origin,
            rows: RowIds::From(0),
            isolated: None,
        },
        Verdict::Isolate {
            good,
            ids,
            bad,
            faults,
        } => Judged::Go {
            batch: good,
            isolated: Some(IsolatedRows {
                position: token.position().clone(),
                batch: bad,
                faults,
            }),
            token,
            origin,
            rows: RowIds::Listed(ids, 0),
        },
        Verdict::Fail(faults) => {
            tracing::warn!(
                table,
                rows = super::rows_named(&faults),
                faults = %super::describe(&faults),
                "batch refused before send: rows the table would refuse"
            );
            Judged::Refused(SendError::BadRows {
                table: table.to_owned(),
                faults,
                batch,
                token,
            })
        }
    }
}
