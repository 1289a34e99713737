//! Errors: every variant names the slot, connection, offset or field concerned.

use std::fmt;
use std::time::Duration;

use crate::batch::Batch;
use crate::ids::{ConnGen, LogicalOffset, SlotId, TableId};
use crate::lane::{Lane, Token};

/// The configuration is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field is out of its allowed range.
    #[error("configuration field `{field}` {reason}")]
    OutOfRange {
        /// The field, dotted from [`SinkConfig`](crate::SinkConfig).
        field: &'static str,
        /// What is required of it.
        reason: &'static str,
    },
    /// A table's pool is larger than the global stream cap, so it could never open.
    #[error("table `{table}` needs {slots} streams but max_open_streams is {cap}")]
    PoolAboveCap {
        /// The table's name.
        table: String,
        /// Its pool size.
        slots: u16,
        /// The cap.
        cap: u16,
    },
    /// A table that routes by ordering key cannot be provisioned through a catalog (a keyed
    /// batch goes to its slot at once, before its schema could be reconciled).
    #[error("table `{table}` is keyed and reconciled: provision keyed tables before starting")]
    KeyedReconciled {
        /// The table's name.
        table: String,
    },
    /// More tables or slots than the sink can number.
    #[error("too many {what} for one sink")]
    TooMany {
        /// What overflowed.
        what: &'static str,
    },
}

/// Which window bound a rejected batch hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Batches in flight.
    Batches,
    /// Bytes in flight.
    Bytes,
    /// Rows in flight.
    Rows,
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bound::Batches => "batches",
            Bound::Bytes => "bytes",
            Bound::Rows => "rows",
        })
    }
}

/// Why [`SinkCore::submit`](crate::SinkCore::submit) did not admit a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RejectReason {
    /// Every slot's window is full: wait for confirmations (this is the backpressure), then
    /// submit again.
    #[error("every slot's ack window is full ({bound} in flight would exceed {limit})")]
    Full {
        /// The bound that is reached (of the least loaded slot).
        bound: Bound,
        /// Its configured limit.
        limit: u64,
    },
    /// The batch has no rows; the service rejects empty batches (PROTOCOL.md A.2).
    #[error("batch has no rows")]
    Empty,
    /// The sink is closing or closed and admits nothing more.
    #[error("sink is closing and admits no more batches")]
    Closed,
    /// The sink has no such table.
    #[error("{table} is not registered with this sink")]
    UnknownTable {
        /// The id given.
        table: TableId,
    },
    /// The table failed fatally; nothing more is admitted for it.
    #[error("{table} has failed: {reason}")]
    TableFailed {
        /// The table.
        table: TableId,
        /// Why it failed.
        reason: String,
    },
    /// The batch's schema was refused by the catalog (a narrowing, a type conflict, ...):
    /// batches of it are never admitted; the table keeps taking batches of its other schemas.
    #[error("{table}: {schema} was refused by the catalog: {reason}")]
    SchemaRefused {
        /// The table.
        table: TableId,
        /// The refused schema.
        schema: crate::ids::SchemaId,
        /// What the catalog said (every refusal, each naming its column).
        reason: String,
    },
    /// The adapter's write boundary found rows the table would refuse (a null in a NOT NULL
    /// column, a value that does not fit the declared type, a row over the message limit) and
    /// the table's policy fails the whole batch; `detail` names every row and column. The core
    /// itself never returns this: it is how such a batch reaches `failed` when nobody was
    /// left waiting for the `send`.
    #[error("{table}: rows the table would refuse: {detail}")]
    BadRows {
        /// The table.
        table: TableId,
        /// Every refused row, with its column and why.
        detail: String,
    },
    /// The table declares an ordering key and the batch came without one, or the reverse.
    #[error("{table} {expectation}")]
    Routing {
        /// The table.
        table: TableId,
        /// What the table expects.
        expectation: &'static str,
    },
}

/// A batch the sink did not admit, handed back whole with its token. Nothing was sent and no
/// state changed.
#[derive(thiserror::Error)]
#[error("batch not admitted: {reason}")]
pub struct Rejected<L: Lane, B: Batch> {
    /// The batch, untouched.
    pub batch: B,
    /// Its token, untouched.
    pub token: Token<L>,
    /// Why it was not admitted.
    pub reason: RejectReason,
}

impl<L: Lane, B: Batch> fmt::Debug for Rejected<L, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("rows", &self.batch.rows())
            .field("bytes", &self.batch.bytes())
            .field("token", &self.token)
            .field("reason", &self.reason)
            .finish()
    }
}

/// A violation of the Zerobus protocol by the remote side, found in an input. The core has
/// already acted on it when it reports it (see each variant).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The ack claims more durable rows than were sent on the connection. Terminal for the
    /// batches on the connection, as in the official client (PROTOCOL.md A.3): they are handed
    /// back and the slot reconnects.
    #[error("{slot} {conn}: ack of {acked} rows exceeds the {sent} rows sent on the connection")]
    ForwardAck {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
        /// The cumulative rows the ack claims.
        acked: u64,
        /// The rows actually sent on the connection.
        sent: u64,
    },
    /// The first `PutResult` of a connection was not READY (or could not be parsed): the
    /// connection fails and is retried, as the official client's
    /// `UnexpectedStreamResponseError` (PROTOCOL.md A.3).
    #[error("{slot} {conn}: unexpected first response (not READY): {detail}")]
    UnexpectedFirstResponse {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
        /// What arrived instead.
        detail: String,
    },
}

/// The `google.rpc.ErrorInfo` detail of a gRPC status, as the transport decoded it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorInfo {
    /// The reason, e.g. `SCHEMA_VALIDATION_FAILED`.
    pub reason: String,
    /// The domain, e.g. `zerobus.databricks.com`.
    pub domain: String,
    /// `metadata.causes`, if present (comma-separated).
    pub causes: Option<String>,
    /// `metadata.error_code`, if present.
    pub error_code: Option<String>,
}

/// gRPC status codes, as the service reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)] // the names are the gRPC standard's
pub enum Code {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    /// The code for a gRPC status number; unknown numbers map to [`Code::Unknown`].
    #[must_use]
    pub fn from_i32(n: i32) -> Code {
        const CODES: [Code; 17] = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        usize::try_from(n)
            .ok()
            .and_then(|i| CODES.get(i).copied())
            .unwrap_or(Code::Unknown)
    }

    /// Whether the official client retries this code (PROTOCOL.md C.1): every code except
    /// InvalidArgument, Unauthenticated, PermissionDenied, OutOfRange, Unimplemented, NotFound.
    #[must_use]
    pub fn is_retryable(self) -> bool {
        !matches!(
            self,
            Code::InvalidArgument
                | Code::Unauthenticated
                | Code::PermissionDenied
                | Code::OutOfRange
                | Code::Unimplemented
                | Code::NotFound
        )
    }
}

/// What the transport reports when a connection fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The call ended with a gRPC status.
    #[error("service status {code:?}: {message}")]
    Status {
        /// The status code.
        code: Code,
        /// The status message (never carries credentials).
        message: String,
        /// Its `google.rpc.ErrorInfo` detail, if it had one. The core reads
        /// `SCHEMA_VALIDATION_FAILED` from it (PROTOCOL.md C.2).
        info: Option<Box<ErrorInfo>>,
    },
    /// The response stream ended without a status while the connection was active.
    #[error("response stream ended while active")]
    Eof,
    /// The connection could not be made or broke below gRPC.
    #[error("transport: {message}")]
    Transport {
        /// What happened.
        message: String,
    },
    /// Credentials for the connection could not be had (the token endpoint failed or refused
    /// the client). `retryable`: the endpoint failed (HTTP 5xx, network); otherwise it refused
    /// the client, which retrying cannot fix (PROTOCOL.md D).
    #[error("credentials: {message}")]
    Credentials {
        /// Whether a later attempt may succeed.
        retryable: bool,
        /// What happened (never the secret).
        message: String,
    },
    /// The service refused the stream's schema (`SCHEMA_VALIDATION_FAILED`, PROTOCOL.md C.2).
    /// The core makes this from a [`StreamError::Status`] whose [`ErrorInfo`] says so.
    #[error("schema rejected ({causes:?}, error code {error_code:?}): {message}")]
    SchemaRejected {
        /// The causes the service listed.
        causes: Vec<SchemaCause>,
        /// The service's numeric error code, if sent.
        error_code: Option<String>,
        /// The status message.
        message: String,
    },
    /// The table no longer meets a precondition of its role, as the adapter found when it
    /// checked the catalog (at a stream's open or on its timer): for example a primary-raw
    /// table whose deletion vectors were turned on under the running pipeline. Fatal for the
    /// table: what is not durable is handed back, nothing more is admitted.
    #[error("{role} preconditions no longer met: {unmet}")]
    Precondition {
        /// The role (`primary-raw`).
        role: &'static str,
        /// Every unmet precondition, in words.
        unmet: String,
    },
}

impl StreamError {
    /// A status without error details.
    #[must_use]
    pub fn status(code: Code, message: impl Into<String>) -> StreamError {
        StreamError::Status {
            code,
            message: message.into(),
            info: None,
        }
    }

    /// Whether the official client would retry after this error (PROTOCOL.md C.1).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self.clone().normalized() {
            StreamError::Status { code, .. } => code.is_retryable(),
            StreamError::Eof | StreamError::Transport { .. } => true,
            StreamError::Credentials { retryable, .. } => retryable,
            StreamError::SchemaRejected { .. } | StreamError::Precondition { .. } => false,
        }
    }

    /// The error as the core reports it: a status whose `ErrorInfo` has reason
    /// `SCHEMA_VALIDATION_FAILED` and domain `zerobus.databricks.com` (or empty) becomes a
    /// [`StreamError::SchemaRejected`], as in the official client (PROTOCOL.md C.2); anything
    /// else is unchanged.
    #[must_use]
    pub fn normalized(self) -> StreamError {
        match self {
            StreamError::Status {
                message,
                info: Some(info),
                ..
            } if info.reason == "SCHEMA_VALIDATION_FAILED"
                && (info.domain == "zerobus.databricks.com" || info.domain.is_empty()) =>
            {
                StreamError::SchemaRejected {
                    causes: SchemaCause::parse_list(info.causes.as_deref().unwrap_or("")),
                    error_code: info.error_code.clone(),
                    message,
                }
            }
            other => other,
        }
    }
}

/// Why batches were handed back as failed instead of confirmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FailureReason {
    /// The remote side broke the protocol on this connection.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The connection failed.
    #[error("{slot} {conn}: {error}")]
    Stream {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
        /// What the transport reported.
        error: StreamError,
    },
    /// The oldest sent batch waited longer than the ack timeout.
    #[error("{slot} {conn}: no durable ack for {offset} within {waited:?}")]
    AckTimeout {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
        /// The oldest unacked batch.
        offset: LogicalOffset,
        /// How long it waited.
        waited: Duration,
    },
    /// The connection did not become ready within the open timeout.
    #[error("{slot} {conn}: not ready within {waited:?}")]
    OpenTimeout {
        /// The slot.
        slot: SlotId,
        /// The connection.
        conn: ConnGen,
        /// How long it waited.
        waited: Duration,
    },
    /// The close deadline passed before these batches were durable.
    #[error("{table}: close deadline passed with batches still unacked")]
    CloseDeadline {
        /// The table.
        table: TableId,
    },
    /// The slot failed more consecutive times than the retry budget allows; the last failure
    /// is named.
    #[error(
        "{slot}: {attempts} failed attempts in a row, past the retry budget of {max_attempts} retries (retry.max_attempts); last failure: {last}"
    )]
    RetryBudgetSpent {
        /// The slot.
        slot: SlotId,
        /// Failed attempts in a row.
        attempts: u32,
        /// The configured retry budget (`RetryPolicy::max_attempts`).
        max_attempts: u32,
        /// The last failure.
        last: Box<FailureReason>,
    },
    /// The batch was never admitted (for example a resubmission refused because the sink is
    /// closing, or a send whose future was dropped before its refusal could be returned): it
    /// comes back here so that its token is never lost.
    #[error("{table}: not admitted: {reason}")]
    NotAdmitted {
        /// The table.
        table: TableId,
        /// Why the core refused it.
        reason: RejectReason,
    },
    /// The table failed fatally (permission, not found, invalid argument, schema rejected, or
    /// credentials refused after one refresh).
    #[error("{table} failed: {error}")]
    TableFailed {
        /// The table.
        table: TableId,
        /// What the service reported.
        error: StreamError,
    },
    /// The catalog refused to evolve the table to the batch's schema: the batch is handed back
    /// (the table keeps serving its other schemas).
    #[error("{table}: {schema} was refused by the catalog: {reason}")]
    SchemaRefused {
        /// The table.
        table: TableId,
        /// The refused schema.
        schema: crate::ids::SchemaId,
        /// What the catalog said (every refusal, each naming its column).
        reason: String,
    },
}

/// Why the service rejected the stream's schema (`google.rpc.ErrorInfo` reason
/// `SCHEMA_VALIDATION_FAILED`, PROTOCOL.md C.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaCause {
    /// A batch column the table does not have.
    FieldNotInTable,
    /// A required table column the batch lacks.
    MissingRequiredColumn,
    /// Columns in another order than the table's.
    FieldOutOfOrder,
    /// A column whose type the table cannot take.
    TypeIncompatible,
    /// A different number of columns.
    FieldCountMismatch,
    /// A cause this library does not know, as sent.
    Unknown(String),
}

impl SchemaCause {
    /// Parses the comma-separated `metadata.causes` of the error detail.
    #[must_use]
    pub fn parse_list(causes: &str) -> Vec<SchemaCause> {
        causes
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| match c {
                "FIELD_NOT_IN_TABLE" => SchemaCause::FieldNotInTable,
                "MISSING_REQUIRED_COLUMN" => SchemaCause::MissingRequiredColumn,
                "FIELD_OUT_OF_ORDER" => SchemaCause::FieldOutOfOrder,
                "TYPE_INCOMPATIBLE" => SchemaCause::TypeIncompatible,
                "FIELD_COUNT_MISMATCH" => SchemaCause::FieldCountMismatch,
                other => SchemaCause::Unknown(other.to_owned()),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_codes_follow_the_official_client() {
        for n in -1..20 {
            let code = Code::from_i32(n);
            let permanent = [3, 5, 7, 11, 12, 16].contains(&n);
            assert_eq!(code.is_retryable(), !permanent, "code {n} = {code:?}");
        }
        assert!(StreamError::Eof.is_retryable());
        let denied = StreamError::status(Code::PermissionDenied, "no");
        assert!(!denied.is_retryable());
    }
}
