//! # zerobus-sink-conformance
//!
//! Checks of zerobus-sink and of its loopback emulator against the official Zerobus client
//! (`databricks-zerobus-ingest-sdk` 2.12.0, Arrow Flight). The official client is a large build
//! (tonic, its own generated protocol code), so it lives in this crate alone: the library
//! crates' examples, doctests and the README demo never compile it.
//!
//! - `tests/official_client.rs`: the official client against the emulator (ingest, flush,
//!   close, a batch it splits, a rotation). If the emulator spoke the protocol differently from
//!   the service, the official client would fail here.
//! - `benches/compare.rs`: this sink, the official client and a bare DoPut client, each at its
//!   defaults, on the same emulator (`cargo bench -p zerobus-sink-conformance --bench compare`;
//!   docs/performance.md).

#![forbid(unsafe_code)]
