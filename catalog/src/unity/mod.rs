//! The Unity Catalog backend: describe through the UC REST API, DDL through the SQL Statement
//! Execution API on a warehouse, temporary table credentials, OAuth M2M (UNITY_CATALOG.md).
//!
//! HTTP 429 and 5xx are retried (a few times, with backoff), the OAuth token endpoint's own
//! failures included; other errors are permanent and name the table, the endpoint and the
//! service's `error_code`. A refused token is dropped and the call retried once with a fresh
//! one. Secrets never appear in errors, logs or `Debug` output.
//!
//! A `404` means "absent" only when it says so: `TABLE_DOES_NOT_EXIST`. The open-source server
//! answers a missing table, schema or catalog with the same generic `RESOURCE_NOT_FOUND`, so
//! then describe asks for the schema and the catalog too, and only a missing table is absent.
//! A missing schema or catalog is an error naming it and its code; a `404` with an empty or
//! non-JSON body is a wrong URL, named as such.
//!
//! Reconciling is idempotent under concurrent callers and retried requests: `CREATE TABLE IF
//! NOT EXISTS`, and a statement that fails because its change is already there (another sink
//! got there first, or a retried request had already run) describes the table again and plans
//! again.

mod auth;
mod coverage;
#[cfg(feature = "iceberg")]
pub mod iceberg;
mod models;
#[cfg(feature = "iceberg")]
pub mod storage;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

pub use auth::{Auth, Secret};

use crate::catalog::{
    Access, CloudCredentials, ReconcileOutcome, SinkId, TableCatalog, VendedCredentials,
    sink_property,
};
use crate::ddl;
use crate::desired::DesiredTable;
use crate::error::CatalogError;
use crate::live::{LiveColumn, LiveTable, Protocol};
use crate::plan::{Action, Policy, ReconcilePlan, plan};
use crate::requirements::FirstSeen;
use crate::table_ref::TableRef;
use crate::types::DeltaType;

use auth::TokenSource;
use models::{ServiceError, StatementResponse, TableInfo, TemporaryCredentials};

/// Where and how to reach Unity Catalog.
#[derive(Clone, Debug)]
pub struct UnityConfig {
    /// The workspace URL, e.g. `https://dbc-123.cloud.databricks.com` (or a loopback server).
    pub workspace_url: String,
    /// The SQL warehouse that runs DDL.
    pub warehouse_id: String,
    /// Credentials.
    pub auth: Auth,
    /// How long one statement may run before it is cancelled.
    pub statement_timeout: Duration,
    /// Attempts for a retryable HTTP failure (429, 5xx, transport).
    pub max_attempts: u32,
    /// Delay before the first retry (doubles each time).
    pub retry_backoff: Duration,
    /// How the recovery read path reads object storage (retries, credential refresh).
    #[cfg(feature = "iceberg")]
    pub storage: storage::StorageOptions,
}

impl UnityConfig {
    /// Defaults: statements may run 5 minutes; 4 attempts from 200 ms.
    #[must_use]
    pub fn new(
        workspace_url: impl Into<String>,
        warehouse_id: impl Into<String>,
        auth: Auth,
    ) -> UnityConfig {
        UnityConfig {
            workspace_url: workspace_url.into().trim_end_matches('/').to_owned(),
            warehouse_id: warehouse_id.into(),
            auth,
            statement_timeout: Duration::from_secs(300),
            max_attempts: 4,
            retry_backoff: Duration::from_millis(200),
            #[cfg(feature = "iceberg")]
            storage: storage::StorageOptions::default(),
        }
    }
}

/// The Unity Catalog backend of [`TableCatalog`].
#[derive(Debug)]
pub struct UnityCatalog {
    config: UnityConfig,
    http: reqwest::Client,
    tokens: TokenSource,
    /// The table ids first described for writing (a recreated table is refused).
    seen: FirstSeen,
}

impl UnityCatalog {
    /// A backend for `config`.
    pub fn new(config: UnityConfig) -> Result<UnityCatalog, CatalogError> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("zerobus-sink-catalog/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| CatalogError::Transport {
                operation: "client",
                target: config.workspace_url.clone(),
                message: crate::error::chain(&e),
            })?;
        let tokens = TokenSource::new(
            config.auth.clone(),
            format!("{}/oidc/v1/token", config.workspace_url),
        );
        Ok(UnityCatalog {
            config,
            http,
            tokens,
            seen: FirstSeen::new(),
        })
    }

    /// One JSON call: retries what is retryable, refreshes a refused token once. Returns the
    /// status and the body (`Null` when empty). A 404 is an answer (`Ok`) only for `describe`,
    /// where it means the table is absent; elsewhere it is an error naming the endpoint.
    async fn call(
        &self,
        operation: &'static str,
        target: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), CatalogError> {
        self.call_with(operation, target, method, path, body, &[])
            .await
    }

    /// [`call`](Self::call) with extra request headers.
    async fn call_with(
        &self,
        operation: &'static str,
        target: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&'static str, &'static str)],
    ) -> Result<(StatusCode, Value), CatalogError> {
        let url = format!("{}{path}", self.config.workspace_url);
        let mut delay = self.config.retry_backoff;
        let mut refreshed = false;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut request = self.http.request(method.clone(), &url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            // The token endpoint's own failures go through the same retries.
            match self.tokens.header(&self.http).await {
                Ok(Some(header)) => {
                    request = request.header(reqwest::header::AUTHORIZATION, header);
                }
                Ok(None) => {}
                Err(e) if e.is_retryable() && attempt < self.config.max_attempts => {
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    continue;
                }
                Err(e) => return Err(e),
            }
            if let Some(b) = body {
                request = request.json(b);
            }
            let result = request.send().await;
            let outcome = match result {
                Err(e) => Err(CatalogError::Transport {
                    operation,
                    target: target.to_owned(),
                    message: format!(
                        "{} {url}: {}",
                        method,
                        crate::error::chain(&e.without_url())
                    ),
                }),
                Ok(response) => {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    let value: Value = if text.trim().is_empty() {
                        Value::Null
                    } else {
                        serde_json::from_str(&text).unwrap_or(Value::String(text))
                    };
                    if status.is_success() || (status == StatusCode::NOT_FOUND && absent(&value)) {
                        return Ok((status, value));
                    }
                    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
                        && !refreshed
                        && matches!(self.config.auth, Auth::OAuthM2M { .. })
                    {
                        refreshed = true;
                        self.tokens.invalidate().await;
                        continue;
                    }
                    Err(http_error(operation, target, status, &value, &method, &url))
                }
            };
            match outcome {
                Err(e) if e.is_retryable() && attempt < self.config.max_attempts => {
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                }
                other => return other,
            }
        }
    }

    /// Runs one statement on the warehouse and waits for a terminal state.
    async fn execute(&self, table: &TableRef, statement: &str) -> Result<(), CatalogError> {
        self.run(table, statement, None).await.map(drop)
    }

    /// Runs one statement (with `fields` added to the request, e.g. a query's `format` and
    /// `disposition`) and waits for it to succeed: the last response, with a query's manifest
    /// and first chunk.
    async fn run(
        &self,
        table: &TableRef,
        statement: &str,
        fields: Option<Value>,
    ) -> Result<StatementResponse, CatalogError> {
        let target = table.full_name();
        let mut body = json!({
            "statement": statement,
            "warehouse_id": self.config.warehouse_id,
            "wait_timeout": "30s",
            "on_wait_timeout": "CONTINUE",
        });
        if let (Some(Value::Object(extra)), Some(b)) = (fields, body.as_object_mut()) {
            b.extend(extra);
        }
        let (_, value) = self
            .call(
                "execute statement",
                &target,
                Method::POST,
                "/api/2.0/sql/statements",
                Some(&body),
            )
            .await?;
        let mut response: StatementResponse = decode("execute statement", &target, value)?;
        let deadline = tokio::time::Instant::now() + self.config.statement_timeout;
        let mut poll = Duration::from_millis(100);
        while matches!(response.status.state.as_str(), "PENDING" | "RUNNING") {
            if tokio::time::Instant::now() >= deadline {
                let cancel = format!("/api/2.0/sql/statements/{}/cancel", response.statement_id);
                let _ = self
                    .call("cancel statement", &target, Method::POST, &cancel, None)
                    .await;
                return Err(CatalogError::StatementFailed {
                    table: target,
                    statement: summary(statement),
                    state: "TIMED OUT".into(),
                    message: format!(
                        "not finished within {:?}; cancelled",
                        self.config.statement_timeout
                    ),
                });
            }
            tokio::time::sleep(poll).await;
            poll = (poll * 2).min(Duration::from_secs(5));
            let path = format!("/api/2.0/sql/statements/{}", response.statement_id);
            let (_, value) = self
                .call("poll statement", &target, Method::GET, &path, None)
                .await?;
            response = decode("poll statement", &target, value)?;
        }
        if response.status.state == "SUCCEEDED" {
            return Ok(response);
        }
        let error = response.status.error.unwrap_or(models::StatementError {
            message: None,
            error_code: None,
        });
        let message = match (error.error_code, error.message) {
            (Some(code), Some(m)) => format!("{code}: {m}"),
            (None, Some(m)) => m,
            (Some(code), None) => code,
            (None, None) => "no message".into(),
        };
        Err(CatalogError::StatementFailed {
            table: target,
            statement: summary(statement),
            state: response.status.state,
            message,
        })
    }

    async fn execute_plan(&self, plan: ReconcilePlan) -> Result<ReconcileOutcome, CatalogError> {
        let statements = ddl::render(&plan)?;
        for s in &statements {
            self.execute(&plan.table, s).await?;
        }
        Ok(ReconcileOutcome {
            plan,
            executed: statements,
        })
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    operation: &'static str,
    target: &str,
    value: Value,
) -> Result<T, CatalogError> {
    serde_json::from_value(value).map_err(|e| CatalogError::Decode {
        operation,
        target: target.to_owned(),
        message: e.to_string(),
    })
}

/// A statement's first words, for errors: never its literals (comments may be long or private).
fn summary(statement: &str) -> String {
    statement
        .split_whitespace()
        .take(4)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The error codes that mean "this table does not exist" (Databricks), or "something in this
/// path does not exist" (the open-source server's generic codes, [`GENERIC_ABSENT`]). Anything
/// else in a 404 is an error.
const ABSENT: [&str; 3] = [
    "TABLE_DOES_NOT_EXIST",
    "RESOURCE_DOES_NOT_EXIST",
    "RESOURCE_NOT_FOUND",
];

/// The codes that do not say *what* is missing: the open-source server answers a missing
/// table, a missing schema and a missing catalog alike with one of these (checked against
/// `uc-server` 0.0.11), so describe asks for the table's schema and catalog before it calls
/// the table absent.
const GENERIC_ABSENT: [&str; 2] = ["RESOURCE_DOES_NOT_EXIST", "RESOURCE_NOT_FOUND"];

/// Whether a 404's body says the table is absent.
fn absent(body: &Value) -> bool {
    serde_json::from_value::<ServiceError>(body.clone())
        .ok()
        .and_then(|e| e.error_code)
        .is_some_and(|code| ABSENT.contains(&code.as_str()))
}

fn http_error(
    operation: &'static str,
    target: &str,
    status: StatusCode,
    body: &Value,
    method: &Method,
    url: &str,
) -> CatalogError {
    let parsed: Option<ServiceError> =
        serde_json::from_value(body.clone())
            .ok()
            .filter(|e: &ServiceError| {
                e.error_code.is_some() || e.message.is_some() || e.error.is_some()
            });
    if status == StatusCode::NOT_FOUND && parsed.is_none() {
        // No error code at all: nothing answered for this path (a wrong workspace URL, or an
        // endpoint this server does not have).
        return CatalogError::Http {
            operation,
            target: target.to_owned(),
            status: 404,
            code: None,
            message: format!(
                "nothing answers {method} {url} (a 404 without an error code: is the workspace URL right?)"
            ),
            retryable: false,
        };
    }
    let (code, message) = match parsed {
        Some(e) => {
            let nested = e.error.as_deref();
            (
                e.error_code
                    .or_else(|| nested.and_then(|n| n.error_code.clone())),
                e.message
                    .or_else(|| nested.and_then(|n| n.message.clone()))
                    .unwrap_or_default(),
            )
        }
        None => (
            None,
            body.as_str()
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect(),
        ),
    };
    CatalogError::Http {
        operation,
        target: target.to_owned(),
        status: status.as_u16(),
        code,
        message,
        retryable: status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error(),
    }
}

/// A column's type from what UC returns: `type_json` first, then `type_text`, then `type_name`;
/// a type this crate does not know is kept as [`DeltaType::Unknown`] (describe never fails on
/// one column).
fn column_type(c: &models::ColumnInfo) -> DeltaType {
    known_column_type(c).unwrap_or_else(|_| {
        DeltaType::Unknown(
            c.type_text
                .clone()
                .or_else(|| c.type_name.clone())
                .unwrap_or_else(|| "unknown".into()),
        )
    })
}

fn known_column_type(c: &models::ColumnInfo) -> Result<DeltaType, String> {
    if let Some(json) = &c.type_json {
        let field: Value = serde_json::from_str(json).map_err(|e| format!("type_json: {e}"))?;
        if let Some(t) = field.get("type") {
            return DeltaType::from_json(t);
        }
    }
    if let Some(text) = &c.type_text
        && let Ok(t) = DeltaType::from_json(&Value::String(text.clone()))
    {
        return Ok(t);
    }
    match (c.type_name.as_deref(), c.type_precision, c.type_scale) {
        (Some("DECIMAL"), Some(p), Some(s)) => Ok(DeltaType::Decimal {
            precision: p,
            scale: s,
        }),
        (Some(name), ..) => DeltaType::from_json(&Value::String(name.to_owned())),
        (None, ..) => Err("no type_json, type_text or type_name".into()),
    }
}

impl UnityCatalog {
    /// After a `404` for `table`: `Ok(None)` when only the table is missing; an error naming
    /// the missing schema or catalog when the answer did not say which (the open-source
    /// server's generic codes). Databricks' `TABLE_DOES_NOT_EXIST` needs no further call.
    async fn absent_or_missing_parent(
        &self,
        table: &TableRef,
        body: &Value,
    ) -> Result<Option<LiveTable>, CatalogError> {
        let code = serde_json::from_value::<ServiceError>(body.clone())
            .ok()
            .and_then(|e| e.error_code);
        if !code.as_deref().is_some_and(|c| GENERIC_ABSENT.contains(&c)) {
            return Ok(None);
        }
        let target = table.full_name();
        let schema = format!("{}.{}", table.catalog(), table.schema());
        let parents = [
            (
                "schema",
                schema.clone(),
                format!("/api/2.1/unity-catalog/schemas/{schema}"),
            ),
            (
                "catalog",
                table.catalog().to_owned(),
                format!("/api/2.1/unity-catalog/catalogs/{}", table.catalog()),
            ),
        ];
        let mut missing = None;
        for (kind, name, path) in parents {
            let (status, _) = self
                .call("describe", &target, Method::GET, &path, None)
                .await?;
            if status != StatusCode::NOT_FOUND {
                break;
            }
            missing = Some((kind, name));
        }
        match missing {
            None => Ok(None),
            Some((kind, name)) => Err(CatalogError::Http {
                operation: "describe",
                target,
                status: 404,
                code,
                message: format!("{kind} {name} does not exist"),
                retryable: false,
            }),
        }
    }
}

impl TableCatalog for UnityCatalog {
    async fn describe(&self, table: &TableRef) -> Result<Option<LiveTable>, CatalogError> {
        let target = table.full_name();
        let path = format!("/api/2.1/unity-catalog/tables/{target}");
        let (status, value) = self
            .call("describe", &target, Method::GET, &path, None)
            .await?;
        if status == StatusCode::NOT_FOUND {
            return self.absent_or_missing_parent(table, &value).await;
        }
        let info: TableInfo = decode("describe", &target, value)?;
        let mut columns = info.columns;
        columns.sort_by_key(|c| c.position.unwrap_or(i64::MAX));
        let columns = columns
            .iter()
            .map(|c| LiveColumn {
                name: c.name.clone(),
                data_type: column_type(c),
                nullable: c.nullable.unwrap_or(true),
                comment: c.comment.clone(),
            })
            .collect();
        Ok(Some(LiveTable {
            table: table.clone(),
            columns,
            comment: info.comment,
            protocol: Protocol::from_properties(&info.properties),
            properties: info.properties,
            table_id: info.table_id,
            storage_location: info.storage_location,
            table_type: info.table_type,
            data_source_format: info.data_source_format,
        }))
    }

    async fn describe_for_write(
        &self,
        table: &TableRef,
    ) -> Result<Option<LiveTable>, CatalogError> {
        let live = self.describe(table).await?;
        self.seen.admit(table, live)
    }

    async fn reconcile(
        &self,
        desired: &DesiredTable,
        policy: &Policy,
    ) -> Result<ReconcileOutcome, CatalogError> {
        let mut executed = Vec::new();
        let mut first = None;
        // Describe, plan, execute; then again, until the plan is empty: a statement that lost a
        // race (or ran twice) plans again, and the last pass proves the table is as wanted.
        for _ in 0..4 {
            let live = self.describe_for_write(&desired.table).await?;
            let plan = plan(live.as_ref(), desired, policy);
            let refusals = plan.refusals();
            if !refusals.is_empty() {
                return Err(CatalogError::Refused {
                    table: desired.table.full_name(),
                    refusals,
                });
            }
            let done = plan.actions.is_empty();
            let shown = first.get_or_insert_with(|| plan.clone()).clone();
            if done {
                return Ok(ReconcileOutcome {
                    plan: shown,
                    executed,
                });
            }
            match self.execute_plan(plan).await {
                Ok(outcome) => executed.extend(outcome.executed),
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        Err(CatalogError::Conflict {
            table: desired.table.full_name(),
            message: "the table kept changing under the reconcile (4 passes)".into(),
        })
    }

    async fn register_sink(&self, table: &TableRef, sink: &SinkId) -> Result<(), CatalogError> {
        let action = Action::SetProperty {
            key: sink_property(sink),
            value: "registered".into(),
        };
        self.execute_plan(ReconcilePlan {
            table: table.clone(),
            actions: vec![action],
            notes: vec![],
        })
        .await
        .map(drop)
    }

    async fn vend_credentials(
        &self,
        table: &TableRef,
        access: Access,
    ) -> Result<VendedCredentials, CatalogError> {
        let target = table.full_name();
        let live = self
            .describe(table)
            .await?
            .ok_or_else(|| CatalogError::TableAbsent {
                table: target.clone(),
            })?;
        let table_id = live.table_id.ok_or_else(|| CatalogError::Decode {
            operation: "vend credentials",
            target: target.clone(),
            message: "the table has no table_id".into(),
        })?;
        let operation = match access {
            Access::Read => "READ",
            Access::ReadWrite => "READ_WRITE",
        };
        let body = json!({ "table_id": table_id, "operation": operation });
        let path = "/api/2.1/unity-catalog/temporary-table-credentials";
        let (_, value) = self
            .call("vend credentials", &target, Method::POST, path, Some(&body))
            .await?;
        let c: TemporaryCredentials = decode("vend credentials", &target, value)?;
        let credentials = if let Some(aws) = c.aws_temp_credentials {
            CloudCredentials::Aws {
                access_key_id: aws.access_key_id,
                secret_access_key: aws.secret_access_key,
                session_token: aws.session_token,
            }
        } else if let Some(sas) = c.azure_user_delegation_sas {
            CloudCredentials::AzureSas(sas.sas_token)
        } else if let Some(aad) = c.azure_aad {
            CloudCredentials::AzureAad(aad.aad_token)
        } else if let Some(gcp) = c.gcp_oauth_token {
            CloudCredentials::Gcp(gcp.oauth_token)
        } else if let Some(r2) = c.r2_temp_credentials {
            CloudCredentials::R2 {
                access_key_id: r2.access_key_id,
                secret_access_key: r2.secret_access_key,
                session_token: r2.session_token,
            }
        } else if let Some(provider) = c.other.iter().find(|(_, v)| v.is_object()).map(|(k, _)| k) {
            return Err(CatalogError::UnsupportedCredentials {
                table: target,
                provider: provider.clone(),
            });
        } else {
            CloudCredentials::None
        };
        Ok(VendedCredentials {
            url: c.url.or(live.storage_location).unwrap_or_default(),
            expires_at_ms: c.expiration_time,
            credentials,
        })
    }
}
