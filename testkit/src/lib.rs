//! # zerobus-sink-testkit
//!
//! Test machinery for zerobus-sink:
//!
//! - [`sim`]: the deterministic simulator: virtual clock, seeded PRNG, a model of the Zerobus
//!   service (log-normal ack latency, write-ahead-log group commit, coalesced and partial acks,
//!   faults), the invariant [`oracle`] after every step (safety and liveness), and a one-line
//!   reproduction of any failing seed.
//! - [`ops`]: the one operation enum shared by the quickcheck properties and the cargo-fuzz
//!   target, and the harness that applies it.
//! - [`emulator`] (feature `emulator`, on by default): a loopback Zerobus, a real Arrow Flight
//!   server speaking PROTOCOL.md A, with a write-ahead log and faults on demand; also the
//!   `zerobus-local` binary.
//! - [`uc_stub`] (feature `uc-stub`, on by default): a loopback stub of the Unity Catalog REST and
//!   SQL Statement APIs that applies the DDL it receives after parsing it with sqlparser.

#![forbid(unsafe_code)]

pub mod batch;
#[cfg(feature = "emulator")]
pub mod emulator;
pub mod ops;
pub mod oracle;
pub mod rng;
pub mod sim;
#[cfg(feature = "uc-stub")]
pub mod uc_stub;

pub use batch::SimBatch;
pub use ops::{Coverage, Harness, Op, Run};
pub use oracle::{Checks, Oracle, Tally, Violation};
pub use rng::Rng;
pub use sim::{FaultCounts, Faults, Latency, SimConfig, SimFailure, SimReport, SimTable, simulate};
