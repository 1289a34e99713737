//! Metrics through the [`metrics`] facade (the caller installs the exporter it wants; the core
//! keeps its own counters as plain data), and what the health tree needs of each stream.
//!
//! Every metric is labelled with the sink's `lane` and the `table`; per-stream ones also with
//! the `stream` (the slot's index in its table's pool), so that two sinks of different lanes in
//! one process never share a series. Handles are registered once per stream and table (no label
//! is built per batch); install the recorder before starting the sink, as the `metrics` crate
//! asks. Names and meanings: `docs/runbook.md`.

pub(crate) mod outage;

use std::collections::HashMap;
use std::time::Instant;

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
use zerobus_sink::{
    Batch, Confirmed, FailureReason, Input, Lane, Metrics, SinkCore, SlotId, StreamError, TableId,
};

use crate::health::Phase;

/// Burst sizes: batches confirmed by one ack (the plan's `zerobus_ack_coalesce_ratio`).
pub const ACK_COALESCE: &str = "zerobus_ack_coalesce_ratio";
/// Seconds from submit to durable confirmation, per batch.
pub const DELIVERY_LATENCY: &str = "zerobus_delivery_latency_seconds";
/// Batches sent on a stream and not yet durable.
pub const PENDING_OFFSETS: &str = "zerobus_pending_offsets";
/// How full a stream's ack window is (0 to 1, the fullest of batches, rows and bytes).
pub const WINDOW_FILL: &str = "zerobus_window_fill_ratio";
/// Connections that could not be made (or broke before READY) and were retried.
pub const RETRIES: &str = "zerobus_ack_lane_retry_total";
/// Live streams that broke (an error status or the call ending) and were rebuilt with a replay:
/// our stream died.
pub const POISONED: &str = "zerobus_ack_lane_poisoned_total";
/// Live streams whose oldest batch waited past the ack timeout: the service is slow.
pub const ACK_TIMEOUTS: &str = "zerobus_ack_timeouts_total";
/// Connections opened for a stream beyond its first.
pub const REBUILDS: &str = "zerobus_stream_rebuilds_total";
/// Stream opens refused for concurrency (`RESOURCE_EXHAUSTED`).
pub const CONCURRENCY_REJECTS: &str = "zerobus_concurrency_rejects_total";
/// Connections refused for their credentials.
pub const AUTH_REJECTIONS: &str = "zerobus_auth_rejections_total";
/// Streams open now (per sink).
pub const OPEN_STREAMS: &str = "zerobus_open_streams";
/// Rows confirmed durable.
pub const ROWS_DURABLE: &str = "zerobus_rows_durable_total";
/// Bytes confirmed durable (as the window counts them: Arrow buffer sizes).
pub const BYTES_DURABLE: &str = "zerobus_bytes_durable_total";
/// Batches confirmed durable.
pub const BATCHES_DURABLE: &str = "zerobus_batches_durable_total";
/// Batches handed to the confirmer's `failed`, by `reason`.
pub const HANDED_BACK: &str = "zerobus_batches_handed_back_total";
/// Rows the write boundary refused before send, by `policy` (`fail_batch`, `isolate`).
pub const BAD_ROWS: &str = "zerobus_bad_rows_total";
/// Sends that had to wait for room in a full window.
pub const BACKPRESSURE: &str = "zerobus_backpressure_waits_total";
/// The write boundary's decisions per column, by `kind` (the plan's
/// `zerobus_type_reconcile_total{kind}`).
pub const TYPE_RECONCILE: &str = "zerobus_type_reconcile_total";
/// Columns refused for a loud mismatch (nested values for STRING, zoned for TIMESTAMP_NTZ).
pub const LOUD_MISMATCHES: &str = "zerobus_type_loud_mismatch_total";

/// One stream's handles and what the health tree shows of it.
#[derive(Debug)]
pub(crate) struct StreamState {
    coalesce: Histogram,
    latency: Histogram,
    pending: Gauge,
    fill: Gauge,
    retries: Counter,
    poisoned: Counter,
    ack_timeouts: Counter,
    rebuilds: Counter,
    concurrency: Counter,
    auth: Counter,
    rows: Counter,
    bytes: Counter,
    batches: Counter,
    opened: u64,
    /// The table's name and the stream's index, for logs.
    table: String,
    index: usize,
    pub(crate) phase: Phase,
    pub(crate) last_ack: Option<Instant>,
    pub(crate) last_error: Option<String>,
}

impl StreamState {
    /// The stream's handles, registered with the recorder under its labels.
    fn register<L: Lane, B: Batch>(
        lane: &'static str,
        tables: &[TableState],
        core: &SinkCore<L, B>,
        slot: SlotId,
    ) -> StreamState {
        let owner = core.slot_table(slot);
        let table = owner
            .and_then(|t| tables.get(t.index()))
            .map_or_else(String::new, |t| t.name.clone());
        let index = owner
            .and_then(|t| core.table_slots(t).position(|s| s == slot))
            .unwrap_or(slot.index());
        let l = [
            ("lane", lane.to_owned()),
            ("table", table.clone()),
            ("stream", index.to_string()),
        ];
        StreamState {
            coalesce: histogram!(ACK_COALESCE, &l),
            latency: histogram!(DELIVERY_LATENCY, &l),
            pending: gauge!(PENDING_OFFSETS, &l),
            fill: gauge!(WINDOW_FILL, &l),
            retries: counter!(RETRIES, &l),
            poisoned: counter!(POISONED, &l),
            ack_timeouts: counter!(ACK_TIMEOUTS, &l),
            rebuilds: counter!(REBUILDS, &l),
            concurrency: counter!(CONCURRENCY_REJECTS, &l),
            auth: counter!(AUTH_REJECTIONS, &l),
            rows: counter!(ROWS_DURABLE, &l),
            bytes: counter!(BYTES_DURABLE, &l),
            batches: counter!(BATCHES_DURABLE, &l),
            opened: 0,
            table,
            index,
            phase: Phase::Idle,
            last_ack: None,
            last_error: None,
        }
    }
}

/// One table's handles (created on first use for labelled families).
#[derive(Debug)]
struct TableState {
    name: String,
    handed_back: HashMap<&'static str, Counter>,
    reconcile: HashMap<&'static str, Counter>,
    bad_rows: HashMap<&'static str, Counter>,
    loud: Counter,
    backpressure: Counter,
}

/// The core's counters that the adapter attributes to the stream an event concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    retries: u64,
    poisoned: u64,
    ack_timeouts: u64,
    concurrency: u64,
    auth: u64,
}

impl Counts {
    fn of(m: &Metrics) -> Counts {
        Counts {
            retries: m.transient_failures,
            poisoned: m.poisoned,
            ack_timeouts: m.ack_timeouts,
            concurrency: m.concurrency_rejects,
            auth: m.auth_rejections,
        }
    }
}

/// The driver's metrics and per-stream health.
#[derive(Debug)]
pub(crate) struct Telemetry {
    lane: &'static str,
    tables: Vec<TableState>,
    streams: HashMap<SlotId, StreamState>,
    open: Gauge,
    last: Counts,
    /// The table a send waits for room in, if any.
    pub(crate) backpressured: Option<TableId>,
}

impl Telemetry {
    pub(crate) fn new<L: Lane>(names: impl Iterator<Item = String>) -> Telemetry {
        let lane = L::NAME;
        let tables = names
            .map(|name| TableState {
                loud: counter!(LOUD_MISMATCHES, "lane" => lane, "table" => name.clone()),
                backpressure: counter!(BACKPRESSURE, "lane" => lane, "table" => name.clone()),
                handed_back: HashMap::new(),
                reconcile: HashMap::new(),
                bad_rows: HashMap::new(),
                name,
            })
            .collect();
        Telemetry {
            lane,
            tables,
            streams: HashMap::new(),
            open: gauge!(OPEN_STREAMS, "lane" => lane),
            last: Counts::default(),
            backpressured: None,
        }
    }

    /// The stream's state (its handles registered on first sight).
    fn stream<L: Lane, B: Batch>(
        &mut self,
        core: &SinkCore<L, B>,
        slot: SlotId,
    ) -> &mut StreamState {
        let (lane, tables) = (self.lane, &self.tables);
        // Registered once: nothing is built or allocated here for a stream already seen.
        self.streams
            .entry(slot)
            .or_insert_with(|| StreamState::register(lane, tables, core, slot))
    }

    /// What the health tree shows of a stream, if it ever opened.
    pub(crate) fn stream_state(&self, slot: SlotId) -> Option<&StreamState> {
        self.streams.get(&slot)
    }

    /// The core's counters moved while handling something about `slot`: they are that
    /// stream's. Called after every input and every output that names a connection.
    pub(crate) fn settle<L: Lane, B: Batch>(&mut self, core: &SinkCore<L, B>, slot: SlotId) {
        let now = Counts::of(core.metrics());
        if now != self.last {
            let was = std::mem::replace(&mut self.last, now);
            let s = self.stream(core, slot);
            s.retries.increment(now.retries.saturating_sub(was.retries));
            s.poisoned
                .increment(now.poisoned.saturating_sub(was.poisoned));
            let timeouts = now.ack_timeouts.saturating_sub(was.ack_timeouts);
            s.ack_timeouts.increment(timeouts);
            if timeouts > 0 {
                // The environmental branch of the runbook: the service is slow, not our stream.
                tracing::warn!(
                    table = %s.table,
                    stream = s.index,
                    "acks slower than ack_timeout: the oldest batch waited past it; the stream \
                     drains and reconnects"
                );
            }
            s.concurrency
                .increment(now.concurrency.saturating_sub(was.concurrency));
            s.auth.increment(now.auth.saturating_sub(was.auth));
        }
        self.window(core, slot);
    }

    /// The stream's pending and window gauges, from the core.
    fn window<L: Lane, B: Batch>(&mut self, core: &SinkCore<L, B>, slot: SlotId) {
        let pending = core.slot_watermarks(slot).map_or(0, |w| w.pending());
        let fill = window_fill(core, slot);
        let open = core.open_streams();
        let s = self.stream(core, slot);
        s.pending.set(pending as f64);
        s.fill.set(fill);
        self.open.set(open as f64);
    }

    /// What an input says of its stream's phase (and last error), read before the core takes
    /// it; [`applied`](Self::applied) once the core did not ignore it (a stale input from an
    /// earlier connection says nothing of the stream now).
    pub(crate) fn change_of<L: Lane>(input: &Input<L>) -> Option<(Phase, Option<String>)> {
        match input {
            Input::Result { result, .. } if result.ack_up_to_offset == -1 => {
                Some((Phase::Live, None))
            }
            Input::Failed { error, .. } => {
                Some((Phase::Down, Some(crate::telemetry::outage::cause(error))))
            }
            Input::Closed { .. } => Some((Phase::Down, None)),
            _ => None,
        }
    }

    /// The core took an input about `slot` that changed its phase.
    pub(crate) fn applied<L: Lane, B: Batch>(
        &mut self,
        core: &SinkCore<L, B>,
        slot: SlotId,
        (phase, error): (Phase, Option<String>),
    ) {
        let s = self.stream(core, slot);
        s.phase = phase;
        if error.is_some() {
            s.last_error = error;
        }
    }

    /// The core asked for a connection for `slot`.
    pub(crate) fn opened<L: Lane, B: Batch>(&mut self, core: &SinkCore<L, B>, slot: SlotId) {
        let s = self.stream(core, slot);
        s.opened += 1;
        if s.opened > 1 {
            s.rebuilds.increment(1);
        }
        s.phase = Phase::Opening;
        self.settle(core, slot);
    }

    /// The core closed a connection of `slot` (gracefully: it drains first).
    pub(crate) fn closed<L: Lane, B: Batch>(
        &mut self,
        core: &SinkCore<L, B>,
        slot: SlotId,
        graceful: bool,
    ) {
        let s = self.stream(core, slot);
        s.phase = if graceful {
            Phase::Draining
        } else {
            Phase::Idle
        };
        self.settle(core, slot);
    }

    /// An ack confirmed a burst (`bytes`: what the window counted for its batches).
    pub(crate) fn confirmed<L: Lane, B: Batch>(
        &mut self,
        core: &SinkCore<L, B>,
        burst: &Confirmed<L>,
        bytes: u64,
    ) {
        let slot = burst.slot();
        let s = self.stream(core, slot);
        s.coalesce.record(burst.len() as f64);
        s.batches.increment(burst.len() as u64);
        s.bytes.increment(bytes);
        let mut rows = 0;
        for c in burst.iter() {
            rows += c.rows();
            let latency = c.confirmed_at().saturating_since(c.submitted_at());
            s.latency.record(latency.as_secs_f64());
        }
        s.rows.increment(rows);
        s.last_ack = Some(Instant::now());
        self.settle(core, slot);
    }

    /// A batch went to the confirmer's `failed`.
    pub(crate) fn handed_back(&mut self, table: TableId, reason: &FailureReason) {
        let lane = self.lane;
        if let Some(t) = self.tables.get_mut(table.index()) {
            let kind = reason_kind(reason);
            let name = &t.name;
            t.handed_back
                .entry(kind)
                .or_insert_with(|| {
                    counter!(HANDED_BACK, "lane" => lane, "table" => name.clone(), "reason" => kind)
                })
                .increment(1);
        }
    }

    /// The write boundary refused `rows` rows of a batch for `table`.
    pub(crate) fn bad_rows(&mut self, table: TableId, rows: u64, isolated: bool) {
        let lane = self.lane;
        if let Some(t) = self.tables.get_mut(table.index()) {
            let policy = if isolated { "isolate" } else { "fail_batch" };
            let name = &t.name;
            t.bad_rows
                .entry(policy)
                .or_insert_with(|| {
                    counter!(BAD_ROWS, "lane" => lane, "table" => name.clone(), "policy" => policy)
                })
                .increment(rows);
        }
    }

    /// A schema's plan: one decision per column, and the refused ones.
    pub(crate) fn planned(&mut self, table: TableId, kinds: &[&'static str], loud: u64) {
        let lane = self.lane;
        if let Some(t) = self.tables.get_mut(table.index()) {
            let name = &t.name;
            for &kind in kinds {
                t.reconcile
                    .entry(kind)
                    .or_insert_with(|| {
                        counter!(TYPE_RECONCILE, "lane" => lane, "table" => name.clone(), "kind" => kind)
                    })
                    .increment(1);
            }
            t.loud.increment(loud);
        }
    }

    /// A send found its table's windows full and waits for room (counted once per wait).
    pub(crate) fn blocked(&mut self, table: TableId) {
        if self.backpressured != Some(table) {
            self.backpressured = Some(table);
            if let Some(t) = self.tables.get(table.index()) {
                t.backpressure.increment(1);
            }
        }
    }
}

/// How full the slot's ack window is: the fullest of batches, rows and bytes (0 to 1).
pub(crate) fn window_fill<L: Lane, B: Batch>(core: &SinkCore<L, B>, slot: SlotId) -> f64 {
    let limits = core.config().window;
    core.in_flight(slot).map_or(0.0, |f| {
        let b = f.batches as f64 / f64::from(limits.max_batches.max(1));
        let r = f.rows as f64 / limits.max_rows.max(1) as f64;
        let y = f.bytes as f64 / limits.max_bytes.max(1) as f64;
        b.max(r).max(y)
    })
}

/// A failure reason's label: its kind, never its text (which names offsets and would make a
/// series per batch).
pub(crate) fn reason_kind(reason: &FailureReason) -> &'static str {
    match reason {
        FailureReason::Protocol(_) => "protocol",
        FailureReason::Stream {
            error: StreamError::Precondition { .. },
            ..
        } => "precondition",
        FailureReason::Stream { .. } => "stream",
        FailureReason::AckTimeout { .. } => "ack_timeout",
        FailureReason::OpenTimeout { .. } => "open_timeout",
        FailureReason::CloseDeadline { .. } => "close_deadline",
        FailureReason::RetryBudgetSpent { .. } => "retry_budget_spent",
        FailureReason::NotAdmitted { .. } => "not_admitted",
        FailureReason::TableFailed { .. } => "table_failed",
        _ => "other",
    }
}
