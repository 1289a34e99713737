//! `NativeSink`: one `ZerobusSink` of the raw lane, started from the settings file's text (the
//! Python side writes keyword settings as that text, so both are checked by the same rules),
//! fed batches from Python, its confirmations turned into committed source positions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_array::ffi_stream::ArrowArrayStreamReader;
use arrow_schema::{Schema, SchemaRef};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::sync::Mutex as AsyncMutex;
use zerobus_sink::{Raw, TableId, Token};
use zerobus_sink_tokio::settings::SinkFile;
use zerobus_sink_tokio::{Sink, ZerobusSink};

use crate::arrow_in::{self, Input};
use crate::positions::{Commits, Shared};
use crate::{errors, logs, runtime};

/// A source position as Python gives it: `(partition, offset)` (the topic is the table's
/// name) or `(topic, partition, offset)`.
#[derive(FromPyObject)]
enum SourceArg {
    Two(u32, i64),
    Three(String, u32, i64),
}

/// The sink (see `zerobus_sink.Sink` for the documented, typed API). Frozen: every method
/// takes `&self`, so threads (and `AsyncSink`'s worker threads) may call it at once; the
/// handle itself is behind an async mutex.
#[pyclass(module = "zerobus_sink._native", name = "NativeSink", frozen)]
pub(crate) struct NativeSink {
    sink: Arc<AsyncMutex<Option<ZerobusSink<Raw>>>>,
    shared: Arc<Shared>,
    /// Each table's name and id.
    tables: Vec<(String, TableId)>,
    /// Rows handed over per table without a source position (numbering their positions).
    auto: Mutex<HashMap<String, i64>>,
    endpoint: String,
    drain: Duration,
    /// The summary `close` returned: a second `close` returns it again.
    closed: Mutex<Option<Py<PyDict>>>,
}

impl NativeSink {
    fn closed_summary(&self) -> std::sync::MutexGuard<'_, Option<Py<PyDict>>> {
        self.closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn table(&self, name: &str) -> PyResult<TableId> {
        if let Some((_, id)) = self.tables.iter().find(|(n, _)| n == name) {
            return Ok(*id);
        }
        let known: Vec<&str> = self.tables.iter().map(|(n, _)| n.as_str()).collect();
        Err(errors::build(
            "SendError",
            format!(
                "table {name} is not one of this sink's tables ({})",
                known.join(", ")
            ),
            errors::Detail {
                table: Some(name.to_owned()),
                code: "unknown_table",
                ..errors::Detail::default()
            },
            |_, _| Ok(()),
        ))
    }

    /// The token for the first batch of a read: a parked one for the same position (a retry
    /// of a refused send), else a new read.
    fn first_token(&self, name: &str, source: &(String, u32, i64)) -> PyResult<Token<Raw>> {
        let mut state = self.shared.lock();
        if let Some(token) = state.parked.remove(source) {
            return Ok(token);
        }
        let (topic, partition, offset) = source;
        let mut tokens = state
            .tracker
            .read(topic, *partition, *offset, 1)
            .map_err(|e| errors::source(name, e.to_string()))?;
        tokens
            .pop()
            .ok_or_else(|| errors::source(name, "the tracker gave no token".into()))
    }

    /// Hands one batch over; on a refusal its token is parked for a retry and the refusal
    /// raised.
    fn hand_over(
        &self,
        py: Python<'_>,
        name: &str,
        id: TableId,
        batch: RecordBatch,
        token: Token<Raw>,
    ) -> PyResult<()> {
        let sink = self.sink.clone();
        let sent = runtime::wait(py, async move {
            let mut guard = sink.lock().await;
            match guard.as_mut() {
                Some(s) => Some(s.send(id, batch, token).await),
                None => None,
            }
        })?;
        match sent {
            None => Err(errors::closed(&format!("send to {name}"))),
            Some(Ok(_receipt)) => Ok(()),
            Some(Err(e)) => {
                let err = errors::send(name, &e);
                if let Some((_, token)) = e.into_parts() {
                    let p = token.position();
                    let key = (p.topic.clone(), p.partition, p.offset);
                    // The exception says under which position to send the batch again.
                    err.value(py).setattr("source", key.clone())?;
                    self.shared.lock().parked.insert(key, token);
                }
                Err(err)
            }
        }
    }

    /// Sends a stream's batches, all under one source position: each batch after the first
    /// takes one more part of the read, split off before the batch ahead of it is sent (so
    /// the read cannot complete while batches of it are still to come).
    fn send_stream(
        &self,
        py: Python<'_>,
        name: &str,
        id: TableId,
        mut reader: ArrowArrayStreamReader,
        source: &(String, u32, i64),
    ) -> PyResult<usize> {
        // Empty batches carry no rows and take no part of the read.
        let mut next = || -> PyResult<Option<RecordBatch>> {
            loop {
                match py.detach(|| reader.next()) {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(arrow_in::arrow_error(e)),
                    Some(Ok(b)) if b.num_rows() == 0 => {}
                    Some(Ok(b)) => return Ok(Some(b)),
                }
            }
        };
        let Some(mut current) = next()? else {
            return Ok(0); // nothing to write: the position is left where it was
        };
        let mut token = self.first_token(name, source)?;
        let mut rows = 0;
        loop {
            let following = next()?;
            let spare = match following {
                Some(_) => Some(
                    self.shared
                        .lock()
                        .tracker
                        .split(&token)
                        .map_err(|e| errors::source(name, e.to_string()))?,
                ),
                None => None,
            };
            rows += current.num_rows();
            self.hand_over(py, name, id, current, token)?;
            match (following, spare) {
                (Some(b), Some(t)) => {
                    current = b;
                    token = t;
                }
                _ => return Ok(rows),
            }
        }
    }

    /// Sends each batch under a position of its own: the table's rows so far (no source
    /// position was given).
    fn send_numbered(
        &self,
        py: Python<'_>,
        name: &str,
        id: TableId,
        batch: RecordBatch,
    ) -> PyResult<usize> {
        if batch.num_rows() == 0 {
            return Ok(0);
        }
        let n = i64::try_from(batch.num_rows()).unwrap_or(i64::MAX);
        // The rows are numbered as they are taken, under the lock: concurrent sends to one
        // table get consecutive, rising positions. A refused batch's position stays open (its
        // rows are not durable) until it is sent again with `source=error.source`.
        let (token, rows) = {
            let mut auto = self
                .auto
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let before = auto.get(name).copied().unwrap_or(0);
            let source = (name.to_owned(), 0, before + n - 1);
            let token = self.first_token(name, &source)?;
            auto.insert(name.to_owned(), before + n);
            (token, batch.num_rows())
        };
        self.hand_over(py, name, id, batch, token)?;
        Ok(rows)
    }
}

#[pymethods]
impl NativeSink {
    /// Starts a sink from the text of a settings file, with the schemas given per table (a
    /// table with a catalog and no schema takes its schema from its batches).
    #[new]
    #[pyo3(signature = (settings, schemas=None))]
    fn new(py: Python<'_>, settings: &str, schemas: Option<Bound<'_, PyDict>>) -> PyResult<Self> {
        logs::install(py)?;
        let file = SinkFile::parse(settings).map_err(|e| errors::config(&e))?;
        let mut given: HashMap<String, SchemaRef> = HashMap::new();
        if let Some(schemas) = schemas {
            for (k, v) in schemas.iter() {
                given.insert(k.extract()?, arrow_in::schema(&v)?);
            }
        }
        let effective = file.effective().map_err(|e| errors::config(&e))?;
        let catalog = effective.catalog.is_some();
        let shared = Arc::new(Shared::default());
        let confirmer = Commits(shared.clone());
        let lookup = move |name: &str| {
            given
                .get(name)
                .cloned()
                .or_else(|| catalog.then(|| Arc::new(Schema::empty())))
        };
        let started = runtime::wait(py, {
            let file = file.clone();
            async move { ZerobusSink::<Raw>::from_file(&file, lookup, confirmer).await }
        })?;
        let sink = started.map_err(|e| errors::config(&e))?;
        let tables = file
            .table_names()
            .filter_map(|n| sink.table(n).map(|id| (n.to_owned(), id)))
            .collect();
        Ok(NativeSink {
            sink: Arc::new(AsyncMutex::new(Some(sink))),
            shared,
            tables,
            auto: Mutex::new(HashMap::new()),
            endpoint: effective.endpoint,
            drain: file.drain(),
            closed: Mutex::new(None),
        })
    }

    /// Hands `data` to `table`; returns the rows handed over.
    #[pyo3(signature = (table, data, source=None))]
    fn send(
        &self,
        py: Python<'_>,
        table: &str,
        data: &Bound<'_, PyAny>,
        source: Option<SourceArg>,
    ) -> PyResult<usize> {
        let id = self.table(table)?;
        let input = arrow_in::input(data)?;
        let explicit = source.map(|s| match s {
            SourceArg::Two(p, o) => (table.to_owned(), p, o),
            SourceArg::Three(t, p, o) => (t, p, o),
        });
        match (input, explicit) {
            (Input::One(batch), Some(source)) => {
                let rows = batch.num_rows();
                if rows == 0 {
                    return Ok(0);
                }
                let token = self.first_token(table, &source)?;
                self.hand_over(py, table, id, batch, token)?;
                Ok(rows)
            }
            (Input::Stream(reader), Some(source)) => {
                self.send_stream(py, table, id, reader, &source)
            }
            (Input::One(batch), None) => self.send_numbered(py, table, id, batch),
            (Input::Stream(reader), None) => {
                let mut rows = 0;
                for batch in reader {
                    let batch = batch.map_err(arrow_in::arrow_error)?;
                    rows += self.send_numbered(py, table, id, batch)?;
                }
                Ok(rows)
            }
        }
    }

    /// Waits until everything handed over is durable or handed back; raises DeliveryError
    /// for batches handed back since the previous flush.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let sink = self.sink.clone();
        let flushed = runtime::wait(py, async move {
            let mut guard = sink.lock().await;
            match guard.as_mut() {
                Some(s) => Some(s.flush().await),
                None => None,
            }
        })?;
        match flushed {
            None => Err(errors::closed("flush")),
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(errors::flush(&e, self.shared.take_unreported(py)?)),
        }
    }

    /// Drains for up to `timeout` seconds (the settings' `shutdown.drain` if `None`), then
    /// stops; returns the summary. Raises DeliveryError if anything was handed back undelivered.
    #[pyo3(signature = (timeout=None))]
    fn close<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(summary) = self.closed_summary().as_ref() {
            return Ok(summary.bind(py).clone());
        }
        let within = match timeout {
            Some(t) if t.is_finite() && t >= 0.0 => Duration::from_secs_f64(t),
            Some(t) => {
                return Err(errors::input(format!(
                    "close timeout must be a non-negative number of seconds, got {t}"
                )));
            }
            None => self.drain,
        };
        let sink = self.sink.clone();
        let report = runtime::wait(py, async move {
            let taken = sink.lock().await.take();
            match taken {
                Some(s) => Some(s.close(within).await),
                None => None,
            }
        })?;
        self.shared.close();
        let Some(report) = report else {
            return Err(errors::closed("close"));
        };
        let summary = PyDict::new(py);
        summary.set_item("rows", report.rows)?;
        summary.set_item("batches", report.batches)?;
        summary.set_item("failed_batches", report.failed_batches)?;
        summary.set_item("elapsed", report.elapsed.as_secs_f64())?;
        summary.set_item("text", report.to_string())?;
        *self.closed_summary() = Some(summary.clone().unbind());
        let unreported = self.shared.take_unreported(py)?;
        if !unreported.is_empty() {
            return Err(errors::delivery(
                format!(
                    "{} batches or row sets were handed back, not durable or refused: {}",
                    unreported.len(),
                    report
                ),
                None,
                unreported,
            ));
        }
        Ok(summary)
    }

    /// Progress so far: rows and batches durable, batches handed back (None once closed).
    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let sink = self.sink.clone();
        // The observer never waits behind a send waiting for room.
        let observer = runtime::wait(py, async move {
            sink.try_lock()
                .ok()
                .and_then(|g| g.as_ref().map(ZerobusSink::observer))
        })?;
        let Some(observer) = observer else {
            return Ok(None);
        };
        let report = runtime::wait(py, async move { observer.report().await })?;
        let Some(report) = report else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("rows", report.rows)?;
        d.set_item("batches", report.batches)?;
        d.set_item("failed_batches", report.failed_batches)?;
        d.set_item("elapsed", report.elapsed.as_secs_f64())?;
        Ok(Some(d))
    }

    /// The next committed position `(topic, partition, offset)`, waiting up to `timeout`
    /// seconds (forever if `None`); `None` if none came or the sink closed.
    #[pyo3(signature = (timeout=None))]
    fn next_confirmation(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
    ) -> PyResult<Option<(String, u32, i64)>> {
        let timeout = timeout.map(|t| Duration::from_secs_f64(t.max(0.0)));
        self.shared.next(py, timeout)
    }

    /// Every partition's committed position: `{(topic, partition): offset}`.
    fn committed(&self) -> HashMap<(String, u32), i64> {
        let state = self.shared.lock();
        state
            .tracker
            .positions()
            .map(|p| ((p.topic, p.partition), p.offset))
            .collect()
    }

    /// Every batch or row set handed back so far.
    fn failures(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        self.shared.all_failures(py)
    }

    /// The tables' names.
    #[getter]
    fn tables(&self) -> Vec<String> {
        self.tables.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The endpoint.
    #[getter]
    fn endpoint(&self) -> &str {
        &self.endpoint
    }
}
