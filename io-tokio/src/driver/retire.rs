//! Schemas the handle no longer remembers ([`crate::recent`]): each one's plan, wire schema
//! and batch schema are dropped once no batch of it is pending anywhere (in the channel from
//! the handle, in the core, waiting to be submitted again: every such batch holds its plan)
//! and the core has retired it. A schema still in use is tried again at the next sweep: the
//! next retirement, reconcile answer, settled flush or report.

use std::sync::Arc;

use zerobus_sink::{Handled, Ignored, Lane};
use zerobus_sink_catalog::TableCatalog;

use super::{Driver, Planned};
use crate::confirmer::Confirmer;
use crate::report::Report;

impl<L: Lane, C: Confirmer<L>, P: TableCatalog + Send + Sync + 'static> Driver<L, C, P> {
    /// Drops what the driver keeps for each retiring schema nothing needs any more.
    pub(super) fn sweep_schemas(&mut self) {
        let mut i = 0;
        while let Some(&(table, schema)) = self.shapes.retiring.get(i) {
            let key = (table, schema);
            let unused = match self.shapes.plans.get(&key) {
                // Only the driver's own reference is left: no batch of it is pending.
                Some(Planned::Ready(plan, _)) => Arc::strong_count(plan) == 1,
                Some(Planned::Refused(_)) => true,
                // Not planned yet: its first batch is still on its way (its `send` was
                // dropped while it waited, and the handle went on to push it out).
                Some(Planned::Asking) | None => false,
            };
            let retired = unused
                && self.core.retire_schema(table, schema) != Handled::Ignored(Ignored::SchemaInUse);
            if retired {
                self.shapes.plans.remove(&key);
                self.shapes.batch.remove(&key);
                self.shapes.retiring.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Counts, in `report`, the schemas the driver keeps a plan for, per table.
    pub(super) fn count_schemas(&self, report: &mut Report) {
        for t in &mut report.tables {
            t.schemas_kept = 0;
        }
        for (table, _) in self.shapes.plans.keys() {
            if let Some(t) = report.tables.get_mut(table.index()) {
                t.schemas_kept += 1;
            }
        }
    }
}
