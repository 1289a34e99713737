//! Errors of the catalog: each names the table, column or statement concerned, and says whether
//! retrying can help. Secrets never appear in them.

use crate::refusal::Refusal;
use crate::requirements::{Requirement, joined};

/// What went wrong in the catalog layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// A table name is not `catalog.schema.table` of safe identifiers.
    #[error("invalid table name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A column name is not a safe identifier, or is reserved, or repeats.
    #[error("column {column:?} of {table}: {reason}")]
    InvalidColumn {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An Arrow type has no Delta type.
    #[error("column {column}: Arrow type {arrow_type} cannot be written to Delta: {reason}")]
    UnmappableType {
        /// The column (a dotted path for nested fields).
        column: String,
        /// The Arrow type.
        arrow_type: String,
        /// What to do instead.
        reason: String,
    },
    /// The live table has a column whose type this crate cannot read.
    #[error("{table}: live column {column} has a type this sink cannot read: {reason}")]
    LiveSchema {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// Why.
        reason: String,
    },
    /// The plan refuses a change; nothing was executed.
    #[error("{table}: reconcile refused: {}", refusals.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused {
        /// The table.
        table: String,
        /// Every refusal in the plan.
        refusals: Vec<Refusal>,
    },
    /// Zerobus cannot write the table: it breaks the service's table requirements
    /// ([`requirements`](crate::requirements)). Found when the table is described for writing,
    /// before anything is planned, executed or opened; permanent until the table is fixed.
    #[error("{table}: {}", joined(broken))]
    Unwritable {
        /// The table.
        table: String,
        /// Every requirement it breaks, with what was found.
        broken: Vec<Requirement>,
    },
    /// An HTTP call got an error status.
    #[error("{operation} {target}: HTTP {status}{}: {message}", code.as_ref().map(|c| format!(" {c}")).unwrap_or_default())]
    Http {
        /// What was being done (e.g. `describe`).
        operation: &'static str,
        /// The table or endpoint concerned.
        target: String,
        /// The HTTP status.
        status: u16,
        /// The service's error code (`error_code` or `errorCode`), if any.
        code: Option<String>,
        /// The service's message.
        message: String,
        /// Whether retrying can help (429 and 5xx).
        retryable: bool,
    },
    /// The request did not complete (connection, timeout, TLS).
    #[error("{operation} {target}: {message}")]
    Transport {
        /// What was being done.
        operation: &'static str,
        /// The table or endpoint concerned.
        target: String,
        /// What happened.
        message: String,
    },
    /// A SQL statement ended FAILED, CANCELED or CLOSED on the warehouse.
    #[error("{table}: statement `{statement}` ended {state}: {message}")]
    StatementFailed {
        /// The table.
        table: String,
        /// The statement's first words (never its literals).
        statement: String,
        /// The terminal state.
        state: String,
        /// The service's message.
        message: String,
    },
    /// A response could not be understood.
    #[error("{operation} {target}: unexpected response: {message}")]
    Decode {
        /// What was being done.
        operation: &'static str,
        /// The table or endpoint concerned.
        target: String,
        /// What was wrong.
        message: String,
    },
    /// The OAuth token endpoint refused the credentials (HTTP 4xx): permanent.
    #[error("OAuth token for {target} refused: HTTP {status}: {message}")]
    TokenRefused {
        /// The table the token was scoped to, or the endpoint.
        target: String,
        /// The HTTP status.
        status: u16,
        /// The endpoint's message (never the secret).
        message: String,
    },
    /// The catalog vended credentials of a provider this crate does not model.
    #[error("{table}: temporary credentials of provider {provider:?} are not supported")]
    UnsupportedCredentials {
        /// The table.
        table: String,
        /// The credential block's name in the response.
        provider: String,
    },
    /// The table does not exist (where an operation needs it to).
    #[error("{table} does not exist")]
    TableAbsent {
        /// The table.
        table: String,
    },
    /// Another writer changed the table first (a create or an ALTER that lost a race, or a
    /// retried request that had already run); the table should be described and planned again.
    #[error("{table}: changed concurrently: {message}")]
    Conflict {
        /// The table.
        table: String,
        /// What was lost.
        message: String,
    },
    /// The local Delta backend failed.
    #[error("{table}: Delta table operation {operation} failed: {message}")]
    Delta {
        /// The table.
        table: String,
        /// The operation.
        operation: &'static str,
        /// What delta-rs said.
        message: String,
    },
}

impl CatalogError {
    /// Whether retrying the same call can succeed.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            CatalogError::Http { retryable, .. } => *retryable,
            CatalogError::Transport { .. } => true,
            _ => false,
        }
    }

    /// Whether the error means another writer changed the table first, so that describing and
    /// planning again is the way on.
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        match self {
            CatalogError::Conflict { .. } => true,
            CatalogError::Http { status: 409, .. } => true,
            CatalogError::StatementFailed { message, .. } => {
                let m = message.to_ascii_uppercase();
                m.contains("ALREADY_EXISTS") || m.contains("ALREADY EXISTS")
            }
            _ => false,
        }
    }
}

/// An error and every error under it, `: `-separated, so that the root cause (connection
/// refused, a certificate, a name that does not resolve) is in the message rather than only
/// reqwest's "error sending request".
#[cfg(feature = "unity")]
pub(crate) fn chain<E: std::error::Error>(error: &E) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}
