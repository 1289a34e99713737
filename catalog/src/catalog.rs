//! The seam every sink depends on: [`TableCatalog`], with async methods and no `dyn`.

use std::fmt;
use std::future::Future;

use crate::desired::DesiredTable;
use crate::error::CatalogError;
use crate::live::LiveTable;
use crate::plan::{Policy, ReconcilePlan};
use crate::table_ref::TableRef;

/// A sink writing to a table, registered as one of its writers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SinkId(pub String);

/// What the vended credentials may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read (the recovery path).
    Read,
    /// Read and write.
    ReadWrite,
}

/// Temporary cloud credentials, by provider. `Debug` never shows a secret.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloudCredentials {
    /// None needed (a local path).
    None,
    /// AWS STS credentials.
    Aws {
        /// Access key id.
        access_key_id: String,
        /// Secret access key (secret).
        secret_access_key: String,
        /// Session token (secret).
        session_token: String,
    },
    /// An Azure user-delegation SAS token (secret).
    AzureSas(String),
    /// An Azure AAD token (secret).
    AzureAad(String),
    /// A GCP OAuth token (secret).
    Gcp(String),
    /// Cloudflare R2 temporary credentials (S3-compatible).
    R2 {
        /// Access key id.
        access_key_id: String,
        /// Secret access key (secret).
        secret_access_key: String,
        /// Session token (secret).
        session_token: String,
    },
}

impl fmt::Debug for CloudCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloudCredentials::None => f.write_str("None"),
            CloudCredentials::Aws { access_key_id, .. } => {
                write!(
                    f,
                    "Aws {{ access_key_id: {access_key_id:?}, secret_access_key: <redacted>, session_token: <redacted> }}"
                )
            }
            CloudCredentials::AzureSas(_) => f.write_str("AzureSas(<redacted>)"),
            CloudCredentials::AzureAad(_) => f.write_str("AzureAad(<redacted>)"),
            CloudCredentials::Gcp(_) => f.write_str("Gcp(<redacted>)"),
            CloudCredentials::R2 { access_key_id, .. } => write!(
                f,
                "R2 {{ access_key_id: {access_key_id:?}, secret_access_key: <redacted>, session_token: <redacted> }}"
            ),
        }
    }
}

/// Temporary, scoped credentials for a table's storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendedCredentials {
    /// The table's storage location.
    pub url: String,
    /// When they expire, in ms since the Unix epoch, if the catalog says.
    pub expires_at_ms: Option<i64>,
    /// The credentials.
    pub credentials: CloudCredentials,
}

/// What a reconcile did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileOutcome {
    /// The plan it executed (log it).
    pub plan: ReconcilePlan,
    /// The statements or operations it ran, in order.
    pub executed: Vec<String>,
}

/// A table catalog: describe, reconcile, register writers, vend credentials. Implemented by the
/// Unity Catalog and local Delta backends; the sink is written against this trait only.
///
/// The methods return `Send` futures, so the sink can call them from any task.
pub trait TableCatalog {
    /// The live table, or `None` if it does not exist: what the catalog says, whether or not
    /// Zerobus could write it (a sink describes with
    /// [`describe_for_write`](TableCatalog::describe_for_write)).
    fn describe(
        &self,
        table: &TableRef,
    ) -> impl Future<Output = Result<Option<LiveTable>, CatalogError>> + Send;

    /// The live table, or `None` if it does not exist, for writing through Zerobus: as
    /// [`describe`](TableCatalog::describe) says, checked against the service's table
    /// requirements ([`requirements`](crate::requirements)). A table that breaks one is
    /// [`CatalogError::Unwritable`], naming it and every requirement broken: not a managed
    /// Delta table, a column name other than ASCII letters, digits and underscores,
    /// catalog-managed commits, or a table id other than the one this catalog first saw for
    /// the name (recreated), or absent after it was seen (dropped). Backends remember the ids
    /// ([`FirstSeen`](crate::FirstSeen)) and describe this way before they plan.
    fn describe_for_write(
        &self,
        table: &TableRef,
    ) -> impl Future<Output = Result<Option<LiveTable>, CatalogError>> + Send;

    /// Makes the table take `desired`: describes it, plans (a pure [`ReconcilePlan`]), and
    /// executes the plan unless it refuses something. Idempotent: a second call plans nothing.
    /// It describes for writing ([`describe_for_write`](TableCatalog::describe_for_write)), so
    /// a table Zerobus cannot write is refused before anything is planned.
    fn reconcile(
        &self,
        desired: &DesiredTable,
        policy: &Policy,
    ) -> impl Future<Output = Result<ReconcileOutcome, CatalogError>> + Send;

    /// Records `sink` as a writer of the table.
    fn register_sink(
        &self,
        table: &TableRef,
        sink: &SinkId,
    ) -> impl Future<Output = Result<(), CatalogError>> + Send;

    /// Temporary credentials for the table's storage, inheriting the caller's privileges.
    fn vend_credentials(
        &self,
        table: &TableRef,
        access: Access,
    ) -> impl Future<Output = Result<VendedCredentials, CatalogError>> + Send;
}

/// The property that records a registered writer.
#[must_use]
pub fn sink_property(sink: &SinkId) -> String {
    format!("twg.sink.{}", sink.0)
}
