//! A table's files on cloud object storage, read with the credentials Unity Catalog vends for
//! it: `s3://` (and `s3a://`), `abfss://` (and `abfs://`, `wasbs://`, `wasb://`), `gs://`, and
//! `file://` (or a plain path).
//!
//! - **Stores** are built with `object_store` (the crate delta-rs already brings), one per
//!   bucket or container, from the table's vended credentials and the storage configuration
//!   Iceberg REST answered with (`s3.endpoint`, `s3.path-style-access`, `client.region`,
//!   `adls.connection-string.<account>`; each only where the catalog sends it).
//! - **Refresh.** Credentials are re-vended (the table is loaded again) before they expire
//!   (within [`StorageOptions::refresh_before`] of the expiry the catalog gave), and once more
//!   when storage refuses them as expired or invalid mid-read; the refused request is then made
//!   again with the new ones.
//! - **Retries.** A throttled or failing request (503 SlowDown, 500, a dropped connection) is
//!   retried by the store, within [`StorageOptions::max_retries`] and
//!   [`StorageOptions::retry_timeout`]; past the bound the read fails naming the file.
//! - **Secrets** (access keys, session tokens, SAS tokens, OAuth tokens) never leave this
//!   module: no `Debug` shows them, and every error message is scrubbed of them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::azure::{AzureConfigKey, MicrosoftAzure, MicrosoftAzureBuilder};
use object_store::gcp::{GcpCredential, GoogleCloudStorage, GoogleCloudStorageBuilder};
use object_store::path::Path;
use object_store::{BackoffConfig, ObjectStoreExt, RetryConfig, StaticCredentialProvider};

use crate::catalog::CloudCredentials;
use crate::recovery::RecoveryError;
use crate::table_ref::TableRef;

/// How the recovery read path talks to object storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageOptions {
    /// Retries of one request that storage throttled (503 SlowDown) or failed (5xx, a dropped
    /// connection); 4 by default.
    pub max_retries: usize,
    /// No retry is started this long after a request's first attempt (30 s by default).
    pub retry_timeout: Duration,
    /// The first backoff (doubling, at most 5 s); 100 ms by default.
    pub first_backoff: Duration,
    /// Credentials are re-vended this long before the expiry the catalog gave (1 minute by
    /// default).
    pub refresh_before: Duration,
}

impl Default for StorageOptions {
    fn default() -> StorageOptions {
        StorageOptions {
            max_retries: 4,
            retry_timeout: Duration::from_secs(30),
            first_backoff: Duration::from_millis(100),
            refresh_before: Duration::from_secs(60),
        }
    }
}

impl StorageOptions {
    fn retry(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig {
                init_backoff: self.first_backoff,
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }
}

/// Vended access to a table's storage: the credentials, when they expire, and the storage
/// configuration that came with them (endpoints, region; no secrets). `Debug` shows no secret.
#[derive(Clone, PartialEq, Eq)]
pub struct StorageAccess {
    /// The credentials.
    pub credentials: CloudCredentials,
    /// When they expire, in ms since the Unix epoch, if the catalog said.
    pub expires_at_ms: Option<i64>,
    /// The storage configuration (secret keys are never kept here).
    pub config: BTreeMap<String, String>,
}

impl std::fmt::Debug for StorageAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageAccess")
            .field("credentials", &self.credentials)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("config", &self.config)
            .finish()
    }
}

impl StorageAccess {
    /// The secrets in these credentials, to scrub from any message.
    fn secrets(&self) -> Vec<String> {
        let mut out = match &self.credentials {
            CloudCredentials::Aws {
                secret_access_key,
                session_token,
                ..
            }
            | CloudCredentials::R2 {
                secret_access_key,
                session_token,
                ..
            } => vec![secret_access_key.clone(), session_token.clone()],
            CloudCredentials::AzureSas(s)
            | CloudCredentials::AzureAad(s)
            | CloudCredentials::Gcp(s) => {
                // A SAS token's signature also appears alone (percent-encoded or not).
                let mut v = vec![s.clone()];
                v.extend(
                    s.trim_start_matches('?')
                        .split('&')
                        .filter_map(|p| p.strip_prefix("sig="))
                        .map(str::to_owned),
                );
                v
            }
            CloudCredentials::None => Vec::new(),
        };
        out.retain(|s| s.len() >= 4);
        out
    }

    /// Whether these credentials should be re-vended before use at `now`.
    fn stale(&self, now: SystemTime, before: Duration) -> bool {
        let Some(at) = self.expires_at_ms else {
            return false;
        };
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let before_ms = i64::try_from(before.as_millis()).unwrap_or(i64::MAX);
        now_ms.saturating_add(before_ms) >= at
    }
}

/// The storage configuration keys that are kept (no secrets): everything else an Iceberg REST
/// configuration carries is dropped, and of a connection string only its blob endpoint is kept.
pub(crate) fn public_config(config: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    const KEPT: [&str; 5] = [
        "s3.endpoint",
        "s3.path-style-access",
        "client.region",
        "s3.region",
        "gcs.service.host",
    ];
    config
        .iter()
        .filter_map(|(k, v)| {
            if KEPT.contains(&k.as_str()) {
                Some((k.clone(), v.clone()))
            } else if k.starts_with("adls.connection-string.") {
                let endpoint = v.split(';').find_map(|p| p.strip_prefix("BlobEndpoint="));
                let plain = (!v.contains(';') && !v.contains('=')).then_some(v.as_str());
                endpoint.or(plain).map(|e| (k.clone(), e.to_owned()))
            } else {
                None
            }
        })
        .collect()
}

/// When vended credentials expire (ms since the Unix epoch), from an Iceberg REST storage
/// configuration: `s3.session-token-expires-at-ms`, `adls.sas-token-expires-at-ms.<account>`,
/// `gcs.oauth2.token-expires-at`; the earliest if several.
pub(crate) fn expiry(config: &BTreeMap<String, String>) -> Option<i64> {
    config
        .iter()
        .filter(|(k, _)| k.contains("expires-at"))
        .filter_map(|(_, v)| v.trim().parse::<i64>().ok())
        .min()
}

/// `message` with every secret of `access` replaced by `<redacted>`.
pub(crate) fn scrub(access: &StorageAccess, message: &str) -> String {
    let mut out = message.to_owned();
    for secret in access.secrets() {
        out = out.replace(&secret, "<redacted>");
        let encoded: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
        out = out.replace(&encoded, "<redacted>");
    }
    out
}

/// A location on storage: which store serves it and the object's path there.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    Local(String),
    S3 {
        bucket: String,
        path: String,
    },
    Azure {
        account: String,
        container: String,
        path: String,
    },
    Gcs {
        bucket: String,
        path: String,
    },
}

impl Place {
    fn parse(location: &str) -> Result<Place, String> {
        let Some((scheme, rest)) = location.split_once("://") else {
            return Ok(Place::Local(location.to_owned()));
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let path = percent_decoded(path);
        match scheme {
            "file" => Ok(Place::Local(format!("/{path}"))),
            "s3" | "s3a" => Ok(Place::S3 {
                bucket: authority.to_owned(),
                path,
            }),
            "abfss" | "abfs" | "wasbs" | "wasb" => {
                let (container, host) = authority
                    .split_once('@')
                    .ok_or_else(|| format!("{scheme}:// location without container@account"))?;
                let account = host.split('.').next().unwrap_or(host).to_owned();
                Ok(Place::Azure {
                    account,
                    container: container.to_owned(),
                    path,
                })
            }
            "gs" => Ok(Place::Gcs {
                bucket: authority.to_owned(),
                path,
            }),
            other => Err(format!(
                "{other}:// storage is not read (s3, abfss, gs, file)"
            )),
        }
    }

    /// The store's key: everything but the path.
    fn store_key(&self) -> Option<(u8, String, String)> {
        match self {
            Place::Local(_) => None,
            Place::S3 { bucket, .. } => Some((0, bucket.clone(), String::new())),
            Place::Azure {
                account, container, ..
            } => Some((1, account.clone(), container.clone())),
            Place::Gcs { bucket, .. } => Some((2, bucket.clone(), String::new())),
        }
    }
}

fn percent_decoded(path: &str) -> String {
    url::form_urlencoded::parse(format!("p={}", path.replace('+', "%2B")).as_bytes())
        .next()
        .map_or_else(|| path.to_owned(), |(_, v)| v.into_owned())
}

/// A store for one bucket or container.
#[derive(Debug)]
enum Store {
    S3(AmazonS3),
    Azure(MicrosoftAzure),
    Gcs(GoogleCloudStorage),
}

impl Store {
    async fn get(&self, path: &Path) -> object_store::Result<Bytes> {
        match self {
            Store::S3(s) => s.get(path).await?.bytes().await,
            Store::Azure(s) => s.get(path).await?.bytes().await,
            Store::Gcs(s) => s.get(path).await?.bytes().await,
        }
    }
}

/// The files of one table, read with its vended access. See the module docs.
#[derive(Debug)]
pub(crate) struct TableFiles {
    table: TableRef,
    access: StorageAccess,
    options: StorageOptions,
    stores: BTreeMap<(u8, String, String), Store>,
    /// How many times the credentials were re-vended.
    pub(crate) refreshed: u32,
}

impl TableFiles {
    pub(crate) fn new(table: TableRef, access: StorageAccess, options: StorageOptions) -> Self {
        TableFiles {
            table,
            access,
            options,
            stores: BTreeMap::new(),
            refreshed: 0,
        }
    }

    /// The bytes of the object at `location`, re-vending the credentials (with `vend`) before
    /// they expire and once when storage refuses them.
    pub(crate) async fn read<V, F>(
        &mut self,
        location: &str,
        mut vend: V,
    ) -> Result<Bytes, RecoveryError>
    where
        V: FnMut() -> F,
        F: Future<Output = Result<StorageAccess, RecoveryError>>,
    {
        let place = Place::parse(location).map_err(|m| self.error(location, &m))?;
        if let Place::Local(path) = &place {
            let path = path.clone();
            return tokio::task::spawn_blocking(move || std::fs::read(path))
                .await
                .map_err(|e| self.error(location, &e.to_string()))?
                .map(Bytes::from)
                .map_err(|e| self.error(location, &e.to_string()));
        }
        if self
            .access
            .stale(SystemTime::now(), self.options.refresh_before)
        {
            self.refresh(vend().await?);
        }
        match self.get(&place, location).await {
            Err(e) if refused(&e) => {
                self.refresh(vend().await?);
                self.get(&place, location)
                    .await
                    .map_err(|e| self.error(location, &failure(&e)))
            }
            other => other.map_err(|e| self.error(location, &failure(&e))),
        }
    }

    fn refresh(&mut self, access: StorageAccess) {
        self.access = access;
        self.stores.clear();
        self.refreshed += 1;
    }

    async fn get(&mut self, place: &Place, location: &str) -> object_store::Result<Bytes> {
        let (Some(key), path) = (place.store_key(), object_path(place)) else {
            unreachable!("a local place is read above")
        };
        if !self.stores.contains_key(&key) {
            let store = build(place, &self.access, &self.options).map_err(|message| {
                object_store::Error::Generic {
                    store: "zerobus-sink",
                    source: format!("{location}: {message}").into(),
                }
            })?;
            self.stores.insert(key.clone(), store);
        }
        self.stores[&key].get(&path).await
    }

    fn error(&self, location: &str, message: &str) -> RecoveryError {
        RecoveryError::Read {
            table: self.table.full_name(),
            what: scrub(&self.access, location),
            message: scrub(&self.access, message),
        }
    }
}

fn object_path(place: &Place) -> Path {
    match place {
        Place::Local(p) => Path::from(p.as_str()),
        Place::S3 { path, .. } | Place::Azure { path, .. } | Place::Gcs { path, .. } => {
            Path::from(path.as_str())
        }
    }
}

/// Whether storage refused the credentials (expired, revoked, invalid): worth one re-vend.
fn refused(e: &object_store::Error) -> bool {
    match e {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => true,
        object_store::Error::Generic { .. } => {
            let m = e.to_string();
            [
                "ExpiredToken",
                "TokenRefreshRequired",
                "InvalidAccessKeyId",
                "InvalidToken",
                "AuthenticationFailed",
            ]
            .iter()
            .any(|code| m.contains(code))
        }
        _ => false,
    }
}

/// What a failed request says, with the sources' messages.
fn failure(e: &object_store::Error) -> String {
    let what = match e {
        object_store::Error::NotFound { .. } => "not found: the file is listed but absent",
        _ => "storage failed",
    };
    let mut message = format!("{what}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    message
}

/// The store that serves `place`, built with `access`.
fn build(place: &Place, access: &StorageAccess, options: &StorageOptions) -> Result<Store, String> {
    let config = &access.config;
    let get = |k: &str| config.get(k).cloned();
    match place {
        Place::Local(_) => Err("a local path has no store".into()),
        Place::S3 { bucket, .. } => {
            let mut b = AmazonS3Builder::new()
                .with_bucket_name(bucket)
                .with_region(
                    get("client.region")
                        .or_else(|| get("s3.region"))
                        .unwrap_or_else(|| "us-east-1".into()),
                )
                .with_retry(options.retry());
            if let Some(endpoint) = get("s3.endpoint") {
                b = b
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_endpoint(endpoint)
                    .with_virtual_hosted_style_request(
                        get("s3.path-style-access").as_deref() == Some("false"),
                    );
            }
            b = match &access.credentials {
                CloudCredentials::Aws {
                    access_key_id,
                    secret_access_key,
                    session_token,
                }
                | CloudCredentials::R2 {
                    access_key_id,
                    secret_access_key,
                    session_token,
                } => {
                    let b = b
                        .with_access_key_id(access_key_id)
                        .with_secret_access_key(secret_access_key);
                    if session_token.is_empty() {
                        b
                    } else {
                        b.with_token(session_token)
                    }
                }
                CloudCredentials::None => b.with_skip_signature(true),
                other => return Err(format!("s3:// with {} credentials", kind(other))),
            };
            b.build().map(Store::S3).map_err(|e| e.to_string())
        }
        Place::Azure {
            account, container, ..
        } => {
            let mut b = MicrosoftAzureBuilder::new()
                .with_account(account)
                .with_container_name(container)
                .with_retry(options.retry());
            if let Some(endpoint) = azure_endpoint(config, account) {
                b = b
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_endpoint(endpoint);
            }
            b = match &access.credentials {
                CloudCredentials::AzureSas(sas) => {
                    b.with_config(AzureConfigKey::SasKey, sas.trim_start_matches('?'))
                }
                CloudCredentials::AzureAad(token) => b.with_bearer_token_authorization(token),
                CloudCredentials::None => b.with_skip_signature(true),
                other => return Err(format!("abfss:// with {} credentials", kind(other))),
            };
            b.build().map(Store::Azure).map_err(|e| e.to_string())
        }
        Place::Gcs { bucket, .. } => {
            let mut b = GoogleCloudStorageBuilder::new()
                .with_bucket_name(bucket)
                .with_retry(options.retry());
            if let Some(url) = get("gcs.service.host") {
                b = b.with_base_url(&url);
            }
            b = match &access.credentials {
                CloudCredentials::Gcp(token) => {
                    b.with_credentials(Arc::new(StaticCredentialProvider::new(GcpCredential {
                        bearer: token.clone(),
                    })))
                }
                CloudCredentials::None => b.with_skip_signature(true),
                other => return Err(format!("gs:// with {} credentials", kind(other))),
            };
            b.build().map(Store::Gcs).map_err(|e| e.to_string())
        }
    }
}

/// The blob endpoint for `account` from `adls.connection-string.<account>[.<host>]`: a URL,
/// or a connection string's `BlobEndpoint=`.
fn azure_endpoint(config: &BTreeMap<String, String>, account: &str) -> Option<String> {
    let prefix = format!("adls.connection-string.{account}");
    let (_, value) = config
        .iter()
        .find(|(k, _)| *k == &prefix || k.starts_with(&format!("{prefix}.")))?;
    let endpoint = value
        .split(';')
        .find_map(|p| p.strip_prefix("BlobEndpoint="))
        .unwrap_or(value);
    Some(endpoint.trim_end_matches('/').to_owned())
}

/// A credential kind's name (no secret).
fn kind(c: &CloudCredentials) -> &'static str {
    match c {
        CloudCredentials::None => "no",
        CloudCredentials::Aws { .. } => "AWS",
        CloudCredentials::AzureSas(_) => "Azure SAS",
        CloudCredentials::AzureAad(_) => "Azure AAD",
        CloudCredentials::Gcp(_) => "GCP",
        CloudCredentials::R2 { .. } => "R2",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_name_their_store_and_path() {
        assert_eq!(
            Place::parse("s3://b/t/data/x%20y.parquet").unwrap(),
            Place::S3 {
                bucket: "b".into(),
                path: "t/data/x y.parquet".into()
            }
        );
        assert_eq!(
            Place::parse("abfss://c@acct.dfs.core.windows.net/t/m.avro").unwrap(),
            Place::Azure {
                account: "acct".into(),
                container: "c".into(),
                path: "t/m.avro".into()
            }
        );
        assert_eq!(
            Place::parse("file:///tmp/a").unwrap(),
            Place::Local("/tmp/a".into())
        );
        assert!(Place::parse("hdfs://x/y").is_err());
    }

    #[test]
    fn an_expiry_within_the_margin_is_stale() {
        let access = StorageAccess {
            credentials: CloudCredentials::None,
            expires_at_ms: Some(100_000),
            config: BTreeMap::new(),
        };
        let at = |ms| UNIX_EPOCH + Duration::from_millis(ms);
        assert!(!access.stale(at(39_999), Duration::from_secs(60)));
        assert!(access.stale(at(40_000), Duration::from_secs(60)));
    }

    #[test]
    fn the_endpoint_comes_from_a_connection_string() {
        let config = BTreeMap::from([(
            "adls.connection-string.dev.dfs.core.windows.net".to_owned(),
            "DefaultEndpointsProtocol=http;BlobEndpoint=http://127.0.0.1:1/dev/;".to_owned(),
        )]);
        assert_eq!(
            azure_endpoint(&config, "dev").as_deref(),
            Some("http://127.0.0.1:1/dev")
        );
    }
}
