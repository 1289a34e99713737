//! Where tokens come back: [`Confirmer`].

use arrow_array::RecordBatch;
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Lane};

use crate::boundary::IsolatedRows;

/// Receives every token back: confirmed once its batch is durable, or failed with its batch.
/// Generic (the sink is `ZerobusSink<L>` whatever the confirmer); it runs on the driver task,
/// so it must not block.
///
/// Commit positions through [`zerobus_sink::SourceTracker`], never one confirmation at a time:
/// confirmations of one source partition come out of order across a table's streams and
/// tables, and only the tracker knows the unbroken durable run.
pub trait Confirmer<L: Lane>: Send + 'static {
    /// A batch of `table` is durable.
    fn confirmed(&mut self, table: &str, confirmation: Confirmation<L>);
    /// A batch of `table` will never be confirmed: the sink has already resubmitted it as its
    /// [`ResubmitPolicy`](crate::ResubmitPolicy) allows (or the failure was final). Fail the
    /// pipeline, or park the batch and its token somewhere durable; never drop it, or the
    /// source position stops below it for good.
    fn failed(&mut self, table: &str, batch: FailedBatch<L, RecordBatch>, reason: &FailureReason);
    /// Rows of a batch of `table` that the write boundary refused before send, under
    /// [`BadRows::Isolate`](crate::BadRows): each is named with its reason. Called before the
    /// batch's good rows are admitted; the batch's token goes on with them, so when it is
    /// confirmed every row it covers is durable or was handed back here. Park these rows
    /// somewhere durable (a dead-letter table) or fail the pipeline; never drop them.
    fn isolated(&mut self, table: &str, rows: IsolatedRows<L>);
}
