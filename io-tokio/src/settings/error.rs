//! Why a configuration file was refused: the key path and the reason, never a secret's value.

use std::path::PathBuf;

use zerobus_sink_catalog::{CatalogError, PrimaryRawError};

use crate::error::StartError;

/// A configuration file that cannot start a sink. Each variant names the key (dotted, with
/// `[i]` for the i-th `[[table]]`) or the file concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{path}: cannot read the configuration: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A key is missing, unknown, of the wrong type or out of range.
    #[error("{}: {reason}", if key.is_empty() { "(top level)" } else { key })]
    Invalid {
        /// The key path, e.g. `table[1].bad_rows` (empty for the file as a whole).
        key: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// An environment variable the file names holds nothing.
    #[error("{key}: environment variable `{variable}` is not set")]
    Env {
        /// The key that names it, e.g. `credentials.client_secret_env`.
        key: String,
        /// The variable.
        variable: String,
    },
    /// The file is for a sink of another lane than the one being started.
    #[error("sink.lane: the file describes a {file} sink, but a {sink} sink is being started")]
    Lane {
        /// The file's lane.
        file: &'static str,
        /// The sink's.
        sink: &'static str,
    },
    /// The catalog refused or could not be built.
    #[error("{key}: {source}")]
    Catalog {
        /// The key of the catalog setting concerned.
        key: String,
        /// The catalog's error.
        source: Box<CatalogError>,
    },
    /// A `primary_raw` table does not meet the role's preconditions (each named).
    #[error("table `{table}`: {source}")]
    PrimaryRaw {
        /// The table.
        table: String,
        /// Every unmet precondition.
        source: Box<PrimaryRawError>,
    },
    /// The sink refused to start with what the file describes.
    #[error(transparent)]
    Start(#[from] StartError),
}

impl ConfigFileError {
    pub(crate) fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigFileError {
        ConfigFileError::Invalid {
            key: key.into(),
            reason: reason.into(),
        }
    }
}
