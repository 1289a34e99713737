//! A sink described by one TOML file (feature `config`; seed section 7): endpoint, credentials
//! by environment variable, the catalog backend, the tables with their roles, sizing and
//! policies, windows, retries and shutdown. Every key is optional except `sink.endpoint` and
//! each table's `name`; an absent key takes the builders' default. Unknown keys are refused,
//! and every refusal names the key path and the reason ([`ConfigFileError`]). Waiting per batch
//! is not a knob: fire-and-forget is structural. Every key: `docs/configuration.md`.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use arrow_array::RecordBatch;
//! # use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw};
//! # use zerobus_sink_tokio::{Confirmer, IsolatedRows, ZerobusSink};
//! # struct Commit;
//! # impl Confirmer<Raw> for Commit {
//! #     fn confirmed(&mut self, _: &str, _: Confirmation<Raw>) {}
//! #     fn failed(&mut self, _: &str, _: FailedBatch<Raw, RecordBatch>, _: &FailureReason) {}
//! #     fn isolated(&mut self, _: &str, _: IsolatedRows<Raw>) {}
//! # }
//! # async fn run(orders: arrow_schema::SchemaRef) -> Result<(), zerobus_sink_tokio::settings::ConfigFileError> {
//! let file = zerobus_sink_tokio::settings::SinkFile::load("sink.toml")?;
//! let sink = ZerobusSink::<Raw>::from_file(&file, |table| (table == "main.bronze.orders").then(|| orders.clone()), Commit).await?;
//! # Ok(()) }
//! ```

mod build;
mod dry_run;
mod error;
mod file;
mod lines;

use std::path::Path;
use std::time::Duration;

use arrow_schema::SchemaRef;
pub use dry_run::TablePlan;
pub use error::ConfigFileError;
use zerobus_sink::{Lane, SinkCore, SizedPool};
use zerobus_sink_catalog::{AnyCatalog, TableRef};

use crate::config::{TableDef, ZerobusConfig};
use crate::confirmer::Confirmer;
use crate::provision::Provisioning;
use crate::sink::ZerobusSink;

/// The default drain at shutdown (`shutdown.drain`).
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(30);

/// A parsed and checked configuration file. Parsing checks everything that does not need the
/// environment or the network: syntax, keys, types, ranges, table names, sizing, roles,
/// columns; reading credentials from the environment and reaching the catalog come later.
#[derive(Debug, Clone)]
pub struct SinkFile {
    file: file::File,
}

/// What the file's values come to once defaults and sizing are applied: what `check` prints
/// and the sink logs at start.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Effective {
    /// The sink's lane.
    pub lane: &'static str,
    /// The endpoint.
    pub endpoint: String,
    /// The catalog backend, if any (`unity`, `local`).
    pub catalog: Option<&'static str>,
    /// Per table: its name, role and sized pool.
    pub tables: Vec<(String, &'static str, SizedPool)>,
    /// Each stream's window: batches, bytes, rows.
    pub window: (u32, u64, u64),
    /// The cap on streams open at once.
    pub max_open_streams: u16,
    /// How long `close` drains.
    pub drain: Duration,
}

impl SinkFile {
    /// Parses and checks `text`.
    pub fn parse(text: &str) -> Result<SinkFile, ConfigFileError> {
        let file = build::parse(text)?;
        let parsed = SinkFile { file };
        build::check(&parsed.file).map_err(|e| e.at_line_in(text))?;
        Ok(parsed)
    }

    /// Reads, parses and checks the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<SinkFile, ConfigFileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        SinkFile::parse(&text)
    }

    /// The lane the file is for (`raw` or `derived`).
    #[must_use]
    pub fn lane(&self) -> &'static str {
        match self.file.sink.lane {
            file::LaneName::Raw => "raw",
            file::LaneName::Derived => "derived",
        }
    }

    /// The tables' names, in file order.
    pub fn table_names(&self) -> impl Iterator<Item = &str> {
        self.file.tables.iter().map(|t| t.name.as_str())
    }

    /// The schema a table's `columns` give, if the file lists them.
    pub fn table_schema(&self, name: &str) -> Option<SchemaRef> {
        let (i, t) = self
            .file
            .tables
            .iter()
            .enumerate()
            .find(|(_, t)| t.name == name)?;
        build::columns(i, t).ok().flatten()
    }

    /// The same file with only the table named `name` (a one-table load), or a refusal naming
    /// the tables it has.
    pub fn only(&self, name: &str) -> Result<SinkFile, ConfigFileError> {
        let mut file = self.file.clone();
        file.tables.retain(|t| t.name == name);
        if file.tables.is_empty() {
            let known: Vec<_> = self.table_names().collect();
            return Err(ConfigFileError::invalid(
                "table",
                format!(
                    "no [[table]] named `{name}` (the file has: {})",
                    known.join(", ")
                ),
            ));
        }
        Ok(SinkFile { file })
    }

    /// How long `close` drains (`shutdown.drain`, [`SHUTDOWN_DRAIN`] by default).
    #[must_use]
    pub fn drain(&self) -> Duration {
        self.file.shutdown.drain.unwrap_or(SHUTDOWN_DRAIN)
    }

    /// The connection settings, reading credentials from the process's environment.
    pub fn config(&self) -> Result<ZerobusConfig, ConfigFileError> {
        self.config_with_env(|name| std::env::var(name).ok())
    }

    /// The connection settings, with secrets looked up by `env` (tests, or a secret store).
    pub fn config_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ZerobusConfig, ConfigFileError> {
        build::config(&self.file, &env)
    }

    /// The catalog the file names (`None` without a `[catalog]`), secrets read by `env`.
    pub fn catalog_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<AnyCatalog>, ConfigFileError> {
        build::catalog(&self.file, &env)
    }

    /// The tables as the sink takes them, each with the schema the file lists or `schemas`
    /// gives. A primary-raw table is not among them: only [`ZerobusSink::from_file`] can
    /// prove its preconditions.
    pub fn tables(
        &self,
        schemas: impl Fn(&str) -> Option<SchemaRef>,
    ) -> Result<Vec<(TableDef, bool)>, ConfigFileError> {
        self.file
            .tables
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let schema = build::schema_for(i, t, &schemas)?;
                Ok((
                    build::apply(i, t, TableDef::new(&t.name, schema))?,
                    t.role == file::RoleName::PrimaryRaw,
                ))
            })
            .collect()
    }

    /// The values the sink derives from the file: pools, windows, the cap, the drain.
    pub fn effective(&self) -> Result<Effective, ConfigFileError> {
        build::some_table(&self.file)?;
        let config = build::core(&self.file);
        let mut core = SinkCore::<zerobus_sink::Raw, arrow_array::RecordBatch>::new(config)
            .map_err(|e| build::core_error(&e))?;
        let mut tables = Vec::new();
        for (i, t) in self.file.tables.iter().enumerate() {
            let spec = build::spec(i, t)?;
            let id = core
                .add_table(spec)
                .map_err(|e| ConfigFileError::invalid(format!("table[{i}]"), e.to_string()))?;
            let role = match t.role {
                file::RoleName::Standard => "standard",
                file::RoleName::PrimaryRaw => "primary_raw",
            };
            if let Some(pool) = core.table_pool(id) {
                tables.push((t.name.clone(), role, pool));
            }
        }
        let w = config.window;
        Ok(Effective {
            lane: self.lane(),
            endpoint: self.file.sink.endpoint.clone(),
            catalog: self.file.catalog.as_ref().map(|c| match c {
                file::CatalogSection::Unity { .. } => "unity",
                file::CatalogSection::Local { .. } => "local",
            }),
            tables,
            window: (w.max_batches, w.max_bytes, w.max_rows),
            max_open_streams: config.max_open_streams,
            drain: self.drain(),
        })
    }
}

impl<L: Lane> ZerobusSink<L> {
    /// Starts the sink a configuration file describes: with its catalog (provisioned) or
    /// without, each table's schema from the file's `columns` or from `schemas`, credentials
    /// from the environment. A `primary_raw` table is validated through the catalog first
    /// (every unmet precondition named). Refused, naming the key, for a file of another lane,
    /// an unset environment variable, a table with no schema, and whatever
    /// [`start`](ZerobusSink::start) refuses.
    pub async fn from_file<C: Confirmer<L>>(
        file: &SinkFile,
        schemas: impl Fn(&str) -> Option<SchemaRef>,
        confirmer: C,
    ) -> Result<ZerobusSink<L>, ConfigFileError> {
        Self::from_file_with_env(file, schemas, confirmer, |n| std::env::var(n).ok()).await
    }

    /// [`from_file`](Self::from_file) with `text` parsed first.
    pub async fn from_toml<C: Confirmer<L>>(
        text: &str,
        schemas: impl Fn(&str) -> Option<SchemaRef>,
        confirmer: C,
    ) -> Result<ZerobusSink<L>, ConfigFileError> {
        Self::from_file(&SinkFile::parse(text)?, schemas, confirmer).await
    }

    /// [`from_file`](Self::from_file) with secrets looked up by `env`.
    pub async fn from_file_with_env<C: Confirmer<L>>(
        file: &SinkFile,
        schemas: impl Fn(&str) -> Option<SchemaRef>,
        confirmer: C,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ZerobusSink<L>, ConfigFileError> {
        build::some_table(&file.file)?;
        if file.lane() != L::NAME {
            return Err(ConfigFileError::Lane {
                file: file.lane(),
                sink: L::NAME,
            });
        }
        let config = file.config_with_env(&env)?;
        let catalog = file.catalog_with_env(&env)?;
        let mut defs = Vec::new();
        for (i, (def, primary_raw)) in file.tables(&schemas)?.into_iter().enumerate() {
            if !primary_raw {
                defs.push(def);
                continue;
            }
            let Some(catalog) = &catalog else {
                return Err(build::needs_catalog(i));
            };
            let table = TableRef::parse(&def.spec.name)
                .map_err(|e| ConfigFileError::invalid(format!("table[{i}].name"), e.to_string()))?;
            let proof = zerobus_sink_catalog::primary_raw::validate(
                catalog,
                &table,
                catalog.primary_raw_shape(),
            )
            .await
            .map_err(|e| ConfigFileError::PrimaryRaw {
                table: def.spec.name.clone(),
                source: Box::new(e),
            })?;
            let mut raw = TableDef::primary_raw(proof, def.schema.clone());
            raw.spec = def.spec;
            raw.conversions = def.conversions;
            raw.bad_rows = def.bad_rows;
            defs.push(raw);
        }
        let sink = match catalog {
            Some(catalog) => {
                let policy = build::policy(&file.file, catalog.primary_raw_shape());
                let writer = file
                    .file
                    .sink
                    .name
                    .clone()
                    .unwrap_or_else(|| "zerobus-sink".to_owned());
                let provisioning = Provisioning::new(catalog, writer).policy(policy);
                ZerobusSink::start_provisioned(config, defs, confirmer, provisioning)?
            }
            None => ZerobusSink::start(config, defs, confirmer)?,
        };
        Ok(sink)
    }
}
