//! From the file's sections to the builders' values, each refusal naming its key.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::{Field, Schema, SchemaRef};
use zerobus_sink::{ConfigError, PoolSizing, SinkConfig, TableSpec};
#[cfg(feature = "local")]
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::unity::{Auth, Secret as UnitySecret, UnityCatalog, UnityConfig};
use zerobus_sink_catalog::{AnyCatalog, DeltaType, Policy, PrimaryRawShape, TableRef};

use super::error::ConfigFileError;
use super::file::{
    BadRowsName, CatalogSection, ColumnSection, CompressionName, CredentialsSection, File,
    RoleName, SinkSection, TableSection,
};
use crate::boundary::{BadRows, Conversions};
use crate::config::{ResubmitPolicy, TableDef, ZerobusConfig};
use crate::conn::auth::{Credentials, OAuth, Secret};
use crate::conn::proxy::ProxyConfig;
use crate::wire::Compression;

/// Syntax and shape: a serde error with its key path (and line), never the value's text.
pub(super) fn parse(text: &str) -> Result<File, ConfigFileError> {
    let de = toml::Deserializer::parse(text).map_err(|e| located("", &e, text))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." { String::new() } else { key };
        let inner = e.into_inner();
        located(&key, &inner, text)
    })
}

/// A toml error as key + reason. An inline secret gets its own reason: the file names the
/// environment variable that holds it.
fn located(key: &str, e: &toml::de::Error, text: &str) -> ConfigFileError {
    let message = e.message().trim_end();
    for secret in ["token", "client_secret"] {
        if message.starts_with(&format!("unknown field `{secret}`")) {
            return ConfigFileError::invalid(
                join(key, secret),
                format!(
                    "secrets are never written in the file: name the environment variable that \
                     holds it in `{secret}_env`"
                ),
            );
        }
    }
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
    let reason = match line {
        Some(line) => format!("{message} (line {line})"),
        None => message.to_owned(),
    };
    ConfigFileError::invalid(key, reason)
}

fn join(key: &str, leaf: &str) -> String {
    if key.is_empty() {
        leaf.to_owned()
    } else {
        format!("{key}.{leaf}")
    }
}

/// Everything that needs neither the environment nor the network.
pub(super) fn check(file: &File) -> Result<(), ConfigFileError> {
    let endpoint = &file.sink.endpoint;
    if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
        return Err(ConfigFileError::invalid(
            "sink.endpoint",
            "needs a scheme: https://… for the service, http://… for a local emulator",
        ));
    }
    proxy_of(&file.sink)?;
    let credentials = match &file.credentials {
        CredentialsSection::Oauth { workspace_url, .. } => Some(workspace_url),
        _ => None,
    };
    let catalog = match &file.catalog {
        Some(CatalogSection::Unity { workspace_url, .. }) => Some(workspace_url),
        _ => None,
    };
    for (key, url) in [
        ("credentials.workspace_url", credentials),
        ("catalog.workspace_url", catalog),
    ] {
        if let Some(url) = url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err(ConfigFileError::invalid(
                key,
                "needs a scheme: https://… (the workspace's URL)",
            ));
        }
    }
    if file.sink.handoffs == Some(0) {
        return Err(ConfigFileError::invalid(
            "sink.handoffs",
            "must be at least 1",
        ));
    }
    bounds(file)?;
    core(file).validate().map_err(|e| core_error(&e))?;
    let mut names = HashSet::new();
    for (i, t) in file.tables.iter().enumerate() {
        TableRef::parse(&t.name)
            .map_err(|e| ConfigFileError::invalid(format!("table[{i}].name"), e.to_string()))?;
        if !names.insert(t.name.as_str()) {
            return Err(ConfigFileError::invalid(
                format!("table[{i}].name"),
                format!("`{}` is listed twice", t.name),
            ));
        }
        spec(i, t)?;
        columns(i, t)?;
        if t.role == RoleName::PrimaryRaw && file.catalog.is_none() {
            return Err(needs_catalog(i));
        }
        if t.keyed && file.catalog.is_some() {
            return Err(ConfigFileError::invalid(
                format!("table[{i}].keyed"),
                "a keyed table cannot be provisioned through a catalog (provision it first and \
                 start without [catalog])",
            ));
        }
    }
    if let Some(CatalogSection::Unity {
        token_env,
        client_id,
        client_secret_env,
        ..
    }) = &file.catalog
        && (token_env.is_some() && (client_id.is_some() || client_secret_env.is_some())
            || client_id.is_some() != client_secret_env.is_some())
    {
        return Err(ConfigFileError::invalid(
            "catalog",
            "give either token_env, or client_id with client_secret_env, or neither (anonymous)",
        ));
    }
    Ok(())
}

/// A file that starts a sink (or is checked for one) lists at least one table.
pub(super) fn some_table(file: &File) -> Result<(), ConfigFileError> {
    match file.tables.is_empty() {
        true => Err(ConfigFileError::invalid(
            "table",
            "the file lists no [[table]]: a sink writes to at least one",
        )),
        false => Ok(()),
    }
}

/// A day: no timeout, backoff or drain of the sink is meant to be longer.
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Sizes and durations outside what the service or the sink can use: each refused under the
/// key the file wrote, with the range; cross-field rules under every key involved.
fn bounds(file: &File) -> Result<(), ConfigFileError> {
    let s = &file.sink;
    size(
        "sink.max_message_bytes",
        s.max_message_bytes,
        64 * 1024,
        10 * 1024 * 1024,
        "a message holds a batch's schema and rows; the service takes at most 10 MiB",
    )?;
    size(
        "sink.max_row_bytes",
        s.max_row_bytes,
        1,
        10 * 1024 * 1024 - 64 * 1024,
        "the service's largest record is 10 MiB - 64 KiB",
    )?;
    size(
        "sink.coalesce_bytes",
        s.coalesce_bytes,
        0,
        s.max_message_bytes
            .unwrap_or(SinkConfig::default().max_message_bytes),
        "small batches go together into one message, of at most sink.max_message_bytes",
    )?;
    let (r, t) = (&file.retry, &file.timeouts);
    for (key, value, min) in [
        (
            "sink.primary_raw_recheck",
            s.primary_raw_recheck,
            Duration::from_secs(1),
        ),
        ("retry.initial_backoff", r.initial_backoff, Duration::ZERO),
        ("retry.max_backoff", r.max_backoff, Duration::ZERO),
        ("retry.drain_budget", r.drain_budget, Duration::ZERO),
        ("resubmit.backoff", file.resubmit.backoff, Duration::ZERO),
        ("timeouts.ack", t.ack, Duration::ZERO),
        ("timeouts.open", t.open, Duration::ZERO),
        ("timeouts.reconcile", t.reconcile, Duration::ZERO),
        ("timeouts.min_residency", t.min_residency, Duration::ZERO),
        ("shutdown.drain", file.shutdown.drain, Duration::ZERO),
    ] {
        if let Some(v) = value
            && (v < min || v > DAY)
        {
            return Err(ConfigFileError::invalid(
                key,
                format!("{v:?} is out of range: from {min:?} to one day"),
            ));
        }
    }
    let d = SinkConfig::default().retry;
    let (initial, max) = (
        r.initial_backoff.unwrap_or(d.initial_backoff),
        r.max_backoff.unwrap_or(d.max_backoff),
    );
    if initial > max {
        return Err(ConfigFileError::invalid(
            "retry.initial_backoff, retry.max_backoff",
            format!("the first backoff ({initial:?}) is longer than the longest ({max:?})"),
        ));
    }
    Ok(())
}

fn size(
    key: &str,
    value: Option<u64>,
    min: u64,
    max: u64,
    why: &str,
) -> Result<(), ConfigFileError> {
    match value {
        Some(v) if v < min || v > max => Err(ConfigFileError::invalid(
            key,
            format!("{v} is out of range: from {min} to {max} ({why})"),
        )),
        _ => Ok(()),
    }
}

/// The `[sink]` proxy keys as a [`ProxyConfig`], the URL checked (shown without credentials).
fn proxy_of(s: &SinkSection) -> Result<ProxyConfig, ConfigFileError> {
    Ok(match (s.proxy.as_deref(), &s.no_proxy) {
        (None, None) => ProxyConfig::Environment,
        (None, Some(_)) => {
            return Err(ConfigFileError::invalid(
                "sink.no_proxy",
                "only with sink.proxy (without it, the environment's no_proxy applies)",
            ));
        }
        (Some("direct"), _) => ProxyConfig::Direct,
        (Some(url), no_proxy) => {
            let proxy = ProxyConfig::Url {
                url: url.to_owned(),
                no_proxy: no_proxy.clone().unwrap_or_default(),
            };
            // Checked now, so that the key is named (the URL shown without its credentials).
            proxy
                .check()
                .map_err(|e| ConfigFileError::invalid("sink.proxy", e.to_string()))?;
            proxy
        }
    })
}

pub(super) fn needs_catalog(i: usize) -> ConfigFileError {
    ConfigFileError::invalid(
        format!("table[{i}].role"),
        "primary_raw needs a [catalog]: its preconditions are checked through it",
    )
}

/// The core's field names are the file's keys, but for the few the file groups elsewhere.
pub(super) fn core_error(e: &ConfigError) -> ConfigFileError {
    match e {
        ConfigError::OutOfRange { field, reason } => {
            let key = match *field {
                "max_open_streams" | "max_message_bytes" => format!("sink.{field}"),
                "ack_timeout" => "timeouts.ack".into(),
                "open_timeout" => "timeouts.open".into(),
                "reconcile_timeout" => "timeouts.reconcile".into(),
                "min_residency" => "timeouts.min_residency".into(),
                other => other.to_owned(),
            };
            ConfigFileError::invalid(key, *reason)
        }
        other => ConfigFileError::invalid("", other.to_string()),
    }
}

pub(super) fn core(file: &File) -> SinkConfig {
    let d = SinkConfig::default();
    let (w, r, t) = (&file.window, &file.retry, &file.timeouts);
    let mut c = d;
    c.window.max_batches = w.max_batches.unwrap_or(d.window.max_batches);
    c.window.max_bytes = w.max_bytes.unwrap_or(d.window.max_bytes);
    c.window.max_rows = w.max_rows.unwrap_or(d.window.max_rows);
    c.max_open_streams = file.sink.max_open_streams.unwrap_or(d.max_open_streams);
    c.max_message_bytes = file.sink.max_message_bytes.unwrap_or(d.max_message_bytes);
    c.ack_timeout = t.ack.unwrap_or(d.ack_timeout);
    c.open_timeout = t.open.unwrap_or(d.open_timeout);
    c.reconcile_timeout = t.reconcile.unwrap_or(d.reconcile_timeout);
    c.min_residency = t.min_residency.unwrap_or(d.min_residency);
    c.retry.initial_backoff = r.initial_backoff.unwrap_or(d.retry.initial_backoff);
    c.retry.max_backoff = r.max_backoff.unwrap_or(d.retry.max_backoff);
    c.retry.multiplier = r.multiplier.unwrap_or(d.retry.multiplier);
    c.retry.jitter = r.jitter.unwrap_or(d.retry.jitter);
    c.retry.max_attempts = r.max_attempts.unwrap_or(d.retry.max_attempts);
    c.retry.drain_budget = r.drain_budget.unwrap_or(d.retry.drain_budget);
    c
}

fn secret(
    key: &str,
    variable: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigFileError> {
    env(variable)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| match looks_like_a_variable(variable) {
            true => ConfigFileError::Env {
                key: key.to_owned(),
                variable: variable.to_owned(),
            },
            false => ConfigFileError::EnvName {
                key: key.to_owned(),
            },
        })
}

/// Whether a name is safe to repeat in a message: `UPPER_SNAKE_CASE`, as environment variables
/// are named, and short. A token or a client secret (mixed case, or longer) is not.
fn looks_like_a_variable(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        // Digit-heavy upper-case strings are keys, not names (`DATABRICKS_TOKEN_2` is fine).
        && name.bytes().filter(u8::is_ascii_digit).count() * 4 <= name.len()
}

pub(super) fn config(
    file: &File,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<ZerobusConfig, ConfigFileError> {
    let s = &file.sink;
    let mut c = ZerobusConfig::new(&s.endpoint).core(core(file));
    c.credentials = match &file.credentials {
        CredentialsSection::None => Credentials::None,
        CredentialsSection::Bearer { token_env } => Credentials::Bearer(Secret::new(secret(
            "credentials.token_env",
            token_env,
            env,
        )?)),
        CredentialsSection::Oauth {
            workspace_url,
            workspace_id,
            client_id,
            client_secret_env,
        } => Credentials::OAuth(OAuth {
            unity_catalog_url: workspace_url.clone(),
            workspace_id: workspace_id.clone(),
            client_id: client_id.clone(),
            client_secret: Secret::new(secret(
                "credentials.client_secret_env",
                client_secret_env,
                env,
            )?),
        }),
    };
    if let Some(compression) = s.compression {
        c.compression = match compression {
            CompressionName::Zstd => Compression::Zstd,
            CompressionName::Lz4 => Compression::Lz4,
            CompressionName::None => Compression::None,
        };
    }
    let d = ResubmitPolicy::default();
    c.resubmit = ResubmitPolicy {
        max_attempts: file.resubmit.max_attempts.unwrap_or(d.max_attempts),
        backoff: file.resubmit.backoff.unwrap_or(d.backoff),
    };
    c.application_name.clone_from(&s.application_name);
    if let Some(bytes) = s.max_row_bytes {
        c.max_row_bytes = bytes;
    }
    if let Some(batches) = s.handoffs {
        c.handoffs = batches;
    }
    if let Some(bytes) = s.coalesce_bytes {
        c.coalesce_bytes = bytes;
    }
    if let Some(every) = s.primary_raw_recheck {
        c.primary_raw_recheck = every;
    }
    if let Some(native) = s.native_roots {
        c.native_roots = native;
    }
    c.proxy = proxy_of(s)?;
    if let Some(path) = &s.tls_ca_file {
        let pem = std::fs::read(path).map_err(|e| {
            ConfigFileError::invalid(
                "sink.tls_ca_file",
                format!("cannot read `{}`: {e}", path.display()),
            )
        })?;
        c.tls_ca_pem = Some(pem);
    }
    Ok(c)
}

pub(super) fn catalog(
    file: &File,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<AnyCatalog>, ConfigFileError> {
    let Some(section) = &file.catalog else {
        return Ok(None);
    };
    Ok(Some(match section {
        #[cfg(feature = "local")]
        CatalogSection::Local { root, .. } => AnyCatalog::Local(LocalDelta::new(root)),
        #[cfg(not(feature = "local"))]
        CatalogSection::Local { root, .. } => {
            return Err(ConfigFileError::invalid(
                "catalog.backend",
                format!(
                    "the local backend (tables under `{}`) is built with zerobus-sink-tokio's \
                     `local` feature, which is off",
                    root.display()
                ),
            ));
        }
        CatalogSection::Unity {
            workspace_url,
            warehouse_id,
            token_env,
            client_id,
            client_secret_env,
            statement_timeout,
            ..
        } => {
            let auth = match (token_env, client_id, client_secret_env) {
                (Some(var), _, _) => {
                    Auth::Bearer(UnitySecret::new(secret("catalog.token_env", var, env)?))
                }
                (None, Some(id), Some(var)) => Auth::OAuthM2M {
                    client_id: id.clone(),
                    client_secret: UnitySecret::new(secret("catalog.client_secret_env", var, env)?),
                },
                _ => Auth::Anonymous,
            };
            let mut config = UnityConfig::new(workspace_url, warehouse_id, auth);
            if let Some(t) = statement_timeout {
                config.statement_timeout = *t;
            }
            let catalog = UnityCatalog::new(config).map_err(|e| ConfigFileError::Catalog {
                key: "catalog.workspace_url".into(),
                source: Box::new(e),
            })?;
            AnyCatalog::Unity(Box::new(catalog))
        }
    }))
}

pub(super) fn policy(file: &File, shape: PrimaryRawShape) -> Policy {
    let allow_widening = match &file.catalog {
        Some(
            CatalogSection::Unity { allow_widening, .. }
            | CatalogSection::Local { allow_widening, .. },
        ) => *allow_widening,
        None => false,
    };
    Policy {
        allow_widening,
        primary_raw: shape,
        ..Policy::default()
    }
}

/// The table's spec: its name, pool sizing and routing.
pub(super) fn spec(i: usize, t: &TableSection) -> Result<TableSpec, ConfigFileError> {
    let key = |leaf: &str| format!("table[{i}].{leaf}");
    let peak = t.peak_mb_per_sec.is_some() || t.peak_rows_per_sec.is_some();
    let sizing = match (t.streams, peak) {
        (Some(_), true) => {
            return Err(ConfigFileError::invalid(
                key("streams"),
                "give either streams or peak_mb_per_sec/peak_rows_per_sec, not both",
            ));
        }
        (Some(0), _) => {
            return Err(ConfigFileError::invalid(
                key("streams"),
                "must be at least 1",
            ));
        }
        (Some(n), false) => PoolSizing::fixed(n),
        (None, true) => {
            for (leaf, v) in [
                ("peak_mb_per_sec", t.peak_mb_per_sec),
                ("peak_rows_per_sec", t.peak_rows_per_sec),
            ] {
                if v.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                    return Err(ConfigFileError::invalid(
                        key(leaf),
                        "must be a positive number",
                    ));
                }
            }
            let mut s = PoolSizing::for_peak(
                t.peak_mb_per_sec.unwrap_or(0.0),
                t.peak_rows_per_sec.unwrap_or(0.0),
            );
            if let Some(max) = t.max_streams {
                s.max_slots = max;
            }
            s
        }
        (None, false) => PoolSizing::default(),
    };
    if t.max_streams == Some(0) {
        return Err(ConfigFileError::invalid(
            key("max_streams"),
            "must be at least 1",
        ));
    }
    let spec = TableSpec::new(&t.name).sizing(sizing);
    Ok(if t.keyed { spec.keyed() } else { spec })
}

/// The schema the table's `columns` give, if it lists them.
pub(super) fn columns(i: usize, t: &TableSection) -> Result<Option<SchemaRef>, ConfigFileError> {
    let Some(columns) = &t.columns else {
        return Ok(None);
    };
    if columns.is_empty() {
        return Err(ConfigFileError::invalid(
            format!("table[{i}].columns"),
            "lists no column (leave it out to take the schema from the pipeline)",
        ));
    }
    let fields = columns
        .iter()
        .enumerate()
        .map(|(j, c)| field(i, j, c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Arc::new(Schema::new(fields))))
}

fn field(i: usize, j: usize, c: &ColumnSection) -> Result<Field, ConfigFileError> {
    let data_type = DeltaType::from_json(&serde_json::Value::String(c.data_type.clone()))
        .map_err(|e| ConfigFileError::invalid(format!("table[{i}].columns[{j}].type"), e))?;
    Ok(Field::new(&c.name, data_type.to_arrow(), c.nullable))
}

pub(super) fn schema_for(
    i: usize,
    t: &TableSection,
    schemas: &impl Fn(&str) -> Option<SchemaRef>,
) -> Result<SchemaRef, ConfigFileError> {
    match (schemas(&t.name), columns(i, t)?) {
        (Some(s), _) | (None, Some(s)) => Ok(s),
        (None, None) => Err(ConfigFileError::invalid(
            format!("table[{i}].columns"),
            format!(
                "no schema for `{}`: list its columns in the file or give it when starting",
                t.name
            ),
        )),
    }
}

/// The table's policies on top of `def`.
pub(super) fn apply(
    i: usize,
    t: &TableSection,
    def: TableDef,
) -> Result<TableDef, ConfigFileError> {
    let mut def = def;
    def.spec = spec(i, t)?;
    def.bad_rows = match t.bad_rows {
        BadRowsName::FailBatch => BadRows::FailBatch,
        BadRowsName::Isolate => BadRows::Isolate,
    };
    def.conversions = conversions(t);
    Ok(def)
}

pub(super) fn conversions(t: &TableSection) -> Conversions {
    Conversions {
        nested_to_json: t.nested_to_json,
        zoned_to_utc_wall_time: t.zoned_to_utc_wall_time,
    }
}
