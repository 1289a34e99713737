//! # zerobus-sink-testkit
//!
//! Test machinery for zerobus-sink:
//!
//! - [`sim`]: the deterministic simulator: virtual clock, seeded PRNG, a model of the Zerobus
//!   service (log-normal ack latency, write-ahead-log group commit, coalesced and partial acks,
//!   faults), the invariant [`oracle`] after every step, and a one-line reproduction of any
//!   failing seed.
//! - [`ops`]: the one operation enum shared by the quickcheck properties and the cargo-fuzz
//!   target, and the harness that applies it.
//!
//! - [`uc_stub`] (feature `uc-stub`, on by default): a loopback stub of the Unity Catalog REST and
//!   SQL Statement APIs that applies the DDL it receives after parsing it with sqlparser.
//!
//! Planned (not built yet): the loopback Zerobus emulator (a real Arrow Flight server) and the
//! `zerobus-local` binary.

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
pub use ops::{Harness, Op};
pub use oracle::{Oracle, Tally, Violation};
pub use rng::Rng;
pub use sim::{Faults, Latency, SimConfig, SimFailure, SimReport, SimTable, simulate};
