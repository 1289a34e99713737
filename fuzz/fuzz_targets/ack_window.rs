//! Fuzzes the core's ack state machine: the input bytes decode into the same `Op` schedule the
//! quickcheck properties use, the harness applies it, and the oracle checks every invariant
//! after every operation. A crash is a violated invariant or a panic (a bug either way): paste
//! its bytes into `testkit/tests/fuzz_regressions.rs` to keep it as a regression test.
//!
//! Run: `cargo +nightly fuzz run ack_window` from the repository root (see docs/testing.md).

#![no_main]

use libfuzzer_sys::fuzz_target;
use zerobus_sink_testkit::{Harness, Op};

fuzz_target!(|data: &[u8]| {
    // Bound the schedule so that one input stays fast; long schedules add nothing per byte.
    let ops = Op::decode_all(&data[..data.len().min(16 * 1024)]);
    if let Err(violation) = Harness::run(&ops) {
        panic!("{violation}\nops: {ops:?}");
    }
});
