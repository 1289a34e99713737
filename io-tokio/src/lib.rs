//! # zerobus-sink-tokio (not built yet)
//!
//! The tokio adapter will drive [`zerobus_sink::SinkCore`] on the caller's runtime: one task
//! owns the core, per-connection tasks speak the Zerobus Arrow Flight protocol (PROTOCOL.md A)
//! with tonic and arrow-flight, OAuth M2M tokens come from the workspace token endpoint, and the
//! plan's `Sink` and `BatchSink` traits are implemented with async fns. It is the only crate
//! that touches tonic, timers and the network.
//!
//! Status: a placeholder; the work is tracked as the adapter issue. Nothing here is usable yet.

#![forbid(unsafe_code)]

pub use zerobus_sink as core;
