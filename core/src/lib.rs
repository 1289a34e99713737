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
//! Feed inputs with the current time, then drain outputs until [`Output::Timeout`]. This is a
//! complete driver, run as a test: a toy service that refuses the first connection and makes
//! everything else durable at once, a source that honours backpressure, and every kind of
//! rejection and hand-back handled (nothing is ever dropped):
//!
//! ```
//! use std::collections::VecDeque;
//! use zerobus_sink::{
//!     Code, Handled, Input, Output, Raw, RejectReason, SinkConfig, SinkCore, StreamError,
//!     TableSpec, Time, Token,
//! };
//!
//! let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default())?;
//! let orders = sink.add_table(TableSpec::new("main.bronze.orders"))?;
//! // The source: five batches of 100 rows, each with the position of its last record.
//! let mut source: VecDeque<(Vec<u8>, Token<Raw>)> =
//!     (0..5).map(|i| (vec![0u8; 100], Token::raw("orders", 0, i * 100 + 99))).collect();
//! let (mut now, mut refused_once, mut committed) = (Time::ZERO, false, Vec::new());
//!
//! while !source.is_empty() || sink.watermarks().pending() > 0 {
//!     // Admit what the windows take. Fire-and-forget: streams open on the next poll.
//!     while let Some((batch, token)) = source.pop_front() {
//!         match sink.submit(now, orders, batch, token) {
//!             Ok(_) => {}
//!             // The backpressure: keep it, submit again after confirmations.
//!             Err(r) if matches!(r.reason, RejectReason::Full { .. }) => {
//!                 source.push_front((r.batch, r.token));
//!                 break;
//!             }
//!             // Closed, failed table, unknown table, empty batch, wrong routing: retrying
//!             // cannot help; stop the pipeline with the batch's position named.
//!             Err(r) => return Err(format!("{:?}: {}", r.token.position(), r.reason).into()),
//!         }
//!     }
//!     // Drain: perform each effect; inputs from the service are fed back at once.
//!     let wake = loop {
//!         match sink.poll_output(now) {
//!             // Open a DoPut (header: sink.table_name(table)); here the first one is refused.
//!             Output::Open { conn, .. } => {
//!                 let input = if refused_once {
//!                     Input::ready(conn)
//!                 } else {
//!                     refused_once = true;
//!                     let error = StreamError::status(Code::Unavailable, "pod restarting");
//!                     Input::Failed { conn, error }
//!                 };
//!                 if let Handled::Violation(e) = sink.handle(now, input) {
//!                     eprintln!("protocol violation: {e}"); // the core has acted on it
//!                 }
//!             }
//!             // Send one FlightData (`{"offset_id": wire_offset}`); here durable at once.
//!             Output::Send(t) => {
//!                 let _ = sink.handle(now, Input::acked(t.conn, t.rows));
//!             }
//!             // Durable: only now may the source position advance.
//!             Output::Confirmed(burst) => committed.extend(burst.into_iter().map(|c| c.commit())),
//!             // Handed back with their tokens: resubmit them (or fail the pipeline), never drop.
//!             Output::Failed(failed) => {
//!                 for b in failed.batches {
//!                     source.push_back((b.batch, b.token));
//!                 }
//!             }
//!             // Close (half-close or drop the call), InvalidateCredentials (drop the cached
//!             // token): see their docs.
//!             Output::Timeout(at) => break at,
//!             _ => {}
//!         }
//!     };
//!     // Sleep until `wake` (or until the next input, which a real driver awaits too).
//!     // `None` means nothing is due: with work pending the core never says that.
//!     now = match wake {
//!         Some(at) => at,
//!         None if sink.watermarks().pending() == 0 => now,
//!         None => return Err("work pending but no deadline".into()),
//!     };
//! }
//! assert_eq!(committed.last().map(|p| p.offset), Some(499));
//! assert_eq!((sink.watermarks().delivered, sink.metrics().transient_failures), (5, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Drain contract.** After every [`submit`](SinkCore::submit), [`handle`](SinkCore::handle),
//! [`flush`](SinkCore::flush) and [`close`](SinkCore::close), and whenever the time in the last
//! `Output::Timeout(Some(at))` is reached, call [`poll_output`](SinkCore::poll_output) until it
//! returns `Output::Timeout`.
//! Outputs come in the order their causes happened; `Confirmed` bursts of one slot come in
//! offset order.
//!
//! ## Tables, pools and failures
//!
//! One sink serves many tables ([`SinkCore::add_table`]); each gets a pool of stream slots
//! sized to its bandwidth ([`PoolSizing`]), opened together at its first batch and kept for the
//! sink's life, under a global cap ([`SinkConfig::max_open_streams`]) enforced by draining and
//! closing the least recently used table. Batches go round-robin to READY slots with room, or
//! by key hash to a fixed slot for keyed tables; when the caller flushes, a table's queue is
//! dealt over its slots by what each has left and its pace, so that they finish together
//! ([`SinkCore::flush`]). Failures are classified ([`ErrorClass`]): transient and
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
//! - **Stale events are ignored** (4): inputs name a [`ConnId`] only the core mints; one of a
//!   closed connection or of another sink is ignored, one of another lane does not compile.
//! - **Nothing is lost** (5): every admitted batch ends exactly once, confirmed or in
//!   [`Output::Failed`] with its token and only its non-durable rows.
//! - **Lanes are types** (6): see [`lane`] for the misuses that do not compile.
//! - **Bounded memory** (8): a slot holds at most one [`WindowLimits`] of batches, a table's
//!   queue at most its slot count times them: at most twice `slots x WindowLimits` in all.
//! - **No panics** (10): bad input is a typed error ([`ProtocolError`], [`Rejected`]).
//! - **Liveness** (11): with work pending the core always has a future deadline, and a table
//!   waiting for streams under the cap gets its turn (first come, first served; see
//!   [`SinkConfig::min_residency`]).
//! - **A drain reaches a fixed point** (13): once `poll_output` has answered `Timeout(at)`, a
//!   second call at the same `now` answers `Timeout(at)` again and changes no state, so a
//!   driver that sleeps until `at` never leaves a table waiting with streams free for it.
//!
//! The invariants and their tests are listed in the repository's `docs/architecture.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backoff;
mod batch;
mod classify;
mod config;
mod conn;
mod coverage;
mod error;
mod event;
mod ids;
pub mod lane;
mod metrics;
mod sink;
mod sizing;
mod table;
mod time;
mod tracker;
mod window;

pub use batch::Batch;
pub use classify::ErrorClass;
pub use config::{RetryPolicy, SinkConfig, StreamService, WindowLimits};
pub use conn::ConnId;
pub use coverage::Coverage;
pub use error::{
    Bound, Code, ConfigError, ErrorInfo, FailureReason, ProtocolError, RejectReason, Rejected,
    SchemaCause, StreamError,
};
pub use event::{
    Confirmed, ConfirmedIter, Failed, FailedBatch, Handled, Ignored, Input, Output, PutResultMeta,
    Transmit,
};
pub use ids::{ConnGen, LogicalOffset, Route, SchemaId, SlotId, TableId, WireOffset};
pub use lane::{
    Confirmation, CoverageRange, Derived, Lane, Raw, SourcePosition, SourceSpan, Token,
};
pub use metrics::{Histogram, Metrics, Watermarks};
pub use sink::{Admitted, SinkCore};
pub use sizing::{PoolSizing, SizedPool};
pub use table::TableSpec;
pub use time::Time;
pub use tracker::{SourceTracker, TrackerError};
pub use window::InFlight;

// The README's examples are compiled as doctests of `zerobus-sink-tokio`, which sees both the
// core and the adapter.
