//! A catalog outage: the local backend behind a switch that, while open, answers every call as
//! an unreachable Unity Catalog would (a transport error, retryable). The local backend has no
//! network to cut; this is fault injection around the real catalog, not a mock of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use zerobus_sink_catalog::{
    Access, CatalogError, DesiredTable, LiveTable, Policy, ReconcileOutcome, SinkId, TableCatalog,
    TableRef, VendedCredentials,
};

/// The catalog `C`, unreachable while `down` is set.
pub struct Flaky<C> {
    pub inner: C,
    pub down: Arc<AtomicBool>,
}

impl<C> Flaky<C> {
    fn check(&self, operation: &'static str, table: &TableRef) -> Result<(), CatalogError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(CatalogError::Transport {
                operation,
                target: table.to_string(),
                message: "connection refused (the soak's catalog outage)".into(),
            });
        }
        Ok(())
    }
}

impl<C: TableCatalog + Sync> TableCatalog for Flaky<C> {
    async fn describe(&self, table: &TableRef) -> Result<Option<LiveTable>, CatalogError> {
        self.check("describe", table)?;
        self.inner.describe(table).await
    }

    async fn describe_for_write(
        &self,
        table: &TableRef,
    ) -> Result<Option<LiveTable>, CatalogError> {
        self.check("describe", table)?;
        self.inner.describe_for_write(table).await
    }

    async fn reconcile(
        &self,
        desired: &DesiredTable,
        policy: &Policy,
    ) -> Result<ReconcileOutcome, CatalogError> {
        self.check("reconcile", &desired.table)?;
        self.inner.reconcile(desired, policy).await
    }

    async fn register_sink(&self, table: &TableRef, sink: &SinkId) -> Result<(), CatalogError> {
        self.check("register", table)?;
        self.inner.register_sink(table, sink).await
    }

    async fn vend_credentials(
        &self,
        table: &TableRef,
        access: Access,
    ) -> Result<VendedCredentials, CatalogError> {
        self.check("vend credentials", table)?;
        self.inner.vend_credentials(table, access).await
    }
}
