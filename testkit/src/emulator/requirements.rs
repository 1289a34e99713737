//! The service's table requirements, as the emulator enforces them on streams (with a catalog
//! root only: without one, any table name is accepted).
//!
//! The service writes only to Unity Catalog managed Delta tables, whose table and column names
//! are ASCII letters, digits and underscores, without catalog-managed commits, and not
//! recreated while streams write to them (PROTOCOL.md E: docs.databricks.com
//! `ingestion/zerobus-limits` and its preview revision `lakeflow-connect/zerobus-limits`).
//!
//! - **At open**, before READY, a stream is refused `INVALID_ARGUMENT` when its table's name
//!   has another character; when the table's Delta log has a protocol with a catalog-managed
//!   table feature (`catalogManaged`, `catalogOwned-preview`; read from the log itself, which
//!   delta-rs cannot open); when the table is not managed (a local table is managed unless its
//!   property `zerobus-local.table_type` names another type, e.g. `EXTERNAL`:
//!   [`TABLE_TYPE_PROPERTY`]); or when a column's name has another character.
//! - **While it writes**, before each group of messages goes to the write-ahead log, the
//!   table's id (the Delta metadata id of its first commit) is compared with the one it had
//!   when the stream opened; another id, or no table, ends the stream `FAILED_PRECONDITION`
//!   and nothing of that group is logged or acked.
//!
//! The words: the documented limits ("Only managed Delta tables are supported", "Only table
//! names with ASCII letters, digits, and underscores are supported", "Catalog-managed commits
//! are not supported", "Recreating a target table is not supported") and the service's way of
//! naming a table (`Table "catalog.schema.table" cannot be found.`, the Zerobus error-handling
//! page) are sourced; how they are joined, the codes for each case (the error page gives
//! `INVALID_ARGUMENT` for invalid input; `FAILED_PRECONDITION` for a recreated table is ours),
//! and the detail after them are ours: the official clients' sources and issues show no
//! message for these cases.
//!
//! Each refusal ends the call through the connection's usual failure path (counted in
//! [`Stats::errors`](super::Stats)) and is counted by requirement in
//! [`Stats::table_refusals`](super::Stats).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::Status;
use zerobus_sink_catalog::local::TABLE_TYPE_PROPERTY;
use zerobus_sink_catalog::{CatalogError, Requirement, TableCatalog, TableRef};

use super::Shared;

/// The catalog-managed commit table features (delta-io/delta `protocol_rfcs/catalog-managed.md`
/// and its preview name).
const CATALOG_MANAGED: [&str; 2] = ["catalogManaged", "catalogOwned-preview"];

/// The table a stream opened on, to tell whether it was recreated since.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    table: String,
    location: PathBuf,
    id: String,
}

/// A refusal: the requirement's label (for [`Stats::table_refusals`](super::Stats)) and the
/// status.
fn refuse(shared: &Arc<Shared>, requirement: &'static str, status: Status) -> Status {
    *shared
        .lock()
        .stats
        .table_refusals
        .entry(requirement)
        .or_default() += 1;
    status
}

fn catalog_managed(shared: &Arc<Shared>, table: &str, feature: &str) -> Status {
    refuse(
        shared,
        "catalog_managed_commits",
        Status::invalid_argument(format!(
            "Table \"{table}\" cannot be a Zerobus target: catalog-managed commits are not \
             supported (its protocol has table feature {feature})."
        )),
    )
}

fn ascii_identifier(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Checks a stream's table at open. `Ok(None)`: nothing to watch (no catalog root, or no such
/// table: the schema check answers `NOT_FOUND`).
pub(crate) async fn at_open(shared: &Arc<Shared>, table: &str) -> Result<Option<Watch>, Status> {
    let Some(catalog) = shared.config.catalog() else {
        return Ok(None);
    };
    if table
        .chars()
        .any(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
    {
        return Err(refuse(
            shared,
            "table_name",
            Status::invalid_argument(format!(
                "Table name \"{table}\" is invalid: only table names with ASCII letters, \
                 digits, and underscores are supported."
            )),
        ));
    }
    let Ok(name) = TableRef::parse(table) else {
        return Ok(None);
    };
    let location = catalog.location(&name);
    let live = match catalog.describe(&name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Ok(None),
        Err(e) => {
            // delta-rs cannot open a table with catalog-managed commits: the catalog read its
            // log and named the feature (a folder's log is read here too).
            let named = match &e {
                CatalogError::Unwritable { broken, .. } => broken.iter().find_map(|r| match r {
                    Requirement::NoCatalogManagedCommits { feature } => Some(feature.clone()),
                    _ => None,
                }),
                _ => None,
            };
            let feature = named.or_else(|| {
                catalog
                    .folder()
                    .and_then(|_| logged_catalog_managed(&location))
            });
            return Err(match feature {
                Some(feature) => catalog_managed(shared, table, &feature),
                None => Status::internal(format!("describe {table}: {e}")),
            });
        }
    };
    let features = live
        .protocol
        .iter()
        .flat_map(|p| p.writer_features.iter().chain(&p.reader_features));
    if let Some(feature) = features
        .into_iter()
        .find(|f| CATALOG_MANAGED.contains(&f.as_str()))
    {
        return Err(catalog_managed(shared, table, feature));
    }
    let table_type = live
        .properties
        .get(TABLE_TYPE_PROPERTY)
        .map_or("MANAGED", String::as_str);
    if !table_type.eq_ignore_ascii_case("MANAGED") {
        return Err(refuse(
            shared,
            "managed_delta",
            Status::invalid_argument(format!(
                "Table \"{table}\" cannot be a Zerobus target: only managed Delta tables are \
                 supported; this table is {}.",
                table_type.to_ascii_uppercase()
            )),
        ));
    }
    if let Some(column) = live.columns.iter().find(|c| !ascii_identifier(&c.name)) {
        return Err(refuse(
            shared,
            "column_name",
            Status::invalid_argument(format!(
                "Table \"{table}\" cannot be a Zerobus target: column \"{}\": only column names \
                 with ASCII letters, digits, and underscores are supported.",
                column.name
            )),
        ));
    }
    let Some(id) = first_commit_id(&location) else {
        return Ok(None);
    };
    Ok(Some(Watch {
        table: table.to_owned(),
        location,
        id,
    }))
}

impl Watch {
    /// `Err` (`FAILED_PRECONDITION`) if the table was recreated or dropped since the stream
    /// opened.
    pub(crate) fn unchanged(&self, shared: &Arc<Shared>) -> Result<(), Status> {
        let now = first_commit_id(&self.location);
        if now.as_deref() == Some(self.id.as_str()) {
            return Ok(());
        }
        let (table, opened) = (&self.table, &self.id);
        let now = now.unwrap_or_else(|| "none: the table is gone".to_owned());
        Err(refuse(
            shared,
            "recreated",
            Status::failed_precondition(format!(
                "Table \"{table}\" was recreated while this stream was writing to it (table id \
                 {opened} at open, {now} now): recreating a target table is not supported."
            )),
        ))
    }
}

/// The JSON commits of a table's log, oldest first.
fn commits(location: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(location.join("_delta_log")) else {
        return Vec::new();
    };
    let mut commits: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    commits.sort();
    commits
}

/// The actions of one commit file (unreadable lines skipped).
fn actions(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The catalog-managed table feature of the newest protocol action in the log, if any.
fn logged_catalog_managed(location: &Path) -> Option<String> {
    let protocol = commits(location).iter().rev().find_map(|path| {
        actions(path)
            .into_iter()
            .rev()
            .find_map(|a| a.get("protocol").cloned())
    })?;
    ["writerFeatures", "readerFeatures"]
        .iter()
        .filter_map(|key| protocol.get(key).and_then(serde_json::Value::as_array))
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .find(|f| CATALOG_MANAGED.contains(f))
        .map(str::to_owned)
}

/// The table's id: the metadata id of its first commit (a Delta table's id never changes, so a
/// new one means a new table under the same name). `None`: no such commit (a table dropped,
/// or being made again).
fn first_commit_id(location: &Path) -> Option<String> {
    let first = location
        .join("_delta_log")
        .join("00000000000000000000.json");
    actions(&first).into_iter().find_map(|a| {
        a.pointer("/metaData/id")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    })
}
