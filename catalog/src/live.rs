//! What a catalog says a table is now.

use std::collections::BTreeMap;

use crate::table_ref::TableRef;
use crate::types::DeltaType;

/// One live column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveColumn {
    /// Its name.
    pub name: String,
    /// Its type.
    pub data_type: DeltaType,
    /// Whether it may be null.
    pub nullable: bool,
    /// Its comment.
    pub comment: Option<String>,
}

/// A table as the catalog describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveTable {
    /// The table.
    pub table: TableRef,
    /// Its columns, in order.
    pub columns: Vec<LiveColumn>,
    /// Its description.
    pub comment: Option<String>,
    /// Its properties.
    pub properties: BTreeMap<String, String>,
    /// The catalog's id for it (Unity Catalog's `table_id`), where there is one.
    pub table_id: Option<String>,
    /// Where its data lives.
    pub storage_location: Option<String>,
}

impl LiveTable {
    /// The column named `name` (case-insensitive, as Delta compares names).
    #[must_use]
    pub fn column(&self, name: &str) -> Option<&LiveColumn> {
        self.columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }
}
