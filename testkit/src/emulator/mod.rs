//! A local Zerobus: a real Arrow Flight server (tonic) on loopback that speaks the Zerobus Arrow
//! protocol as PROTOCOL.md sections A and F describe, so that the adapter, the official client
//! and the demo all talk to a real gRPC server over TCP.
//!
//! Per `DoPut`: the `x-databricks-zerobus-table-name` header names the table; the first message
//! must be the schema (empty `app_metadata`); READY (`{"ack_up_to_offset":-1,
//! "ack_up_to_records":0}`) answers it; every later message must carry `{"offset_id":N}` with N
//! strictly sequential from 0 on the connection; rows are counted from the IPC headers (no chunk
//! size is assumed). Messages are appended to the table's write-ahead log and acknowledged with
//! the connection's cumulative row count only after the log is synced ([`wal`]). Acks batch
//! naturally: everything that arrived while the previous group was being made durable (plus
//! [`EmulatorConfig::ack_latency`]) is made durable and acknowledged together.
//!
//! Faults ([`Fault`]) are queued per table and taken by the table's next connection.
//! Hostile input (bad metadata, gaps, malformed or oversized IPC) ends the call with an error
//! status; decoding is bounded and cannot crash the server.

pub mod delta;
pub mod fallback;
mod frame;
mod limits;
mod materializer;
mod oauth;
mod profile;
mod prometheus;
mod requirements;
mod service;
mod socket;
pub mod wal;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use materializer::Materializer;
use zerobus_sink_catalog::local::LocalDelta;

pub use limits::{Pace, StreamLimits};
pub use oauth::OAuthClient;
pub use profile::{Http2Windows, SERVICE_PUBLICATION_LAG, SERVICE_UNACKED_ROWS};
pub use tonic::Code;

/// How the emulator behaves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EmulatorConfig {
    /// Where the write-ahead logs go (one file per table).
    pub wal_dir: PathBuf,
    /// The service's time to durability: a message is acked this long after it arrived (not
    /// after the previous ack: acks pipeline). Messages that arrive meanwhile share the ack.
    pub ack_latency: Duration,
    /// At most this many messages per ack (0: no limit).
    pub max_messages_per_ack: usize,
    /// Open calls per table beyond this get `RESOURCE_EXHAUSTED` (`None`: no limit).
    pub max_streams_per_table: Option<usize>,
    /// The gRPC message size limit (the tonic default of 4 MiB is too small, PROTOCOL.md 0).
    pub max_message_bytes: usize,
    /// A record batch message may decode to at most this many bytes.
    pub max_decoded_bytes: u64,
    /// Serve TLS with this PEM certificate chain and private key (`None`: plaintext).
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Serve the Delta tables of a local catalog under this root ([`delta`]): streams are
    /// checked against their table, and acked rows land in it. `None`: any table name is
    /// accepted and rows stay in the write-ahead logs.
    pub delta_root: Option<PathBuf>,
    /// Serve the Delta tables of this local catalog instead of [`delta_root`](Self::delta_root)'s
    /// (one on object storage: [`LocalDelta::on_s3`](zerobus_sink_catalog::local::LocalDelta::on_s3)).
    /// The write-ahead logs stay in [`wal_dir`](Self::wal_dir), and so do the fallback files of
    /// rows acked before their table changed (under `wal_dir/fallback/catalog/schema/table`).
    pub delta_catalog: Option<LocalDelta>,
    /// How long acked rows wait before they are appended to their Delta table (grouped into one
    /// commit per table per round).
    pub materialize_lag: Duration,
    /// Enforce the service's per-stream limits ([`StreamLimits`]; `None`: no ceiling).
    pub stream_limits: Option<StreamLimits>,
    /// Rows read and not yet acked per stream, at most: past it the emulator stops reading the
    /// stream, so HTTP/2 flow control pushes back on the client (`None`: no bound; the service
    /// buffers about [`SERVICE_UNACKED_ROWS`]).
    pub max_unacked_rows: Option<u64>,
    /// The HTTP/2 windows to advertise (`None`: hyper's defaults; the service's are
    /// [`Http2Windows::SERVICE`]).
    pub http2_windows: Option<Http2Windows>,
    /// Keep every acked batch in memory for [`Emulator::batches`] (on by default; off for long
    /// benchmarks, where the write-ahead log and the tables still hold everything).
    pub keep_batches: bool,
    /// Require a bearer token this client minted at the token endpoint ([`OAuthClient`];
    /// `None`: any token, or none, is accepted).
    pub oauth: Option<OAuthClient>,
}

impl EmulatorConfig {
    /// Defaults: no added latency, unlimited acks and streams, 16 MiB messages, 256 MiB decoded.
    #[must_use]
    pub fn new(wal_dir: impl Into<PathBuf>) -> EmulatorConfig {
        EmulatorConfig {
            wal_dir: wal_dir.into(),
            ack_latency: Duration::ZERO,
            max_messages_per_ack: 0,
            max_streams_per_table: None,
            max_message_bytes: 16 << 20,
            max_decoded_bytes: 256 << 20,
            tls: None,
            delta_root: None,
            delta_catalog: None,
            materialize_lag: Duration::from_secs(1),
            stream_limits: None,
            max_unacked_rows: None,
            http2_windows: None,
            keep_batches: true,
            oauth: None,
        }
    }

    /// Sets [`oauth`](EmulatorConfig::oauth): streams need a live token `client` minted.
    #[must_use]
    pub fn oauth(mut self, client: OAuthClient) -> EmulatorConfig {
        self.oauth = Some(client);
        self
    }

    /// Enforces per-stream limits ([`StreamLimits::documented`] for the service's).
    #[must_use]
    pub fn stream_limits(mut self, limits: StreamLimits) -> EmulatorConfig {
        self.stream_limits = Some(limits);
        self
    }

    /// Sets [`keep_batches`](EmulatorConfig::keep_batches).
    #[must_use]
    pub fn keep_batches(mut self, keep: bool) -> EmulatorConfig {
        self.keep_batches = keep;
        self
    }

    /// Serves the Delta tables under `root` (the local catalog backend's root) and
    /// materializes acked rows into them ([`delta`]).
    #[must_use]
    pub fn delta_root(mut self, root: impl Into<PathBuf>) -> EmulatorConfig {
        self.delta_root = Some(root.into());
        self
    }

    /// Serves the Delta tables of `catalog` (e.g. on S3) and materializes acked rows into them
    /// ([`delta`]).
    #[must_use]
    pub fn delta_catalog(mut self, catalog: LocalDelta) -> EmulatorConfig {
        self.delta_catalog = Some(catalog);
        self
    }

    /// The local catalog whose tables it serves, if any: [`delta_catalog`](Self::delta_catalog),
    /// else one on [`delta_root`](Self::delta_root).
    #[must_use]
    pub fn catalog(&self) -> Option<LocalDelta> {
        self.delta_catalog
            .clone()
            .or_else(|| self.delta_root.as_ref().map(LocalDelta::new))
    }

    /// Sets [`materialize_lag`](EmulatorConfig::materialize_lag).
    #[must_use]
    pub fn materialize_lag(mut self, lag: Duration) -> EmulatorConfig {
        self.materialize_lag = lag;
        self
    }

    /// Serves TLS with this PEM certificate chain and key; [`Emulator::url`] becomes `https://`.
    #[must_use]
    pub fn tls(mut self, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> EmulatorConfig {
        self.tls = Some((cert_pem, key_pem));
        self
    }

    /// Sets [`ack_latency`](EmulatorConfig::ack_latency).
    #[must_use]
    pub fn ack_latency(mut self, latency: Duration) -> EmulatorConfig {
        self.ack_latency = latency;
        self
    }

    /// Sets [`max_messages_per_ack`](EmulatorConfig::max_messages_per_ack).
    #[must_use]
    pub fn max_messages_per_ack(mut self, n: usize) -> EmulatorConfig {
        self.max_messages_per_ack = n;
        self
    }

    /// Sets [`max_streams_per_table`](EmulatorConfig::max_streams_per_table).
    #[must_use]
    pub fn max_streams_per_table(mut self, n: usize) -> EmulatorConfig {
        self.max_streams_per_table = Some(n);
        self
    }
}

/// A fault for a table's next connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Refuse the call with this status instead of READY.
    RejectOpen {
        /// The status code.
        code: Code,
    },
    /// Accept the schema but never send READY.
    HoldReady,
    /// Refuse the schema: `INVALID_ARGUMENT` with a `google.rpc.ErrorInfo` detail
    /// (`SCHEMA_VALIDATION_FAILED`, domain `zerobus.databricks.com`, `metadata.causes`), as the
    /// service does (PROTOCOL.md C.2).
    RejectSchema {
        /// The comma-separated causes, e.g. `"TYPE_INCOMPATIBLE,FIELD_NOT_IN_TABLE"`.
        causes: String,
    },
    /// Once at least `logged` of this call's traffic is logged (and before acking it), end
    /// the call with this status.
    FailAfter {
        /// How much is logged first.
        logged: Count,
        /// The status code.
        code: Code,
    },
    /// Once at least `logged` of this call's traffic is logged (and before acking it), cut the
    /// TCP connection: no status, no trailers.
    DropAfter {
        /// How much is logged first.
        logged: Count,
    },
    /// Once at least `acked` of this call's traffic is acked, send `close_stream_duration_ms`;
    /// keep accepting and acking; end the call (OK) when the client half-closes or `grace`
    /// passes.
    RotateAfter {
        /// How much is acked first.
        acked: Count,
        /// The grace period.
        grace: Duration,
    },
    /// Once at least `logged` of this call's traffic is logged, ack more rows than were
    /// received.
    ForwardAckAfter {
        /// How much is logged first.
        logged: Count,
    },
    /// Send every ack `1 + times` times: the same offset repeated (official SDK issue #639,
    /// where repeats reset the client's no-ack timer).
    RepeatAcks {
        /// Extra copies of each ack.
        times: u32,
    },
    /// Once at least `acked` of this call's traffic is acked, make no more progress: keep
    /// reading what arrives but neither log nor ack it, and repeat the last ack every `every`,
    /// until the client gives up on the call (the stuck stream of official SDK issue #639).
    /// Nothing after the stuck point is durable: a client must replay it on a new stream.
    StuckAfter {
        /// How much is acked first.
        acked: Count,
        /// How often the last ack is repeated.
        every: Duration,
    },
}

/// How far into one call a fault fires: a number of messages, or of rows. A client that sends
/// several batches as one message (ours, by default) takes a number of messages that depends on
/// timing, so a fault meant to land at the same point of every run counts rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Record batch messages.
    Messages(u64),
    /// Rows, summed over the messages.
    Rows(u64),
}

impl Count {
    /// Whether a call that has seen `messages` messages of `rows` rows has reached this count.
    #[must_use]
    pub fn reached(self, messages: u64, rows: u64) -> bool {
        match self {
            Count::Messages(n) => messages >= n,
            Count::Rows(n) => rows >= n,
        }
    }
}

/// Counters, for assertions. Its `Debug` shows how many bearer tokens were presented, never
/// the tokens themselves.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// `DoPut` calls received.
    pub calls: u64,
    /// Calls answered with READY.
    pub ready: u64,
    /// Calls refused at open, by status code name.
    pub refused: BTreeMap<String, u64>,
    /// Record batch messages logged.
    pub messages: u64,
    /// Rows logged.
    pub rows: u64,
    /// Acks sent (READY not counted).
    pub acks: u64,
    /// Messages by body codec: "zstd", "lz4", "none".
    pub codecs: BTreeMap<&'static str, u64>,
    /// Request streams the client ended cleanly (half-close).
    pub half_closes: u64,
    /// Request streams that broke (reset, dropped connection).
    pub resets: u64,
    /// Calls ended with an error status by the emulator (faults and hostile input).
    pub errors: u64,
    /// Distinct `user-agent` values seen.
    pub user_agents: BTreeSet<String>,
    /// Bearer tokens presented, in order (test tokens only: this is an emulator).
    pub tokens: Vec<String>,
    /// Most streams open at once on one table.
    pub max_open_per_table: usize,
    /// Batches found in the write-ahead logs at start (durable before a restart); included in
    /// `messages` and `rows`.
    pub recovered_messages: u64,
    /// Rows appended to Delta tables by the materializer (this run).
    pub materialized_rows: u64,
    /// Delta commits the materializer made (this run).
    pub materialized_commits: u64,
    /// Materializer rounds that failed for a table (retried the next round).
    pub materialize_errors: u64,
    /// Acks held back to keep a stream within [`StreamLimits`]' rates.
    pub throttled_acks: u64,
    /// Most rows read from one stream and not yet acked, at any moment.
    pub max_unacked_rows: u64,
    /// Acks sent again with a count already acked ([`Fault::RepeatAcks`],
    /// [`Fault::StuckAfter`]).
    pub repeated_acks: u64,
    /// Acked rows the materializer wrote to a table's fallback directory instead of the table:
    /// the table changed under them, not additively, between their ack and their publication
    /// ([`delta`]).
    pub fallback_rows: u64,
    /// Parquet files written to fallback directories.
    pub fallback_files: u64,
    /// Streams ended for a table that breaks the service's table requirements, by requirement
    /// (`table_name`, `column_name`, `managed_delta`, `catalog_managed_commits`, `recreated`);
    /// each is also in `errors`.
    pub table_refusals: BTreeMap<&'static str, u64>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats")
            .field("calls", &self.calls)
            .field("ready", &self.ready)
            .field("refused", &self.refused)
            .field("messages", &self.messages)
            .field("rows", &self.rows)
            .field("recovered_messages", &self.recovered_messages)
            .field("acks", &self.acks)
            .field("codecs", &self.codecs)
            .field("half_closes", &self.half_closes)
            .field("resets", &self.resets)
            .field("errors", &self.errors)
            .field("user_agents", &self.user_agents)
            .field(
                "tokens",
                &format_args!("{} presented (not shown)", self.tokens.len()),
            )
            .field("max_open_per_table", &self.max_open_per_table)
            .field("materialized_rows", &self.materialized_rows)
            .field("materialized_commits", &self.materialized_commits)
            .field("materialize_errors", &self.materialize_errors)
            .field("throttled_acks", &self.throttled_acks)
            .field("max_unacked_rows", &self.max_unacked_rows)
            .field("repeated_acks", &self.repeated_acks)
            .field("fallback_rows", &self.fallback_rows)
            .field("fallback_files", &self.fallback_files)
            .field("table_refusals", &self.table_refusals)
            .finish()
    }
}

#[derive(Debug, Default)]
struct TableState {
    batches: Vec<RecordBatch>,
    open: usize,
    faults: VecDeque<Fault>,
    /// The Delta table's columns when this run first accepted a stream for it: what the
    /// materializer's first round compares with ([`fallback`]).
    columns_at_open: Option<Vec<zerobus_sink_catalog::LiveColumn>>,
}

#[derive(Debug, Default)]
struct State {
    tables: BTreeMap<String, TableState>,
    rejected_tokens: BTreeSet<String>,
    /// Tokens the token endpoint minted, with when each expires.
    minted: BTreeMap<String, std::time::Instant>,
    minted_count: u64,
    stats: Stats,
    /// Per table, the write-ahead log's byte position up to which its Delta table holds the rows.
    materialized: BTreeMap<String, u64>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    config: EmulatorConfig,
    state: Mutex<State>,
    /// Every connection still open, so that [`Emulator::kill`] can cut them all.
    switches: Mutex<Vec<socket::Watch>>,
    wals: tokio::sync::Mutex<BTreeMap<String, wal::Wal>>,
    /// Woken whenever the state may have changed (see [`Emulator::until`]).
    changed: tokio::sync::Notify,
    /// Materialization held back ([`Emulator::hold_materialization`]).
    held: std::sync::atomic::AtomicBool,
}

/// The locked state; releasing it wakes [`Emulator::until`] waiters to look again.
struct StateGuard<'a> {
    guard: MutexGuard<'a, State>,
    changed: &'a tokio::sync::Notify,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        self.changed.notify_waiters();
    }
}

impl Shared {
    /// The state, without waking waiters (for reads that change nothing).
    fn read(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug in a test; the state is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The state, for changes: waiters look again when it is released.
    fn lock(&self) -> StateGuard<'_> {
        StateGuard {
            guard: self.read(),
            changed: &self.changed,
        }
    }
}

/// A running emulator. Dropping it stops the server.
#[derive(Debug)]
pub struct Emulator {
    addr: SocketAddr,
    scheme: &'static str,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// The materializer (with a Delta root).
    materializer: Option<Materializer>,
}

impl Emulator {
    /// Starts the emulator on `127.0.0.1` (an ephemeral port) on the current tokio runtime.
    pub async fn start(config: EmulatorConfig) -> io::Result<Emulator> {
        Emulator::bind("127.0.0.1:0".parse().expect("a valid address"), config).await
    }

    /// Starts the emulator on `addr`.
    pub async fn bind(addr: SocketAddr, config: EmulatorConfig) -> io::Result<Emulator> {
        tokio::fs::create_dir_all(&config.wal_dir).await?;
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let max = config.max_message_bytes;
        let mut builder = tonic::transport::Server::builder();
        if let Some(w) = config.http2_windows {
            builder = builder
                .initial_connection_window_size(w.connection)
                .initial_stream_window_size(w.stream);
        }
        if let Some((cert, key)) = &config.tls {
            // tonic's server TLS takes the process-default provider; with both ring and
            // aws-lc-rs compiled in there is none until one is installed (an error here means
            // one already is, which is fine).
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let identity = tonic::transport::Identity::from_pem(cert, key);
            builder = builder
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("TLS: {e}")))?;
        }
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let state = recover(&config.wal_dir, config.keep_batches)?;
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(state),
            switches: Mutex::new(Vec::new()),
            wals: tokio::sync::Mutex::new(BTreeMap::new()),
            changed: tokio::sync::Notify::new(),
            held: std::sync::atomic::AtomicBool::new(false),
        });
        let service = FlightServiceServer::new(service::Service::new(shared.clone()))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max);
        let materializer = match shared.config.catalog() {
            Some(catalog) => Some(Materializer::start(shared.clone(), catalog)?),
            None => None,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = builder
                .add_service(service)
                .serve_with_incoming_shutdown(socket::incoming(listener), async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "emulator server stopped");
            }
        });
        Ok(Emulator {
            addr,
            scheme,
            shared,
            stop: Some(stop),
            task: Some(task),
            materializer,
        })
    }

    /// Where it listens.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its endpoint URL (`http://127.0.0.1:PORT`, or `https://` when serving TLS).
    #[must_use]
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Queues a fault for the next connection of `table`.
    pub fn inject(&self, table: &str, fault: Fault) {
        let mut state = self.shared.lock();
        state
            .tables
            .entry(table.to_owned())
            .or_default()
            .faults
            .push_back(fault);
    }

    /// Refuses `token` with `UNAUTHENTICATED` from now on.
    pub fn reject_token(&self, token: &str) {
        self.shared.lock().rejected_tokens.insert(token.to_owned());
    }

    /// The batches logged for `table`, in the order they were made durable.
    #[must_use]
    pub fn batches(&self, table: &str) -> Vec<RecordBatch> {
        let state = self.shared.read();
        state
            .tables
            .get(table)
            .map(|t| t.batches.clone())
            .unwrap_or_default()
    }

    /// The path of `table`'s write-ahead log (read it back with [`wal::read`]).
    #[must_use]
    pub fn wal_path(&self, table: &str) -> PathBuf {
        wal::path(&self.shared.config.wal_dir, table)
    }

    /// The WAL directory.
    #[must_use]
    pub fn wal_dir(&self) -> &Path {
        &self.shared.config.wal_dir
    }

    /// Where its Delta tables are, if it serves a folder's.
    #[must_use]
    pub fn delta_root(&self) -> Option<&Path> {
        self.shared.config.delta_root.as_deref()
    }

    /// Where its Delta tables are, as a URL (`file://…/` or `s3://…/`), if it serves any.
    #[must_use]
    pub fn tables_url(&self) -> Option<String> {
        self.shared.config.catalog().map(|c| c.root_url())
    }

    /// Holds materialization back (`true`) or lets it go on (`false`): acked rows stay in the
    /// write-ahead log, durable, and the Delta tables stay as they are, as when the service's
    /// table metadata lags far behind its acks. For tests of readers that must not assume
    /// read-after-write consistency.
    pub fn hold_materialization(&self, held: bool) {
        self.shared
            .held
            .store(held, std::sync::atomic::Ordering::SeqCst);
        self.shared.changed.notify_waiters();
    }

    /// Waits until `table`'s Delta table holds every row its write-ahead log held when this was
    /// called (the materializer has caught up). Returns at once without a Delta root.
    pub async fn until_materialized(&self, table: &str) {
        if self.shared.config.delta_root.is_none() && self.shared.config.delta_catalog.is_none() {
            return;
        }
        let logged = std::fs::metadata(self.wal_path(table)).map_or(0, |m| m.len());
        loop {
            let changed = self.shared.changed.notified();
            if self
                .shared
                .read()
                .materialized
                .get(table)
                .copied()
                .unwrap_or(0)
                >= logged
            {
                return;
            }
            changed.await;
        }
    }

    /// The counters so far.
    #[must_use]
    pub fn stats(&self) -> Stats {
        self.shared.read().stats.clone()
    }

    /// Waits until the counters satisfy `condition` (for example, until a client has reconnected):
    /// tests await the event instead of sleeping.
    pub async fn until(&self, condition: impl Fn(&Stats) -> bool) {
        loop {
            let changed = self.shared.changed.notified();
            if condition(&self.shared.read().stats) {
                return;
            }
            changed.await;
        }
    }

    /// An outage: stops listening and cuts every connection at once (no status, no
    /// trailers), as a crashed process would; the materializer stops where it is. What was
    /// acked is in the write-ahead logs; a new emulator bound to the same address and
    /// directories serves it again. Returns once the address is free.
    pub async fn kill(mut self) {
        if let Some(materializer) = self.materializer.take() {
            materializer.abort().await;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let switches = std::mem::take(
            &mut *self
                .shared
                .switches
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for s in switches {
            s.kill();
        }
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Stops accepting calls, waits for the server task to end, then materializes what is
    /// logged (a graceful stop leaves every logged row in its Delta table). Returns the final
    /// counters, materialization included.
    pub async fn shutdown(mut self) -> Stats {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        if let Some(materializer) = self.materializer.take() {
            materializer.stop().await;
        }
        self.stats()
    }
}

/// What the write-ahead logs under `dir` hold from earlier runs: the counters, and with
/// `keep_batches` every table's batches, so that stats and [`Emulator::batches`] survive a
/// restart. Without them a log is counted from its records' headers, so that a restart late in
/// a long run is as quick as an early one. A torn tail (a record a crash cut short: never
/// synced, so never acked) is cut off first, so that what is appended next follows a complete
/// record.
fn recover(dir: &Path, keep_batches: bool) -> io::Result<State> {
    let mut state = State::default();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let (Some(stem), Some("wal")) = (
            path.file_stem().and_then(|s| s.to_str()),
            path.extension().and_then(|s| s.to_str()),
        ) else {
            continue;
        };
        let tally = wal::tally(&path)?;
        let cut = wal::cut_torn_tail(&path, &tally)?;
        if cut > 0 {
            tracing::warn!(log = %path.display(), bytes = cut, at = tally.end, "cut a torn record off the write-ahead log");
        }
        state.stats.recovered_messages += tally.messages;
        state.stats.messages += tally.messages;
        state.stats.rows += tally.rows;
        let table = state.tables.entry(stem.to_owned()).or_default();
        if keep_batches {
            table.batches.extend(wal::read(&path)?);
        }
    }
    Ok(state)
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
