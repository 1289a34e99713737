//! # zerobus-sink-tokio: the sink on a real network
//!
//! Drives the sans-IO core ([`zerobus_sink`]) on the caller's tokio runtime (it never builds
//! one) over the Zerobus Arrow Flight protocol (PROTOCOL.md section A): one `DoPut` per stream,
//! the schema first, READY, `{"offset_id":N}` per message, durable acks by cumulative rows,
//! rotation, replay. The core decides; this crate performs. One task owns the core
//! ([`ZerobusSink`]'s driver); each stream runs in its own task.
//!
//! ```no_run
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use arrow_array::{ArrayRef, Int64Array, RecordBatch};
//! use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw, SourceTracker};
//! use zerobus_sink_tokio::{Confirmer, IsolatedRows, Sink, TableDef, ZerobusConfig, ZerobusSink};
//!
//! #[derive(Clone, Default)]
//! struct Commit(Arc<Mutex<SourceTracker>>);
//! impl Confirmer<Raw> for Commit {
//!     fn confirmed(&mut self, _table: &str, c: Confirmation<Raw>) {
//!         if let Ok(Some(p)) = self.0.lock().unwrap().confirm(c) {
//!             println!("commit {}/{} through {}", p.topic, p.partition, p.offset);
//!         }
//!     }
//!     fn failed(&mut self, table: &str, b: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
//!         // Final (the sink resubmitted what it could): stop the pipeline, never drop it.
//!         panic!("{table}: {} rows not durable: {why}", b.batch.num_rows());
//!     }
//!     fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
//!         // Only under BadRows::Isolate: park these in a dead-letter table, or stop.
//!         panic!("{table}: {} rows refused: {:?}", rows.batch.num_rows(), rows.faults);
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
//! let batch = RecordBatch::try_from_iter([("id", ids)])?;
//! let config = ZerobusConfig::new("http://127.0.0.1:50051");
//! let table = TableDef::new("main.bronze.orders", batch.schema());
//! let commit = Commit::default();
//! let mut sink = ZerobusSink::<Raw>::start(config, vec![table], commit.clone())?;
//! let orders = sink.table("main.bronze.orders").unwrap();
//! let token = commit.0.lock().unwrap().read("orders", 0, 999, 1)?.pop().unwrap();
//! let receipt = sink.send(orders, batch, token).await?;
//! receipt.await?; // optional: the token reaches the confirmer either way
//! sink.flush().await?;
//! println!("{}", sink.close(Duration::from_secs(30)).await);
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! The defaults build the Databricks write path only: the Arrow Flight transport, OAuth, the
//! driver, the write boundary, the `metrics` facade, and provisioning through Unity Catalog.
//! The rest is opt-in:
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `unity` | yes | tables provisioned and evolved through Unity Catalog ([`Provisioning`] over `zerobus_sink_catalog::unity::UnityCatalog`) |
//! | `local` | no | local Delta tables on disk as the catalog backend, for the `zerobus-local` emulator |
//! | `config` | no | a sink described by one TOML file: `settings::SinkFile`, `ZerobusSink::from_file` |
//! | `ops` | no | the operator endpoint: `ops::serve` answers `/metrics` (Prometheus text) and `/health` |
//!
//! ```toml
//! # to write to Databricks
//! zerobus-sink-tokio = "0.1"
//! # to run against zerobus-local
//! zerobus-sink-tokio = { version = "0.1", features = ["local"] }
//! # to serve /metrics
//! zerobus-sink-tokio = { version = "0.1", features = ["ops"] }
//! ```
//!
//! The operator binary, `zerobus-sinkctl`, is its own package (`io-tokio/cli`).

#![cfg_attr(docsrs, feature(doc_cfg))]

/// The README's examples (the adapter's use), compiled as doctests so that they cannot drift
/// from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The lane is fixed by the sink's type: a confirmer of derived-lane coverage cannot be given a
/// raw sink, so raw confirmations can never be mistaken for coverage (unsatisfied trait bound):
///
/// ```compile_fail,E0277
/// use arrow_array::RecordBatch;
/// use zerobus_sink::{Confirmation, Derived, FailedBatch, FailureReason, Raw};
/// use zerobus_sink_tokio::{Confirmer, ZerobusConfig, ZerobusSink};
/// struct Coverage;
/// impl Confirmer<Derived> for Coverage {
///     fn confirmed(&mut self, _: &str, _: Confirmation<Derived>) {}
///     fn failed(&mut self, _: &str, _: FailedBatch<Derived, RecordBatch>, _: &FailureReason) {}
///     fn isolated(&mut self, _: &str, _: zerobus_sink_tokio::IsolatedRows<Derived>) {}
/// }
/// let sink = ZerobusSink::<Raw>::start(ZerobusConfig::new("http://127.0.0.1:1"), vec![], Coverage);
/// ```
///
/// Its twin compiles: the same confirmer with a derived sink.
///
/// ```no_run
/// # use arrow_array::RecordBatch;
/// # use zerobus_sink::{Confirmation, Derived, FailedBatch, FailureReason};
/// # use zerobus_sink_tokio::{Confirmer, ZerobusConfig, ZerobusSink};
/// # struct Coverage;
/// # impl Confirmer<Derived> for Coverage {
/// #     fn confirmed(&mut self, _: &str, _: Confirmation<Derived>) {}
/// #     fn failed(&mut self, _: &str, _: FailedBatch<Derived, RecordBatch>, _: &FailureReason) {}
/// #     fn isolated(&mut self, _: &str, _: zerobus_sink_tokio::IsolatedRows<Derived>) {}
/// # }
/// let sink = ZerobusSink::<Derived>::start(ZerobusConfig::new("http://127.0.0.1:1"), vec![], Coverage);
/// ```
pub mod lanes {}

// The layers, from bytes up; none imports a layer above it.
// 1. The Arrow Flight encoding of batches and acks.
mod wire;
// 2. One DoPut stream on its own HTTP/2 connection, with its credentials, proxy and TLS.
mod conn;
// 3. The one task that owns the core and performs its effects.
mod driver;
// 4. The public handle, and the batch schemas it remembers per table.
mod recent;
mod sink;

// Beside the layers, importing none of them: the write boundary, provisioning through a
// catalog, telemetry (metrics and logs).
pub mod boundary;
mod provision;
pub mod telemetry;

// The vocabulary every layer shares.
mod config;
mod confirmer;
mod error;
pub mod health;
mod observer;
mod receipt;
mod report;
mod schema;

// Above the handle, each behind its feature: the operator endpoint and the TOML file.
#[cfg(feature = "ops")]
#[cfg_attr(docsrs, doc(cfg(feature = "ops")))]
pub mod ops;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod settings;

pub use boundary::plan::EMIT_TS;
pub use boundary::{BadRows, ColumnRefusal, Conversions, FaultKind, IsolatedRows, RowFault};
pub use config::{
    COALESCE_BYTES, HANDOFFS, MAX_ROW_BYTES, PRIMARY_RAW_RECHECK, ResubmitPolicy, TableDef,
    ZerobusConfig,
};
pub use confirmer::Confirmer;
pub use conn::auth::{AuthError, Credentials, OAuth, Secret};
pub use conn::proxy::{ProxyConfig, ProxyError};
pub use error::{DeliveryError, FlushError, SendError, StartError};
pub use observer::Observer;
pub use provision::{NoCatalog, Provisioning};
pub use receipt::{Delivered, Receipt};
pub use report::{Report, TableReport};
pub use sink::{BatchSink, CommitInfo, OffsetSpan, Positions, Sink, TableWriter, ZerobusSink};
pub use wire::{Compression, MetadataError};
