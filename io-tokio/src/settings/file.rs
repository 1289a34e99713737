//! The TOML file's shape, key for key (`docs/configuration.md` documents each). Every table
//! denies unknown keys; absent keys take the library's own defaults (the builders'), so the
//! defaults live in one place.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    pub(crate) sink: SinkSection,
    #[serde(default)]
    pub(crate) credentials: CredentialsSection,
    pub(crate) catalog: Option<CatalogSection>,
    #[serde(default)]
    pub(crate) window: WindowSection,
    #[serde(default)]
    pub(crate) retry: RetrySection,
    #[serde(default)]
    pub(crate) resubmit: ResubmitSection,
    #[serde(default)]
    pub(crate) timeouts: TimeoutSection,
    #[serde(default)]
    pub(crate) shutdown: ShutdownSection,
    #[serde(default, rename = "table")]
    pub(crate) tables: Vec<TableSection>,
}

/// `[sink]`: where to connect and what the sink is called.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SinkSection {
    pub(crate) endpoint: String,
    #[serde(default)]
    pub(crate) lane: LaneName,
    /// The writer name registered on each table (provisioned sinks).
    pub(crate) name: Option<String>,
    pub(crate) application_name: Option<String>,
    pub(crate) compression: Option<CompressionName>,
    pub(crate) max_open_streams: Option<u16>,
    pub(crate) max_message_bytes: Option<u64>,
    pub(crate) max_row_bytes: Option<u64>,
    /// Batches `send` may hand over beyond the windows.
    pub(crate) handoffs: Option<usize>,
    /// The most Arrow bytes small batches fill together in one wire message (0: none).
    pub(crate) coalesce_bytes: Option<u64>,
    pub(crate) tls_ca_file: Option<PathBuf>,
    /// Trust the platform's root certificates too (default true).
    pub(crate) native_roots: Option<bool>,
    /// `"direct"`, or a proxy URL; absent: the environment's `grpc_proxy`/`https_proxy`.
    pub(crate) proxy: Option<String>,
    /// With `proxy`: hosts that bypass it (comma-separated).
    pub(crate) no_proxy: Option<String>,
    #[serde(default, deserialize_with = "duration")]
    pub(crate) primary_raw_recheck: Option<Duration>,
}

/// The sink's lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LaneName {
    #[default]
    Raw,
    Derived,
}

/// IPC body compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CompressionName {
    Zstd,
    Lz4,
    None,
}

/// `[credentials]`: how streams authenticate. Secrets are named by environment variable,
/// never written in the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum CredentialsSection {
    #[default]
    None,
    Bearer {
        token_env: String,
    },
    Oauth {
        workspace_url: String,
        workspace_id: String,
        client_id: String,
        client_secret_env: String,
    },
}

/// `[catalog]`: the backend that provisions the tables.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "backend", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum CatalogSection {
    Unity {
        workspace_url: String,
        warehouse_id: String,
        /// A personal access token, by environment variable.
        token_env: Option<String>,
        /// OAuth M2M: the client id and the secret's environment variable.
        client_id: Option<String>,
        client_secret_env: Option<String>,
        #[serde(default)]
        allow_widening: bool,
        #[serde(default, deserialize_with = "duration")]
        statement_timeout: Option<Duration>,
    },
    Local {
        root: PathBuf,
        #[serde(default)]
        allow_widening: bool,
    },
}

/// `[window]`: what may be in flight per stream.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WindowSection {
    pub(crate) max_batches: Option<u32>,
    pub(crate) max_bytes: Option<u64>,
    pub(crate) max_rows: Option<u64>,
}

/// `[retry]`: how a stream reconnects.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetrySection {
    #[serde(default, deserialize_with = "duration")]
    pub(crate) initial_backoff: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    pub(crate) max_backoff: Option<Duration>,
    pub(crate) multiplier: Option<f64>,
    pub(crate) jitter: Option<f64>,
    pub(crate) max_attempts: Option<u32>,
    #[serde(default, deserialize_with = "duration")]
    pub(crate) drain_budget: Option<Duration>,
}

/// `[resubmit]`: what happens to batches handed back for a transient reason.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResubmitSection {
    pub(crate) max_attempts: Option<u32>,
    #[serde(default, deserialize_with = "duration")]
    pub(crate) backoff: Option<Duration>,
}

/// `[timeouts]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeoutSection {
    #[serde(default, deserialize_with = "duration")]
    pub(crate) ack: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    pub(crate) open: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    pub(crate) reconcile: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    pub(crate) min_residency: Option<Duration>,
}

/// `[shutdown]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShutdownSection {
    /// How long `close` waits for streams to drain before handing batches back.
    #[serde(default, deserialize_with = "duration")]
    pub(crate) drain: Option<Duration>,
}

/// `[[table]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TableSection {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) role: RoleName,
    /// A fixed number of streams ...
    pub(crate) streams: Option<u16>,
    /// ... or streams sized to the table's peak.
    pub(crate) peak_mb_per_sec: Option<f64>,
    pub(crate) peak_rows_per_sec: Option<f64>,
    pub(crate) max_streams: Option<u16>,
    #[serde(default)]
    pub(crate) keyed: bool,
    #[serde(default)]
    pub(crate) bad_rows: BadRowsName,
    /// The auto-project of seed 5.2: nested values into STRING columns as JSON text.
    #[serde(default)]
    pub(crate) nested_to_json: bool,
    #[serde(default)]
    pub(crate) zoned_to_utc_wall_time: bool,
    /// The first schema expected, when the pipeline does not give one.
    pub(crate) columns: Option<Vec<ColumnSection>>,
}

/// A table's role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RoleName {
    #[default]
    Standard,
    PrimaryRaw,
}

/// What happens to a batch with rows the table would refuse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BadRowsName {
    #[default]
    FailBatch,
    Isolate,
}

/// `[[table.columns]]`: a column in Delta's type names (`long`, `string`, `decimal(10,2)`,
/// `timestamp_ntz`, ...).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ColumnSection {
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) data_type: String,
    #[serde(default = "yes")]
    pub(crate) nullable: bool,
}

fn yes() -> bool {
    true
}

/// A duration written as `"500ms"`, `"2s"`, `"5m"` (humantime).
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text).map(Some).map_err(|e| {
        serde::de::Error::custom(format!(
            "`{text}` is not a duration ({e}); write e.g. \"500ms\", \"2s\", \"5m\""
        ))
    })
}
