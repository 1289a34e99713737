//! The local backend: real Delta tables under a root (`root/catalog/schema/table`), with
//! delta-rs and no datafusion. The embedded default: the demo and the tests use it. The root is
//! a local folder ([`LocalDelta::new`]) or a prefix in S3 or an S3-compatible store
//! ([`LocalDelta::on_s3`], endpoint and credentials from [`S3Storage`]): delta-rs opens the
//! tables by URL with the storage options, commits with put-if-absent (`If-None-Match: *`, so
//! two writers cannot both take a version), and the data files are read through the same
//! object store.
//!
//! Column comments live in the fields' `comment` metadata, the table comment in the Delta
//! metadata's description, properties in its configuration: where Databricks keeps them too.
//! Not supported here: type widening (delta-rs has no in-place type change); a plan that widens
//! fails with a named error before anything is written.
//!
//! Every table it makes stays writable and evolvable by the delta-rs it ships with: properties
//! are committed as a metadata change alone (delta-rs's own property operation rewrites the
//! protocol of a writer-7 table, e.g. one with a `TIMESTAMP_NTZ` column, into a feature list
//! its writer then refuses). A primary-raw table here is
//! [`PrimaryRawShape::DeltaReadable`]: deletion vectors off, no Iceberg or column-mapping
//! claims, because delta-rs can neither write a column-mapped table nor (without datafusion)
//! read one (ADR 0009).
//!
//! Reconciling is idempotent under concurrent callers: a commit that loses a race (another
//! sink created the table, or changed it, first) describes the table again and plans again.
//!
//! The service's table requirements ([`requirements`](crate::requirements)) hold here as in
//! Unity Catalog: a local table is the catalog's own, so it is `MANAGED` (and `DELTA`) unless
//! its property [`TABLE_TYPE_PROPERTY`] names another type (`EXTERNAL`, say: how tests, and
//! `zerobus-local`, which reads the same property, make a table Zerobus must refuse). Its id is
//! the Delta metadata's id, so a table dropped and made again under the same name is a new
//! table. A table whose protocol has catalog-managed commits cannot even be opened by delta-rs;
//! describing it reads the protocol from its log and names the feature instead.

pub mod coverage_store;
mod gate;
mod read;
mod s3;

pub use gate::TABLES_AT_ONCE;
pub use s3::S3Storage;

use gate::Gate;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use arrow_array::{ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{ArrowError, SchemaRef};
use deltalake::kernel::transaction::CommitBuilder;
use deltalake::kernel::{Action as DeltaAction, MetadataExt, MetadataValue, Snapshot, StructField};
use deltalake::operations::update_table_metadata::TableMetadataUpdate;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use url::Url;

use crate::catalog::{
    Access, CloudCredentials, ReconcileOutcome, SinkId, TableCatalog, VendedCredentials,
    sink_property,
};
use crate::desired::{DesiredColumn, DesiredTable};
use crate::error::CatalogError;
use crate::live::{LiveColumn, LiveTable, Protocol};
use crate::plan::{Action, Policy, plan};
use crate::primary_raw::PrimaryRawShape;
use crate::requirements::{CATALOG_MANAGED_FEATURES, FirstSeen, MANAGED_TABLE_TYPE, Requirement};
use crate::table_ref::TableRef;
use crate::types::{DeltaType, field_json};

/// The table property that gives a local table a Unity Catalog table type other than
/// `MANAGED` (e.g. `EXTERNAL`): the local backend has no table types of its own.
pub const TABLE_TYPE_PROPERTY: &str = "zerobus-local.table_type";

/// Delta tables under a root: a local folder, or a prefix in S3 (or an S3-compatible store).
/// `Debug` shows the root, never a credential.
#[derive(Clone)]
pub struct LocalDelta {
    root: Root,
    /// The table ids first described for writing; clones share them.
    seen: FirstSeen,
    /// How many tables are described or changed at once; clones share it.
    gate: Gate,
}

/// Where a local catalog keeps its tables.
#[derive(Clone)]
enum Root {
    Folder(PathBuf),
    /// `s3://bucket/prefix/` and how to reach it (boxed: the folder is the common case).
    Store(Box<StoreRoot>),
}

#[derive(Clone)]
struct StoreRoot {
    url: Url,
    storage: S3Storage,
}

impl std::fmt::Debug for LocalDelta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.root {
            Root::Folder(path) => f.debug_struct("LocalDelta").field("root", path).finish(),
            Root::Store(store) => f
                .debug_struct("LocalDelta")
                .field("root", &store.url.as_str())
                .field("storage", &store.storage)
                .finish(),
        }
    }
}

impl LocalDelta {
    /// Tables live under the folder `root`, which is created if absent.
    #[must_use]
    pub fn new(root: impl Into<PathBuf>) -> LocalDelta {
        LocalDelta {
            root: Root::Folder(root.into()),
            seen: FirstSeen::new(),
            gate: Gate::new(TABLES_AT_ONCE),
        }
    }

    /// Tables live under `root`, `s3://bucket[/prefix]`, reached with `storage` (its endpoint
    /// for an S3-compatible store or an emulator, its region and credentials). The bucket must
    /// exist; the store must honour `If-None-Match: *` on `PUT` (AWS S3 does, as do MinIO and
    /// moto), which keeps two writers from committing the same Delta version.
    ///
    /// # Errors
    /// `root` is not an `s3://` URL with a bucket.
    pub fn on_s3(root: &str, storage: S3Storage) -> Result<LocalDelta, CatalogError> {
        let invalid = |reason: &str| CatalogError::InvalidName {
            name: root.to_owned(),
            reason: reason.to_owned(),
        };
        let mut url = Url::parse(root).map_err(|e| invalid(&e.to_string()))?;
        if url.scheme() != "s3" || url.host_str().is_none_or(str::is_empty) {
            return Err(invalid(
                "a local catalog's object-store root is s3://bucket[/prefix]",
            ));
        }
        if !url.path().ends_with('/') {
            url.set_path(&format!("{}/", url.path()));
        }
        s3::register();
        Ok(LocalDelta {
            root: Root::Store(Box::new(StoreRoot { url, storage })),
            seen: FirstSeen::new(),
            gate: Gate::new(TABLES_AT_ONCE),
        })
    }

    /// Describes or changes at most `n` tables at once (at least one; the default is
    /// [`TABLES_AT_ONCE`]): each such operation loads the table's state into memory
    /// (`gate.rs` has the measurements). Clones made after this share the limit.
    #[must_use]
    pub fn with_tables_at_once(mut self, n: usize) -> LocalDelta {
        self.gate = Gate::new(n);
        self
    }

    /// How many more tables could be described or changed at this moment.
    #[must_use]
    pub fn tables_free(&self) -> usize {
        self.gate.free()
    }

    /// The root folder, if the tables are in one (not on object storage).
    #[must_use]
    pub fn folder(&self) -> Option<&Path> {
        match &self.root {
            Root::Folder(path) => Some(path),
            Root::Store(_) => None,
        }
    }

    /// Opens `table`'s Delta table (loaded at its latest version), with this root's storage
    /// options: for writers of the table outside the catalog (the emulator's materializer).
    ///
    /// # Errors
    /// The table cannot be opened (absent, or its log unreadable).
    pub async fn open_table(&self, table: &TableRef) -> Result<DeltaTable, CatalogError> {
        self.open(table).await
    }

    /// The root: a folder's `file://` URL, or the `s3://` one.
    #[must_use]
    pub fn root_url(&self) -> String {
        match &self.root {
            Root::Folder(path) => std::fs::canonicalize(path)
                .ok()
                .and_then(|p| Url::from_directory_path(p).ok())
                .map_or_else(|| path.display().to_string(), |u| u.to_string()),
            Root::Store(store) => store.url.to_string(),
        }
    }

    /// Where `table` lives, for a folder root; under an object-store root, the path of its
    /// folder below the root (see [`table_url`](Self::table_url) for its URL).
    #[must_use]
    pub fn location(&self, table: &TableRef) -> PathBuf {
        let relative = Path::new(table.catalog())
            .join(table.schema())
            .join(table.table());
        match &self.root {
            Root::Folder(root) => root.join(relative),
            Root::Store(_) => relative,
        }
    }

    /// The URL of `table`'s folder (`file://…/` or `s3://bucket/prefix/catalog/schema/table/`);
    /// a folder root's folder is created if absent.
    ///
    /// # Errors
    /// The folder cannot be created or resolved.
    pub fn table_url(&self, table: &TableRef) -> Result<Url, CatalogError> {
        self.url(table)
    }

    /// The storage options delta-rs and the object store take (empty for a folder).
    pub(crate) fn storage_options(&self) -> HashMap<String, String> {
        match &self.root {
            Root::Folder(_) => HashMap::new(),
            Root::Store(store) => store.storage.options(&store.url),
        }
    }

    fn url(&self, table: &TableRef) -> Result<Url, CatalogError> {
        match &self.root {
            Root::Folder(_) => {
                let path = self.location(table);
                std::fs::create_dir_all(&path).map_err(|e| delta_err(table, "create folder", e))?;
                let absolute = std::fs::canonicalize(&path)
                    .map_err(|e| delta_err(table, "resolve folder", e))?;
                Url::from_directory_path(&absolute)
                    .map_err(|()| delta_err(table, "folder url", format!("{}", absolute.display())))
            }
            Root::Store(store) => store
                .url
                .join(&format!(
                    "{}/{}/{}/",
                    table.catalog(),
                    table.schema(),
                    table.table()
                ))
                .map_err(|e| delta_err(table, "table url", e)),
        }
    }

    /// The table at `url` (not loaded), with this root's storage options.
    fn builder(&self, table: &TableRef, url: Url) -> Result<DeltaTableBuilder, CatalogError> {
        Ok(DeltaTableBuilder::from_url(url)
            .map_err(|e| delta_err(table, "locate", e))?
            .with_storage_options(self.storage_options()))
    }

    async fn open(&self, table: &TableRef) -> Result<DeltaTable, CatalogError> {
        let url = self.url(table)?;
        self.builder(table, url)?
            .load()
            .await
            .map_err(|e| delta_err(table, "open", e))
    }

    /// `table`'s latest snapshot without its files: protocol, metadata and schema.
    async fn metadata_snapshot(&self, table: &TableRef) -> Result<Snapshot, CatalogError> {
        let url = self.url(table)?;
        let store = self
            .builder(table, url)?
            .build_storage()
            .map_err(|e| delta_err(table, "open", e))?;
        Snapshot::try_new(store.as_ref(), None)
            .await
            .map_err(|e| delta_err(table, "open", e))
    }

    /// Whether `table`'s folder holds a Delta log with at least one entry.
    async fn is_delta_table(&self, table: &TableRef) -> Result<bool, CatalogError> {
        match &self.root {
            Root::Folder(_) => Ok(is_delta_table(&self.location(table))),
            Root::Store(_) => Ok(!s3::log_entries(self, table).await?.1.is_empty()),
        }
    }

    /// The catalog-managed feature the table's log names, if any (delta-rs cannot open such a
    /// table).
    async fn logged_catalog_managed(&self, table: &TableRef) -> Option<String> {
        match &self.root {
            Root::Folder(_) => logged_catalog_managed(&self.location(table)),
            Root::Store(_) => {
                let (store, entries) = s3::log_entries(self, table).await.ok()?;
                for path in entries
                    .iter()
                    .rev()
                    .filter(|p| p.extension() == Some("json"))
                {
                    let text = s3::read_text(&store, path).await?;
                    if let Some(found) = catalog_managed_in(&text) {
                        return found;
                    }
                }
                None
            }
        }
    }
}

/// `batch` with the columns of `target`: its own by name (cast to the target's Arrow type where
/// the physical type differs, e.g. a string view or a narrower integer), nulls for the target's
/// columns it lacks (added by a later evolution, or nullable columns it does not fill).
///
/// # Errors
/// A column cannot be cast to the target's type, or a column it lacks is `NOT NULL`.
pub fn fit(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let rows = batch.num_rows();
    let columns: Vec<ArrayRef> = target
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => arrow_cast::cast(c, f.data_type()),
            None => Ok(new_null_array(f.data_type(), rows)),
        })
        .collect::<Result<_, _>>()?;
    RecordBatch::try_new(target.clone(), columns)
}

fn delta_err(table: &TableRef, operation: &'static str, e: impl std::fmt::Display) -> CatalogError {
    CatalogError::Delta {
        table: table.full_name(),
        operation,
        message: e.to_string(),
    }
}

/// A delta-rs error that means another writer committed first (or made the table first).
fn lost_race(e: &DeltaTableError) -> bool {
    use deltalake::kernel::transaction::TransactionError as T;
    match e {
        DeltaTableError::VersionAlreadyExists(_) => true,
        DeltaTableError::Transaction { source } => {
            matches!(source, T::VersionAlreadyExists(_) | T::CommitConflict(_))
        }
        // `SaveMode::ErrorIfExists` on a table made since our describe.
        other => other.to_string().contains("already exists"),
    }
}

fn race_err(table: &TableRef, operation: &'static str, e: DeltaTableError) -> CatalogError {
    if lost_race(&e) {
        CatalogError::Conflict {
            table: table.full_name(),
            message: format!("{operation}: {e}"),
        }
    } else {
        delta_err(table, operation, e)
    }
}

/// Sets table properties as a metadata-only commit: the protocol is left as it is.
async fn commit_properties(
    table: &TableRef,
    t: &DeltaTable,
    properties: HashMap<String, String>,
) -> Result<(), CatalogError> {
    let snapshot = t.snapshot().map_err(|e| delta_err(table, "snapshot", e))?;
    let mut metadata = snapshot.metadata().clone();
    for (k, v) in &properties {
        metadata = metadata
            .add_config_key(k.clone(), v.clone())
            .map_err(|e| delta_err(table, "set properties", e))?;
    }
    let operation = DeltaOperation::SetTableProperties { properties };
    CommitBuilder::default()
        .with_actions(vec![DeltaAction::Metadata(metadata)])
        .build(Some(snapshot), t.log_store(), operation)
        .await
        .map_err(|e| race_err(table, "set properties", e))?;
    Ok(())
}

/// Widens `column` to `to` as a metadata-only commit. The Delta `typeWidening` feature is not
/// declared (delta-rs refuses to read a table that declares it): files written before keep the
/// narrower physical type, which this backend's reader ([`fit`]) and delta-rs's readers cast to
/// the column's type on read. A local, development-only stand-in for Databricks'
/// `ALTER COLUMN ... TYPE` (which declares the feature).
async fn widen_column(
    table: &TableRef,
    t: &DeltaTable,
    column: &str,
    to: &DeltaType,
) -> Result<(), CatalogError> {
    let snapshot = t.snapshot().map_err(|e| delta_err(table, "snapshot", e))?;
    let mut schema = serde_json::to_value(snapshot.schema().as_ref())
        .map_err(|e| delta_err(table, "widen", e))?;
    let mut widened = None;
    if let Some(fields) = schema
        .get_mut("fields")
        .and_then(serde_json::Value::as_array_mut)
    {
        for field in fields {
            let named = field
                .get("name")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|n| n.eq_ignore_ascii_case(column));
            if named {
                field["type"] = to.to_json();
                widened = Some(field.clone());
            }
        }
    }
    let Some(field) = widened else {
        return Err(delta_err(
            table,
            "widen",
            format!("column {column} is not in the table"),
        ));
    };
    let schema = serde_json::from_value(schema).map_err(|e| delta_err(table, "widen", e))?;
    let field: StructField =
        serde_json::from_value(field).map_err(|e| delta_err(table, "widen", e))?;
    let metadata = snapshot
        .metadata()
        .clone()
        .with_schema(&schema)
        .map_err(|e| delta_err(table, "widen", e))?;
    CommitBuilder::default()
        .with_actions(vec![DeltaAction::Metadata(metadata)])
        .build(
            Some(snapshot),
            t.log_store(),
            DeltaOperation::UpdateFieldMetadata {
                fields: vec![field],
            },
        )
        .await
        .map_err(|e| race_err(table, "widen", e))?;
    Ok(())
}

/// The protocol of a snapshot, in the crate's terms (through its Delta-log JSON form, which
/// is the stable part of delta-rs's API).
fn protocol_of(p: &deltalake::kernel::Protocol) -> Protocol {
    let json = serde_json::to_value(p).unwrap_or_default();
    let version = |key: &str| {
        json.get(key)
            .and_then(serde_json::Value::as_i64)
            .and_then(|v| i32::try_from(v).ok())
            .unwrap_or(0)
    };
    let names = |key: &str| {
        json.get(key)
            .and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    Protocol {
        min_reader_version: version("minReaderVersion"),
        min_writer_version: version("minWriterVersion"),
        reader_features: names("readerFeatures"),
        writer_features: names("writerFeatures"),
    }
}

fn kernel_field(
    table: &TableRef,
    name: &str,
    data_type: &DeltaType,
    nullable: bool,
    comment: Option<&str>,
) -> Result<StructField, CatalogError> {
    serde_json::from_value(field_json(name, data_type, nullable, comment))
        .map_err(|e| delta_err(table, "build field", e))
}

fn kernel_fields(
    table: &TableRef,
    columns: &[DesiredColumn],
    force_nullable: bool,
) -> Result<Vec<StructField>, CatalogError> {
    columns
        .iter()
        .map(|c| {
            kernel_field(
                table,
                &c.name,
                &c.data_type,
                c.nullable || force_nullable,
                c.comment.as_ref().map(|c| c.text.as_str()),
            )
        })
        .collect()
}

/// The catalog-managed commit feature the last protocol action in the table's JSON commits
/// names, if any (read directly: delta-rs cannot open such a table).
fn logged_catalog_managed(location: &Path) -> Option<String> {
    let mut commits: Vec<PathBuf> = std::fs::read_dir(location.join("_delta_log"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    commits.sort();
    commits.iter().rev().find_map(|path| {
        let text = std::fs::read_to_string(path).ok()?;
        catalog_managed_in(&text)
    })?
}

/// In one JSON commit: `None` if it has no protocol action; else the catalog-managed feature
/// its last protocol action names, if any.
fn catalog_managed_in(commit: &str) -> Option<Option<String>> {
    let protocol = commit
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|action| action.get("protocol").cloned())?;
    Some(
        ["writerFeatures", "readerFeatures"]
            .iter()
            .filter_map(|key| protocol.get(key).and_then(serde_json::Value::as_array))
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .find(|f| CATALOG_MANAGED_FEATURES.contains(f))
            .map(str::to_owned),
    )
}

fn is_delta_table(path: &Path) -> bool {
    path.join("_delta_log").is_dir()
        && std::fs::read_dir(path.join("_delta_log")).is_ok_and(|mut d| d.next().is_some())
}

impl LocalDelta {
    /// [`TableCatalog::describe`] without waiting for the gate: for callers that hold a permit.
    async fn describe_open(&self, table: &TableRef) -> Result<Option<LiveTable>, CatalogError> {
        if !self.is_delta_table(table).await? {
            return Ok(None);
        }
        // The protocol, metadata and schema alone: a snapshot without the table's files (an
        // open loads every live file's entry, which grows with the table; a drift describes
        // each table three times).
        let snapshot = match self.metadata_snapshot(table).await {
            Ok(snapshot) => snapshot,
            Err(e) => {
                // delta-rs cannot load a catalog-managed table (it wants the catalog's commits):
                // say which requirement that breaks rather than how the open failed.
                return match self.logged_catalog_managed(table).await {
                    Some(feature) => Err(CatalogError::Unwritable {
                        table: table.full_name(),
                        broken: vec![Requirement::NoCatalogManagedCommits { feature }],
                    }),
                    None => Err(e),
                };
            }
        };
        let schema = serde_json::to_value(snapshot.schema().as_ref())
            .map_err(|e| delta_err(table, "read schema", e))?;
        let fields = schema
            .get("fields")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut columns = Vec::with_capacity(fields.len());
        for f in fields {
            let name = f
                .get("name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            // A type this crate does not know is kept as such: describing never fails on it.
            let data_type = f
                .get("type")
                .map(DeltaType::from_json_lenient)
                .ok_or_else(|| CatalogError::LiveSchema {
                    table: table.full_name(),
                    column: name.clone(),
                    reason: "no type".into(),
                })?;
            let nullable = f
                .get("nullable")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true);
            let comment = f
                .pointer("/metadata/comment")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned);
            columns.push(LiveColumn {
                name,
                data_type,
                nullable,
                comment,
            });
        }
        let metadata = snapshot.metadata();
        let properties: BTreeMap<String, String> = metadata
            .configuration()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let table_type = properties
            .get(TABLE_TYPE_PROPERTY)
            .map_or(MANAGED_TABLE_TYPE, String::as_str)
            .to_ascii_uppercase();
        Ok(Some(LiveTable {
            table: table.clone(),
            columns,
            comment: metadata.description().map(str::to_owned),
            table_id: Some(metadata.id().to_owned()),
            storage_location: Some(self.url(table)?.to_string()),
            protocol: Some(protocol_of(snapshot.protocol())),
            table_type: Some(table_type),
            data_source_format: Some(crate::requirements::DELTA_FORMAT.to_owned()),
            properties,
        }))
    }
}

impl TableCatalog for LocalDelta {
    async fn describe(&self, table: &TableRef) -> Result<Option<LiveTable>, CatalogError> {
        let _permit = self.gate.enter().await;
        self.describe_open(table).await
    }

    async fn describe_for_write(
        &self,
        table: &TableRef,
    ) -> Result<Option<LiveTable>, CatalogError> {
        let live = self.describe_open(table).await?;
        self.seen.admit(table, live)
    }

    async fn reconcile(
        &self,
        desired: &DesiredTable,
        policy: &Policy,
    ) -> Result<ReconcileOutcome, CatalogError> {
        // The local backend makes the delta-rs readable shape of a primary-raw table, whatever
        // the caller's policy says (it cannot make the Iceberg one).
        let policy = Policy {
            primary_raw: PrimaryRawShape::DeltaReadable,
            ..*policy
        };
        let _permit = self.gate.enter().await;
        let mut last = None;
        for _ in 0..5 {
            match self.reconcile_once(desired, &policy).await {
                Err(CatalogError::Conflict { message, .. }) => last = Some(message),
                other => return other,
            }
        }
        Err(CatalogError::Conflict {
            table: desired.table.full_name(),
            message: format!(
                "lost the race to change the table 5 times; last: {}",
                last.unwrap_or_default()
            ),
        })
    }

    async fn register_sink(&self, table: &TableRef, sink: &SinkId) -> Result<(), CatalogError> {
        self.set_properties(table, [(sink_property(sink), "registered".to_owned())])
            .await
    }

    async fn vend_credentials(
        &self,
        table: &TableRef,
        _access: Access,
    ) -> Result<VendedCredentials, CatalogError> {
        if !self.is_delta_table(table).await? {
            return Err(CatalogError::TableAbsent {
                table: table.full_name(),
            });
        }
        let credentials = match &self.root {
            Root::Folder(_) => CloudCredentials::None,
            Root::Store(store) => store.storage.credentials(),
        };
        Ok(VendedCredentials {
            url: self.url(table)?.to_string(),
            expires_at_ms: None,
            credentials,
        })
    }
}

impl LocalDelta {
    /// Sets table properties as an owner would (`ALTER TABLE ... SET TBLPROPERTIES`): one
    /// metadata-only commit, retried when another writer commits first. Nothing is planned or
    /// checked: this is how an owner changes a table under a running sink (for example turning
    /// deletion vectors on under a primary-raw table, which the sink's re-check then finds).
    ///
    /// # Errors
    /// The table cannot be opened, or the commit failed (or lost the race 5 times).
    pub async fn set_properties(
        &self,
        table: &TableRef,
        properties: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), CatalogError> {
        let properties: HashMap<String, String> = properties.into_iter().collect();
        let _permit = self.gate.enter().await;
        for _ in 0..5 {
            let t = self.open(table).await?;
            match commit_properties(table, &t, properties.clone()).await {
                Err(CatalogError::Conflict { .. }) => continue,
                other => return other,
            }
        }
        Err(CatalogError::Conflict {
            table: table.full_name(),
            message: "set properties: lost the race 5 times".into(),
        })
    }

    /// One describe, plan and execute; a commit another writer won first is a
    /// [`CatalogError::Conflict`], and the caller plans again.
    async fn reconcile_once(
        &self,
        desired: &DesiredTable,
        policy: &Policy,
    ) -> Result<ReconcileOutcome, CatalogError> {
        let table = &desired.table;
        let live = self.describe_for_write(table).await?;
        let plan = plan(live.as_ref(), desired, policy);
        let refusals = plan.refusals();
        if !refusals.is_empty() {
            return Err(CatalogError::Refused {
                table: table.full_name(),
                refusals,
            });
        }
        let mut executed = Vec::new();
        let mut properties: HashMap<String, String> = HashMap::new();
        for action in &plan.actions {
            match action {
                Action::CreateTable {
                    columns,
                    comment,
                    properties: p,
                } => {
                    let base = self
                        .builder(table, self.url(table)?)?
                        .build()
                        .map_err(|e| delta_err(table, "locate", e))?;
                    let mut create = base
                        .create()
                        .with_table_name(table.table())
                        .with_columns(kernel_fields(table, columns, false)?)
                        .with_configuration(p.iter().map(|(k, v)| (k.clone(), Some(v.clone()))))
                        .with_raise_if_key_not_exists(false)
                        // Another sink may create it between our describe and this commit.
                        .with_save_mode(SaveMode::ErrorIfExists);
                    if let Some(c) = comment {
                        create = create.with_comment(c);
                    }
                    create.await.map_err(|e| race_err(table, "create", e))?;
                }
                Action::WidenColumn { column, to, .. } => {
                    let t = self.open(table).await?;
                    widen_column(table, &t, column, to).await?;
                }
                Action::AddColumn(c) => {
                    let field = kernel_field(
                        table,
                        &c.name,
                        &c.data_type,
                        true,
                        c.comment.as_ref().map(|c| c.text.as_str()),
                    )?;
                    let t = self.open(table).await?;
                    t.add_columns()
                        .with_fields([field])
                        .await
                        .map_err(|e| race_err(table, "add column", e))?;
                }
                Action::SetColumnComment {
                    column, comment, ..
                } => {
                    let t = self.open(table).await?;
                    let metadata = HashMap::from([(
                        "comment".to_owned(),
                        MetadataValue::String(comment.clone()),
                    )]);
                    t.update_field_metadata()
                        .with_field_name(column)
                        .with_metadata(metadata)
                        .await
                        .map_err(|e| race_err(table, "set column comment", e))?;
                }
                Action::SetTableComment(c) => {
                    let t = self.open(table).await?;
                    let update = TableMetadataUpdate {
                        name: None,
                        description: Some(c.clone()),
                    };
                    t.update_table_metadata()
                        .with_update(update)
                        .await
                        .map_err(|e| race_err(table, "set table comment", e))?;
                }
                Action::SetProperty { key, value } => {
                    properties.insert(key.clone(), value.clone());
                    executed.push(action.to_string());
                    continue;
                }
                _ => {}
            }
            executed.push(action.to_string());
        }
        if !properties.is_empty() {
            let t = self.open(table).await?;
            commit_properties(table, &t, properties).await?;
        }
        Ok(ReconcileOutcome { plan, executed })
    }
}
