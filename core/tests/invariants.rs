//! One test per DESIGN.md invariant, named after it, driving the core directly.
//! (The simulator and the quickcheck properties in the testkit check the same invariants over
//! random schedules; these pin each one with a readable scenario.)

mod common;

use std::time::Duration;

use common::*;
use zerobus_sink::{
    Batch, Bound, CoverageRange, Derived, FailureReason, Handled, Ignored, Input, Output,
    PoolSizing, ProtocolError, RejectReason, SinkConfig, SinkCore, SlotId, StreamError, TableSpec,
    Token, WindowLimits,
};

#[test]
fn invariant_1_ingest_is_fire_and_forget() {
    let (mut s, table) = sink(1);
    // 500 submits with no ack at all: every one is admitted and put on the wire.
    for i in 0..500 {
        let admitted = s.submit(t(0), table, vec![0u8; 10], token(i)).unwrap();
        assert_eq!(admitted.seq, i as u64);
    }
    let out = drain(&mut s, t(0));
    let sent = sends(&out);
    assert_eq!(sent.len(), 500);
    assert_eq!(s.watermarks().pending(), 500);
    assert_eq!(s.watermarks().delivered, 0);
    // Wire offsets are the connection's, from 0 and contiguous; logical offsets the slot's.
    assert!(
        sent.iter()
            .enumerate()
            .all(|(i, x)| x.2 == i as u64 && x.3 == i as u64)
    );
}

#[test]
fn invariant_2_confirmed_only_after_covering_durable_ack() {
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 10], token(1)).unwrap();
    s.submit(t(0), table, vec![0u8; 10], token(2)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    assert!(
        confirmed_positions(out).is_empty(),
        "nothing confirmed on submit"
    );

    // 9 of the first batch's 10 rows: not covered, nothing confirmed.
    ack(&mut s, t(1), conn, 9);
    assert!(confirmed_positions(drain(&mut s, t(1))).is_empty());
    assert_eq!(s.watermarks().delivered, 0);

    // 15 rows: the first batch is covered, the second only half.
    ack(&mut s, t(2), conn, 15);
    assert_eq!(confirmed_positions(drain(&mut s, t(2))), vec![1]);
    let marks = s.watermarks();
    assert_eq!(
        (marks.submitted, marks.delivered, marks.rows_delivered),
        (2, 1, 10)
    );
}

#[test]
fn invariant_3_one_ack_confirms_every_covered_item_in_order() {
    let (mut s, table) = sink(1);
    for i in 0..5 {
        s.submit(t(0), table, vec![0u8; 4], token(i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    ack(&mut s, t(200), conn, 16);
    let out = drain(&mut s, t(200));
    assert_eq!(out.len(), 1, "one burst for one ack");
    let Output::Confirmed(burst) = out.into_iter().next().unwrap() else {
        panic!("expected a burst")
    };
    assert_eq!(
        burst.offsets().iter().map(|o| o.get()).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(s.metrics().coalesce.max(), Some(4));
    assert_eq!(s.metrics().delivery_latency_us.min(), Some(200_000));
}

/// A burst's iterator yields its confirmations in offset order and knows how many are left,
/// whether the burst holds one inline or several in a vector.
#[test]
fn invariant_3_a_burst_iterates_in_offset_order_and_counts_down() {
    let (mut s, table) = sink(1);
    for i in 0..4 {
        s.submit(t(0), table, vec![0u8; 4], token(i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    // One batch (inline), then the other three (a vector).
    for (up_to, expected) in [(4, vec![0]), (16, vec![1, 2, 3])] {
        ack(&mut s, t(1), conn, up_to);
        let mut out = drain(&mut s, t(1));
        assert_eq!(out.len(), 1, "one burst for one ack");
        let Some(Output::Confirmed(burst)) = out.pop() else {
            panic!("expected a burst")
        };
        let mut iter = burst.into_iter();
        let mut seen = Vec::new();
        for left in (1..=expected.len()).rev() {
            assert_eq!(iter.len(), left);
            assert_eq!(iter.size_hint(), (left, Some(left)));
            seen.push(iter.next().expect("a confirmation left").commit().offset);
        }
        assert_eq!(seen, expected);
        assert_eq!((iter.len(), iter.next().is_none()), (0, true));
        assert!(iter.next().is_none(), "fused");
    }
}

#[test]
fn invariant_4_stale_generation_events_never_touch_live_connection() {
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 4], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, old, ..) = sends(&out)[0];
    apply(
        &mut s,
        t(1),
        Input::Failed {
            conn: old,
            error: StreamError::Eof,
        },
    );
    let out = drain(&mut s, t(1));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Close { conn, graceful: false, .. } if *conn == old))
    );
    // After the backoff (2 s, no jitter here) a new generation replays the batch.
    let out = drain(&mut s, t(2_001));
    let (_, live, wire, offset, rows) = sends(&out)[0];
    assert_ne!(old, live);
    assert_eq!(
        (wire, offset, rows),
        (0, 0, 4),
        "replayed from wire offset 0 with its logical offset"
    );
    // Everything from the old generation is ignored: ack, failure, close, ready, rotation.
    for input in [
        Input::acked(old, 4),
        Input::Failed {
            conn: old,
            error: StreamError::Eof,
        },
        Input::Closed { conn: old },
        Input::ready(old),
        Input::rotate(old, Duration::from_secs(1)),
    ] {
        assert_eq!(s.handle(t(2_002), input), Handled::Ignored(Ignored::Stale));
    }
    assert!(drain(&mut s, t(2_002)).is_empty());
    assert_eq!(s.metrics().stale_inputs, 5);
    ack(&mut s, t(2_003), live, 4);
    assert_eq!(confirmed_positions(drain(&mut s, t(2_003))), vec![1]);
}

#[test]
fn invariant_5_nothing_is_lost() {
    let (mut s, table) = sink(1);
    for i in 0..3 {
        s.submit(t(0), table, vec![7u8; 10], token(i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    // 14 rows durable: batch 0 whole, 4 rows of batch 1. Then the stream breaks.
    ack(&mut s, t(1), conn, 14);
    assert_eq!(confirmed_positions(drain(&mut s, t(1))), vec![0]);
    apply(
        &mut s,
        t(2),
        Input::Failed {
            conn,
            error: StreamError::Eof,
        },
    );
    drain(&mut s, t(2));
    // The replay carries only the 6 non-durable rows of batch 1, then batch 2 whole.
    let out = drain(&mut s, t(2_002));
    let replay: Vec<_> = sends(&out).iter().map(|x| (x.2, x.3, x.4)).collect();
    assert_eq!(replay, vec![(0, 1, 6), (1, 2, 10)]);
    let (_, conn, ..) = sends(&out)[0];
    ack(&mut s, t(2_003), conn, 16);
    assert_eq!(confirmed_positions(drain(&mut s, t(2_003))), vec![1, 2]);
    let m = s.watermarks();
    assert_eq!(
        (m.submitted, m.delivered, m.failed, m.pending()),
        (3, 3, 0, 0)
    );
}

#[test]
fn invariant_5_a_terminal_failure_hands_back_only_the_non_durable_rows() {
    let (mut s, table) = sink(1);
    for i in 0..3 {
        s.submit(t(0), table, vec![7u8; 10], token(i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    ack(&mut s, t(1), conn, 14);
    drain(&mut s, t(1));
    // A forward ack is terminal for what the connection carried.
    assert!(matches!(
        s.handle(t(2), Input::acked(conn, 31)),
        Handled::Violation(ProtocolError::ForwardAck {
            acked: 31,
            sent: 30,
            ..
        })
    ));
    let back = failed(drain(&mut s, t(2)));
    assert_eq!(back.len(), 1);
    let rows: Vec<_> = back[0]
        .batches
        .iter()
        .map(|b| (b.offset.map(|o| o.get()), b.batch.rows(), b.durable_rows))
        .collect();
    assert_eq!(rows, vec![(Some(1), 6, 4), (Some(2), 10, 0)]);
    let m = s.watermarks();
    assert_eq!(m.submitted, m.delivered + m.failed);
}

#[test]
fn invariant_6_lanes_are_type_parameters() {
    // The misuses are compile_fail doctests in `zerobus_sink::lane`; this is their compiling
    // twin: a derived sink takes derived tokens and yields derived confirmations.
    let mut s = SinkCore::<Derived, Vec<u8>>::new(SinkConfig::default()).unwrap();
    let table = s.add_table(TableSpec::new("main.silver.orders")).unwrap();
    s.submit(
        t(0),
        table,
        vec![1u8; 3],
        Token::derived(CoverageRange::new("orders", 2, 100, 103)),
    )
    .unwrap();
    let mut ranges: Vec<CoverageRange> = Vec::new();
    loop {
        match s.poll_output(t(0)) {
            Output::Open { conn, .. } => {
                assert_eq!(s.handle(t(0), Input::ready(conn)), Handled::Applied)
            }
            Output::Send(x) => {
                assert_eq!(
                    s.handle(t(0), Input::acked(x.conn, x.rows)),
                    Handled::Applied
                )
            }
            Output::Confirmed(burst) => ranges.extend(burst.into_iter().map(|c| c.commit())),
            Output::Timeout(_) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ranges, vec![CoverageRange::new("orders", 2, 100, 103)]);
}

#[test]
fn invariant_7_pool_never_opens_more_streams_than_configured() {
    let (mut s, table) = sink(3);
    let mut opens = Vec::new();
    for i in 0..300 {
        s.submit(t(0), table, vec![0u8; 1], token(i)).unwrap();
        loop {
            match s.poll_output(t(0)) {
                Output::Open { conn, .. } => {
                    opens.push(conn.slot());
                    apply(&mut s, t(0), Input::ready(conn));
                }
                Output::Timeout(_) => break,
                _ => {}
            }
        }
    }
    // All three opened together at the first write, none after.
    assert_eq!(
        opens,
        vec![
            SlotId::from_index(0),
            SlotId::from_index(1),
            SlotId::from_index(2)
        ]
    );
    for slot in s.slot_ids() {
        assert_eq!(
            s.slot_watermarks(slot).unwrap().submitted,
            100,
            "round-robin"
        );
    }
}

#[test]
fn invariant_8_memory_is_bounded_by_configuration() {
    let window = WindowLimits {
        max_batches: 4,
        max_bytes: 1_000,
        max_rows: 25,
    };
    let (mut s, table) = sink_with(
        1,
        SinkConfig {
            window,
            ..SinkConfig::default()
        },
    );
    let mut admitted = 0;
    let mut last = None;
    for i in 0..100 {
        match s.submit(t(0), table, vec![0u8; 10], token(i)) {
            Ok(_) => admitted += 1,
            Err(rejected) => {
                assert_eq!(rejected.batch.len(), 10, "the batch comes back whole");
                last = Some(rejected.reason);
            }
        }
        let queued = s.queued(table).unwrap();
        assert!(
            queued.batches <= 4 && queued.bytes <= 1_000 && queued.rows <= 25,
            "{queued:?}"
        );
    }
    assert_eq!(admitted, 2, "a third 10-row batch would exceed 25 rows");
    assert_eq!(
        last,
        Some(RejectReason::Full {
            bound: Bound::Rows,
            limit: 25
        })
    );
    // A batch larger than the whole window waits like any other while the queue holds some.
    let too_big = s.submit(t(0), table, vec![0u8; 26], token(0)).unwrap_err();
    assert_eq!(
        too_big.reason,
        RejectReason::Full {
            bound: Bound::Rows,
            limit: 25
        }
    );
    assert_eq!(s.metrics().backpressured, 99);
    // Once the slot takes the two, the slot window and the queue each stay in bounds.
    drain(&mut s, t(0));
    let held = s.in_flight(SlotId::from_index(0)).unwrap();
    assert_eq!((held.batches, held.rows), (2, 20));
}

#[test]
fn invariant_8_a_batch_larger_than_a_window_waits_for_an_empty_one_and_goes_alone() {
    let window = WindowLimits {
        max_batches: 4,
        max_bytes: 1_000,
        max_rows: 25,
    };
    let config = SinkConfig {
        window,
        max_message_bytes: 10,
        ..SinkConfig::default()
    };
    let (mut s, table) = sink_with(1, config);
    s.submit(t(0), table, vec![0u8; 10], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    // The queue is empty: it takes the 60-row batch alone, and nothing else beside it.
    s.submit(t(0), table, vec![0u8; 60], token(2)).unwrap();
    let small = s.submit(t(0), table, vec![0u8; 1], token(3)).unwrap_err();
    assert!(
        matches!(small.reason, RejectReason::Full { .. }),
        "{small:?}"
    );
    assert_eq!(s.queued(table).unwrap().rows, 60);
    // It reaches the slot only when the slot's window is empty.
    assert!(sends(&drain(&mut s, t(1))).is_empty());
    ack(&mut s, t(2), conn, 10);
    let out = drain(&mut s, t(2));
    let shape: Vec<_> = sends(&out).iter().map(|x| (x.2, x.3, x.4)).collect();
    assert_eq!(
        shape,
        vec![
            (1, 1, 10),
            (2, 1, 10),
            (3, 1, 10),
            (4, 1, 10),
            (5, 1, 10),
            (6, 1, 10)
        ],
        "split into 10-row messages on the wire, one logical batch"
    );
    assert_eq!(confirmed_positions(out), vec![1]);
    assert_eq!(s.in_flight(SlotId::from_index(0)).unwrap().rows, 60);
    ack(&mut s, t(3), conn, 70);
    assert_eq!(confirmed_positions(drain(&mut s, t(3))), vec![2]);
    s.submit(t(3), table, vec![0u8; 1], token(3)).unwrap();
}

#[test]
fn invariant_9_retries_never_readvance_delivered_nor_refire() {
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 5], token(1)).unwrap();
    s.submit(t(0), table, vec![0u8; 5], token(2)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    ack(&mut s, t(1), conn, 5);
    assert_eq!(confirmed_positions(drain(&mut s, t(1))), vec![1]);
    // The same ack again (a retried burst) confirms nothing and moves nothing.
    ack(&mut s, t(2), conn, 5);
    assert!(drain(&mut s, t(2)).is_empty());
    // A regressing ack is reported as ignored and changes nothing.
    assert_eq!(
        s.handle(t(3), Input::acked(conn, 2)),
        Handled::Ignored(Ignored::AckRegressed {
            acked: 2,
            previous: 5
        })
    );
    assert!(drain(&mut s, t(3)).is_empty());
    // A rebuild replays batch 2 only; batch 1 is not re-fired.
    apply(
        &mut s,
        t(4),
        Input::Failed {
            conn,
            error: StreamError::Eof,
        },
    );
    drain(&mut s, t(4));
    let out = drain(&mut s, t(2_004));
    assert_eq!(sends(&out).iter().map(|x| x.3).collect::<Vec<_>>(), vec![1]);
    let (_, conn, ..) = sends(&out)[0];
    ack(&mut s, t(2_005), conn, 5);
    assert_eq!(confirmed_positions(drain(&mut s, t(2_005))), vec![2]);
    assert_eq!(s.watermarks().delivered, 2);
}

#[test]
fn invariant_10_no_panic_on_any_input() {
    let (mut s, table) = sink(2);
    assert_eq!(
        s.submit(t(0), table, Vec::new(), token(0))
            .unwrap_err()
            .reason,
        RejectReason::Empty
    );
    let nowhere = zerobus_sink::TableId::from_index(7);
    assert_eq!(
        s.submit(t(0), nowhere, vec![1u8], token(0))
            .unwrap_err()
            .reason,
        RejectReason::UnknownTable { table: nowhere }
    );
    assert!(matches!(
        s.submit(t(0), table.key(3), vec![1u8], token(0))
            .unwrap_err()
            .reason,
        RejectReason::Routing { .. }
    ));

    // An ack before READY: a typed violation, and the connection restarts (nothing is lost).
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let Output::Open { conn, .. } = s.poll_output(t(0)) else {
        panic!("expected an open")
    };
    let handled = s.handle(t(0), Input::acked(conn, 1));
    assert!(
        matches!(
            &handled,
            Handled::Violation(ProtocolError::UnexpectedFirstResponse { slot, .. }) if *slot == conn.slot()
        ),
        "{handled:?}"
    );
    assert!(failed(drain(&mut s, t(0))).is_empty());
    assert_eq!(s.watermarks().pending(), 1);
    assert_eq!(s.metrics().protocol_errors, 1);
}

#[test]
fn ack_timeout_drains_then_rebuilds_and_replays() {
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 10], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    assert!(matches!(s.poll_output(t(0)), Output::Timeout(Some(at)) if at == t(60_000)));
    // Partial progress does not extend the deadline (PROTOCOL.md A.3).
    ack(&mut s, t(30_000), conn, 5);
    assert!(matches!(s.poll_output(t(30_000)), Output::Timeout(Some(at)) if at == t(60_000)));
    // At the deadline the stream drains for 500 ms (acks still count), then closes.
    assert!(drain(&mut s, t(60_000)).is_empty());
    ack(&mut s, t(60_100), conn, 7);
    let out = drain(&mut s, t(60_500));
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Close {
            graceful: false,
            ..
        }
    )));
    assert_eq!(
        (s.metrics().ack_timeouts, s.metrics().poisoned),
        (1, 0),
        "slow, not broken"
    );
    let out = drain(&mut s, t(62_500));
    let replay: Vec<_> = sends(&out).iter().map(|x| (x.2, x.4)).collect();
    assert_eq!(
        replay,
        vec![(0, 3)],
        "only the 3 rows not acked before the drain ended"
    );
}

#[test]
fn repeated_acks_of_one_offset_never_extend_the_no_ack_deadline() {
    // Official SDK issue #639: repeated acks of the same offset reset that client's no-ack
    // timer, so a stream stuck on one offset was never recovered while the repeats went on.
    // Here the deadline is the oldest unacked batch's age: a repeat is no progress.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 10], token(1)).unwrap();
    s.submit(t(0), table, vec![0u8; 10], token(2)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    ack(&mut s, t(1_000), conn, 10);
    assert_eq!(confirmed_positions(drain(&mut s, t(1_000))), vec![1]);
    // The second batch was sent at 0: its deadline is 60 s, whatever repeats after.
    for second in 2..60 {
        let now = t(second * 1_000);
        let handled = s.handle(now, Input::acked(conn, 10));
        assert_eq!(
            handled,
            Handled::Ignored(Ignored::NoProgress),
            "repeat at {now}"
        );
        assert!(
            drain(&mut s, now).is_empty(),
            "a repeat at {now} did something"
        );
        assert!(
            matches!(s.poll_output(now), Output::Timeout(Some(at)) if at == t(60_000)),
            "a repeat at {now} moved the deadline"
        );
    }
    // At the deadline the stuck stream is drained and rebuilt, as any other.
    assert!(drain(&mut s, t(60_000)).is_empty());
    let out = drain(&mut s, t(60_500));
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Close {
            graceful: false,
            ..
        }
    )));
    assert_eq!(s.metrics().ack_timeouts, 1);
}

#[test]
fn large_batches_are_split_into_wire_messages_without_breaking_row_accounting() {
    let (mut s, table) = sink_with(
        1,
        SinkConfig {
            max_message_bytes: 4,
            ..SinkConfig::default()
        },
    );
    s.submit(t(0), table, vec![0u8; 10], token(1)).unwrap();
    s.submit(t(0), table, vec![0u8; 3], token(2)).unwrap();
    let out = drain(&mut s, t(0));
    let sent = sends(&out);
    // 10 rows of 1 byte at 4 bytes a message: 3 messages of 4, 4, 2 rows; then one of 3.
    let shape: Vec<_> = sent.iter().map(|x| (x.2, x.3, x.4)).collect();
    assert_eq!(shape, vec![(0, 0, 4), (1, 0, 4), (2, 0, 2), (3, 1, 3)]);
    let (_, conn, ..) = sent[0];
    ack(&mut s, t(1), conn, 8);
    assert!(confirmed_positions(drain(&mut s, t(1))).is_empty());
    ack(&mut s, t(2), conn, 13);
    assert_eq!(confirmed_positions(drain(&mut s, t(2))), vec![1, 2]);
}

#[test]
fn close_drains_to_durable_then_closes_gracefully_and_hands_back_the_rest_at_the_deadline() {
    let (mut s, table) = sink(2);
    // Two turns, so that both slots are READY and round-robin gives each one batch.
    s.submit(t(0), table, vec![0u8; 2], token(1)).unwrap();
    let mut out = drain(&mut s, t(0));
    s.submit(t(0), table, vec![0u8; 2], token(2)).unwrap();
    out.extend(drain(&mut s, t(0)));
    let sent = sends(&out);
    assert_ne!(sent[0].0, sent[1].0);
    s.close(t(1), t(1_000));
    assert_eq!(
        s.submit(t(1), table, vec![0u8; 1], token(3))
            .unwrap_err()
            .reason,
        RejectReason::Closed
    );
    let (slot0, conn0, ..) = sent[0];
    ack(&mut s, t(2), conn0, 2);
    let out = drain(&mut s, t(2));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Close { conn, graceful: true } if conn.slot() == slot0))
    );
    assert!(!s.is_closed());
    let back = failed(drain(&mut s, t(1_000)));
    assert!(matches!(back[0].reason, FailureReason::CloseDeadline { table: t } if t == table));
    assert_eq!(
        back[0].offsets(),
        vec![Some(zerobus_sink::LogicalOffset::ZERO)]
    );
    assert!(s.is_closed());
    let m = s.watermarks();
    assert_eq!((m.delivered, m.failed), (1, 1));
    let _ = PoolSizing::default();
}
