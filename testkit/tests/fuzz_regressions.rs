//! Inputs the fuzz target (`fuzz/fuzz_targets/ack_window.rs`) found or that pin a tricky
//! schedule, replayed through the same decoder and harness. Add a crash by pasting its bytes.

use zerobus_sink_testkit::{Harness, Op, Tally};

fn replay(name: &str, bytes: &[u8]) -> Tally {
    let ops = Op::decode_all(bytes);
    Harness::run(&ops).unwrap_or_else(|v| panic!("{name}: {v}\nops: {ops:?}"))
}

#[test]
fn decoder_reads_every_operation_and_drops_a_truncated_tail() {
    let ops = Op::decode_all(&[0, 5, 1, 2, 2, 1, 7, 0, 8, 3, 0, 0]);
    assert_eq!(
        ops,
        vec![
            Op::Submit { rows: 5 },
            Op::Ready { slot: 2 },
            Op::Ack { slot: 1, rows: 7 },
            Op::Close { grace_ms: 3 }
        ]
    );
}

#[test]
fn forward_ack_after_partial_ack_hands_back_the_suffix() {
    // submit 30, ready, ack 10 rows, forward ack of 4 billion rows.
    let tally = replay(
        "forward-after-partial",
        &[0, 30, 1, 0, 2, 0, 10, 0, 3, 0, 0xff, 0xff, 0xff, 0xff],
    );
    assert_eq!((tally.admitted, tally.confirmed, tally.failed), (1, 0, 1));
}

#[test]
fn stale_ack_after_reconnect_is_ignored() {
    // Slot 0: submit, ready, fail. Submits to slots 1, 2, then 0 again (a new connection),
    // ready, an ack of 5 rows tagged with the failed generation, then a live ack of 5.
    let bytes = [
        0, 5, 1, 0, 5, 0, 0, 5, 0, 5, 0, 5, 1, 0, 4, 0, 5, 0, 2, 0, 5, 0,
    ];
    let tally = replay("stale-after-reconnect", &bytes);
    // Batch 1 failed with its connection; the stale ack confirmed nothing; the live one
    // confirmed batch 4; batches 2 and 3 were never acked and fail at close.
    assert_eq!((tally.admitted, tally.confirmed, tally.failed), (4, 1, 3));
}

#[test]
fn server_close_with_nothing_pending_tells_the_driver_before_a_new_open() {
    // Found by prop_confirm_only_after_a_covering_ack (shrunk): the service ended slot 0's call
    // with OK while nothing was pending; the core went idle without a Close output, so the next
    // Open looked like a second live connection on the slot.
    let bytes = [0, 17, 1, 0, 2, 0, 94, 0, 0, 34, 6, 0, 0, 15, 0, 2];
    let tally = replay("server-close-idle", &bytes);
    assert_eq!(tally.confirmed, 1);
}
