//! What the adapter's benchmarks share.

use arrow_array::RecordBatch;
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw};
use zerobus_sink_tokio::{Confirmer, IsolatedRows};

/// A confirmer for a benchmark: confirmations are counted by the sink's report; a batch that
/// fails or rows refused end the run, since its numbers would mean nothing.
pub struct Strict;

impl Confirmer<Raw> for Strict {
    fn confirmed(&mut self, _: &str, _: Confirmation<Raw>) {}
    fn failed(&mut self, table: &str, _: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        panic!("{table}: batch failed in the benchmark: {why}");
    }
    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        panic!("{table}: rows refused in the benchmark: {:?}", rows.faults);
    }
}
