//! SQL: `CREATE EXTERNAL TABLE ... STORED AS ZEROBUS` through [`ZerobusTableFactory`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::Result;
use datafusion::logical_expr::CreateExternalTable;
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_tokio::{ProxyConfig, ZerobusConfig};

use crate::error::TableError;
use crate::shared::Sinks;
use crate::table::{ZerobusTable, live_schema};
use crate::target::Target;

/// The `STORED AS` name the factory is registered under.
pub const FILE_TYPE: &str = "ZEROBUS";

/// The options of `CREATE EXTERNAL TABLE ... STORED AS ZEROBUS LOCATION 'catalog.schema.table'
/// OPTIONS (...)`. Keys may be written bare (`'endpoint'`), as DataFusion files them
/// (`format.endpoint`) or namespaced (`zerobus.endpoint`). No option takes a secret: the
/// statement's text is kept in the plan.
///
/// | option | required | meaning |
/// |---|---|---|
/// | `endpoint` | yes | the Zerobus endpoint, `http://127.0.0.1:50051` for `zerobus-local` |
/// | `catalog_root` | yes | the local Delta catalog's root folder (the one `zerobus-local` serves) |
/// | `streams` | no | the table's Zerobus streams (default 2) |
/// | `job_id` | no | the job id stamped on every `INSERT` into this table (default: the session's `zerobus.job_id`, else one generated per `INSERT`) |
/// | `writer` | no | the writer name registered on the table |
/// | `proxy` | no | `environment` (default: `grpc_proxy`/`https_proxy`/`no_proxy`, as the official client) or `direct` |
pub const OPTIONS: [&str; 6] = [
    "endpoint",
    "catalog_root",
    "streams",
    "job_id",
    "writer",
    "proxy",
];

/// Makes [`ZerobusTable`]s for `CREATE EXTERNAL TABLE ... STORED AS ZEROBUS` (register it on
/// the session state's table factories under [`FILE_TYPE`]; [`session_context`](crate::session_context)
/// does). The statement's columns are the table's; without columns, the table must exist and
/// its columns are described from the catalog. Tables it makes for one target share one sink.
#[derive(Debug, Clone, Default)]
pub struct ZerobusTableFactory {
    sinks: Sinks,
}

impl ZerobusTableFactory {
    /// A factory whose tables write through `sinks` (shared with a catalog provider, say).
    #[must_use]
    pub fn new(sinks: Sinks) -> ZerobusTableFactory {
        ZerobusTableFactory { sinks }
    }

    /// The sinks its tables write through.
    #[must_use]
    pub fn sinks(&self) -> &Sinks {
        &self.sinks
    }
}

/// The target an external table's location and options name.
///
/// # Errors
/// An unknown option, a missing required one, a value that cannot be used, or a location that
/// is not `catalog.schema.table`.
pub fn target_of(location: &str, options: &HashMap<String, String>) -> Result<Target, TableError> {
    let mut known: HashMap<&'static str, &str> = HashMap::new();
    for (key, value) in options {
        let bare = key
            .strip_prefix("format.")
            .or_else(|| key.strip_prefix("zerobus."))
            .unwrap_or(key);
        let Some(name) = OPTIONS.iter().find(|o| **o == bare) else {
            return Err(TableError::Option {
                table: location.to_owned(),
                key: key.clone(),
                reason: format!("unknown; the options are {}", OPTIONS.join(", ")),
            });
        };
        known.insert(*name, value.as_str());
    }
    let required = |key: &'static str| {
        known.get(key).copied().ok_or(TableError::Missing {
            table: location.to_owned(),
            key,
        })
    };
    let endpoint = required("endpoint")?;
    let root = PathBuf::from(required("catalog_root")?);
    let proxy = match known.get("proxy").copied() {
        None | Some("environment") => ProxyConfig::Environment,
        Some("direct") => ProxyConfig::Direct,
        Some(other) => {
            return Err(TableError::Option {
                table: location.to_owned(),
                key: "proxy".into(),
                reason: format!("{other:?} is neither 'environment' nor 'direct'"),
            });
        }
    };
    let config = ZerobusConfig::new(endpoint).proxy(proxy);
    let mut target = Target::new(location, config, LocalDelta::new(root))?;
    if let Some(streams) = known.get("streams") {
        let n = streams
            .parse::<u16>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| TableError::Option {
                table: location.to_owned(),
                key: "streams".into(),
                reason: format!("{streams:?} is not a number of streams from 1 to 65535"),
            })?;
        target = target.streams(n);
    }
    if let Some(job) = known.get("job_id") {
        target = target.job_id(*job);
    }
    if let Some(writer) = known.get("writer") {
        target = target.writer(*writer);
    }
    Ok(target)
}

#[async_trait]
impl TableProviderFactory for ZerobusTableFactory {
    async fn create(
        &self,
        _state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let location = cmd
            .locations
            .first()
            .map(String::as_str)
            .unwrap_or_default();
        let target = target_of(location, &cmd.options)?;
        let declared = cmd.schema.as_arrow();
        let schema = if declared.fields().is_empty() {
            live_schema(&target)
                .await?
                .ok_or_else(|| TableError::NoColumns {
                    table: target.table().full_name(),
                })?
        } else {
            Arc::new(declared.clone())
        };
        Ok(Arc::new(ZerobusTable::new(target, schema, &self.sinks)))
    }
}
