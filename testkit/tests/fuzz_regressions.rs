//! Schedules the fuzz target (`fuzz/fuzz_targets/ack_window.rs`) or the properties found, kept
//! as readable operations and replayed through the same harness. To add a fuzz crash, decode
//! its bytes with `Op::decode_all` and paste the operations here.

use quickcheck::{Arbitrary, Gen};
use zerobus_sink_testkit::{Checks, Harness, Op, Run, Tally};

fn replay(name: &str, ops: &[Op]) -> Tally {
    Harness::run(ops).unwrap_or_else(|v| panic!("{name}: {v}\nops: {ops:?}"))
}

fn replay_run(name: &str, ops: &[Op]) -> Run {
    Harness::run_checking(ops, Checks::ALL).unwrap_or_else(|v| panic!("{name}: {v}\nops: {ops:?}"))
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
fn the_committed_corpus_decodes_op_for_op_and_holds_every_invariant() {
    // Op::PollAgain took the last reconcile tag (254) with its one field byte, so inputs
    // written before it decode into as many operations as they did; each still runs clean,
    // invariant 13 (a second poll after every drain) included.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/ack_window");
    let mut inputs = 0;
    let mut polls_again = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let ops = Op::decode_all(&std::fs::read(&path).unwrap());
        polls_again += ops
            .iter()
            .filter(|op| matches!(op, Op::PollAgain { .. }))
            .count();
        replay(&path.display().to_string(), &ops);
        inputs += 1;
    }
    assert!(
        inputs >= 100,
        "only {inputs} corpus inputs in {}",
        dir.display()
    );
    assert!(
        polls_again > 0,
        "no corpus input polls again at the same instant"
    );
    assert_eq!(
        Op::decode_all(&[254, 7, 255]),
        [Op::PollAgain { times: 7 }, Op::Flush]
    );
}

#[test]
fn a_stream_stuck_repeating_one_offset_is_recovered_within_the_ack_timeout() {
    // Official SDK issue #639: repeated acks of one offset reset that client's no-ack timer.
    // Tag 248 (the last drift tag before) is a repeated ack, with its one field byte.
    assert_eq!(
        Op::decode_all(&[248, 2, 242, 1]),
        [Op::RepeatAck { slot: 2 }, Op::Drift { hold: true }]
    );
    let mut ops = vec![
        Op::Submit { rows: 10 },
        Op::Ready { slot: 0 },
        Op::Submit { rows: 10 },
        Op::Ack { slot: 0, rows: 10 },
    ];
    // The service repeats its ack of 10 rows every second for two minutes (the harness's
    // ack timeout is 60 s); the oracle checks after each that the deadline did not move.
    for _ in 0..120 {
        ops.push(Op::Tick { ms: 1_000 });
        ops.push(Op::RepeatAck { slot: 0 });
    }
    let mut h = Harness::default();
    for op in &ops {
        h.apply(op).unwrap_or_else(|v| panic!("{v}"));
    }
    assert_eq!(
        h.coverage().ack_timeouts,
        1,
        "the stuck stream timed out once"
    );
    let run = h.finish().unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(run.tally.admitted, run.tally.confirmed + run.tally.failed);
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
    let run = replay_run("forward-after-partial", &ops);
    assert_eq!(
        (run.tally.admitted, run.tally.confirmed, run.tally.failed),
        (1, 0, 1)
    );
    // What the name claims: the forward ack was seen as one (terminal), and what came back is
    // the suffix: the 20 rows not acked, with the 10 durable ones sliced off.
    assert_eq!(run.coverage.forward_acks, 1);
    assert_eq!(
        (
            run.coverage.handed_back_rows,
            run.coverage.handed_back_durable
        ),
        (20, 10)
    );
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
    let mut h = Harness::default();
    for op in &ops[..6] {
        h.apply(op).unwrap();
    }
    // The stale ack (5 rows, all the batch) confirmed nothing: the batch is still pending.
    let pending = h.pending();
    h.apply(&ops[6]).unwrap();
    let run = h.finish().unwrap();
    assert_eq!(pending, 1, "the stale ack must not confirm");
    assert_eq!(
        (run.tally.admitted, run.tally.confirmed, run.tally.failed),
        (1, 1, 0),
        "the replay's own ack confirms"
    );
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
    let run = replay_run("eviction-ping-pong", &ops);
    assert_eq!(run.tally.admitted, 2);
    // Taking turns means no eviction before anything was written: slot READY events never
    // came, so the residency never started and nobody was evicted.
    assert_eq!(run.coverage.evictions, 0);
}

#[test]
fn fuzz_a_rotation_half_close_then_a_late_ack_after_the_core_forgot_the_call() {
    // `cargo fuzz run ack_window`, about 700,000 executions (issue 18): a rotation with a
    // grace below 500 ms half-closes at once; a day later the drain window is long over and
    // the core had dropped the call without a `Close`, so the oracle still counted a late ack
    // on it as durable while the core (rightly) ignored it. The core now ends every call it
    // stops listening to with a `Close { graceful: false }`.
    let bytes = [
        11, 24, 11, 11, 11, 11, 11, 22, 1, 2, 66, 2, 2, 52, 170, 182, 0, 130, 0, 0, 0, 2, 170, 68,
        68, 0,
    ];
    let ops = Op::decode_all(&bytes);
    assert_eq!(
        ops,
        [
            Op::Submit { rows: 24 },
            Op::Submit { rows: 11 },
            Op::Submit { rows: 11 },
            Op::Submit { rows: 22 },
            Op::SubmitKeyed { key: 2, rows: 66 },
            Op::Ready { slot: 2 },
            Op::Rotate {
                slot: 170,
                grace_ms: 182
            },
            Op::Tick { ms: 33_554_432 },
            Op::StaleAck {
                slot: 68,
                up_to: 68
            },
        ]
    );
    let run = replay_run("rotation-forgotten-call", &ops);
    assert_eq!(run.coverage.rotations, 1);
    assert_eq!(run.tally.admitted, run.tally.confirmed + run.tally.failed);
}

/// Writes the fuzz target's seed corpus: the byte form of 64 generated schedules and of every
/// regression above, so that a fuzz run starts from schedules that already reach rotations,
/// evictions and retry budgets. Run once, then minimise with `cargo fuzz cmin` (docs/testing.md):
/// `cargo test -p zerobus-sink-testkit --test fuzz_regressions write_seed_corpus -- --ignored`.
#[test]
#[ignore = "writes fuzz/corpus/ack_window; run by hand (docs/testing.md)"]
fn write_seed_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/ack_window");
    std::fs::create_dir_all(&dir).unwrap();
    let mut g = Gen::new(200);
    for i in 0..64 {
        let ops: Vec<Op> = Arbitrary::arbitrary(&mut g);
        std::fs::write(dir.join(format!("generated-{i:02}")), Op::encode_all(&ops)).unwrap();
    }
    let crash = [
        11, 24, 11, 11, 11, 11, 11, 22, 1, 2, 66, 2, 2, 52, 170, 182, 0, 130, 0, 0, 0, 2, 170, 68,
        68, 0,
    ];
    std::fs::write(dir.join("regression-rotation-forgotten-call"), crash).unwrap();
}
