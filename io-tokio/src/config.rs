//! What a sink is started with: where and how to connect ([`ZerobusConfig`]), the tables it
//! writes ([`TableDef`]) and what it does with batches the core hands back
//! ([`ResubmitPolicy`]).

use std::time::Duration;

use arrow_schema::SchemaRef;
use zerobus_sink::{PoolSizing, RetryPolicy, SinkConfig, TableSpec, WindowLimits};
use zerobus_sink_catalog::{Contract, PrimaryRawProof, PrimaryRawShape, Role};

use crate::boundary::{BadRows, Conversions};
use crate::conn::auth::Credentials;
use crate::conn::proxy::ProxyConfig;
use crate::wire::Compression;

/// The default [`ZerobusConfig::max_row_bytes`]: the service's 10 MiB message limit less the
/// 64 KiB the official client keeps for framing (PROTOCOL.md E and B).
pub const MAX_ROW_BYTES: u64 = 10 * 1024 * 1024 - 64 * 1024;

/// What the sink does with a batch the core hands back for a reason that a later attempt can
/// fix (a slot that spent its retry budget during an outage): it submits it again, the
/// non-durable rows only, with its token, after `backoff x attempt`, up to `max_attempts`
/// times; only then does the batch reach [`Confirmer::failed`](crate::Confirmer::failed).
/// Final reasons (the table failed, the service broke the protocol, the close deadline) reach
/// the confirmer at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResubmitPolicy {
    /// Resubmissions of one batch before it is handed back (0: never resubmit).
    pub max_attempts: u32,
    /// Wait before the first resubmission; the n-th waits n times this.
    pub backoff: Duration,
}

impl Default for ResubmitPolicy {
    /// Three resubmissions, 5 s apart, then 10 s, then 15 s: with the core's own retries
    /// (up to 4 reconnects per stream, backing off 2 s to 60 s) a batch rides out an outage of
    /// a few minutes before the pipeline hears of it.
    fn default() -> ResubmitPolicy {
        ResubmitPolicy {
            max_attempts: 3,
            backoff: Duration::from_secs(5),
        }
    }
}

/// Where and how to connect.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ZerobusConfig {
    /// The Zerobus endpoint: `https://…` (TLS, webpki roots) or `http://…` (plaintext, for a
    /// local emulator). An endpoint without a scheme is refused at start.
    pub endpoint: String,
    /// How connections authenticate.
    pub credentials: Credentials,
    /// IPC body compression (zstd by default, as the official client).
    pub compression: Compression,
    /// The core's configuration (windows, pool cap, timeouts, retries).
    pub core: SinkConfig,
    /// What to do with batches the core hands back.
    pub resubmit: ResubmitPolicy,
    /// Appended to the user agent (`zerobus-sink-rs/<version> <application_name>`).
    pub application_name: Option<String>,
    /// An extra trust anchor (PEM) for `https` endpoints, e.g. a private CA in front of the
    /// service; the webpki roots are trusted either way.
    pub tls_ca_pem: Option<Vec<u8>>,
    /// The largest row the sink sends ([`MAX_ROW_BYTES`] by default): a larger one cannot fit
    /// a message, so it is a bad row (named, handed back; see [`BadRows`]). The wire splits
    /// batches into messages, never rows.
    pub max_row_bytes: u64,
    /// How often a primary-raw table's preconditions are checked again while its streams are
    /// open ([`PRIMARY_RAW_RECHECK`] by default); they are also checked at every stream open.
    pub primary_raw_recheck: Duration,
    /// How streams reach the endpoint: the environment's `grpc_proxy`/`https_proxy`/`no_proxy`
    /// by default, as the official client ([`ProxyConfig`]).
    pub proxy: ProxyConfig,
    /// Trust the platform's root certificates for `https` endpoints, besides the bundled webpki
    /// roots and `tls_ca_pem` (on by default; a platform without a store just adds none).
    pub native_roots: bool,
    /// How many batches `send` may hand over beyond what the windows admit ([`HANDOFFS`] by
    /// default; at least 1, 0 is taken as 1): while they wait for the sink's task, `send`
    /// returns without waiting for it. More decouples the caller from the task further and
    /// holds that many more batches in memory when the windows are full.
    pub handoffs: usize,
    /// Small batches handed to a stream while it was sending leave together as one wire
    /// message of at most this many Arrow bytes ([`COALESCE_BYTES`] by default, capped by the
    /// core's `max_message_bytes`); a batch of this size or more leaves alone. 0 sends every
    /// batch as a message of its own, as the official client does. Nothing waits to be
    /// grouped, so this costs no latency; acks complete batches by rows either way.
    pub coalesce_bytes: u64,
}

/// The default [`ZerobusConfig::coalesce_bytes`]: 256 KiB of Arrow data, the size from which a
/// batch is encoded on another worker thread. Fewer messages for the service to decode and
/// ack; with 100-row batches, a quarter of the official client's CPU per MB in the bench
/// against the emulator (docs/performance.md).
pub const COALESCE_BYTES: u64 = 256 * 1024;

/// The default [`ZerobusConfig::handoffs`]: 32 batches handed over beyond the windows, so that
/// `send` returns while the sink's task takes the batches before it in bulk.
pub const HANDOFFS: usize = 32;

/// The default [`ZerobusConfig::primary_raw_recheck`]: five minutes, one describe per
/// primary-raw table, so that a property turned on under a running pipeline stops it within
/// minutes at a negligible catalog cost.
pub const PRIMARY_RAW_RECHECK: Duration = Duration::from_secs(300);

impl ZerobusConfig {
    /// Defaults for `endpoint`: no credentials, zstd, the core's defaults, the default
    /// resubmit policy.
    #[must_use]
    pub fn new(endpoint: impl Into<String>) -> ZerobusConfig {
        ZerobusConfig {
            endpoint: endpoint.into(),
            credentials: Credentials::None,
            compression: Compression::default(),
            core: SinkConfig::default(),
            resubmit: ResubmitPolicy::default(),
            application_name: None,
            tls_ca_pem: None,
            max_row_bytes: MAX_ROW_BYTES,
            primary_raw_recheck: PRIMARY_RAW_RECHECK,
            proxy: ProxyConfig::default(),
            native_roots: true,
            handoffs: HANDOFFS,
            coalesce_bytes: COALESCE_BYTES,
        }
    }

    /// Sets the most Arrow bytes small batches fill together in one wire message (0: every
    /// batch its own message).
    #[must_use]
    pub fn coalesce_bytes(mut self, bytes: u64) -> ZerobusConfig {
        self.coalesce_bytes = bytes;
        self
    }

    /// Sets how many batches `send` may hand over beyond what the windows admit.
    #[must_use]
    pub fn handoffs(mut self, batches: usize) -> ZerobusConfig {
        self.handoffs = batches;
        self
    }

    /// Sets how streams reach the endpoint (a proxy, or directly whatever the environment says).
    #[must_use]
    pub fn proxy(mut self, proxy: ProxyConfig) -> ZerobusConfig {
        self.proxy = proxy;
        self
    }

    /// Sets how often primary-raw tables are checked again while their streams are open.
    #[must_use]
    pub fn primary_raw_recheck(mut self, every: Duration) -> ZerobusConfig {
        self.primary_raw_recheck = every;
        self
    }

    /// Sets the largest row the sink sends.
    #[must_use]
    pub fn max_row_bytes(mut self, bytes: u64) -> ZerobusConfig {
        self.max_row_bytes = bytes;
        self
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

    /// Sets the whole core configuration.
    #[must_use]
    pub fn core(mut self, core: SinkConfig) -> ZerobusConfig {
        self.core = core;
        self
    }

    /// Sets each stream's window (what may be in flight per stream).
    #[must_use]
    pub fn window(mut self, window: WindowLimits) -> ZerobusConfig {
        self.core.window = window;
        self
    }

    /// Sets the cap on streams open at once across every table.
    #[must_use]
    pub fn max_open_streams(mut self, streams: u16) -> ZerobusConfig {
        self.core.max_open_streams = streams;
        self
    }

    /// Sets how streams reconnect.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> ZerobusConfig {
        self.core.retry = retry;
        self
    }

    /// Sets what happens to batches handed back.
    #[must_use]
    pub fn resubmit(mut self, resubmit: ResubmitPolicy) -> ZerobusConfig {
        self.resubmit = resubmit;
        self
    }

    /// Names the application in the user agent.
    #[must_use]
    pub fn application_name(mut self, name: impl Into<String>) -> ZerobusConfig {
        self.application_name = Some(name.into());
        self
    }
}

/// A table the sink writes: its spec (name, pool sizing, ordering key) and its Arrow schema;
/// for a sink that provisions through a catalog
/// ([`ZerobusSink::start_provisioned`](crate::ZerobusSink::start_provisioned)) also its data
/// contract and role.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TableDef {
    /// Name, sizing and routing.
    pub spec: TableSpec,
    /// Taken as it is: every batch must have exactly this schema. Provisioned: the first
    /// schema expected (checked at start); batches may drift from it, and each new schema is
    /// reconciled with the table before its first batch is sent.
    pub schema: SchemaRef,
    /// Comments, owner and properties for the table (provisioned sinks).
    pub contract: Option<Contract>,
    /// The primary-raw role, with the shape its preconditions were validated against (only a
    /// [`PrimaryRawProof`] sets it).
    pub(crate) primary_raw: Option<PrimaryRawShape>,
    /// What the write boundary may convert beyond lossless casts (provisioned sinks; both off
    /// by default).
    pub conversions: Conversions,
    /// What happens to a batch with rows the table would refuse (the whole batch fails, by
    /// default).
    pub bad_rows: BadRows,
}

impl TableDef {
    /// A table named `catalog.schema.table` with this schema and the default pool (2 streams).
    #[must_use]
    pub fn new(name: impl Into<String>, schema: SchemaRef) -> TableDef {
        TableDef {
            spec: TableSpec::new(name),
            schema,
            contract: None,
            primary_raw: None,
            conversions: Conversions::default(),
            bad_rows: BadRows::default(),
        }
    }

    /// Lets the write boundary make these conversions (provisioned sinks).
    #[must_use]
    pub fn conversions(mut self, conversions: Conversions) -> TableDef {
        self.conversions = conversions;
        self
    }

    /// What happens to a batch with rows the table would refuse.
    #[must_use]
    pub fn bad_rows(mut self, policy: BadRows) -> TableDef {
        self.bad_rows = policy;
        self
    }

    /// Describes the table with a data contract (provisioned sinks).
    #[must_use]
    pub fn contract(mut self, contract: Contract) -> TableDef {
        self.contract = Some(contract);
        self
    }

    /// The primary raw copy of a table that met every precondition of the role when
    /// [`validate`](zerobus_sink_catalog::primary_raw::validate) described it (provisioned
    /// sinks only; seed section 8). The sink checks the preconditions again at every stream
    /// open and every [`ZerobusConfig::primary_raw_recheck`]: a table found changed fails with
    /// [`StreamError::Precondition`](zerobus_sink::StreamError), its batches not yet durable
    /// handed back, nothing more admitted. See `docs/primary-raw.md`.
    ///
    /// Only a proof gives a table the role; the role cannot be set by hand:
    ///
    /// ```compile_fail,E0616
    /// # use std::sync::Arc;
    /// # use arrow_schema::Schema;
    /// use zerobus_sink_catalog::PrimaryRawShape;
    /// use zerobus_sink_tokio::TableDef;
    /// let mut def = TableDef::new("main.raw.orders", Arc::new(Schema::empty()));
    /// def.primary_raw = Some(PrimaryRawShape::DeltaReadable);
    /// ```
    #[must_use]
    pub fn primary_raw(proof: PrimaryRawProof, schema: SchemaRef) -> TableDef {
        let mut def = TableDef::new(proof.table().full_name(), schema);
        def.primary_raw = Some(proof.shape());
        def
    }

    /// The table's role.
    #[must_use]
    pub fn role(&self) -> Role {
        role_of(self.primary_raw.is_some())
    }

    /// Exactly `streams` streams for this table.
    #[must_use]
    pub fn streams(self, streams: u16) -> TableDef {
        self.sizing(PoolSizing::fixed(streams))
    }

    /// Streams sized to the table's peak bandwidth ([`PoolSizing::for_peak`]) or set by hand.
    #[must_use]
    pub fn sizing(mut self, sizing: PoolSizing) -> TableDef {
        self.spec = self.spec.sizing(sizing);
        self
    }

    /// Batches carry an ordering key: route each with `table.key(hash)`, so one key's batches
    /// stay on one stream and in order.
    #[must_use]
    pub fn keyed(mut self) -> TableDef {
        self.spec = self.spec.keyed();
        self
    }
}

/// The role of a table with (`true`) or without the primary-raw role's shape.
pub(crate) fn role_of(primary_raw: bool) -> Role {
    if primary_raw {
        Role::PrimaryRaw
    } else {
        Role::Standard
    }
}
