//! The handle: [`ZerobusSink`], and the plan's `Sink` and `BatchSink` traits.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use tokio::sync::{mpsc, oneshot};
use zerobus_sink::{Lane, RejectReason, Route, SinkCore, TableId, Token};
use zerobus_sink_catalog::{TableCatalog, TableRef};

use crate::boundary::check::{self, Judged};
use crate::boundary::{self, BadRows};
use crate::config::{TableDef, ZerobusConfig};
use crate::confirmer::Confirmer;
use crate::conn::auth::TokenSource;
use crate::conn::{self, TableWire};
use crate::driver::command::{Ask, Checked, Control, Flags, Handoff, Known};
use crate::driver::{Definition, Driver, Parts};
use crate::error::{FlushError, SendError, StartError};
use crate::health::SinkHealth;
use crate::observer::Observer;
use crate::provision::{NoCatalog, Provisioning};
use crate::receipt::Receipt;
use crate::recent::RecentSchemas;
use crate::report::Report;
use crate::{schema, wire};

/// The plan's `Sink` (seed section 2.2): fire-and-forget sends with receipts, and a flush.
pub trait Sink<L: Lane> {
    /// Hands a batch over and returns once it is handed over (awaiting only while the window
    /// is full: that is the backpressure). The receipt resolves when the batch is durable.
    ///
    /// What can be decided before the hand-over comes back from `send` with the batch and its
    /// token: an unknown table, a schema that does not match or that the catalog refused, rows
    /// the table would refuse, an empty batch, a table that has failed. A schema's first batch
    /// waits for its plan (and for admission); the schema's later batches are checked here and
    /// handed over without waiting for the sink's task. If admission fails after the hand-over
    /// (the table fails meanwhile), the batch goes to the [`Confirmer`]'s `failed` and its
    /// receipt fails, like a batch handed back later.
    ///
    /// **Cancel-safe.** If the future is dropped while it waits for room, the batch and its
    /// token are dropped with it, unadmitted: nothing was sent and nothing will be confirmed
    /// (keep your source position where it was). Once the batch is handed over (the wait for
    /// room is over), dropping the future no longer matters: its token reaches the
    /// [`Confirmer`], confirmed or failed, like any other.
    fn send(
        &mut self,
        route: impl Into<Route> + Send,
        batch: RecordBatch,
        token: Token<L>,
    ) -> impl Future<Output = Result<Receipt, SendError<L>>> + Send;
    /// Waits until every batch sent so far is durable or handed to the confirmer's `failed`
    /// (batches being resubmitted are waited for); an error counts those handed over since the
    /// previous flush. The batches still queued for a table's streams are dealt over them so
    /// that they finish together (the core's `SinkCore::flush`).
    fn flush(&mut self) -> impl Future<Output = Result<(), FlushError>> + Send;
}

/// What [`BatchSink::finish`] reports: what was pushed since the previous finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitInfo {
    /// Batches pushed.
    pub batches: u64,
    /// Rows pushed.
    pub rows: u64,
}

/// The numbers `[first, last]` ([`Receipt::seq`]) of the batches pushed since the previous
/// finish (`None` when nothing was pushed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetSpan {
    /// The first batch's number.
    pub first: Option<u64>,
    /// The last batch's number (the submitted high-water).
    pub last: Option<u64>,
}

/// The plan's `BatchSink` (seed section 2.1), for one table.
pub trait BatchSink {
    /// Why a push failed.
    type Error;
    /// Submits a batch fire-and-forget (awaits only while the window is full).
    fn push(&mut self, batch: &RecordBatch)
    -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Ends the current window: what was pushed since the last finish. Does not wait for
    /// durability (the confirmer hears of that).
    fn finish(
        &mut self,
    ) -> impl Future<Output = Result<(CommitInfo, OffsetSpan), Self::Error>> + Send;
}

/// Makes the token for each pushed batch of a [`TableWriter`].
pub trait Positions<L: Lane>: Send {
    /// The token for `batch`.
    fn token(&mut self, batch: &RecordBatch) -> Token<L>;
}

impl<L: Lane, F: FnMut(&RecordBatch) -> Token<L> + Send> Positions<L> for F {
    fn token(&mut self, batch: &RecordBatch) -> Token<L> {
        self(batch)
    }
}

/// The sink: lands Arrow batches in Zerobus tables through pools of long-lived streams, on the
/// caller's tokio runtime. Lane `L` is fixed for its life; confirmations reach the
/// [`Confirmer`] given to [`start`](ZerobusSink::start).
#[derive(Debug)]
pub struct ZerobusSink<L: Lane> {
    submits: mpsc::Sender<Handoff<L>>,
    control: mpsc::UnboundedSender<Control>,
    tables: Vec<(TableId, Arc<TableWire>)>,
    /// Per table (provisioned sinks): the batch schemas sent most recently, their ids, and
    /// each one's plan once its first batch was admitted or refused.
    schemas: RecentSchemas,
    /// Per table: what to do with rows the table would refuse.
    bad_rows: Vec<BadRows>,
    /// Per table: batches accepted so far (the next receipt's `seq`).
    accepted: Vec<u64>,
    max_row_bytes: u64,
    flags: Arc<Flags>,
    task: tokio::task::JoinHandle<()>,
}

impl<L: Lane> ZerobusSink<L> {
    /// Starts the sink's driver on the current tokio runtime (it never builds one). Streams open
    /// at each table's first batch. Refused at once, naming what is wrong: an endpoint without
    /// `http://` or `https://`, an invalid core configuration, and each table whose name is not
    /// `catalog.schema.table`, that is registered twice, or that has a column Delta cannot hold
    /// (with the cast to use).
    pub fn start<C: Confirmer<L>>(
        config: ZerobusConfig,
        tables: Vec<TableDef>,
        confirmer: C,
    ) -> Result<ZerobusSink<L>, StartError> {
        Self::launch::<C, NoCatalog>(config, tables, confirmer, None)
    }

    /// Starts a sink that provisions and evolves its tables through a catalog (seed 5.1): the
    /// Unity Catalog backend for Databricks, the local backend for `zerobus-local`. A table's
    /// first batch of each schema waits while the table is described, reconciled (created if
    /// absent, with the reserved `_twg_*` columns and the contract's comments and properties;
    /// added columns; widening as the policy allows) and the schema planned by the write
    /// boundary ([`boundary`](crate::boundary), `docs/write-boundary.md`); the sink registers
    /// as the table's writer once. On a drift the table's streams drain and reopen with the
    /// new schema; earlier batches confirm in order. A schema that cannot be written comes back
    /// from `send` as [`SendError::Unreconcilable`](crate::SendError), every column named, and
    /// so do its later batches; the table keeps serving its other schemas. Rows the table
    /// would refuse are found before send (see [`BadRows`](crate::BadRows)). Each row is
    /// stamped with `_twg_emit_ts` and its `_twg_source_*` position when sent. Refused at
    /// start as [`start`](Self::start) refuses, and a keyed table (provision it before
    /// starting).
    pub fn start_provisioned<C: Confirmer<L>, P: TableCatalog + Send + Sync + 'static>(
        config: ZerobusConfig,
        tables: Vec<TableDef>,
        confirmer: C,
        provisioning: Provisioning<P>,
    ) -> Result<ZerobusSink<L>, StartError> {
        Self::launch(config, tables, confirmer, Some(provisioning))
    }

    fn launch<C: Confirmer<L>, P: TableCatalog + Send + Sync + 'static>(
        config: ZerobusConfig,
        tables: Vec<TableDef>,
        confirmer: C,
        provisioning: Option<Provisioning<P>>,
    ) -> Result<ZerobusSink<L>, StartError> {
        let provisioned = provisioning.is_some();
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        if !(config.endpoint.starts_with("http://") || config.endpoint.starts_with("https://")) {
            return Err(StartError::Endpoint {
                endpoint: config.endpoint,
                reason: "needs a scheme: https://… for the service, http://… for a local emulator",
            });
        }
        let has_host = config
            .endpoint
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.host().map(|h| !h.is_empty()))
            .unwrap_or(false);
        if !has_host {
            return Err(StartError::Endpoint {
                endpoint: config.endpoint,
                reason: "has no host: https://<workspace-id>.zerobus.<region>.cloud.databricks.com, \
                         or http://127.0.0.1:50051 for a local emulator",
            });
        }
        let mut core = SinkCore::new(config.core)?;
        schema::check_tables(&tables)?;
        let mut wires = Vec::new();
        let mut definitions = Vec::new();
        for def in tables {
            let name = def.spec.name.clone();
            let primary_raw = match (def.primary_raw, provisioned) {
                (None, _) => None,
                (Some(shape), true) => Some((
                    TableRef::parse(&name).map_err(|e| StartError::Table {
                        table: name.clone(),
                        reason: e.to_string(),
                    })?,
                    shape,
                )),
                (Some(_), false) => {
                    return Err(StartError::Table {
                        table: name,
                        reason: "the primary-raw role needs the catalog to check its \
                                 preconditions again at every stream open: start the sink \
                                 with start_provisioned"
                            .into(),
                    });
                }
            };
            let spec = if provisioned {
                def.spec.reconciled()
            } else {
                def.spec
            };
            let id = core.add_table(spec).map_err(|e| StartError::Table {
                table: name.clone(),
                reason: e.to_string(),
            })?;
            if let Some(pool) = core.table_pool(id) {
                let w = config.core.window;
                tracing::info!(
                    table = %name,
                    streams = pool.slots,
                    by_bytes = pool.by_bytes,
                    by_rows = pool.by_rows,
                    capped = pool.capped,
                    window_batches = w.max_batches,
                    window_bytes = w.max_bytes,
                    window_rows = w.max_rows,
                    "table registered"
                );
            }
            wires.push((
                id,
                Arc::new(TableWire {
                    name,
                    schema: def.schema,
                    provisioned,
                }),
            ));
            definitions.push(Definition {
                contract: def.contract,
                primary_raw,
                conversions: def.conversions,
                bad_rows: def.bad_rows,
            });
        }
        let mut user_agent = format!("zerobus-sink-rs/{}", env!("CARGO_PKG_VERSION"));
        if let Some(app) = &config.application_name {
            user_agent.push(' ');
            user_agent.push_str(app);
        }
        let host = config
            .endpoint
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_owned))
            .unwrap_or_default();
        let proxy = config.proxy.resolve(&host, |n| std::env::var(n).ok())?;
        if let Some(p) = &proxy {
            tracing::info!(proxy = %p.addr, endpoint = %config.endpoint, "streams tunnel through a proxy");
        }
        let native_roots = if config.native_roots && config.endpoint.starts_with("https://") {
            crate::conn::tls::native_roots()
        } else {
            Vec::new()
        };
        let shared = Arc::new(conn::Shared {
            endpoint: config.endpoint.clone(),
            user_agent,
            connect_timeout: config.core.open_timeout,
            tls_ca_pem: config.tls_ca_pem.clone(),
            native_roots,
            proxy,
            options: wire::write_options(config.compression)?,
            tokens: TokenSource::new(config.credentials),
            coalesce_bytes: config.coalesce_bytes.min(config.core.max_message_bytes),
        });
        let (submits, submits_rx) = mpsc::channel(config.handoffs.max(1));
        let (control, control_rx) = mpsc::unbounded_channel();
        let flags = Arc::new(Flags::new(wires.len()));
        let bad_rows = definitions.iter().map(|d| d.bad_rows).collect();
        let driver = Driver::new(Parts {
            core,
            confirmer,
            shared,
            tables: wires.iter().map(|(_, w)| w.clone()).collect(),
            submits: submits_rx,
            flags: flags.clone(),
            control: control_rx,
            resubmit: config.resubmit,
            provisioning,
            definitions,
            max_row_bytes: config.max_row_bytes,
            primary_raw_recheck: config.primary_raw_recheck,
        });
        let task = runtime.spawn(driver.run());
        Ok(ZerobusSink {
            submits,
            control,
            schemas: RecentSchemas::new(wires.iter().map(|(_, w)| w.provisioned)),
            bad_rows,
            accepted: vec![0; wires.len()],
            max_row_bytes: config.max_row_bytes,
            flags,
            tables: wires,
            task,
        })
    }

    /// The id of the table named `name`.
    #[must_use]
    pub fn table(&self, name: &str) -> Option<TableId> {
        self.tables
            .iter()
            .find(|(_, w)| w.name == name)
            .map(|(id, _)| *id)
    }

    /// Progress so far (`None` if the driver is gone). Never waits behind a `send` that waits
    /// for room.
    pub async fn report(&self) -> Option<Report> {
        self.observer().report().await
    }

    /// The health tree now: sink -> table -> stream (`None` if the driver is gone). Never waits
    /// behind a `send` that waits for room.
    pub async fn health(&self) -> Option<SinkHealth> {
        self.observer().health().await
    }

    /// A cloneable view of the sink's report and health, for an operator endpoint or a
    /// progress display running beside the pipeline (`ops::serve`, feature `ops`).
    #[must_use]
    pub fn observer(&self) -> Observer {
        Observer::new(self.control.clone())
    }

    /// Stops admission, drains every stream to durable (dealing what is queued over the
    /// streams, as [`flush`](Sink::flush) does) and closes it. Batches not durable within
    /// `within` are handed back to the confirmer (and their receipts fail). Returns the
    /// summary. Never waits behind a `send` that waits for room (that send is refused).
    pub async fn close(self, within: Duration) -> Report {
        let (tx, rx) = oneshot::channel();
        let _ = self.control.send(Control::Close { within, reply: tx });
        // Letting go of the hand-off channel tells the driver that everything is handed over
        // (the request above is read first).
        let ZerobusSink { submits, task, .. } = self;
        drop(submits);
        let report = rx.await.unwrap_or_default();
        let _ = task.await;
        report
    }

    /// A receipt for the table's next accepted batch.
    fn receipt(
        &mut self,
        table: TableId,
        rx: oneshot::Receiver<Result<crate::Delivered, crate::DeliveryError>>,
    ) -> Receipt {
        let seq = match self.accepted.get_mut(table.index()) {
            Some(n) => {
                *n += 1;
                *n - 1
            }
            None => 0,
        };
        Receipt::new(table, seq, rx)
    }

    /// A batch whose schema's plan the handle does not know, or for a failed table: the
    /// driver plans, checks and admits it, and answers.
    async fn ask(
        &mut self,
        route: Route,
        batch: RecordBatch,
        token: Token<L>,
    ) -> Result<Receipt, SendError<L>> {
        let Ok(permit) = self.submits.reserve().await else {
            return Err(SendError::Stopped {
                parts: Some((batch, token)),
            });
        };
        let (receipt, rx) = oneshot::channel();
        let (reply, answer) = oneshot::channel();
        permit.send(Handoff::Ask(Ask {
            route,
            batch,
            token,
            receipt,
            reply,
        }));
        let (table, schema) = (route.table(), route.schema_id());
        match answer.await {
            Ok(Ok(plan)) => {
                if let Some(plan) = plan {
                    self.schemas.learn(table, schema, Known::Ready(plan));
                }
                Ok(self.receipt(table, rx))
            }
            Ok(Err(error)) => {
                if let SendError::Unreconcilable { columns, .. } = &error {
                    self.schemas
                        .learn(table, schema, Known::Refused(columns.clone()));
                }
                Err(error)
            }
            // The driver stopped (the runtime is shutting down) while holding the batch.
            Err(_) => Err(SendError::Stopped { parts: None }),
        }
    }

    /// A [`BatchSink`] for one table, making tokens with `positions`.
    pub fn writer<P: Positions<L>>(
        &mut self,
        table: TableId,
        positions: P,
    ) -> TableWriter<'_, L, P> {
        TableWriter {
            sink: self,
            table,
            positions,
            span: OffsetSpan::default(),
            info: CommitInfo::default(),
        }
    }
}

impl<L: Lane> Sink<L> for ZerobusSink<L> {
    async fn send(
        &mut self,
        route: impl Into<Route> + Send,
        batch: RecordBatch,
        token: Token<L>,
    ) -> Result<Receipt, SendError<L>> {
        let mut route = route.into();
        let Some(wire) = self
            .tables
            .iter()
            .find(|(id, _)| *id == route.table())
            .map(|(_, w)| w.clone())
        else {
            return Err(SendError::UnknownTable {
                table: route.table(),
                batch,
                token,
            });
        };
        if wire.provisioned {
            // A schema seen recently keeps its id; a new one is numbered. The driver plans it
            // against the table (the write boundary) before its first batch is admitted, and
            // retires the one it pushed out of the handle's memory once nothing needs it.
            let (schema, out) = self.schemas.id(route.table(), &batch.schema());
            if let Some(old) = out {
                let _ = self.control.send(Control::Retire {
                    table: route.table(),
                    schema: old,
                });
            }
            route = route.table().schema(schema);
        } else if let Some(detail) = schema::difference(&wire.schema, &batch.schema()) {
            return Err(SendError::SchemaMismatch {
                table: wire.name.clone(),
                detail,
                batch,
                token,
            });
        }
        if batch.num_rows() == 0 {
            return Err(SendError::Rejected {
                reason: RejectReason::Empty,
                batch,
                token,
            });
        }
        let table = route.table();
        let known = match self.flags.failed(table) {
            // The driver answers with the core's refusal.
            true => None,
            false => self.schemas.known(table, route.schema_id()).cloned(),
        };
        let plan = match known {
            None => return self.ask(route, batch, token).await,
            Some(Known::Refused(columns)) => {
                return Err(SendError::Unreconcilable {
                    table: wire.name.clone(),
                    columns,
                    batch,
                    token,
                });
            }
            Some(Known::Ready(plan)) => plan,
        };
        // Waiting for room is the only await before the hand-over: dropping the future here
        // leaves the batch unadmitted (see the trait's docs). The rows are checked once the
        // room is taken, so that rows isolated from the batch go only with it.
        let Ok(permit) = self.submits.reserve().await else {
            return Err(SendError::Stopped {
                parts: Some((batch, token)),
            });
        };
        let policy = self
            .bad_rows
            .get(table.index())
            .copied()
            .unwrap_or_default();
        match check::judged(&plan, batch, token, self.max_row_bytes, policy, &wire.name) {
            Judged::Go {
                batch,
                token,
                origin,
                rows,
                isolated,
            } => {
                let (receipt, rx) = oneshot::channel();
                permit.send(Handoff::Checked(Checked {
                    route,
                    plan,
                    batch,
                    token,
                    origin,
                    rows,
                    isolated,
                    receipt,
                }));
                Ok(self.receipt(table, rx))
            }
            Judged::Refused(error) => {
                if let SendError::BadRows { faults, .. } = &error {
                    let rows = boundary::rows_named(faults) as u64;
                    let _ = self.control.send(Control::BadRows { table, rows });
                }
                Err(error)
            }
        }
    }

    async fn flush(&mut self) -> Result<(), FlushError> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Control::Flush(tx))
            .map_err(|_| FlushError::Stopped)?;
        rx.await.map_err(|_| FlushError::Stopped)?
    }
}

/// A [`BatchSink`] writing one table of a [`ZerobusSink`].
#[derive(Debug)]
pub struct TableWriter<'a, L: Lane, P> {
    sink: &'a mut ZerobusSink<L>,
    table: TableId,
    positions: P,
    span: OffsetSpan,
    info: CommitInfo,
}

impl<L: Lane, P: Positions<L>> BatchSink for TableWriter<'_, L, P> {
    type Error = SendError<L>;

    async fn push(&mut self, batch: &RecordBatch) -> Result<(), SendError<L>> {
        let token = self.positions.token(batch);
        let receipt = self.sink.send(self.table, batch.clone(), token).await?;
        self.span.first.get_or_insert(receipt.seq());
        self.span.last = Some(receipt.seq());
        self.info.batches += 1;
        self.info.rows += batch.num_rows() as u64;
        // Fire-and-forget: durability reaches the confirmer, not this call.
        drop(receipt);
        Ok(())
    }

    async fn finish(&mut self) -> Result<(CommitInfo, OffsetSpan), SendError<L>> {
        Ok((
            std::mem::take(&mut self.info),
            std::mem::take(&mut self.span),
        ))
    }
}
