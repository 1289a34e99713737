//! Tables by their three-part name without a `CREATE`: [`ZerobusCatalog`] over the local Delta
//! backend, so that `INSERT INTO main.bronze.orders SELECT ...` resolves to a [`ZerobusTable`]
//! whose columns are the live table's.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::common::Result;
use zerobus_sink_catalog::TableRef;
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_tokio::ZerobusConfig;

use crate::shared::Sinks;
use crate::table::ZerobusTable;
use crate::target::Target;

/// One catalog of the local Delta backend (`catalog` in `catalog.schema.table`) as a DataFusion
/// catalog: register it under its name (`SessionContext::register_catalog("main", ...)`). Its
/// schemas are the backend's; a table resolves when it exists (a new table is created by its
/// first `INSERT` through `CREATE EXTERNAL TABLE ... STORED AS ZEROBUS`, which declares its
/// columns). Every table it resolves writes through `config`'s endpoint with 2 streams and a
/// job id from the session (`zerobus.job_id`) or generated per `INSERT`.
#[derive(Debug, Clone)]
pub struct ZerobusCatalog {
    name: String,
    config: ZerobusConfig,
    local: LocalDelta,
    sinks: Sinks,
}

impl ZerobusCatalog {
    /// The catalog `name` of `local`, written through `config`'s endpoint, with the sinks of
    /// `sinks` (share them with the session's [`ZerobusTableFactory`](crate::ZerobusTableFactory)).
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        config: ZerobusConfig,
        local: LocalDelta,
        sinks: Sinks,
    ) -> ZerobusCatalog {
        ZerobusCatalog {
            name: name.into(),
            config,
            local,
            sinks,
        }
    }

    /// The catalog's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The names of the folders in `dir` (none if it cannot be read).
fn folders(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

impl CatalogProvider for ZerobusCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.local
            .folder()
            .map(|root| folders(&root.join(&self.name)))
            .unwrap_or_default()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        Some(Arc::new(ZerobusSchema {
            catalog: self.clone(),
            schema: name.to_owned(),
        }))
    }
}

/// One schema of a [`ZerobusCatalog`].
#[derive(Debug, Clone)]
pub struct ZerobusSchema {
    catalog: ZerobusCatalog,
    schema: String,
}

impl ZerobusSchema {
    fn name_of(&self, table: &str) -> String {
        format!("{}.{}.{table}", self.catalog.name, self.schema)
    }
}

#[async_trait]
impl SchemaProvider for ZerobusSchema {
    fn table_names(&self) -> Vec<String> {
        let Some(root) = self.catalog.local.folder() else {
            return Vec::new();
        };
        folders(&root.join(&self.catalog.name).join(&self.schema))
            .into_iter()
            .filter(|t| self.table_exist(t))
            .collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let target = Target::new(
            &self.name_of(name),
            self.catalog.config.clone(),
            self.catalog.local.clone(),
        )?;
        let table = ZerobusTable::described(target, &self.catalog.sinks).await?;
        Ok(table.map(|t| Arc::new(t) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        TableRef::parse(&self.name_of(name))
            .is_ok_and(|t| self.catalog.local.location(&t).join("_delta_log").is_dir())
    }
}
