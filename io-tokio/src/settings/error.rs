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
    /// The file names an environment variable that holds nothing, by a name that does not
    /// look like one (`UPPER_SNAKE_CASE`): perhaps the secret itself, written where its
    /// variable's name belongs. The name is not kept, so no message or `Debug` repeats it.
    #[error(
        "{key}: the environment variable it names is not set; the name is not repeated, as it does \
         not look like one (UPPER_SNAKE_CASE) and may be the secret itself: write the secret in \
         a variable and its name here"
    )]
    EnvName {
        /// The key that names it, e.g. `credentials.token_env`.
        key: String,
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
    /// A refusal of `key`. Its reason may quote what the file wrote (a serde message's
    /// `invalid type: string "…"`, a table name): every quoted part is [`scrubbed`] first.
    pub(crate) fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigFileError {
        ConfigFileError::Invalid {
            key: key.into(),
            reason: scrubbed(&reason.into()),
        }
    }
}

impl ConfigFileError {
    /// The same refusal with the line of `text` where its key is written, when it is and the
    /// reason does not give one already (serde's do).
    pub(crate) fn at_line_in(self, text: &str) -> ConfigFileError {
        match self {
            ConfigFileError::Invalid { key, reason } if !reason.contains("(line ") => {
                let reason = match super::lines::line_of(text, &key) {
                    Some(line) => format!("{reason} (line {line})"),
                    None => reason,
                };
                ConfigFileError::Invalid { key, reason }
            }
            other => other,
        }
    }
}

/// A value the file wrote, as a message may repeat it: short ones, paths and URLs (with a
/// separator in them), and names (`snake_case` keys, `UPPER_SNAKE` variables), as written; any
/// other long one as `…`, since it may be a token or a client secret put in the wrong field.
fn repeatable(value: &str) -> String {
    let digits = value.bytes().filter(u8::is_ascii_digit).count();
    let snake = |upper: bool| {
        value.contains('_')
            && digits * 4 <= value.len()
            && value.bytes().all(|b| {
                b == b'_'
                    || b.is_ascii_digit()
                    || b.is_ascii_alphabetic() && b.is_ascii_uppercase() == upper
            })
    };
    match value.len() < 16 || value.contains(['/', '\\', '.', ' ']) || snake(false) || snake(true) {
        true => value.to_owned(),
        false => "…".to_owned(),
    }
}

/// `message` with every `"…"` or `` `…` `` quoted part that is not [`repeatable`] replaced.
fn scrubbed(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find(['"', '`']) {
        let quote = &rest[open..=open];
        let Some(len) = rest[open + 1..].find(quote) else {
            break;
        };
        let inner = &rest[open + 1..open + 1 + len];
        out.push_str(&rest[..=open]);
        out.push_str(&repeatable(inner));
        out.push_str(quote);
        rest = &rest[open + len + 2..];
    }
    out.push_str(rest);
    out
}
