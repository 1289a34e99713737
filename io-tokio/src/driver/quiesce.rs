//! Quiescing a table before a change that is not additive ([`crate::provision::Quiescer`]):
//! while a schema's first batch waits for its plan the driver admits nothing, so the table
//! gets no new batches; its queued ones are dealt over its streams (the core's flush), and the
//! reconcile task hears once every batch the table admitted has ended (confirmed or handed
//! back) and none waits to be resubmitted.

use tokio::sync::oneshot;
use zerobus_sink::{Lane, TableId};
use zerobus_sink_catalog::TableCatalog;

use super::Driver;
use crate::confirmer::Confirmer;

impl<L: Lane, C: Confirmer<L>, P: TableCatalog + Send + Sync + 'static> Driver<L, C, P> {
    /// A reconcile task asks for `table` to be quiesced; `done` hears when it is.
    pub(super) fn quiesce(&mut self, table: TableId, done: oneshot::Sender<()>) {
        let now = self.now();
        self.core.flush(now);
        self.quiescing.push((table, done));
        self.settle_quiesces();
    }

    /// Answers the quiesces whose table has nothing pending and nothing waiting to be
    /// resubmitted (a closing sink answers every one: it admits nothing more anyway).
    pub(super) fn settle_quiesces(&mut self) {
        if self.quiescing.is_empty() {
            return;
        }
        let closing = self.closing.is_some() || self.handle_gone;
        let waiting: Vec<TableId> = self.again.values().map(|a| a.batch.route.table()).collect();
        let pending = |table: TableId| {
            self.core
                .table_watermarks(table)
                .is_some_and(|w| w.pending() > 0)
                || waiting.contains(&table)
        };
        let (done, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.quiescing)
            .into_iter()
            .partition(|(table, _)| closing || !pending(*table));
        self.quiescing = still;
        for (table, tx) in done {
            tracing::debug!(table = %self.table_name(table), "quiesced");
            let _ = tx.send(());
        }
    }
}
