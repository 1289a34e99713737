//! The service's behaviours that fast tests switch off: its HTTP/2 flow-control windows, its
//! per-stream buffer of unacked records, and its publication lag. [`EmulatorConfig::realistic`]
//! turns them on together (`zerobus-local --realistic`); each is also a setting of its own.
//!
//! | behaviour | the service | source |
//! |---|---|---|
//! | HTTP/2 windows | 32 MiB per connection, 2 MiB per stream | official SDK issue #766 (what the server advertises) |
//! | unacked records | about 50,000 per stream; past it the stream waits on flow control | the service's scale write-ups (brief, "What matters now") |
//! | publication lag | about 5 s from ack to table at P50, up to 30 s at P95 | docs.databricks.com/aws/en/ingestion/zerobus-limits (PROTOCOL.md E) |
//!
//! The realistic lag is the P50: a fixed lag cannot be a distribution, and the P50 is what a
//! reader sees most often. Tests that depend on the P95 set [`EmulatorConfig::materialize_lag`]
//! themselves.

use std::time::Duration;

use super::EmulatorConfig;

/// HTTP/2 flow-control windows the server advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Windows {
    /// The connection's window, in bytes (shared by every stream on it).
    pub connection: u32,
    /// Each stream's window, in bytes.
    pub stream: u32,
}

impl Http2Windows {
    /// What the service advertises: 32 MiB per connection, 2 MiB per stream (official SDK
    /// issue #766).
    pub const SERVICE: Http2Windows = Http2Windows {
        connection: 32 << 20,
        stream: 2 << 20,
    };
}

/// Records the service buffers per stream before it stops reading it (about 50,000).
pub const SERVICE_UNACKED_ROWS: u64 = 50_000;

/// The service's time from ack to table at P50 (about 5 s).
pub const SERVICE_PUBLICATION_LAG: Duration = Duration::from_secs(5);

impl EmulatorConfig {
    /// The service's windows, per-stream buffer and publication lag together (see the module
    /// docs); everything else as it was.
    #[must_use]
    pub fn realistic(self) -> EmulatorConfig {
        self.http2_windows(Http2Windows::SERVICE)
            .max_unacked_rows(SERVICE_UNACKED_ROWS)
            .materialize_lag(SERVICE_PUBLICATION_LAG)
    }

    /// Advertises `windows` (`None`, the default: hyper's).
    #[must_use]
    pub fn http2_windows(mut self, windows: Http2Windows) -> EmulatorConfig {
        self.http2_windows = Some(windows);
        self
    }

    /// Stops reading a stream while `rows` of it are read and not yet acked, with or without
    /// [`stream_limits`](EmulatorConfig::stream_limits): the client then waits on HTTP/2 flow
    /// control, as against the service's buffer.
    #[must_use]
    pub fn max_unacked_rows(mut self, rows: u64) -> EmulatorConfig {
        self.max_unacked_rows = Some(rows);
        self
    }
}
