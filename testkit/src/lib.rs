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
//! Planned (not built yet): the loopback Zerobus emulator (a real Arrow Flight server) and the
//! `zerobus-local` binary.

#![forbid(unsafe_code)]

pub mod batch;
pub mod ops;
pub mod oracle;
pub mod rng;
pub mod sim;

pub use batch::SimBatch;
pub use ops::{Harness, Op};
pub use oracle::{Oracle, Tally, Violation};
pub use rng::Rng;
pub use sim::{Faults, Latency, SimConfig, SimFailure, SimReport, SimTable, simulate};
