//! Why a plan refuses a change: plain values at the bottom of the crate, so that errors can
//! carry them without depending on the plan that makes them.

use std::fmt;

/// Why a change is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The batches' type is narrower than the table's.
    Narrowing {
        /// The table's type.
        live: String,
        /// The batches' type.
        wanted: String,
    },
    /// The types are unrelated, or the change would lose values.
    TypeConflict {
        /// The table's type.
        live: String,
        /// The batches' type.
        wanted: String,
        /// Why it cannot change.
        why: &'static str,
    },
    /// A lossless widening, but the policy does not allow widening.
    WideningNotAllowed {
        /// The table's type.
        live: String,
        /// The batches' type.
        wanted: String,
    },
    /// The batches would carry nulls into a `NOT NULL` column.
    NullabilityConflict,
    /// A `NOT NULL` column of the table is missing from the batches (dropping it is never done).
    RequiredColumnMissing,
    /// The table cannot hold the primary-raw role: these preconditions are unmet.
    PrimaryRawPreconditions {
        /// Each unmet precondition.
        unmet: Vec<crate::unmet::Unmet>,
    },
    /// A widening Delta allows but Iceberg readers of the table cannot follow (the table has
    /// Iceberg reads on: only int to long, float to double and a decimal's precision may grow).
    IcebergCannotFollow {
        /// The table's type.
        live: String,
        /// The batches' type.
        wanted: String,
    },
    /// The wanted column's name is not ASCII letters, digits and underscores: Zerobus could
    /// never write it (PROTOCOL.md E), so the table is neither made nor evolved with it.
    ColumnName,
    /// The table's column has a type this crate does not know; it is never changed.
    UnknownLiveType {
        /// The type as the catalog wrote it.
        type_text: String,
    },
}

/// A refused change, naming the column when there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The column, if the refusal is about one.
    pub column: Option<String>,
    /// Why.
    pub reason: RefusalReason,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(c) = &self.column {
            write!(f, "column {c}: ")?;
        }
        match &self.reason {
            RefusalReason::Narrowing { live, wanted } => {
                write!(f, "narrowing from {live} to {wanted}")
            }
            RefusalReason::TypeConflict { live, wanted, why } => {
                write!(f, "type conflict {live} vs {wanted} ({why})")
            }
            RefusalReason::WideningNotAllowed { live, wanted } => {
                write!(
                    f,
                    "widening {live} to {wanted} is lossless but not allowed by the policy"
                )
            }
            RefusalReason::NullabilityConflict => write!(
                f,
                "the table column is NOT NULL but the batches' field is nullable"
            ),
            RefusalReason::RequiredColumnMissing => {
                write!(f, "a NOT NULL table column is missing from the batches")
            }
            RefusalReason::PrimaryRawPreconditions { unmet } => {
                write!(
                    f,
                    "the table cannot hold the primary-raw role: {}",
                    crate::unmet::joined(unmet)
                )
            }
            RefusalReason::IcebergCannotFollow { live, wanted } => write!(
                f,
                "widening {live} to {wanted}: the table has Iceberg reads on, and Iceberg only \
                 widens int to bigint, float to double and a decimal's precision"
            ),
            RefusalReason::ColumnName => write!(
                f,
                "Zerobus accepts only ASCII letters, digits and underscores in column names"
            ),
            RefusalReason::UnknownLiveType { type_text } => write!(
                f,
                "the table's column has type {type_text}, which this sink does not know; it \
                 is left untouched (write the column from SQL, or drop it from the batches)"
            ),
        }
    }
}
