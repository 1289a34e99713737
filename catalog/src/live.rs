//! What a catalog says a table is now.

use std::collections::{BTreeMap, BTreeSet};

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

/// A table's Delta protocol: the reader and writer versions and, from versions 3 and 7, the
/// table features each needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Protocol {
    /// `minReaderVersion`.
    pub min_reader_version: i32,
    /// `minWriterVersion`.
    pub min_writer_version: i32,
    /// Reader features (e.g. `columnMapping`, `deletionVectors`, `timestampNtz`).
    pub reader_features: BTreeSet<String>,
    /// Writer features (e.g. `icebergCompatV2`, `columnMapping`, `appendOnly`).
    pub writer_features: BTreeSet<String>,
}

impl Protocol {
    /// Whether `feature` is a reader or writer feature of the table.
    #[must_use]
    pub fn has(&self, feature: &str) -> bool {
        self.reader_features.contains(feature) || self.writer_features.contains(feature)
    }

    /// The protocol Unity Catalog reports in a table's properties (`delta.minReaderVersion`,
    /// `delta.minWriterVersion`, `delta.feature.<name>`), if it reports one.
    #[must_use]
    pub fn from_properties(properties: &BTreeMap<String, String>) -> Option<Protocol> {
        let version = |k: &str| properties.get(k).and_then(|v| v.trim().parse().ok());
        let min_reader_version = version("delta.minReaderVersion")?;
        let min_writer_version = version("delta.minWriterVersion")?;
        let features: BTreeSet<String> = properties
            .iter()
            .filter(|(_, v)| matches!(v.as_str(), "supported" | "enabled"))
            .filter_map(|(k, _)| k.strip_prefix("delta.feature.").map(str::to_owned))
            .collect();
        Some(Protocol {
            min_reader_version,
            min_writer_version,
            reader_features: features.clone(),
            writer_features: features,
        })
    }
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
    /// Its Delta protocol, when the catalog says (the local backend always; Unity Catalog when
    /// the table's properties carry it).
    pub protocol: Option<Protocol>,
    /// Its type (Unity Catalog's `table_type`: `MANAGED`, `EXTERNAL`, `VIEW`, ...), if the
    /// catalog says. The local backend's tables are `MANAGED` unless their property
    /// `zerobus-local.table_type` says otherwise.
    pub table_type: Option<String>,
    /// Its format (Unity Catalog's `data_source_format`: `DELTA`, `ICEBERG`, ...), if the
    /// catalog says; `DELTA` for the local backend.
    pub data_source_format: Option<String>,
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
