//! # zerobus-sink: the sans-IO core
//!
//! A pure state machine that lands batches durably through Zerobus streams. It owns the
//! decisions: which slot (stream) carries a batch, its logical and wire offsets, which batches an
//! ack makes durable, when a connection has timed out, and what goes back to the caller. It does
//! no I/O, reads no clock, spawns nothing and takes no locks: time is an argument, effects are
//! return values. A driver (the tokio adapter, the simulator, or your own runtime) performs them.
//!
//! ## The run loop
//!
//! Feed inputs with the current time, then drain outputs until [`Output::Timeout`]:
//!
//! ```
//! use zerobus_sink::{Input, Output, Raw, SinkConfig, SinkCore, TableSpec, Time, Token};
//!
//! let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default())?;
//! let orders = sink.add_table(TableSpec::new("main.bronze.orders"))?;
//! let now = Time::from_millis(0);
//!
//! // Fire-and-forget: returns at once. Streams open on the next poll, never in submit.
//! sink.submit(now, orders, vec![0u8; 100], Token::raw("orders", 0, 99)).map_err(|r| r.reason)?;
//!
//! let mut committed = Vec::new();
//! loop {
//!     match sink.poll_output(now) {
//!         // Open a DoPut for the slot (table name: sink.table_name(table)); on READY, say so.
//!         Output::Open { slot, conn, .. } => sink.handle(now, Input::Ready { slot, conn })?,
//!         // Send the message; here the "service" makes it durable at once.
//!         Output::Send(t) => {
//!             let ack = Input::Acked { slot: t.slot, conn: t.conn, up_to_records: t.rows };
//!             sink.handle(now, ack)?;
//!         }
//!         // Durable: only now may the source position advance.
//!         Output::Confirmed(burst) => committed.extend(burst.into_iter().map(|c| c.commit())),
//!         // Never dropped: retry them or fail the pipeline.
//!         Output::Failed(failed) => panic!("handed back: {:?}", failed.offsets()),
//!         // Sleep until `at` (or until the next submit or input), then poll again.
//!         Output::Timeout(_at) => break,
//!         // Close, InvalidateCredentials: see their docs.
//!         _ => {}
//!     }
//! }
//! assert_eq!(committed[0].offset, 99);
//! assert_eq!(sink.watermarks().delivered, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Drain contract.** After every [`submit`](SinkCore::submit), [`handle`](SinkCore::handle)
//! and [`close`](SinkCore::close), and whenever the time in the last `Output::Timeout(Some(at))`
//! is reached, call [`poll_output`](SinkCore::poll_output) until it returns `Output::Timeout`.
//! Outputs come in the order their causes happened; `Confirmed` bursts of one slot come in
//! offset order.
//!
//! ## Tables, pools and failures
//!
//! One sink serves many tables ([`SinkCore::add_table`]); each gets a pool of stream slots
//! sized to its bandwidth ([`PoolSizing`]), opened together at its first batch and kept for the
//! sink's life, under a global cap ([`SinkConfig::max_open_streams`]) enforced by draining and
//! closing the least recently used table. Batches go round-robin to READY slots, or by key hash
//! to a fixed slot for keyed tables. Failures are classified ([`ErrorClass`]): transient and
//! poison failures back off (exponential, seeded jitter) and replay the unacked suffix on a new
//! connection; concurrency rejects back off the slot while the others carry the traffic; a
//! rotation drains, half-closes and reopens; fatal errors fail the table and hand its batches
//! back. A slot that exhausts its retry budget hands its batches back.
//!
//! ## Guarantees
//!
//! - **Fire-and-forget** (invariant 1): `submit` never waits for an ack. The only limit is the
//!   bounded window ([`WindowLimits`]); a full window hands the batch back
//!   ([`RejectReason::Full`]), which is the backpressure.
//! - **Durable before confirmed** (2, 3): a token comes back in [`Output::Confirmed`] only after
//!   an ack covers every row of its batch; one ack confirms every covered batch, in order.
//! - **Stale events are ignored** (4): inputs carry the connection generation ([`ConnGen`]).
//! - **Nothing is lost** (5): every admitted batch ends exactly once, confirmed or in
//!   [`Output::Failed`] with its token and only its non-durable rows.
//! - **Lanes are types** (6): see [`lane`] for the misuses that do not compile.
//! - **Bounded memory** (8): at most `slots x` [`WindowLimits`] in flight.
//! - **No panics** (10): bad input is a typed error ([`ProtocolError`], [`Rejected`]).
//!
//! The ten invariants and their tests are listed in the repository's `docs/architecture.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backoff;
mod batch;
mod classify;
mod config;
mod error;
mod event;
mod ids;
pub mod lane;
mod metrics;
mod sink;
mod sizing;
mod table;
mod time;
mod window;

pub use batch::Batch;
pub use classify::{ErrorClass, SchemaCause};
pub use config::{RetryPolicy, SinkConfig, WindowLimits};
pub use error::{
    Bound, Code, ConfigError, FailureReason, ProtocolError, RejectReason, Rejected, StreamError,
};
pub use event::{Confirmed, Failed, FailedBatch, Input, Output, Transmit};
pub use ids::{ConnGen, LogicalOffset, SlotId, TableId, WireOffset};
pub use lane::{Confirmation, CoverageRange, Derived, Lane, Raw, SourcePosition, Token};
pub use metrics::{Histogram, Metrics, Watermarks};
pub use sink::{Admitted, SinkCore};
pub use sizing::{PoolSizing, SizedPool};
pub use table::{Route, TableSpec};
pub use time::Time;
pub use window::InFlight;

// The README's examples are compiled as doctests of `zerobus-sink-tokio`, which sees both the
// core and the adapter.
