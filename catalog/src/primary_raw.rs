//! The primary-raw role's preconditions (seed section 8): what a table must be for recovery to
//! read it back, checked from the catalog's description, and the proof a sink needs to give a
//! table the role.
//!
//! The preconditions depend on how recovery reads the table, so the backend decides them
//! ([`PrimaryRawShape`]): on Unity Catalog the table is read back through Iceberg (registered,
//! IcebergCompatV2 with column mapping, a protocol of at least reader 2 / writer 7, deletion
//! vectors off); on the local backend through delta-rs (registered, deletion vectors off, no
//! reader feature the shipped reader cannot read). Durable acknowledgements, the fourth
//! condition of the seed, are not a table property: this sink has no other kind (every
//! confirmation is a durable ack; fire-and-forget is not a mode).
//!
//! [`validate`] describes a table and returns a [`PrimaryRawProof`] only if every precondition
//! holds; the sink's table definition for the role takes that proof, so a primary-raw table
//! that was never validated cannot be configured. A proof is a fact about one moment: the sink
//! checks the table again at every stream open and on a timer
//! ([`PrimaryRawShape::check`]), because a property can change under a running pipeline.
//!
//! A proof cannot be made except by [`validate`]:
//!
//! ```compile_fail,E0451
//! use zerobus_sink_catalog::{PrimaryRawProof, PrimaryRawShape, TableRef};
//! let forged = PrimaryRawProof {
//!     table: TableRef::parse("main.raw.orders").unwrap(),
//!     shape: PrimaryRawShape::DeltaReadable,
//! };
//! ```

use crate::catalog::TableCatalog;
use crate::error::CatalogError;
pub use crate::shape::PrimaryRawShape;
use crate::table_ref::TableRef;
pub use crate::unmet::{Unmet, joined};

/// Why a table was refused the primary-raw role.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrimaryRawError {
    /// The table does not meet these preconditions.
    #[error("{table} cannot hold the primary-raw role: {}", joined(unmet))]
    Unmet {
        /// The table.
        table: String,
        /// Every unmet precondition.
        unmet: Vec<Unmet>,
    },
    /// The catalog could not describe the table (nothing was decided).
    #[error("{table}: the primary-raw preconditions could not be checked: {source}")]
    Catalog {
        /// The table.
        table: String,
        /// What the catalog said.
        #[source]
        source: CatalogError,
    },
}

/// Proof that a table met every precondition of the primary-raw role when [`validate`]
/// described it: the only way to give a sink's table the role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrimaryRawProof {
    table: TableRef,
    shape: PrimaryRawShape,
}

impl PrimaryRawProof {
    /// The table.
    #[must_use]
    pub fn table(&self) -> &TableRef {
        &self.table
    }

    /// The shape it was checked against.
    #[must_use]
    pub fn shape(&self) -> PrimaryRawShape {
        self.shape
    }
}

/// Describes `table` through `catalog` and checks every precondition of `shape`: the proof
/// if all hold.
///
/// # Errors
/// [`PrimaryRawError::Unmet`] naming every unmet precondition, or
/// [`PrimaryRawError::Catalog`] if the table could not be described.
pub async fn validate<C: TableCatalog>(
    catalog: &C,
    table: &TableRef,
    shape: PrimaryRawShape,
) -> Result<PrimaryRawProof, PrimaryRawError> {
    let live = catalog
        .describe(table)
        .await
        .map_err(|source| PrimaryRawError::Catalog {
            table: table.full_name(),
            source,
        })?;
    let unmet = shape.check(live.as_ref());
    if unmet.is_empty() {
        Ok(PrimaryRawProof {
            table: table.clone(),
            shape,
        })
    } else {
        Err(PrimaryRawError::Unmet {
            table: table.full_name(),
            unmet,
        })
    }
}
