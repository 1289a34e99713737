//! Outages, visible and bounded: a stream that starts failing is logged at WARN once, with its
//! root cause (connection refused, TLS, DNS, a status), not once per retry; a change of cause
//! is logged again; the recovery is logged at INFO with how many attempts it took. Retries in
//! between are DEBUG.

use std::collections::HashMap;

use zerobus_sink::{ConnId, Input, Lane, SlotId, StreamError};

/// Per slot: the cause it is failing with, and how many attempts failed since it last worked.
#[derive(Debug, Default)]
pub(crate) struct Outages {
    failing: HashMap<SlotId, (String, u32)>,
}

/// What an error comes down to, for deciding whether the cause changed (a status's code, or
/// the transport's innermost error).
pub(crate) fn cause(error: &StreamError) -> String {
    match error {
        StreamError::Status { code, .. } => format!("status {code:?}"),
        StreamError::SchemaRejected { .. } => "schema rejected".into(),
        StreamError::Credentials { .. } => "credentials".into(),
        StreamError::Eof => "the call ended".into(),
        StreamError::Transport { message } => message
            .rsplit(": ")
            .next()
            .unwrap_or(message.as_str())
            .to_owned(),
        other => other.to_string(),
    }
}

impl Outages {
    /// An input is about to reach the core.
    pub(crate) fn before<L: Lane>(&mut self, table: &str, input: &Input<L>) {
        let Input::Failed { conn, error } = input else {
            return;
        };
        let slot = conn.slot();
        let now = cause(error);
        match self.failing.get_mut(&slot) {
            Some((was, attempts)) if *was == now => {
                *attempts += 1;
                tracing::debug!(%table, %slot, attempt = *attempts, %error, "stream still failing");
            }
            Some((was, attempts)) => {
                *attempts += 1;
                tracing::warn!(%table, %slot, %error, previously = %was, "stream failing for another cause");
                *was = now;
            }
            None => {
                tracing::warn!(%table, %slot, %error, "stream failing; retrying with backoff");
                self.failing.insert(slot, (now, 1));
            }
        }
    }

    /// The connection became READY: a failing slot has recovered.
    pub(crate) fn ready<L: Lane>(&mut self, table: &str, conn: ConnId<L>) {
        let slot = conn.slot();
        if let Some((cause, attempts)) = self.failing.remove(&slot) {
            tracing::info!(%table, %slot, failed_attempts = attempts, last_cause = %cause, "stream recovered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_is_the_innermost_transport_error_or_the_status_code() {
        let refused = StreamError::Transport {
            message:
                "connect to http://127.0.0.1:9: transport error: Connection refused (os error 111)"
                    .into(),
        };
        assert_eq!(cause(&refused), "Connection refused (os error 111)");
        let status = StreamError::status(zerobus_sink::Code::Unavailable, "pod draining");
        assert_eq!(cause(&status), "status Unavailable");
    }
}
