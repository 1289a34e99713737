//! The health tree: sink -> table -> stream, as data ([`ZerobusSink::health`]) and as JSON
//! ([`SinkHealth::to_json`], served by the operator endpoint). Built on request from state the
//! driver keeps anyway; nothing of it runs per batch.
//!
//! [`ZerobusSink::health`]: crate::ZerobusSink::health

use std::time::Duration;

use serde::Serialize;

/// Where a stream is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Phase {
    /// No connection (never opened, or closed and not needed).
    Idle,
    /// A connection was asked for and is not READY yet.
    Opening,
    /// READY: batches flow.
    Live,
    /// Half-closed: draining its acks before it ends (rotation, schema switch, close).
    Draining,
    /// The connection failed or ended; the core reopens it after its backoff if work waits.
    Down,
}

/// One stream (a slot of a table's pool).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct StreamHealth {
    /// The slot's index in its table's pool (the metrics' `stream` label).
    pub stream: usize,
    /// Where it is.
    pub phase: Phase,
    /// Time since its last durable ack, if it had one.
    #[serde(serialize_with = "seconds")]
    pub last_ack_age: Option<Duration>,
    /// How full its ack window is (0 to 1: the fullest of batches, rows and bytes).
    pub window_fill: f64,
    /// Batches sent and not yet durable.
    pub pending_batches: u64,
    /// The cause of its last failure (a status code or the transport's innermost error), if
    /// any; never a credential.
    pub last_error: Option<String>,
}

/// One table.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TableHealth {
    /// The table's name.
    pub name: String,
    /// The table failed fatally (its batches are handed back; sends are refused).
    pub failed: bool,
    /// A send waits for room in this table's full windows now.
    pub backpressure: bool,
    /// Batches admitted but not yet given to a stream.
    pub queued_batches: u64,
    /// Its streams, in pool order.
    pub streams: Vec<StreamHealth>,
}

/// The whole sink.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SinkHealth {
    /// The sink's lane (`raw` or `derived`).
    pub lane: &'static str,
    /// Since the sink started.
    #[serde(serialize_with = "duration")]
    pub uptime: Duration,
    /// The sink is closing (admission stopped).
    pub closing: bool,
    /// Streams open now.
    pub open_streams: usize,
    /// Batches waiting to be submitted again after a transient hand-back.
    pub waiting_to_resubmit: usize,
    /// Per table, in order of registration.
    pub tables: Vec<TableHealth>,
}

impl SinkHealth {
    /// Whether every table can make progress: none failed, and no stream's last error stands
    /// without a live stream beside it.
    #[must_use]
    pub fn healthy(&self) -> bool {
        self.tables.iter().all(|t| {
            !t.failed
                && (t.streams.iter().any(|s| s.phase == Phase::Live)
                    || t.streams.iter().all(|s| s.last_error.is_none()))
        })
    }

    /// The tree as JSON (durations in seconds), with `healthy` at the top.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.insert("healthy".into(), self.healthy().into());
        }
        serde_json::to_string_pretty(&value).unwrap_or_default()
    }
}

fn seconds<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

fn duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(phase: Phase, error: Option<&str>) -> StreamHealth {
        StreamHealth {
            stream: 0,
            phase,
            last_ack_age: Some(Duration::from_millis(1500)),
            window_fill: 0.25,
            pending_batches: 3,
            last_error: error.map(str::to_owned),
        }
    }

    fn sink(streams: Vec<StreamHealth>, failed: bool) -> SinkHealth {
        SinkHealth {
            lane: "raw",
            uptime: Duration::from_secs(2),
            closing: false,
            open_streams: 1,
            waiting_to_resubmit: 0,
            tables: vec![TableHealth {
                name: "main.a.b".into(),
                failed,
                backpressure: false,
                queued_batches: 0,
                streams,
            }],
        }
    }

    #[test]
    fn a_failing_stream_is_unhealthy_only_without_a_live_one_beside_it() {
        assert!(sink(vec![stream(Phase::Live, None)], false).healthy());
        assert!(!sink(vec![stream(Phase::Down, Some("status Unavailable"))], false).healthy());
        assert!(
            sink(
                vec![
                    stream(Phase::Down, Some("status Unavailable")),
                    stream(Phase::Live, None)
                ],
                false
            )
            .healthy()
        );
        assert!(!sink(vec![stream(Phase::Live, None)], true).healthy());
    }

    #[test]
    fn the_json_names_every_level_with_durations_in_seconds() {
        let json = sink(vec![stream(Phase::Live, None)], false).to_json();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["healthy"], true);
        assert_eq!(v["uptime"], 2.0);
        assert_eq!(v["tables"][0]["name"], "main.a.b");
        assert_eq!(v["tables"][0]["streams"][0]["phase"], "live");
        assert_eq!(v["tables"][0]["streams"][0]["last_ack_age"], 1.5);
        assert_eq!(v["tables"][0]["streams"][0]["pending_batches"], 3);
    }
}
