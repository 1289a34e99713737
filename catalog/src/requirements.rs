//! The service's table requirements, checked when a table is described for writing.
//!
//! Zerobus writes only to tables that meet these (PROTOCOL.md E, from
//! docs.databricks.com/aws/en/ingestion/zerobus-limits and its preview revision,
//! lakeflow-connect/zerobus-limits):
//!
//! - "Only managed Delta tables can be targets": Unity Catalog's `table_type` is `MANAGED` and
//!   its `data_source_format` is `DELTA`;
//! - "Table and column names may use only ASCII letters, digits and underscores" (table names
//!   are checked by [`TableRef`] when parsed; column names here, and in the plan for the columns
//!   a sink wants);
//! - "Catalog-managed commits are not supported": the table's protocol has neither Delta table
//!   feature of catalog-managed commits ([`CATALOG_MANAGED_FEATURES`]), nor do its properties
//!   declare one (`delta.feature.<name> = supported`);
//! - "Recreating the target table is not supported": the table id a catalog first saw for a
//!   table never changes, and a table once seen is not absent later ([`FirstSeen`]).
//!
//! A table that breaks one would otherwise be found out by the service when a stream opens, or
//! by a failing batch. [`TableCatalog::describe_for_write`](crate::TableCatalog) checks them
//! and answers [`CatalogError::Unwritable`](crate::CatalogError) naming the table and every
//! requirement broken, before anything is planned, executed or opened.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::live::LiveTable;
use crate::table_ref::{TableRef, is_identifier_safe};

/// The `table_type` Zerobus writes to.
pub const MANAGED_TABLE_TYPE: &str = "MANAGED";

/// The `data_source_format` Zerobus writes to.
pub const DELTA_FORMAT: &str = "DELTA";

/// The Delta table features of catalog-managed commits: `catalogManaged` (the Delta protocol's
/// RFC, delta-io/delta `protocol_rfcs/catalog-managed.md`) and its preview name
/// `catalogOwned-preview` (both reader-writer features; named so in delta-kernel-rs'
/// `TableFeature`).
pub const CATALOG_MANAGED_FEATURES: [&str; 2] = ["catalogManaged", "catalogOwned-preview"];

/// A requirement of the service that a table breaks, with what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Requirement {
    /// Only managed tables: the table's type is another one (`None`: the catalog does not say).
    Managed {
        /// The table's `table_type`, if the catalog gives one.
        table_type: Option<String>,
    },
    /// Only Delta tables: the table's format is another one (`None`: the catalog does not say).
    Delta {
        /// The table's `data_source_format`, if the catalog gives one.
        format: Option<String>,
    },
    /// Column names of ASCII letters, digits and underscores only.
    ColumnName {
        /// The column.
        column: String,
    },
    /// No catalog-managed commits: the table has this feature.
    NoCatalogManagedCommits {
        /// The table feature found (one of [`CATALOG_MANAGED_FEATURES`]).
        feature: String,
    },
    /// Not recreated while written: the table's id changed, or the table is gone.
    NotRecreated {
        /// The table id the catalog first saw.
        first: String,
        /// The table id now (`None`: the table no longer exists).
        now: Option<String>,
    },
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ONLY: &str = "Zerobus writes only to managed Delta tables";
        match self {
            Requirement::Managed {
                table_type: Some(t),
            } => write!(f, "{ONLY}; this table is {t}"),
            Requirement::Managed { table_type: None } => {
                write!(f, "{ONLY}; the catalog does not say this table's type")
            }
            Requirement::Delta { format: Some(d) } => {
                write!(f, "{ONLY}; this table's format is {d}")
            }
            Requirement::Delta { format: None } => {
                write!(f, "{ONLY}; the catalog does not say this table's format")
            }
            Requirement::ColumnName { column } => write!(
                f,
                "column {column:?}: Zerobus accepts only ASCII letters, digits and underscores \
                 in column names"
            ),
            Requirement::NoCatalogManagedCommits { feature } => write!(
                f,
                "the table uses catalog-managed commits (Delta table feature {feature}), which \
                 Zerobus does not support"
            ),
            Requirement::NotRecreated {
                first,
                now: Some(now),
            } => write!(
                f,
                "the table was recreated: its table id was {first} when this sink first \
                 described it and is {now} now; Zerobus does not support recreating a table it \
                 writes to"
            ),
            Requirement::NotRecreated { first, now: None } => write!(
                f,
                "the table was dropped: its table id was {first} when this sink first described \
                 it; Zerobus does not support recreating a table it writes to, so the sink will \
                 not create it again"
            ),
        }
    }
}

/// Every requirement in `broken`, `; also `-separated (each one's text may hold a `;`).
#[must_use]
pub fn joined(broken: &[Requirement]) -> String {
    broken
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; also ")
}

/// The requirements `live` breaks by itself (everything but recreation, which needs to know
/// what was seen before: [`FirstSeen`]). Pure.
#[must_use]
pub fn unmet(live: &LiveTable) -> Vec<Requirement> {
    let mut broken = Vec::new();
    if !live
        .table_type
        .as_deref()
        .is_some_and(|t| t.eq_ignore_ascii_case(MANAGED_TABLE_TYPE))
    {
        broken.push(Requirement::Managed {
            table_type: live.table_type.clone(),
        });
    }
    if !live
        .data_source_format
        .as_deref()
        .is_some_and(|f| f.eq_ignore_ascii_case(DELTA_FORMAT))
    {
        broken.push(Requirement::Delta {
            format: live.data_source_format.clone(),
        });
    }
    for c in &live.columns {
        if !is_identifier_safe(&c.name) {
            broken.push(Requirement::ColumnName {
                column: c.name.clone(),
            });
        }
    }
    if let Some(feature) = catalog_managed(live) {
        broken.push(Requirement::NoCatalogManagedCommits { feature });
    }
    broken
}

/// The catalog-managed commit feature `live` has, if any: in its protocol, or declared in its
/// properties (`delta.feature.catalogManaged = supported`, as Unity Catalog reports features).
fn catalog_managed(live: &LiveTable) -> Option<String> {
    let in_protocol = live.protocol.as_ref().and_then(|p| {
        CATALOG_MANAGED_FEATURES
            .iter()
            .find(|f| p.has(f))
            .map(|f| (*f).to_owned())
    });
    in_protocol.or_else(|| {
        CATALOG_MANAGED_FEATURES
            .iter()
            .find(|f| {
                live.properties
                    .get(&format!("delta.feature.{f}"))
                    .is_some_and(|v| {
                        v.eq_ignore_ascii_case("supported") || v.eq_ignore_ascii_case("enabled")
                    })
            })
            .map(|f| (*f).to_owned())
    })
}

/// The table id a catalog first saw for each table it admitted for writing, to find a table
/// recreated (a new id under the same name) or dropped (absent once seen) since. Clones share
/// what they remember; a new value remembers nothing (a new sink may write to a table that was
/// recreated before it started).
#[derive(Clone, Debug, Default)]
pub struct FirstSeen {
    ids: Arc<Mutex<BTreeMap<TableRef, String>>>,
}

impl FirstSeen {
    /// Remembers nothing yet.
    #[must_use]
    pub fn new() -> FirstSeen {
        FirstSeen::default()
    }

    /// The table id first seen for `table`, if any.
    #[must_use]
    pub fn id(&self, table: &TableRef) -> Option<String> {
        self.ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .cloned()
    }

    /// Checks `live` (`None`: absent) against what was seen of `table`, and remembers its id
    /// when it is the first one seen: the requirement broken if the table was recreated or
    /// dropped since.
    pub fn observe(&self, table: &TableRef, live: Option<&LiveTable>) -> Option<Requirement> {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        let now = live.and_then(|l| l.table_id.clone());
        match (ids.get(table), now) {
            (Some(first), now) if now.as_ref() != Some(first) => {
                // A table without an id (a catalog that gives none) cannot be told apart from
                // its predecessor; only an absent table or another id is a recreation.
                if now.is_none() && live.is_some() {
                    return None;
                }
                Some(Requirement::NotRecreated {
                    first: first.clone(),
                    now,
                })
            }
            (Some(_), _) => None,
            (None, Some(id)) => {
                ids.insert(table.clone(), id);
                None
            }
            (None, None) => None,
        }
    }

    /// What [`describe_for_write`](crate::TableCatalog::describe_for_write) answers for
    /// `table` described as `live`: the table, or every requirement it breaks. A table is
    /// remembered only once admitted (a refused one may be recreated to fix it).
    pub(crate) fn admit(
        &self,
        table: &TableRef,
        live: Option<LiveTable>,
    ) -> Result<Option<LiveTable>, crate::CatalogError> {
        let mut broken = live.as_ref().map(unmet).unwrap_or_default();
        if broken.is_empty()
            && let Some(r) = self.observe(table, live.as_ref())
        {
            broken.push(r);
        }
        if broken.is_empty() {
            Ok(live)
        } else {
            Err(crate::CatalogError::Unwritable {
                table: table.full_name(),
                broken,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::live::{LiveColumn, Protocol};
    use crate::types::DeltaType;

    fn live(id: &str) -> LiveTable {
        LiveTable {
            table: TableRef::parse("main.bronze.orders").unwrap(),
            columns: vec![LiveColumn {
                name: "id".into(),
                data_type: DeltaType::Long,
                nullable: false,
                comment: None,
            }],
            comment: None,
            properties: BTreeMap::new(),
            table_id: Some(id.into()),
            storage_location: None,
            protocol: None,
            table_type: Some("MANAGED".into()),
            data_source_format: Some("DELTA".into()),
        }
    }

    #[test]
    fn a_managed_delta_table_with_ascii_names_meets_every_requirement() {
        assert_eq!(unmet(&live("a")), []);
    }

    #[test]
    fn each_requirement_is_named_with_what_was_found() {
        let mut t = live("a");
        t.table_type = Some("EXTERNAL".into());
        t.data_source_format = Some("ICEBERG".into());
        t.columns[0].name = "prix_€".into();
        t.protocol = Some(Protocol {
            min_reader_version: 3,
            min_writer_version: 7,
            reader_features: BTreeSet::from(["catalogManaged".to_owned()]),
            writer_features: BTreeSet::from(["catalogManaged".to_owned()]),
        });
        let broken = unmet(&t);
        assert_eq!(
            broken,
            [
                Requirement::Managed {
                    table_type: Some("EXTERNAL".into())
                },
                Requirement::Delta {
                    format: Some("ICEBERG".into())
                },
                Requirement::ColumnName {
                    column: "prix_€".into()
                },
                Requirement::NoCatalogManagedCommits {
                    feature: "catalogManaged".into()
                },
            ]
        );
        assert_eq!(
            broken[0].to_string(),
            "Zerobus writes only to managed Delta tables; this table is EXTERNAL"
        );
    }

    #[test]
    fn catalog_managed_commits_are_found_in_the_properties_too() {
        let mut t = live("a");
        t.properties.insert(
            "delta.feature.catalogOwned-preview".into(),
            "supported".into(),
        );
        assert_eq!(
            unmet(&t),
            [Requirement::NoCatalogManagedCommits {
                feature: "catalogOwned-preview".into()
            }]
        );
    }

    #[test]
    fn a_new_id_or_an_absent_table_after_the_first_is_a_recreation() {
        let seen = FirstSeen::new();
        let table = TableRef::parse("main.bronze.orders").unwrap();
        assert_eq!(seen.observe(&table, None), None, "absent, never seen");
        assert_eq!(seen.observe(&table, Some(&live("a"))), None, "first seen");
        assert_eq!(seen.observe(&table, Some(&live("a"))), None, "the same");
        assert_eq!(
            seen.observe(&table, Some(&live("b"))),
            Some(Requirement::NotRecreated {
                first: "a".into(),
                now: Some("b".into())
            })
        );
        assert_eq!(
            seen.observe(&table, None),
            Some(Requirement::NotRecreated {
                first: "a".into(),
                now: None
            })
        );
        assert_eq!(seen.id(&table).as_deref(), Some("a"), "the first stays");
        let clone = seen.clone();
        assert!(
            clone.observe(&table, Some(&live("b"))).is_some(),
            "clones share"
        );
    }

    #[test]
    fn a_refused_table_is_not_remembered() {
        let seen = FirstSeen::new();
        let table = TableRef::parse("main.bronze.orders").unwrap();
        let mut external = live("a");
        external.table_type = Some("EXTERNAL".into());
        let err = seen.admit(&table, Some(external)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "main.bronze.orders: Zerobus writes only to managed Delta tables; this table is \
             EXTERNAL"
        );
        assert_eq!(seen.id(&table), None);
        assert!(
            seen.admit(&table, Some(live("b"))).is_ok(),
            "fixed by a new table"
        );
    }
}
