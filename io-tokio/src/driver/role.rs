//! The primary-raw role's preconditions, checked again (seed section 8: re-checked, not
//! cached, because a table property can change under a running pipeline):
//!
//! - **At every stream open.** A connection of a primary-raw table is made only after the
//!   table has been described and found to meet every precondition of its shape; otherwise
//!   the connection ends, before it is made, with
//!   [`StreamError::Precondition`](zerobus_sink::StreamError), which the core treats as fatal
//!   for the table.
//! - **On a timer** (`ZerobusConfig::primary_raw_recheck`) while the table has connections:
//!   a table found changed has every open connection reported failed with the same error.
//!
//! Either way the core hands back every batch of the table not yet durable (to the confirmer's
//! `failed`, or as a failed receipt) and admits nothing more for it. A catalog that cannot be
//! reached never fails a table: it delays an open (a transient failure the slot retries with
//! its backoff) and skips a timed check (logged).

use std::sync::Arc;

use tokio::time::Instant;
use zerobus_sink::{Input, Lane, StreamError, TableId};
use zerobus_sink_catalog::primary_raw::joined;
use zerobus_sink_catalog::{PrimaryRawShape, TableCatalog, TableRef};

use super::Driver;
use crate::confirmer::Confirmer;
use crate::provision::Provisioning;

/// The role the errors name.
const ROLE: &str = "primary-raw";

/// Checks `role`'s preconditions through the catalog (`Ok` for a table without the role).
pub(super) async fn check<P: TableCatalog>(
    provisioning: Option<Arc<Provisioning<P>>>,
    role: Option<(TableRef, PrimaryRawShape)>,
) -> Result<(), StreamError> {
    let (Some(p), Some((table, shape))) = (provisioning, role) else {
        return Ok(());
    };
    let live = p
        .catalog
        .describe(&table)
        .await
        .map_err(|e| StreamError::Transport {
            message: format!("checking the {ROLE} preconditions of {table}: {e}"),
        })?;
    let unmet = shape.check(live.as_ref());
    if unmet.is_empty() {
        Ok(())
    } else {
        Err(StreamError::Precondition {
            role: ROLE,
            unmet: joined(&unmet),
        })
    }
}

impl<L: Lane, C: Confirmer<L>, P: TableCatalog + Send + Sync + 'static> Driver<L, C, P> {
    /// The check to run before a connection of `table` is made.
    pub(super) fn open_gate(
        &self,
        table: TableId,
    ) -> impl Future<Output = Result<(), StreamError>> + Send + 'static + use<L, C, P> {
        check(self.provisioning.clone(), self.role(table))
    }

    /// The table and shape to check, for a primary-raw table.
    fn role(&self, table: TableId) -> Option<(TableRef, PrimaryRawShape)> {
        self.definitions
            .get(table.index())
            .and_then(|d| d.primary_raw.clone())
    }

    /// Starts the timed checks that are due: one per primary-raw table with connections.
    pub(super) fn recheck_due(&mut self) {
        let Some(at) = self.recheck.next else {
            return;
        };
        let now = Instant::now();
        if now < at {
            return;
        }
        self.recheck.next = Some(now + self.recheck.every);
        for table in self.core.table_ids() {
            let Some(role) = self.role(table) else {
                continue;
            };
            let connected = self
                .conns
                .keys()
                .any(|c| self.core.slot_table(c.slot()) == Some(table));
            if !connected || self.core.table_failed(table) {
                continue;
            }
            let answers = self.recheck.tx.clone();
            let checked = check(self.provisioning.clone(), Some(role));
            tokio::spawn(async move {
                let _ = answers.send((table, checked.await));
            });
        }
    }

    /// A timed check's answer: a table found changed fails through each of its connections.
    pub(super) fn rechecked(&mut self, table: TableId, result: Result<(), StreamError>) {
        let name = self.table_name(table);
        match result {
            Ok(()) => tracing::debug!(table = %name, "{ROLE} preconditions still met"),
            Err(error @ StreamError::Precondition { .. }) => {
                tracing::error!(table = %name, %error, "the table no longer meets its role's preconditions: it fails, its batches not yet durable are handed back");
                let conns: Vec<_> = self
                    .conns
                    .keys()
                    .filter(|c| self.core.slot_table(c.slot()) == Some(table))
                    .copied()
                    .collect();
                for conn in conns {
                    self.input(Input::Failed {
                        conn,
                        error: error.clone(),
                    });
                }
            }
            Err(error) => {
                tracing::warn!(table = %name, %error, "could not check the {ROLE} preconditions; trying again at the next check");
            }
        }
    }
}

/// The timed checks' state.
pub(super) struct Recheck {
    /// How often.
    pub(super) every: std::time::Duration,
    /// When next (`None`: the sink has no primary-raw table).
    pub(super) next: Option<Instant>,
    pub(super) tx: tokio::sync::mpsc::UnboundedSender<(TableId, Result<(), StreamError>)>,
    pub(super) rx: tokio::sync::mpsc::UnboundedReceiver<(TableId, Result<(), StreamError>)>,
}
