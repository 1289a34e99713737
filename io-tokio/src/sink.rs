//! The handle: [`ZerobusSink`], its configuration, and the plan's `Sink` and `BatchSink` traits.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Schema, SchemaRef};
use tokio::sync::{mpsc, oneshot};
use zerobus_sink::{
    Confirmation, FailedBatch, FailureReason, Lane, Route, SinkConfig, SinkCore, TableId,
    TableSpec, Token,
};

use crate::auth::{Credentials, TokenSource};
use crate::conn::{self, TableWire};
use crate::driver::{Command, Driver, Submit};
use crate::error::{FlushError, SendError, StartError};
use crate::receipt::Receipt;
use crate::report::Report;
use crate::wire::{self, Compression};

/// Where and how to connect.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ZerobusConfig {
    /// The Zerobus endpoint, `https://…` (TLS, webpki roots) or `http://…` (plaintext, for a
    /// local emulator). Without a scheme, `https://` is assumed.
    pub endpoint: String,
    /// How connections authenticate.
    pub credentials: Credentials,
    /// IPC body compression (zstd by default, as the official client).
    pub compression: Compression,
    /// The core's configuration (windows, pool cap, timeouts, retries).
    pub core: SinkConfig,
    /// Appended to the user agent (`zerobus-sink-rs/<version> <application_name>`).
    pub application_name: Option<String>,
    /// An extra trust anchor (PEM) for `https` endpoints, e.g. a private CA in front of the
    /// service; the webpki roots are trusted either way.
    pub tls_ca_pem: Option<Vec<u8>>,
}

impl ZerobusConfig {
    /// Defaults for `endpoint`: no credentials, zstd, the core's defaults.
    #[must_use]
    pub fn new(endpoint: impl Into<String>) -> ZerobusConfig {
        let endpoint = endpoint.into();
        let endpoint = if endpoint.contains("://") {
            endpoint
        } else {
            format!("https://{endpoint}")
        };
        ZerobusConfig {
            endpoint,
            credentials: Credentials::None,
            compression: Compression::default(),
            core: SinkConfig::default(),
            application_name: None,
            tls_ca_pem: None,
        }
    }

    /// Trusts this PEM certificate (a private CA) for `https` endpoints, besides the webpki roots.
    #[must_use]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> ZerobusConfig {
        self.tls_ca_pem = Some(pem.into());
        self
    }

    /// Sets the credentials.
    #[must_use]
    pub fn credentials(mut self, credentials: Credentials) -> ZerobusConfig {
        self.credentials = credentials;
        self
    }

    /// Sets the compression.
    #[must_use]
    pub fn compression(mut self, compression: Compression) -> ZerobusConfig {
        self.compression = compression;
        self
    }

    /// Sets the core configuration.
    #[must_use]
    pub fn core(mut self, core: SinkConfig) -> ZerobusConfig {
        self.core = core;
        self
    }
}

/// A table the sink writes: its spec (name, pool sizing, ordering key) and its Arrow schema.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// Name, sizing and routing.
    pub spec: TableSpec,
    /// Every batch must have exactly this schema.
    pub schema: SchemaRef,
}

impl TableDef {
    /// A table named `catalog.schema.table` with this schema and default sizing.
    #[must_use]
    pub fn new(name: impl Into<String>, schema: SchemaRef) -> TableDef {
        TableDef {
            spec: TableSpec::new(name),
            schema,
        }
    }
}

/// Receives every token back: confirmed once its batch is durable, or failed with its batch.
/// Generic (the sink is `ZerobusSink<L>` whatever the confirmer); it runs on the driver task,
/// so it must not block.
pub trait Confirmer<L: Lane>: Send + 'static {
    /// A batch of `table` is durable: commit the confirmation's position.
    fn confirmed(&mut self, table: &str, confirmation: Confirmation<L>);
    /// A batch of `table` will never be confirmed: retry it or fail the pipeline.
    fn failed(&mut self, table: &str, batch: FailedBatch<L, RecordBatch>, reason: &FailureReason);
}

/// The plan's `Sink` (seed section 2.2): fire-and-forget sends with receipts, and a flush.
pub trait Sink<L: Lane> {
    /// Admits a batch and returns once it is admitted (awaiting only while the window is full:
    /// that is the backpressure). The receipt resolves when the batch is durable.
    fn send(
        &mut self,
        route: impl Into<Route> + Send,
        batch: RecordBatch,
        token: Token<L>,
    ) -> impl Future<Output = Result<Receipt, SendError<L>>> + Send;
    /// Waits until every batch sent so far is durable or handed back.
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

/// The admission numbers `[first, last]` of the batches pushed since the previous finish
/// (`None` when nothing was pushed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetSpan {
    /// The first batch's admission number.
    pub first: Option<u64>,
    /// The last batch's admission number (the submitted high-water).
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
    commands: mpsc::Sender<Command<L>>,
    tables: Vec<(TableId, Arc<TableWire>)>,
    task: tokio::task::JoinHandle<()>,
}

impl<L: Lane> std::fmt::Debug for Command<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Submit(_) => "Submit",
            Command::Flush(_) => "Flush",
            Command::Report(_) => "Report",
            Command::Close { .. } => "Close",
        })
    }
}

impl<L: Lane> ZerobusSink<L> {
    /// Starts the sink's driver on the current tokio runtime (it never builds one). Streams open
    /// at each table's first batch.
    pub fn start<C: Confirmer<L>>(
        config: ZerobusConfig,
        tables: Vec<TableDef>,
        confirmer: C,
    ) -> Result<ZerobusSink<L>, StartError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| StartError::NoRuntime)?;
        let mut core = SinkCore::new(config.core)?;
        let mut wires = Vec::new();
        for def in tables {
            let name = def.spec.name.clone();
            if let Some(f) = def
                .schema
                .fields()
                .iter()
                .find(|f| matches!(f.data_type(), DataType::Dictionary(..)))
            {
                return Err(StartError::Table {
                    table: name,
                    reason: format!(
                        "column {} is dictionary-encoded; cast it to its value type",
                        f.name()
                    ),
                });
            }
            let id = core.add_table(def.spec).map_err(|e| StartError::Table {
                table: name.clone(),
                reason: e.to_string(),
            })?;
            wires.push((
                id,
                Arc::new(TableWire {
                    name,
                    schema: def.schema,
                }),
            ));
        }
        let mut user_agent = format!("zerobus-sink-rs/{}", env!("CARGO_PKG_VERSION"));
        if let Some(app) = &config.application_name {
            user_agent.push(' ');
            user_agent.push_str(app);
        }
        let shared = Arc::new(conn::Shared {
            endpoint: config.endpoint.clone(),
            user_agent,
            connect_timeout: config.core.open_timeout,
            tls_ca_pem: config.tls_ca_pem.clone(),
            options: wire::write_options(config.compression)?,
            tokens: TokenSource::new(config.credentials),
        });
        let (commands, rx) = mpsc::channel(1);
        let driver = Driver::new(
            core,
            confirmer,
            shared,
            wires.iter().map(|(_, w)| w.clone()).collect(),
            rx,
        );
        let task = runtime.spawn(driver.run());
        Ok(ZerobusSink {
            commands,
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

    /// Progress so far (`None` if the driver is gone).
    pub async fn report(&self) -> Option<Report> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(Command::Report(tx)).await.ok()?;
        rx.await.ok()
    }

    /// Stops admission, drains every stream to durable and closes it. Batches not durable
    /// within `within` are handed back to the confirmer (and their receipts fail). Returns the
    /// summary.
    pub async fn close(self, within: Duration) -> Report {
        let (tx, rx) = oneshot::channel();
        let _ = self
            .commands
            .send(Command::Close { within, reply: tx })
            .await;
        let report = rx.await.unwrap_or_default();
        let _ = self.task.await;
        report
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

/// How `found` differs from the table's `expected` schema, if it does.
fn schema_difference(expected: &Schema, found: &Schema) -> Option<String> {
    if expected == found {
        return None;
    }
    let detail = expected
        .fields()
        .iter()
        .zip(found.fields().iter())
        .find(|(a, b)| a != b)
        .map(|(a, b)| format!("column {}: table has {a:?}, batch has {b:?}", a.name()))
        .unwrap_or_else(|| {
            format!(
                "table has {} columns, batch has {} (or the schema metadata differs)",
                expected.fields().len(),
                found.fields().len()
            )
        });
    Some(detail)
}

impl<L: Lane> Sink<L> for ZerobusSink<L> {
    async fn send(
        &mut self,
        route: impl Into<Route> + Send,
        batch: RecordBatch,
        token: Token<L>,
    ) -> Result<Receipt, SendError<L>> {
        let route = route.into();
        let Some((_, wire)) = self.tables.iter().find(|(id, _)| *id == route.table()) else {
            return Err(SendError::UnknownTable {
                table: route.table(),
                batch,
                token,
            });
        };
        if let Some(detail) = schema_difference(&wire.schema, &batch.schema()) {
            return Err(SendError::SchemaMismatch {
                table: wire.name.clone(),
                detail,
                batch,
                token,
            });
        }
        let (reply, rx) = oneshot::channel();
        let submit = Submit {
            route,
            batch,
            token,
            reply,
        };
        if let Err(mpsc::error::SendError(Command::Submit(s))) =
            self.commands.send(Command::Submit(submit)).await
        {
            return Err(SendError::Stopped {
                parts: Some((s.batch, s.token)),
            });
        }
        match rx.await {
            Ok(result) => result,
            // The driver stopped (the runtime is shutting down) while holding the batch.
            Err(_) => Err(SendError::Stopped { parts: None }),
        }
    }

    async fn flush(&mut self) -> Result<(), FlushError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Flush(tx))
            .await
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
