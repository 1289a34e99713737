//! The adapter's errors. Each names the table, batch or stream concerned; none carries a secret.

use std::fmt;

use arrow_array::RecordBatch;
use zerobus_sink::{ConfigError, FailureReason, Lane, RejectReason, TableId, Token};

use crate::boundary::{self, ColumnRefusal, RowFault};

/// Why the sink could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// `start` was called outside a tokio runtime (the sink never builds its own).
    #[error("ZerobusSink::start must be called from within a tokio runtime")]
    NoRuntime,
    /// The endpoint is not usable.
    #[error("endpoint {endpoint:?} {reason}")]
    Endpoint {
        /// The endpoint given.
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The core configuration is invalid.
    #[error("invalid sink configuration: {0}")]
    Config(#[from] ConfigError),
    /// A table could not be registered.
    #[error("table {table}: {reason}")]
    Table {
        /// The table.
        table: String,
        /// Why.
        reason: String,
    },
    /// The IPC write options could not be built.
    #[error("IPC options: {0}")]
    Ipc(#[from] arrow_schema::ArrowError),
    /// The proxy setting cannot be used (named without its credentials).
    #[error(transparent)]
    Proxy(#[from] crate::conn::proxy::ProxyError),
}

/// A batch that was not admitted, handed back whole with its token: nothing was sent.
#[non_exhaustive]
pub enum SendError<L: Lane> {
    /// The core refused it (closed, too large, empty, table failed, routing).
    Rejected {
        /// Why.
        reason: RejectReason,
        /// The batch.
        batch: RecordBatch,
        /// Its token.
        token: Token<L>,
    },
    /// Its schema is not the table's (PROTOCOL.md A.2.6: the service requires an exact match).
    SchemaMismatch {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
        /// The batch.
        batch: RecordBatch,
        /// Its token.
        token: Token<L>,
    },
    /// The batch's schema cannot be written to the table: decided once for the schema when the
    /// table was described, every column concerned named. Later batches of this schema are
    /// refused the same way, at once.
    Unreconcilable {
        /// The table.
        table: String,
        /// Every column that cannot go, and why.
        columns: Vec<ColumnRefusal>,
        /// The batch.
        batch: RecordBatch,
        /// Its token.
        token: Token<L>,
    },
    /// Rows the table would refuse (a null in a NOT NULL column, a value that does not fit, a
    /// row over the message limit), and the table's policy is
    /// [`BadRows::FailBatch`](crate::BadRows): nothing of the batch was sent.
    BadRows {
        /// The table.
        table: String,
        /// Every bad row, with its column and why.
        faults: Vec<RowFault>,
        /// The batch.
        batch: RecordBatch,
        /// Its token.
        token: Token<L>,
    },
    /// The sink has no table with this id.
    UnknownTable {
        /// The id.
        table: TableId,
        /// The batch.
        batch: RecordBatch,
        /// Its token.
        token: Token<L>,
    },
    /// The sink's driver task is gone (the runtime is shutting down). The batch and token
    /// come back if they had not reached the driver yet.
    Stopped {
        /// The batch and its token, if they had not reached the driver.
        parts: Option<(RecordBatch, Token<L>)>,
    },
}

impl<L: Lane> SendError<L> {
    /// The batch and token, to retry elsewhere or to report.
    #[must_use]
    pub fn into_parts(self) -> Option<(RecordBatch, Token<L>)> {
        match self {
            SendError::Rejected { batch, token, .. }
            | SendError::SchemaMismatch { batch, token, .. }
            | SendError::Unreconcilable { batch, token, .. }
            | SendError::BadRows { batch, token, .. }
            | SendError::UnknownTable { batch, token, .. } => Some((batch, token)),
            SendError::Stopped { parts } => parts,
        }
    }

    fn parts(&self) -> Option<(&RecordBatch, &Token<L>)> {
        match self {
            SendError::Rejected { batch, token, .. }
            | SendError::SchemaMismatch { batch, token, .. }
            | SendError::Unreconcilable { batch, token, .. }
            | SendError::BadRows { batch, token, .. }
            | SendError::UnknownTable { batch, token, .. } => Some((batch, token)),
            SendError::Stopped { parts } => parts.as_ref().map(|(b, t)| (b, t)),
        }
    }
}

impl<L: Lane> fmt::Display for SendError<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Rejected { reason, batch, .. } => {
                write!(
                    f,
                    "batch of {} rows not admitted: {reason}",
                    batch.num_rows()
                )
            }
            SendError::SchemaMismatch { table, detail, .. } => {
                write!(
                    f,
                    "batch does not match the schema of table {table}: {detail}"
                )
            }
            SendError::Unreconcilable { table, columns, .. } => write!(
                f,
                "batch schema cannot be written to table {table}: {}",
                boundary::joined(columns, usize::MAX)
            ),
            SendError::BadRows { table, faults, .. } => write!(
                f,
                "{} rows of the batch would be refused by table {table}: {}",
                boundary::rows_named(faults),
                boundary::describe(faults)
            ),
            SendError::UnknownTable { table, .. } => write!(f, "{table} is not registered"),
            SendError::Stopped { .. } => f.write_str("the sink has stopped; batch not sent"),
        }
    }
}

impl<L: Lane> fmt::Debug for SendError<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = self.parts();
        f.debug_struct("SendError")
            .field("error", &self.to_string())
            .field("rows", &parts.map(|(b, _)| b.num_rows()))
            .field("token", &parts.map(|(_, t)| t))
            .finish()
    }
}

impl<L: Lane> std::error::Error for SendError<L> {}

/// Why a receipt did not resolve to a delivery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The batch was handed back (its token went to the confirmer's `failed`).
    #[error("batch handed back with {durable_rows} rows durable: {reason}")]
    Failed {
        /// Why.
        reason: FailureReason,
        /// Rows of it already durable (a prefix).
        durable_rows: u64,
    },
    /// The driver stopped before the batch was settled.
    #[error("the sink stopped before the batch was settled")]
    Stopped,
}

/// Why a flush did not end with everything durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// Batches were handed back since the last flush (each went to the confirmer's `failed`).
    #[error("{batches} batches were handed back undelivered since the last flush")]
    Failed {
        /// How many.
        batches: u64,
    },
    /// The driver is gone.
    #[error("the sink has stopped")]
    Stopped,
}
