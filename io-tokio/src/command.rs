//! What the handle asks of the driver: the one vocabulary both sides share, at the bottom of
//! the crate (the handle depends on it and on nothing of the driver's insides).

use std::time::Duration;

use arrow_array::RecordBatch;
use tokio::sync::oneshot;
use zerobus_sink::{Lane, Route, Token};

use crate::error::{FlushError, SendError};
use crate::health::SinkHealth;
use crate::receipt::Receipt;
use crate::report::Report;

/// A batch to admit. Its reply carries the receipt or the refusal; if nobody waits for the
/// reply any more (the `send` future was dropped), a refused batch goes to the confirmer's
/// `failed`, so that its token is never lost.
pub(crate) struct Submit<L: Lane> {
    pub(crate) route: Route,
    pub(crate) batch: RecordBatch,
    pub(crate) token: Token<L>,
    pub(crate) reply: oneshot::Sender<Result<Receipt, SendError<L>>>,
}

/// Everything else. These travel on their own channel, which the driver reads even while a
/// `send` waits for room in a full window: a report or a close never queues behind it.
pub(crate) enum Control {
    Flush(oneshot::Sender<Result<(), FlushError>>),
    Report(oneshot::Sender<Report>),
    Health(oneshot::Sender<SinkHealth>),
    Close {
        within: Duration,
        reply: oneshot::Sender<Report>,
    },
}

impl<L: Lane> std::fmt::Debug for Submit<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submit")
            .field("table", &self.route.table())
            .field("rows", &self.batch.num_rows())
            .field("token", &self.token)
            .finish()
    }
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Control::Flush(_) => "Flush",
            Control::Report(_) => "Report",
            Control::Health(_) => "Health",
            Control::Close { .. } => "Close",
        })
    }
}
