//! # zerobus-sink-catalog (not built yet)
//!
//! Zerobus only writes; it never creates or evolves a table. This crate will hold the
//! `TableCatalog` seam (describe, reconcile, register_sink, vend_credentials) with async fns, the
//! pure `ReconcilePlan` (create, add column, lossless widening behind an opt-in, comments,
//! properties, refuse), the Arrow to Delta/Unity Catalog type map, and two backends behind
//! features: Unity Catalog over its REST and SQL Statement APIs, and local Delta tables.
//!
//! Status: a placeholder; the work is tracked as the catalog issue. It is independent of the
//! core crate and of any runtime.

#![forbid(unsafe_code)]
