//! The table a sink wants: built from the incoming Arrow schema, an optional data contract, and
//! the reserved `_twg_*` metadata columns the sink stamps on write.

use std::collections::BTreeMap;

use arrow_schema::Schema;

use crate::error::CatalogError;
use crate::table_ref::{TableRef, is_identifier_safe};
use crate::types::{DeltaType, VARIANT_EXTENSION};

/// Prefix of the columns the sink owns.
pub const RESERVED_PREFIX: &str = "_twg_";

/// The reserved columns: name, type, built-in description.
pub const RESERVED_COLUMNS: [(&str, DeltaType, &str); 6] = [
    (
        "_twg_emit_ts",
        DeltaType::Timestamp,
        "Time (UTC) at which zerobus-sink emitted this row to Zerobus; stamped on write, never by the source.",
    ),
    (
        "_twg_source_topic",
        DeltaType::String,
        "Source topic (or stream) of the batch this row came in; stamped by zerobus-sink from the batch's token.",
    ),
    (
        "_twg_source_partition",
        DeltaType::Integer,
        "Source partition of the batch this row came in; stamped by zerobus-sink from the batch's token.",
    ),
    (
        "_twg_source_start",
        DeltaType::Long,
        "First source offset the batch this row came in covers (the raw lane: its last record's offset, as _twg_source_end).",
    ),
    (
        "_twg_source_end",
        DeltaType::Long,
        "Last source offset the batch this row came in covers.",
    ),
    (
        "_twg_source_row",
        DeltaType::Integer,
        "Index of this row within the batch as the pipeline sent it; with the other _twg_source_ columns, it identifies a row across replays (Zerobus is at-least-once).",
    ),
];

/// Who wrote a comment: the sink for its own columns, the data contract for payload columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Authority {
    /// A fixed, built-in description of a column the sink owns.
    Engine,
    /// A description from the data contract.
    Contract,
}

/// A comment and who wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comment {
    /// The text.
    pub text: String,
    /// Its authority.
    pub authority: Authority,
}

/// What a data contract says about the table (ODCS-style): all optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contract {
    /// Column descriptions, by column name.
    pub column_descriptions: BTreeMap<String, String>,
    /// The table's description.
    pub table_description: Option<String>,
    /// The owning team.
    pub owner: Option<String>,
    /// Where the contract lives.
    pub uri: Option<String>,
    /// The contract's version.
    pub version: Option<String>,
    /// The source topic the table is fed from.
    pub source_topic: Option<String>,
}

/// The role the table plays for the pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// An ordinary target.
    #[default]
    Standard,
    /// The primary raw copy recovery reads back through Iceberg: created with Iceberg reads
    /// (IcebergCompatV2, universal format iceberg, column mapping by name) and deletion vectors
    /// off (seed section 8).
    PrimaryRaw,
}

/// The properties a primary-raw table must have where recovery reads it through Iceberg (Unity
/// Catalog): Iceberg reads on, column mapping by name, deletion vectors off. See
/// [`PrimaryRawShape`](crate::primary_raw::PrimaryRawShape).
pub const PRIMARY_RAW_PROPERTIES: [(&str, &str); 4] = [
    ("delta.enableIcebergCompatV2", "true"),
    ("delta.universalFormat.enabledFormats", "iceberg"),
    ("delta.columnMapping.mode", "name"),
    ("delta.enableDeletionVectors", "false"),
];

/// The properties a primary-raw table has on the local backend, where recovery reads it with
/// delta-rs: deletion vectors off (and nothing the shipped reader cannot read; no Iceberg).
pub const LOCAL_PRIMARY_RAW_PROPERTIES: [(&str, &str); 1] =
    [("delta.enableDeletionVectors", "false")];

/// One wanted column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredColumn {
    /// Its name.
    pub name: String,
    /// Its type, as the DDL can express it (see [`DeltaType::loosened`]).
    pub data_type: DeltaType,
    /// Whether it may be null.
    pub nullable: bool,
    /// Its comment, if an authority gives one.
    pub comment: Option<Comment>,
}

/// The table a sink wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredTable {
    /// The table.
    pub table: TableRef,
    /// Payload columns in schema order, then the reserved columns.
    pub columns: Vec<DesiredColumn>,
    /// The table's description.
    pub comment: Option<String>,
    /// Properties to set (owner, contract, source, role).
    pub properties: BTreeMap<String, String>,
    /// The role.
    pub role: Role,
}

impl DesiredTable {
    /// The table `table` should be to take batches of `schema`: every field mapped to Delta
    /// (a named error for any that cannot be), the contract's descriptions and properties, the
    /// reserved columns with their built-in descriptions. The role's properties depend on the
    /// backend, so the plan adds them ([`PrimaryRawShape`](crate::primary_raw::PrimaryRawShape)).
    pub fn from_arrow(
        table: TableRef,
        schema: &Schema,
        contract: Option<&Contract>,
        role: Role,
    ) -> Result<DesiredTable, CatalogError> {
        let bad = |column: &str, reason: &str| CatalogError::InvalidColumn {
            table: table.full_name(),
            column: column.to_owned(),
            reason: reason.to_owned(),
        };
        let mut columns = Vec::with_capacity(schema.fields().len() + RESERVED_COLUMNS.len());
        for field in schema.fields() {
            let name = field.name();
            if !is_identifier_safe(name) {
                return Err(bad(
                    name,
                    "column names must be ASCII letters, digits or underscores",
                ));
            }
            if name.to_ascii_lowercase().starts_with(RESERVED_PREFIX) {
                return Err(bad(
                    name,
                    "the _twg_ prefix is reserved for columns the sink stamps",
                ));
            }
            if columns
                .iter()
                .any(|c: &DesiredColumn| c.name.eq_ignore_ascii_case(name))
            {
                return Err(bad(
                    name,
                    "appears twice (Delta column names are case-insensitive)",
                ));
            }
            let variant = field
                .metadata()
                .get("ARROW:extension:name")
                .is_some_and(|n| n == VARIANT_EXTENSION);
            let data_type = if variant {
                DeltaType::Variant
            } else {
                DeltaType::from_arrow(name, field.data_type())?.loosened()
            };
            let comment = contract
                .and_then(|c| c.column_descriptions.get(name))
                .map(|text| Comment {
                    text: text.clone(),
                    authority: Authority::Contract,
                });
            columns.push(DesiredColumn {
                name: name.clone(),
                data_type,
                nullable: field.is_nullable(),
                comment,
            });
        }
        for (name, data_type, text) in RESERVED_COLUMNS {
            let comment = Some(Comment {
                text: text.to_owned(),
                authority: Authority::Engine,
            });
            columns.push(DesiredColumn {
                name: name.to_owned(),
                data_type,
                nullable: false,
                comment,
            });
        }
        let mut properties = BTreeMap::new();
        if let Some(c) = contract {
            for (key, value) in [
                ("twg.owner", &c.owner),
                ("twg.contract.uri", &c.uri),
                ("twg.contract.version", &c.version),
                ("twg.source.topic", &c.source_topic),
            ] {
                if let Some(v) = value {
                    properties.insert(key.to_owned(), v.clone());
                }
            }
        }
        let comment = contract.and_then(|c| c.table_description.clone());
        Ok(DesiredTable {
            table,
            columns,
            comment,
            properties,
            role,
        })
    }
}
