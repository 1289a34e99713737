//! The local backend on S3 (or an S3-compatible store such as MinIO, or moto): the storage
//! options, and delta-rs taught to open `s3://` tables through the `object_store` this
//! workspace already builds (delta-rs's own S3 support would bring the AWS SDK). Commits go
//! through delta-rs's default log store: a put-if-absent (`If-None-Match: *`) of the version's
//! JSON, so two writers racing for a version cannot both win.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Once};

use deltalake::logstore::{
    LogStore, LogStoreFactory, ObjectStoreFactory, ObjectStoreRef, StorageConfig, default_logstore,
    logstore_factories, object_store_factories,
};
use deltalake::{DeltaResult, DeltaTableError};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use url::Url;

use super::LocalDelta;
use crate::catalog::CloudCredentials;
use crate::error::CatalogError;
use crate::table_ref::TableRef;

/// Where and how to reach S3 for a local catalog on object storage ([`LocalDelta::on_s3`]).
/// Unset fields fall back to the object store's defaults (region `us-east-1`; credentials
/// from the instance's role). `Debug` never shows the secret or the session token.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Storage {
    /// The endpoint, for an S3-compatible store or an emulator (`http://127.0.0.1:5000`);
    /// `http://` is allowed only when given here.
    pub endpoint: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// The access key id.
    pub access_key_id: Option<String>,
    /// The secret access key (secret).
    pub secret_access_key: Option<String>,
    /// A session token for temporary credentials (secret).
    pub session_token: Option<String>,
}

impl fmt::Debug for S3Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Storage")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &redacted(&self.secret_access_key))
            .field("session_token", &redacted(&self.session_token))
            .finish()
    }
}

impl S3Storage {
    /// From the AWS environment variables: `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`),
    /// `AWS_REGION` (or `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`; an empty variable counts as unset.
    #[must_use]
    pub fn from_env() -> S3Storage {
        let var = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
        };
        S3Storage {
            endpoint: var(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]),
            region: var(&["AWS_REGION", "AWS_DEFAULT_REGION"]),
            access_key_id: var(&["AWS_ACCESS_KEY_ID"]),
            secret_access_key: var(&["AWS_SECRET_ACCESS_KEY"]),
            session_token: var(&["AWS_SESSION_TOKEN"]),
        }
    }

    /// The options delta-rs and `object_store` take for tables under `root`.
    pub(crate) fn options(&self, root: &Url) -> HashMap<String, String> {
        let _ = root;
        let mut o = HashMap::from([
            (
                "aws_region".to_owned(),
                self.region.clone().unwrap_or_else(|| "us-east-1".into()),
            ),
            // Put-if-absent with `If-None-Match: *`: a Delta commit cannot overwrite another.
            ("aws_conditional_put".to_owned(), "etag".to_owned()),
        ]);
        if let Some(e) = &self.endpoint {
            o.insert("aws_endpoint".into(), e.trim_end_matches('/').to_owned());
            o.insert("aws_virtual_hosted_style_request".into(), "false".into());
            if e.starts_with("http://") {
                o.insert("aws_allow_http".into(), "true".into());
            }
        }
        for (key, value) in [
            ("aws_access_key_id", &self.access_key_id),
            ("aws_secret_access_key", &self.secret_access_key),
            ("aws_session_token", &self.session_token),
        ] {
            if let Some(v) = value {
                o.insert(key.into(), v.clone());
            }
        }
        o
    }

    /// What [`vend_credentials`](crate::TableCatalog::vend_credentials) hands a reader.
    pub(crate) fn credentials(&self) -> CloudCredentials {
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => CloudCredentials::Aws {
                access_key_id: id.clone(),
                secret_access_key: secret.clone(),
                session_token: self.session_token.clone().unwrap_or_default(),
            },
            _ => CloudCredentials::None,
        }
    }
}

/// delta-rs's factories for `s3://`: the store from `object_store`, the default log store.
#[derive(Debug)]
struct S3Factory;

impl ObjectStoreFactory for S3Factory {
    fn parse_url_opts(
        &self,
        url: &Url,
        config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, Path)> {
        let (store, path) =
            object_store::parse_url_opts(url, config.raw.iter()).map_err(DeltaTableError::from)?;
        Ok((Arc::from(store), path))
    }
}

impl LogStoreFactory for S3Factory {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

/// Teaches delta-rs `s3://` (once per process).
pub(super) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Ok(scheme) = Url::parse("s3://") {
            object_store_factories().insert(scheme.clone(), Arc::new(S3Factory));
            logstore_factories().insert(scheme, Arc::new(S3Factory));
        }
    });
}

/// The store of `table`'s folder and the entries of its `_delta_log`, in name order.
pub(super) async fn log_entries(
    catalog: &LocalDelta,
    table: &TableRef,
) -> Result<(Arc<dyn ObjectStore>, Vec<Path>), CatalogError> {
    let url = catalog.url(table)?;
    let err = |e: object_store::Error| CatalogError::Delta {
        table: table.full_name(),
        operation: "list the Delta log",
        message: format!("{url}_delta_log/: {e}"),
    };
    let (store, prefix) =
        object_store::parse_url_opts(&url, catalog.storage_options()).map_err(err)?;
    let listed = store
        .list_with_delimiter(Some(&prefix.clone().join("_delta_log")))
        .await
        .map_err(err)?;
    let mut entries: Vec<Path> = listed.objects.into_iter().map(|o| o.location).collect();
    entries.sort();
    Ok((Arc::from(store), entries))
}

/// A small object's text (a JSON commit).
pub(super) async fn read_text(store: &Arc<dyn ObjectStore>, path: &Path) -> Option<String> {
    let bytes = store.get(path).await.ok()?.bytes().await.ok()?;
    String::from_utf8(bytes.to_vec()).ok()
}
