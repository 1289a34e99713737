//! What a table lacks for the primary-raw role: plain values at the bottom of the crate, so that
//! refusals and errors can carry them without depending on the checks that find them.

use std::fmt;

/// The property that turns deletion vectors on.
pub(crate) const DELETION_VECTORS: &str = "delta.enableDeletionVectors";

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

/// Every unmet precondition, `; `-separated.
#[must_use]
pub fn joined(unmet: &[Unmet]) -> String {
    unmet
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
