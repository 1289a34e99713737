//! # zerobus-sink-catalog
//!
//! Zerobus only writes: it never creates a table, evolves its schema, stamps comments or vends
//! credentials. This crate does, for any sink (seed section 5.1):
//!
//! - [`TableCatalog`]: the seam (describe, reconcile, register a writer, vend credentials) with
//!   async methods and no `dyn`;
//! - [`DesiredTable`]: the table a sink wants, from the incoming Arrow schema, an optional data
//!   [`Contract`] and the reserved `_twg_*` columns;
//! - the type map ([`DeltaType`]): Arrow to Delta / Unity Catalog and back, and which changes are
//!   lossless widenings;
//! - [`plan()`]: a pure [`ReconcilePlan`] (create, add column, widen, comments, properties, or
//!   refuse, naming the column), idempotent through managed comment hashes;
//! - [`requirements`]: what the service writes to (managed Delta tables, ASCII names, no
//!   catalog-managed commits, never recreated), checked by
//!   [`TableCatalog::describe_for_write`] before any plan, and a table that breaks one refused
//!   as [`CatalogError::Unwritable`], naming it and the requirement;
//! - [`ddl::render`]: Databricks SQL for a plan, every identifier and literal escaped;
//! - [`CoverageStore`]: which source ranges a sink made durable in a primary-raw table, kept
//!   in a coverage table beside it through either backend ([`CoverageLog`]);
//! - backends behind features: `unity` (Unity Catalog REST, SQL Statement Execution API, OAuth
//!   M2M) and `local` (Delta tables on disk with delta-rs, the embedded default).
//!
//! ## Layers, and what each one may know
//!
//! 1. **Pure** ([`types`], [`DesiredTable`], [`plan()`], [`ddl`]): no I/O, no clock. Everything
//!    a backend decides (create, add, widen, refuse, which properties a role needs) is decided
//!    here, once, so both backends refuse the same things for the same reasons.
//! 2. **Backends** ([`unity::UnityCatalog`], [`local::LocalDelta`]): describe the live table into
//!    a [`LiveTable`] (columns, properties, [`Protocol`]), apply a plan, and when someone else
//!    changed the table in between (a racing writer, a lost response), describe again and
//!    re-plan: reconciling converges instead of failing on the first conflict.
//! 3. **The seam** ([`TableCatalog`]): what a sink calls. It never sees SQL or a Delta log.
//!
//! A backend answers "the table is absent" only when the service says exactly that
//! (`TABLE_DOES_NOT_EXIST`); a missing schema or catalog, a wrong URL or a refused token is an
//! error naming what failed, never a reason to create a table.
//!
//! ```
//! use arrow_schema::{DataType, Field, Schema};
//! use zerobus_sink_catalog::{ddl, plan, DesiredTable, Policy, Role, TableRef};
//!
//! let schema = Schema::new(vec![Field::new("id", DataType::Int64, false)]);
//! let table = TableRef::parse("main.bronze.orders")?;
//! let desired = DesiredTable::from_arrow(table, &schema, None, Role::Standard)?;
//! let plan = plan(None, &desired, &Policy::default()); // the table is absent: create it
//! let sql = ddl::render(&plan)?;
//! assert!(sql[0].starts_with("CREATE TABLE IF NOT EXISTS `main`.`bronze`.`orders` (`id` BIGINT NOT NULL"));
//! # Ok::<(), zerobus_sink_catalog::CatalogError>(())
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod catalog;
pub mod coverage;
pub mod ddl;
mod desired;
mod error;
mod live;
pub mod plan;
pub mod primary_raw;
pub mod recovery;
mod refusal;
pub mod requirements;
mod shape;
mod table_ref;
pub mod types;
mod unmet;

#[cfg(feature = "unity")]
mod any;
#[cfg(feature = "local")]
pub mod local;
#[cfg(feature = "unity")]
pub mod unity;

#[cfg(feature = "unity")]
pub use any::AnyCatalog;
pub use catalog::{
    Access, CloudCredentials, ReconcileOutcome, SinkId, TableCatalog, VendedCredentials,
    sink_property,
};
pub use coverage::{CoverageLog, CoverageStore, SavedRange};
pub use desired::{
    Authority, Comment, Contract, DesiredColumn, DesiredTable, LOCAL_PRIMARY_RAW_PROPERTIES,
    PRIMARY_RAW_PROPERTIES, RESERVED_COLUMNS, RESERVED_PREFIX, Role,
};
pub use error::CatalogError;
pub use live::{LiveColumn, LiveTable, Protocol};
pub use plan::{Action, HumanEdits, Policy, ReconcilePlan, Refusal, RefusalReason, plan};
pub use primary_raw::{PrimaryRawError, PrimaryRawProof, PrimaryRawShape, Unmet};
pub use requirements::{FirstSeen, Requirement};
pub use table_ref::{TableRef, is_identifier_safe};
pub use types::{DeltaField, DeltaType, VARIANT_EXTENSION, Widening};
