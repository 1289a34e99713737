//! The process's sinks: one [`ZerobusSink`] per target, started at its first `INSERT` and
//! shared by every input partition (and every later `INSERT`) that writes the target.
//!
//! `ZerobusSink::send` takes `&mut self`; it returns as soon as the batch is handed over (it
//! awaits only while the windows are full, which is the backpressure every writer of the
//! table shares anyway), so the partitions share it behind an async mutex held for the
//! hand-over only. Durability is awaited on each batch's receipt, outside the lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use tokio::sync::OnceCell;
use zerobus_sink::{
    Confirmation, CoverageRange, Derived, FailedBatch, FailureReason, TableId, Token,
};
use zerobus_sink_tokio::{
    Confirmer, IsolatedRows, Provisioning, Receipt, Report, SendError, Sink, StartError, TableDef,
    ZerobusSink,
};

use crate::target::Target;

/// The sinks of one process (or of one factory and the catalogs sharing it), by endpoint and
/// table. Cheap to clone: clones share the sinks. Give the same `Sinks` to the
/// [`ZerobusTableFactory`](crate::ZerobusTableFactory) and the
/// [`ZerobusCatalog`](crate::ZerobusCatalog) of a session so that a table written through
/// either uses one sink.
#[derive(Debug, Clone, Default)]
pub struct Sinks {
    by_target: Arc<Mutex<ByTarget>>,
}

/// The sinks by (endpoint, table).
type ByTarget = HashMap<(String, String), Arc<SharedSink>>;

impl Sinks {
    /// Each started sink's progress so far (rows durable, streams, failures), in no
    /// particular order: for a progress line while a query runs. A sink is asked only
    /// between two hand-overs, so this waits at most for one batch's room in its window.
    pub async fn reports(&self) -> Vec<Report> {
        let started: Vec<Arc<SharedSink>> = self
            .by_target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut reports = Vec::with_capacity(started.len());
        for shared in started {
            if let Some(s) = shared.started()
                && let Some(report) = s.sink.lock().await.report().await
            {
                reports.push(report);
            }
        }
        reports
    }

    /// The sink for `target` (not started until its first batch).
    pub(crate) fn of(&self, target: &Target) -> Arc<SharedSink> {
        let mut map = self
            .by_target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(target.key()).or_default().clone()
    }
}

/// A target's sink, started once, lazily, by the first input partition that has a batch.
#[derive(Debug, Default)]
pub(crate) struct SharedSink {
    started: OnceCell<Started>,
}

/// A started sink: the handle, the table's id in it, and what its confirmer saw.
#[derive(Debug)]
pub(crate) struct Started {
    sink: tokio::sync::Mutex<ZerobusSink<Derived>>,
    table: TableId,
    seen: Seen,
}

impl SharedSink {
    /// The started sink, starting it (on the current runtime) if this is the first call.
    pub(crate) async fn get(
        &self,
        target: &Target,
        first: &TableDef,
    ) -> Result<&Started, StartError> {
        self.started
            .get_or_try_init(|| async { Started::start(target, first.clone()) })
            .await
    }

    /// The started sink, if an input partition has started it.
    pub(crate) fn started(&self) -> Option<&Started> {
        self.started.get()
    }
}

impl Started {
    fn start(target: &Target, def: TableDef) -> Result<Started, StartError> {
        let seen = Seen::default();
        let name = def.spec.name.clone();
        let provisioning = Provisioning::new(target.catalog().clone(), target.writer_name());
        let sink = ZerobusSink::<Derived>::start_provisioned(
            target.config().clone(),
            vec![def],
            seen.clone(),
            provisioning,
        )?;
        let table = sink.table(&name).ok_or_else(|| StartError::Table {
            table: name,
            reason: "not registered after start".into(),
        })?;
        Ok(Started {
            sink: tokio::sync::Mutex::new(sink),
            table,
            seen,
        })
    }

    /// Hands `batch` over with `token` (awaiting room if the windows are full).
    pub(crate) async fn send(
        &self,
        batch: RecordBatch,
        token: Token<Derived>,
    ) -> Result<Receipt, SendError<Derived>> {
        self.sink.lock().await.send(self.table, batch, token).await
    }

    /// Rows of `job`'s input `partition` that the write boundary isolated as bad rows (none
    /// under the default policy, which fails the batch instead).
    pub(crate) fn isolated(&self, job: &str, partition: u32) -> u64 {
        self.seen.isolated(job, partition)
    }
}

/// The sink's confirmer. Durability reaches each input partition through its batches'
/// receipts; this only logs batches handed back (their receipts fail the partition) and counts
/// isolated rows per job and partition, so that the partition fails rather than count them.
#[derive(Debug, Clone, Default)]
struct Seen {
    isolated: Arc<Mutex<HashMap<(String, u32), u64>>>,
}

impl Seen {
    fn isolated(&self, job: &str, partition: u32) -> u64 {
        self.isolated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(job.to_owned(), partition))
            .copied()
            .unwrap_or(0)
    }
}

impl Confirmer<Derived> for Seen {
    fn confirmed(&mut self, _table: &str, confirmation: Confirmation<Derived>) {
        // The batch's receipt resolves too: the partition awaits that.
        let _: CoverageRange = confirmation.commit();
    }

    fn failed(
        &mut self,
        table: &str,
        batch: FailedBatch<Derived, RecordBatch>,
        reason: &FailureReason,
    ) {
        let range = batch.token.position();
        tracing::warn!(
            %table,
            job = %range.topic,
            partition = range.partition,
            start = range.start,
            end = range.end,
            %reason,
            "rows handed back undelivered; their input partition fails"
        );
    }

    fn isolated(&mut self, table: &str, rows: IsolatedRows<Derived>) {
        tracing::warn!(
            %table,
            job = %rows.position.topic,
            partition = rows.position.partition,
            rows = rows.batch.num_rows(),
            "rows isolated as bad rows; their input partition fails"
        );
        let key = (rows.position.topic.clone(), rows.position.partition);
        *self
            .isolated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key)
            .or_default() += rows.batch.num_rows() as u64;
    }
}
