//! The write boundary (seed section 5.2): what the sink checks and converts between a batch
//! and its table, so that nothing it could reconcile or name reaches the service as an opaque
//! rejection, and nothing is silently NULLed or dropped.
//!
//! - **Once per schema** (when the table is described, never per batch), each incoming column
//!   is matched with the column the table declares, by a rule (`rules.rs`): pass, a lossless
//!   cast to the wire type the table wants, a *checked* cast (the value must fit; a row whose
//!   value does not is a bad row), nested values as JSON text into a STRING column, or a zoned
//!   timestamp as its UTC wall time into TIMESTAMP_NTZ (both opt-in through [`Conversions`]).
//!   Anything else is refused, every column at once ([`ColumnRefusal`]): the table's batches
//!   of that schema come back from `send` as [`SendError::Unreconcilable`](crate::SendError).
//! - **Per batch, before send**: rows the table would refuse are found (a null in a NOT NULL
//!   column, a value that does not fit after a checked cast, a row larger than the message
//!   limit) and the table's [`BadRows`] policy decides: fail the batch (it comes back from
//!   `send` with every bad row named), or isolate (good rows go with the token; bad rows go to
//!   [`Confirmer::isolated`](crate::Confirmer::isolated) first). Either way rows written plus
//!   rows handed back equal rows submitted.
//! - **At emit**: every row is stamped with `_twg_emit_ts` (the driver's clock when the batch
//!   went to a stream) and, from the batch's token, the `_twg_source_*` columns (topic,
//!   partition, start and end offsets, the row's index in the batch as sent), so that readers
//!   can drop rows a replay wrote twice (docs/write-boundary.md has the query).
//!
//! The rules, the policies and the dedup query are listed in `docs/write-boundary.md`.

pub(crate) mod apply;
pub(crate) mod check;
pub(crate) mod plan;
pub(crate) mod rows;
pub(crate) mod rules;

use std::fmt;

use arrow_array::RecordBatch;
use zerobus_sink::Lane;

pub(crate) use plan::Plan;

/// The conversions the write boundary may make beyond lossless casts; both are off by
/// default, so that a mismatch that changes what a value means is refused loudly unless the
/// table's owner asked for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Conversions {
    /// Struct, List and Map values arriving for a STRING column are written as JSON text.
    /// Off: the column is refused, named.
    pub nested_to_json: bool,
    /// Zoned timestamps (e.g. `Timestamp(µs, "UTC")`) arriving for a TIMESTAMP_NTZ column are
    /// written as their UTC wall time. Off: the column is refused, named.
    pub zoned_to_utc_wall_time: bool,
}

impl Conversions {
    /// Nested values into STRING columns as JSON text.
    #[must_use]
    pub fn nested_to_json(mut self) -> Conversions {
        self.nested_to_json = true;
        self
    }

    /// Zoned timestamps into TIMESTAMP_NTZ columns as their UTC wall time.
    #[must_use]
    pub fn zoned_to_utc_wall_time(mut self) -> Conversions {
        self.zoned_to_utc_wall_time = true;
        self
    }
}

/// What happens to a batch with rows its table would refuse. (A row too large for any message
/// is isolated under either policy, unless the batch also has rows `FailBatch` fails it for.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadRows {
    /// The whole batch comes back from `send` ([`SendError::BadRows`](crate::SendError)) with
    /// every bad row named; nothing of it is sent.
    #[default]
    FailBatch,
    /// The good rows go, with the batch's token (confirmed when they are durable); the bad rows
    /// go to [`Confirmer::isolated`](crate::Confirmer::isolated) as their own batch, each with
    /// its reason, before the good rows are admitted. A batch with no good row fails whole.
    Isolate,
}

/// Why a row was refused before send.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// A null in a column the table declares NOT NULL.
    NullInRequired,
    /// The value does not fit the column's declared type (`declared`) after the cast.
    DoesNotFit {
        /// The table's type.
        declared: String,
    },
    /// The row alone is larger than the service's message limit.
    TooLarge {
        /// The row's size, as the wire counts its values.
        bytes: u64,
        /// The limit ([`ZerobusConfig::max_row_bytes`](crate::ZerobusConfig)).
        limit: u64,
    },
}

/// One row the table would refuse, found before send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFault {
    /// The row's index in the batch as it was sent.
    pub row: usize,
    /// The column concerned (`None` for a row too large as a whole).
    pub column: Option<String>,
    /// Why.
    pub kind: FaultKind,
}

impl fmt::Display for RowFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "row {}", self.row)?;
        if let Some(c) = &self.column {
            write!(f, " column `{c}`")?;
        }
        match &self.kind {
            FaultKind::NullInRequired => f.write_str(": null in a NOT NULL column"),
            FaultKind::DoesNotFit { declared } => write!(f, ": value does not fit {declared}"),
            FaultKind::TooLarge { bytes, limit } => {
                write!(f, ": {bytes} bytes, over the {limit}-byte message limit")
            }
        }
    }
}

/// Every fault, one per item, for errors and logs (values are never included); past 20, a
/// count of the rest.
pub(crate) fn describe(faults: &[RowFault]) -> String {
    joined(faults, 20)
}

/// The items in words, `; `-separated; past `shown`, a count of the rest.
pub(crate) fn joined<T: fmt::Display>(items: &[T], shown: usize) -> String {
    let mut s = items
        .iter()
        .take(shown)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > shown {
        s.push_str(&format!("; and {} more", items.len() - shown));
    }
    s
}

/// How many distinct rows `faults` name (a row may have several faults).
pub(crate) fn rows_named(faults: &[RowFault]) -> usize {
    faults
        .iter()
        .map(|f| f.row)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// Why a column of a batch schema cannot be written to its table, decided once per schema.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnRefusal {
    /// Struct, List or Map values for a STRING column, and [`Conversions::nested_to_json`] is
    /// off.
    NestedIntoString {
        /// The column.
        column: String,
        /// The batch's type.
        incoming: String,
    },
    /// A zoned timestamp for a TIMESTAMP_NTZ column, and
    /// [`Conversions::zoned_to_utc_wall_time`] is off.
    ZonedIntoNtz {
        /// The column.
        column: String,
        /// The batch's type.
        incoming: String,
    },
    /// No rule converts the batch's type to the table's.
    Unconvertible {
        /// The column.
        column: String,
        /// The batch's type.
        incoming: String,
        /// The table's type.
        declared: String,
    },
    /// The batch has a column the table does not (after reconciling: the catalog did not add
    /// it).
    NotInTable {
        /// The column.
        column: String,
        /// The batch's type.
        incoming: String,
    },
    /// The table declares the column NOT NULL and the batch does not have it.
    MissingRequired {
        /// The column.
        column: String,
    },
    /// The catalog refused to make the table take the schema (its words name each column or
    /// precondition).
    Catalog {
        /// What the catalog said.
        reason: String,
    },
}

impl ColumnRefusal {
    /// The counter kind (`zerobus_type_reconcile_total{kind}`).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            ColumnRefusal::NestedIntoString { .. } => "refused_nested_into_string",
            ColumnRefusal::ZonedIntoNtz { .. } => "refused_zoned_into_ntz",
            ColumnRefusal::Unconvertible { .. } => "refused_unconvertible",
            ColumnRefusal::NotInTable { .. } => "refused_not_in_table",
            ColumnRefusal::MissingRequired { .. } => "refused_missing_required",
            ColumnRefusal::Catalog { .. } => "refused_by_catalog",
        }
    }

    /// Whether it is one of the two mismatches the plan names as loud (nested into STRING,
    /// zoned into TIMESTAMP_NTZ).
    #[must_use]
    pub fn is_loud(&self) -> bool {
        matches!(
            self,
            ColumnRefusal::NestedIntoString { .. } | ColumnRefusal::ZonedIntoNtz { .. }
        )
    }
}

impl fmt::Display for ColumnRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnRefusal::NestedIntoString { column, incoming } => write!(
                f,
                "column `{column}`: {incoming} values for a STRING column (enable Conversions::nested_to_json to write them as JSON text)"
            ),
            ColumnRefusal::ZonedIntoNtz { column, incoming } => write!(
                f,
                "column `{column}`: zoned {incoming} for a TIMESTAMP_NTZ column (enable Conversions::zoned_to_utc_wall_time to write the UTC wall time)"
            ),
            ColumnRefusal::Unconvertible {
                column,
                incoming,
                declared,
            } => write!(
                f,
                "column `{column}`: no conversion from {incoming} to the table's {declared}"
            ),
            ColumnRefusal::NotInTable { column, incoming } => {
                write!(f, "column `{column}` ({incoming}) is not in the table")
            }
            ColumnRefusal::MissingRequired { column } => {
                write!(
                    f,
                    "column `{column}` is NOT NULL in the table and missing from the batch"
                )
            }
            ColumnRefusal::Catalog { reason } => write!(f, "the catalog refused: {reason}"),
        }
    }
}

/// Rows of a batch the write boundary refused under [`BadRows::Isolate`], handed back on
/// their own. The batch's token stays with its good rows (it is confirmed when they are
/// durable); `position` says which batch these came from.
#[must_use = "isolated rows must be parked or reported; dropping them loses data"]
pub struct IsolatedRows<L: Lane> {
    /// The position of the batch they came from.
    pub position: L::Position,
    /// The refused rows, in the batch's schema and order.
    pub batch: RecordBatch,
    /// Every fault: `row` is the index in the batch as sent (a row may have several).
    pub faults: Vec<RowFault>,
}

impl<L: Lane> fmt::Debug for IsolatedRows<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsolatedRows")
            .field("position", &self.position)
            .field("rows", &self.batch.num_rows())
            .field("faults", &self.faults)
            .finish()
    }
}
