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

use std::fmt;

use crate::catalog::TableCatalog;
use crate::desired::{LOCAL_PRIMARY_RAW_PROPERTIES, PRIMARY_RAW_PROPERTIES};
use crate::error::CatalogError;
use crate::live::{LiveTable, Protocol};
use crate::table_ref::TableRef;

/// The property that turns deletion vectors on.
const DELETION_VECTORS: &str = "delta.enableDeletionVectors";

/// What a primary-raw table must be, which depends on how recovery reads it back (seed
/// section 8): the backend sets it (ADR 0009).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrimaryRawShape {
    /// Read back through Iceberg (Unity Catalog): IcebergCompatV2 with Iceberg as a universal
    /// format, column mapping by name, deletion vectors off ([`PRIMARY_RAW_PROPERTIES`]), and a
    /// protocol of at least reader 2, writer 7 with the `columnMapping` and `icebergCompatV2`
    /// features.
    #[default]
    IcebergCompatV2,
    /// Read back with delta-rs (the local backend): deletion vectors off
    /// ([`LOCAL_PRIMARY_RAW_PROPERTIES`]) and nothing the shipped reader cannot read (no
    /// column mapping). It claims no Iceberg reads: delta-rs can neither write nor (without
    /// datafusion) read a column-mapped table.
    DeltaReadable,
}

/// One precondition of the primary-raw role a table does not meet.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unmet {
    /// The catalog has no such table.
    NotRegistered,
    /// A table property does not have the value the role needs.
    Property {
        /// The property.
        key: String,
        /// Its value, if set.
        found: Option<String>,
        /// The value needed.
        needed: String,
    },
    /// Deletion vectors are on: rows they delete vanish from recovery's read path.
    DeletionVectors,
    /// The protocol is older than the role's features need.
    Protocol {
        /// The table's `minReaderVersion`.
        reader: i32,
        /// The table's `minWriterVersion`.
        writer: i32,
        /// The reader version needed.
        min_reader: i32,
        /// The writer version needed.
        min_writer: i32,
    },
    /// The protocol does not enable a feature the role needs.
    MissingFeature {
        /// The feature.
        feature: String,
    },
    /// The protocol needs a reader feature the shipped reader cannot read.
    UnreadableFeature {
        /// The feature (or the reader version, if it is above what the reader knows).
        feature: String,
    },
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::NotRegistered => write!(f, "the table is not registered in the catalog"),
            Unmet::Property { key, found, needed } => match found {
                Some(found) => write!(f, "{key} is {found:?}, needs {needed:?}"),
                None => write!(f, "{key} is not set, needs {needed:?}"),
            },
            Unmet::DeletionVectors => write!(
                f,
                "deletion vectors are enabled ({DELETION_VECTORS} = true): rows they delete \
                 vanish from recovery's read path"
            ),
            Unmet::Protocol {
                reader,
                writer,
                min_reader,
                min_writer,
            } => write!(
                f,
                "protocol is reader {reader} / writer {writer}, needs at least reader \
                 {min_reader} / writer {min_writer}"
            ),
            Unmet::MissingFeature { feature } => {
                write!(f, "the protocol does not enable {feature}")
            }
            Unmet::UnreadableFeature { feature } => write!(
                f,
                "the protocol needs reader feature {feature}, which the shipped reader cannot read"
            ),
        }
    }
}

impl PrimaryRawShape {
    /// The properties a primary-raw table of this shape is created with.
    #[must_use]
    pub fn properties(self) -> &'static [(&'static str, &'static str)] {
        match self {
            PrimaryRawShape::IcebergCompatV2 => &PRIMARY_RAW_PROPERTIES,
            PrimaryRawShape::DeltaReadable => &LOCAL_PRIMARY_RAW_PROPERTIES,
        }
    }

    /// Every precondition of this shape the table as described does not meet (`None`: the
    /// catalog has no such table). Empty: the table may hold the role.
    #[must_use]
    pub fn check(self, live: Option<&LiveTable>) -> Vec<Unmet> {
        match live {
            Some(live) => self.unmet(live),
            None => vec![Unmet::NotRegistered],
        }
    }

    /// Every precondition of this shape that the existing table `live` does not meet.
    #[must_use]
    pub fn unmet(self, live: &LiveTable) -> Vec<Unmet> {
        let mut unmet = Vec::new();
        for (key, needed) in self.properties() {
            let found = live.properties.get(*key);
            if found.map(String::as_str) == Some(*needed) {
                continue;
            }
            if *key == DELETION_VECTORS && found.is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                unmet.push(Unmet::DeletionVectors);
            } else {
                unmet.push(Unmet::Property {
                    key: (*key).to_owned(),
                    found: found.cloned(),
                    needed: (*needed).to_owned(),
                });
            }
        }
        let Some(p) = &live.protocol else {
            return unmet;
        };
        match self {
            PrimaryRawShape::IcebergCompatV2 => {
                let (min_reader, min_writer) = (2, 7);
                if p.min_reader_version < min_reader || p.min_writer_version < min_writer {
                    unmet.push(Unmet::Protocol {
                        reader: p.min_reader_version,
                        writer: p.min_writer_version,
                        min_reader,
                        min_writer,
                    });
                }
                for feature in ["columnMapping", "icebergCompatV2"] {
                    if !p.writer_features.contains(feature) {
                        unmet.push(Unmet::MissingFeature {
                            feature: feature.to_owned(),
                        });
                    }
                }
            }
            PrimaryRawShape::DeltaReadable => {
                if let Some(feature) = unreadable(p) {
                    unmet.push(Unmet::UnreadableFeature { feature });
                }
            }
        }
        unmet
    }
}

/// A reader feature of `p` the shipped delta-rs reader (no datafusion) cannot read, if any.
fn unreadable(p: &Protocol) -> Option<String> {
    const READABLE: [&str; 5] = [
        "timestampNtz",
        "deletionVectors",
        "variantType",
        "variantType-preview",
        "v2Checkpoint",
    ];
    if p.min_reader_version > 3 {
        return Some(format!("(reader version {})", p.min_reader_version));
    }
    p.reader_features
        .iter()
        .find(|f| !READABLE.contains(&f.as_str()))
        .cloned()
}

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

/// Every unmet precondition, `; `-separated.
#[must_use]
pub fn joined(unmet: &[Unmet]) -> String {
    unmet
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
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
