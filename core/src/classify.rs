//! The error taxonomy: what the service or transport reported, and what the sink does about it
//! (seed section 6, PROTOCOL.md C).

use crate::error::{Code, StreamError};

/// How the sink answers an error on a slot's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The connection could not be made (nothing was in flight on it): retry the same slot
    /// after backoff.
    Transient,
    /// The service refused another stream (`RESOURCE_EXHAUSTED`): back off this slot while
    /// traffic uses the others; never reopen at once.
    ConcurrencyReject,
    /// A live stream broke: drain what acks still come within a bounded budget, close, back off,
    /// open a new generation and replay the unacked suffix.
    Poison,
    /// The credentials were refused: refresh them and retry once; a second refusal is fatal.
    AuthRejected,
    /// Retrying cannot help (permission, not found, invalid argument, schema validation): the
    /// table fails loudly and its batches are handed back.
    Fatal,
}

impl StreamError {
    /// The class of this error, given whether the stream was live (READY) when it happened:
    /// a retryable failure of a live stream is [`Poison`](ErrorClass::Poison), of a stream not
    /// yet ready [`Transient`](ErrorClass::Transient). The gRPC codes map as the official
    /// client's `is_retryable` (PROTOCOL.md C.1); a status whose `ErrorInfo` says
    /// `SCHEMA_VALIDATION_FAILED` is fatal whatever its code (C.2); credentials that could not
    /// be had are transient if the token endpoint failed and fatal if it refused the client (D).
    #[must_use]
    pub fn class(&self, live: bool) -> ErrorClass {
        let retryable = if live {
            ErrorClass::Poison
        } else {
            ErrorClass::Transient
        };
        match self.clone().normalized() {
            StreamError::SchemaRejected { .. } | StreamError::Precondition { .. } => {
                ErrorClass::Fatal
            }
            StreamError::Credentials {
                retryable: true, ..
            } => ErrorClass::Transient,
            StreamError::Credentials {
                retryable: false, ..
            } => ErrorClass::Fatal,
            StreamError::Status {
                code: Code::ResourceExhausted,
                ..
            } => ErrorClass::ConcurrencyReject,
            StreamError::Status {
                code: Code::Unauthenticated | Code::PermissionDenied,
                ..
            } => ErrorClass::AuthRejected,
            StreamError::Status { code, .. } if !code.is_retryable() => ErrorClass::Fatal,
            StreamError::Status { .. } | StreamError::Eof | StreamError::Transport { .. } => {
                retryable
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SchemaCause;

    fn status(code: Code) -> StreamError {
        StreamError::status(code, "")
    }

    #[test]
    fn classes_follow_protocol_c1() {
        assert_eq!(
            status(Code::ResourceExhausted).class(false),
            ErrorClass::ConcurrencyReject
        );
        assert_eq!(
            status(Code::ResourceExhausted).class(true),
            ErrorClass::ConcurrencyReject
        );
        assert_eq!(
            status(Code::Unauthenticated).class(true),
            ErrorClass::AuthRejected
        );
        assert_eq!(
            status(Code::PermissionDenied).class(false),
            ErrorClass::AuthRejected
        );
        for fatal in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::OutOfRange,
            Code::Unimplemented,
        ] {
            assert_eq!(status(fatal).class(true), ErrorClass::Fatal, "{fatal:?}");
        }
        for retry in [
            Code::Unavailable,
            Code::Internal,
            Code::Unknown,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::Cancelled,
            Code::Ok,
        ] {
            assert_eq!(status(retry).class(true), ErrorClass::Poison, "{retry:?}");
            assert_eq!(
                status(retry).class(false),
                ErrorClass::Transient,
                "{retry:?}"
            );
        }
        assert_eq!(StreamError::Eof.class(true), ErrorClass::Poison);
        let schema = StreamError::SchemaRejected {
            causes: vec![SchemaCause::TypeIncompatible],
            error_code: Some("8001".into()),
            message: "bad".into(),
        };
        assert_eq!(schema.class(false), ErrorClass::Fatal);
        // The ErrorInfo rule, whatever the code; another domain is not a schema rejection.
        let info = |domain: &str| StreamError::Status {
            code: Code::FailedPrecondition,
            message: "schema".into(),
            info: Some(Box::new(crate::ErrorInfo {
                reason: "SCHEMA_VALIDATION_FAILED".into(),
                domain: domain.into(),
                causes: Some("TYPE_INCOMPATIBLE".into()),
                error_code: Some("8001".into()),
            })),
        };
        assert_eq!(
            info("zerobus.databricks.com").class(true),
            ErrorClass::Fatal
        );
        assert_eq!(info("").class(true), ErrorClass::Fatal);
        assert_eq!(info("example.com").class(true), ErrorClass::Poison);
        assert!(matches!(
            info("").normalized(),
            StreamError::SchemaRejected { causes, .. } if causes == [SchemaCause::TypeIncompatible]
        ));
        let token = |retryable| StreamError::Credentials {
            retryable,
            message: "token endpoint".into(),
        };
        assert_eq!(token(true).class(false), ErrorClass::Transient);
        assert_eq!(token(false).class(false), ErrorClass::Fatal);
    }

    #[test]
    fn schema_causes_parse_known_and_keep_unknown() {
        assert_eq!(
            SchemaCause::parse_list("FIELD_NOT_IN_TABLE, TYPE_INCOMPATIBLE,,NEW_THING"),
            vec![
                SchemaCause::FieldNotInTable,
                SchemaCause::TypeIncompatible,
                SchemaCause::Unknown("NEW_THING".into())
            ]
        );
    }
}
