//! Configuration of the core, validated once at construction.

use std::time::Duration;

use crate::error::ConfigError;

/// The bounds of one slot's ack window: what may be in flight (admitted, not yet durable).
///
/// Memory held by the sink is bounded by `slots x` these limits, never by input (invariant 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowLimits {
    /// Batches in flight per slot. The official client's default is 1,000.
    pub max_batches: u32,
    /// Bytes in flight per slot, as counted by [`Batch::bytes`](crate::Batch::bytes).
    pub max_bytes: u64,
    /// Rows in flight per slot. The service buffers up to ~50,000 unacked records per stream.
    pub max_rows: u64,
}

impl Default for WindowLimits {
    fn default() -> WindowLimits {
        WindowLimits {
            max_batches: 1_000,
            max_bytes: 256 * 1024 * 1024,
            max_rows: 50_000,
        }
    }
}

/// Configuration of a [`SinkCore`](crate::SinkCore). Every field has a conservative default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinkConfig {
    /// Stream slots in the pool; each holds at most one connection.
    pub slots: u16,
    /// Bounds of each slot's ack window.
    pub window: WindowLimits,
    /// Largest wire message; a larger batch is sent as several row slices, each with its own
    /// wire offset (PROTOCOL.md A.2: 2 MiB, as the official client).
    pub max_message_bytes: u64,
    /// How long the oldest sent batch may wait for its durable ack before the connection is
    /// declared dead (PROTOCOL.md A.3: 60 s).
    pub ack_timeout: Duration,
    /// How long an opened connection may take to become ready (PROTOCOL.md C.4: 30 s).
    pub open_timeout: Duration,
}

impl Default for SinkConfig {
    fn default() -> SinkConfig {
        SinkConfig {
            slots: 1,
            window: WindowLimits::default(),
            max_message_bytes: 2 * 1024 * 1024,
            ack_timeout: Duration::from_secs(60),
            open_timeout: Duration::from_secs(30),
        }
    }
}

impl SinkConfig {
    /// Checks every field; the error names the first field that is out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let checks: [(&'static str, bool, &'static str); 7] = [
            ("slots", self.slots > 0, "must be at least 1"),
            (
                "window.max_batches",
                self.window.max_batches > 0,
                "must be at least 1",
            ),
            (
                "window.max_bytes",
                self.window.max_bytes > 0,
                "must be at least 1",
            ),
            (
                "window.max_rows",
                self.window.max_rows > 0,
                "must be at least 1",
            ),
            (
                "max_message_bytes",
                self.max_message_bytes > 0,
                "must be at least 1",
            ),
            (
                "ack_timeout",
                !self.ack_timeout.is_zero(),
                "must be longer than zero",
            ),
            (
                "open_timeout",
                !self.open_timeout.is_zero(),
                "must be longer than zero",
            ),
        ];
        match checks.into_iter().find(|(_, ok, _)| !ok) {
            Some((field, _, reason)) => Err(ConfigError::OutOfRange { field, reason }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zeroes_are_named() {
        assert_eq!(SinkConfig::default().validate(), Ok(()));
        let mut c = SinkConfig::default();
        c.window.max_rows = 0;
        let err = c.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "configuration field `window.max_rows` must be at least 1"
        );
        let c = SinkConfig {
            ack_timeout: Duration::ZERO,
            ..SinkConfig::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("ack_timeout")
        );
    }
}
