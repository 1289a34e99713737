//! Either backend, chosen at run time (a configuration file names it): an enum, not a trait
//! object, so the sink stays generic over one concrete [`TableCatalog`]. The local variant
//! exists with the `local` feature. It reads tables back through either backend's
//! [`Recover`] (the Databricks one with the `iceberg` feature).

use crate::coverage::{CoverageLog, SavedRange};
#[cfg(feature = "local")]
use crate::local::LocalDelta;
use crate::recovery::{Lag, Recover, Recovered, RecoveryError};
use crate::unity::UnityCatalog;
use crate::{
    Access, CatalogError, DesiredTable, LiveTable, Policy, PrimaryRawShape, ReconcileOutcome,
    SinkId, TableCatalog, TableRef, VendedCredentials,
};
use zerobus_sink::{Coverage, CoverageRange};

/// The Unity Catalog backend or the local one (the Unity client boxed: it is ten times the
/// size of the local one).
#[derive(Debug)]
pub enum AnyCatalog {
    /// Unity Catalog (Databricks, or the open-source server).
    Unity(Box<UnityCatalog>),
    /// Local Delta tables under a root folder (`zerobus-local`; feature `local`).
    #[cfg(feature = "local")]
    Local(LocalDelta),
}

impl AnyCatalog {
    /// The shape a primary-raw table takes in this backend (Iceberg-readable in Unity
    /// Catalog, delta-rs readable locally).
    #[must_use]
    pub fn primary_raw_shape(&self) -> PrimaryRawShape {
        match self {
            AnyCatalog::Unity(_) => PrimaryRawShape::IcebergCompatV2,
            #[cfg(feature = "local")]
            AnyCatalog::Local(_) => PrimaryRawShape::DeltaReadable,
        }
    }

    /// The backend's name, for logs: `unity` or `local`.
    #[must_use]
    pub fn backend(&self) -> &'static str {
        match self {
            AnyCatalog::Unity(_) => "unity",
            #[cfg(feature = "local")]
            AnyCatalog::Local(_) => "local",
        }
    }
}

impl TableCatalog for AnyCatalog {
    async fn describe(&self, table: &TableRef) -> Result<Option<LiveTable>, CatalogError> {
        match self {
            AnyCatalog::Unity(c) => c.describe(table).await,
            #[cfg(feature = "local")]
            AnyCatalog::Local(c) => c.describe(table).await,
        }
    }

    async fn describe_for_write(
        &self,
        table: &TableRef,
    ) -> Result<Option<LiveTable>, CatalogError> {
        match self {
            AnyCatalog::Unity(c) => c.describe_for_write(table).await,
            #[cfg(feature = "local")]
            AnyCatalog::Local(c) => c.describe_for_write(table).await,
        }
    }

    async fn reconcile(
        &self,
        desired: &DesiredTable,
        policy: &Policy,
    ) -> Result<ReconcileOutcome, CatalogError> {
        match self {
            AnyCatalog::Unity(c) => c.reconcile(desired, policy).await,
            #[cfg(feature = "local")]
            AnyCatalog::Local(c) => c.reconcile(desired, policy).await,
        }
    }

    async fn register_sink(&self, table: &TableRef, sink: &SinkId) -> Result<(), CatalogError> {
        match self {
            AnyCatalog::Unity(c) => c.register_sink(table, sink).await,
            #[cfg(feature = "local")]
            AnyCatalog::Local(c) => c.register_sink(table, sink).await,
        }
    }

    async fn vend_credentials(
        &self,
        table: &TableRef,
        access: Access,
    ) -> Result<VendedCredentials, CatalogError> {
        match self {
            AnyCatalog::Unity(c) => c.vend_credentials(table, access).await,
            #[cfg(feature = "local")]
            AnyCatalog::Local(c) => c.vend_credentials(table, access).await,
        }
    }
}

impl Recover for AnyCatalog {
    async fn recover(
        &self,
        table: &TableRef,
        range: &CoverageRange,
        durable: &Coverage,
        lag: Lag,
    ) -> Result<Recovered, RecoveryError> {
        match self {
            #[cfg(feature = "iceberg")]
            AnyCatalog::Unity(c) => c.recover(table, range, durable, lag).await,
            #[cfg(not(feature = "iceberg"))]
            AnyCatalog::Unity(_) => {
                let _ = (range, durable, lag);
                Err(RecoveryError::Read {
                    table: table.full_name(),
                    what: "the table's snapshot".into(),
                    message: "this build has no Databricks read path (the catalog's `iceberg` \
                              feature)"
                        .into(),
                })
            }
            #[cfg(feature = "local")]
            AnyCatalog::Local(c) => c.recover(table, range, durable, lag).await,
        }
    }
}

impl CoverageLog for AnyCatalog {
    async fn append_coverage(
        &self,
        table: &TableRef,
        sink: &SinkId,
        ranges: &[CoverageRange],
    ) -> Result<(), CatalogError> {
        match self {
            AnyCatalog::Unity(c) => c.append_coverage(table, sink, ranges).await,
            #[cfg(feature = "local")]
            AnyCatalog::Local(c) => c.append_coverage(table, sink, ranges).await,
        }
    }

    async fn read_coverage(
        &self,
        table: &TableRef,
        sink: Option<&SinkId>,
    ) -> Result<Vec<SavedRange>, CatalogError> {
        match self {
            AnyCatalog::Unity(c) => c.read_coverage(table, sink).await,
            #[cfg(feature = "local")]
            AnyCatalog::Local(c) => c.read_coverage(table, sink).await,
        }
    }
}
