//! Source positions: the tracker that turns durable confirmations into committed positions,
//! the queue Python reads them from, and the batches handed back. Filled by the sink's
//! confirmer (on the runtime), read by Python (GIL released while it waits).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use pyo3::prelude::*;
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw, SourceTracker, Token};
use zerobus_sink_tokio::{Confirmer, IsolatedRows};

use crate::arrow_out::Rows;

/// How often a waiting reader looks for a pending signal.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// A source position: `topic`/`partition`/`offset`.
pub(crate) type Key = (String, u32);

/// What the confirmer and Python share.
#[derive(Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
pub(crate) struct State {
    pub tracker: SourceTracker,
    /// Committed positions Python has not taken yet: the latest per partition.
    ready: BTreeMap<Key, i64>,
    /// Every batch or row set handed back, in order.
    pub failures: Vec<Failure>,
    /// How many of `failures` were raised already.
    pub reported: usize,
    /// Tokens of sends refused before anything was sent, kept for a retry of the same source
    /// position (`tracker.read` would refuse the same position twice).
    pub parked: HashMap<(String, u32, i64), Token<Raw>>,
    closed: bool,
}

/// Rows the sink handed back: not durable (`kind` "not_durable"), or refused by the table's
/// bad-row policy `isolate` ("refused").
pub(crate) struct Failure {
    pub table: String,
    pub kind: &'static str,
    pub reason: String,
    pub source: (String, u32, i64),
    pub durable_rows: u64,
    pub rows: RecordBatch,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// No more confirmations will come: readers waiting for one return.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// The next committed position, waiting up to `timeout` (`None`: until one comes or the
    /// sink is closed). `Ok(None)` when there is none: closed, or the timeout passed.
    pub(crate) fn next(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<(String, u32, i64)>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let mut state = self.lock();
            if let Some(((topic, partition), offset)) = state.ready.pop_first() {
                return Ok(Some((topic, partition, offset)));
            }
            if state.closed {
                return Ok(None);
            }
            let slice = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    left.min(SIGNAL_CHECK)
                }
                None => SIGNAL_CHECK,
            };
            drop(state);
            // Wait with the GIL released; the guard is taken (and dropped) on this side.
            py.detach(|| {
                let state = self.lock();
                if state.ready.is_empty() && !state.closed {
                    let _ = self.changed.wait_timeout(state, slice);
                }
            });
            py.check_signals()?;
        }
    }

    /// The failures not raised yet, as Python objects, marking them raised.
    pub(crate) fn take_unreported(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let mut state = self.lock();
        let from = state.reported;
        state.reported = state.failures.len();
        state.failures[from..]
            .iter()
            .map(|f| failure_object(py, f))
            .collect()
    }

    /// Every failure so far.
    pub(crate) fn all_failures(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let state = self.lock();
        state
            .failures
            .iter()
            .map(|f| failure_object(py, f))
            .collect()
    }
}

/// `zerobus_sink.Failure(table=, kind=, reason=, source=, durable_rows=, rows=)`.
fn failure_object(py: Python<'_>, f: &Failure) -> PyResult<Py<PyAny>> {
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("table", &f.table)?;
    kwargs.set_item("kind", f.kind)?;
    kwargs.set_item("reason", &f.reason)?;
    kwargs.set_item("source", f.source.clone())?;
    kwargs.set_item("durable_rows", f.durable_rows)?;
    kwargs.set_item("rows", Py::new(py, Rows::new(f.rows.clone()))?)?;
    let cls = py.import("zerobus_sink.errors")?.getattr("Failure")?;
    Ok(cls.call((), Some(&kwargs))?.unbind())
}

/// The sink's confirmer: confirmations through the tracker, hand-backs kept.
pub(crate) struct Commits(pub Arc<Shared>);

impl Confirmer<Raw> for Commits {
    fn confirmed(&mut self, table: &str, confirmation: Confirmation<Raw>) {
        let mut state = self.0.lock();
        match state.tracker.confirm(confirmation) {
            Ok(Some(p)) => {
                state.ready.insert((p.topic, p.partition), p.offset);
                drop(state);
                self.0.changed.notify_all();
            }
            Ok(None) => {}
            // Every token comes from this tracker: an unknown one is a bug, said loudly.
            Err(e) => tracing::error!(table, error = %e, "confirmation the tracker does not know"),
        }
    }

    fn failed(&mut self, table: &str, batch: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        let p = batch.token.position();
        let failure = Failure {
            table: table.to_owned(),
            kind: "not_durable",
            reason: why.to_string(),
            source: (p.topic.clone(), p.partition, p.offset),
            durable_rows: batch.durable_rows,
            rows: batch.batch,
        };
        tracing::warn!(table, rows = failure.rows.num_rows(), reason = %failure.reason, "batch handed back, not durable");
        self.0.lock().failures.push(failure);
        self.0.changed.notify_all();
    }

    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        let p = rows.position;
        let reason = rows
            .faults
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        self.0.lock().failures.push(Failure {
            table: table.to_owned(),
            kind: "refused",
            reason,
            source: (p.topic, p.partition, p.offset),
            durable_rows: 0,
            rows: rows.batch,
        });
        self.0.changed.notify_all();
    }
}
