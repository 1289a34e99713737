//! Schedules the fuzz target (`fuzz/fuzz_targets/ack_window.rs`) or the properties found, kept
//! as readable operations and replayed through the same harness. To add a fuzz crash, decode
//! its bytes with `Op::decode_all` and paste the operations here.

use quickcheck::{Arbitrary, Gen};
use zerobus_sink_testkit::{Harness, Op, Tally};

fn replay(name: &str, ops: &[Op]) -> Tally {
    Harness::run(ops).unwrap_or_else(|v| panic!("{name}: {v}\nops: {ops:?}"))
}

#[test]
fn the_byte_format_round_trips_and_drops_a_truncated_tail() {
    let mut g = Gen::new(100);
    for _ in 0..200 {
        let ops: Vec<Op> = Arbitrary::arbitrary(&mut g);
        assert_eq!(Op::decode_all(&Op::encode_all(&ops)), ops);
    }
    let mut bytes = Op::encode_all(&[Op::Submit { rows: 5 }, Op::Tick { ms: 7 }]);
    bytes.extend([9, 1, 2]);
    assert_eq!(
        Op::decode_all(&bytes),
        vec![Op::Submit { rows: 5 }, Op::Tick { ms: 7 }]
    );
}

#[test]
fn forward_ack_after_partial_ack_hands_back_the_suffix() {
    let ops = [
        Op::Submit { rows: 30 },
        Op::Ready { slot: 0 },
        Op::Ack { slot: 0, rows: 10 },
        Op::RawAck {
            slot: 0,
            up_to: u32::MAX,
        },
    ];
    let tally = replay("forward-after-partial", &ops);
    assert_eq!((tally.admitted, tally.confirmed, tally.failed), (1, 0, 1));
}

#[test]
fn stale_ack_after_reconnect_is_ignored_and_the_replay_confirms() {
    let ops = [
        Op::Submit { rows: 5 },
        Op::Ready { slot: 0 },
        Op::Fail { slot: 0, kind: 0 },
        Op::Tick { ms: 2_500 },
        Op::Ready { slot: 0 },
        Op::StaleAck { slot: 0, up_to: 5 },
        Op::Ack { slot: 0, rows: 5 },
    ];
    let tally = replay("stale-after-reconnect", &ops);
    assert_eq!((tally.admitted, tally.confirmed, tally.failed), (1, 1, 0));
}

#[test]
fn server_close_with_nothing_pending_tells_the_driver_before_a_new_open() {
    // Found by prop_confirm_only_after_a_covering_ack (shrunk): the service ended slot 0's call
    // with OK while nothing was pending; the core went idle without a Close output, so the next
    // Open looked like a second live connection on the slot.
    let ops = [
        Op::Submit { rows: 17 },
        Op::Ready { slot: 0 },
        Op::Ack { slot: 0, rows: 94 },
        Op::ServerClose { slot: 0 },
        Op::Tick { ms: 2_500 },
        Op::Submit { rows: 2 },
        Op::Ready { slot: 0 },
        Op::Ack { slot: 0, rows: 2 },
    ];
    let tally = replay("server-close-idle", &ops);
    assert_eq!(tally.confirmed, 2);
}

#[test]
fn two_tables_under_the_cap_take_turns_instead_of_evicting_each_other() {
    // Found by the oracle's reopen check: with both tables holding work and the cap below their
    // pools, each warm-up evicted the other at once (closing its opening streams and reopening
    // them in the same instant). The minimum residency makes them take turns.
    let ops = [
        Op::Submit { rows: 30 },
        Op::SubmitKeyed { key: 0, rows: 2 },
        Op::Ready { slot: 255 },
    ];
    let tally = replay("eviction-ping-pong", &ops);
    assert_eq!(tally.admitted, 2);
}
