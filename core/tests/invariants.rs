//! One test per DESIGN.md invariant, named after it, driving the core directly.
//! (The simulator and the quickcheck properties in the testkit check the same invariants over
//! random schedules; these pin each one with a readable scenario.)

use std::time::Duration;

use zerobus_sink::{
    Batch, Bound, CoverageRange, Derived, FailureReason, Input, Output, ProtocolError, Raw,
    RejectReason, SinkConfig, SinkCore, SlotId, StreamError, Time, Token, WindowLimits,
};

type Sink = SinkCore<Raw, Vec<u8>>;

fn t(ms: u64) -> Time {
    Time::from_millis(ms)
}

fn token(n: i64) -> Token<Raw> {
    Token::raw("orders", 0, n)
}

fn sink(slots: u16) -> Sink {
    SinkCore::new(SinkConfig {
        slots,
        ..SinkConfig::default()
    })
    .unwrap()
}

/// Drains outputs, answering every Open with Ready at once; returns everything else.
fn drain(sink: &mut Sink, now: Time) -> Vec<Output<Raw, Vec<u8>>> {
    let mut seen = Vec::new();
    loop {
        match sink.poll_output(now) {
            Output::Open { slot, conn } => sink.handle(now, Input::Ready { slot, conn }).unwrap(),
            Output::Timeout(_) => return seen,
            other => seen.push(other),
        }
    }
}

fn sends(outputs: &[Output<Raw, Vec<u8>>]) -> Vec<(SlotId, zerobus_sink::ConnGen, u64, u64, u64)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send(t) => Some((t.slot, t.conn, t.wire_offset.get(), t.offset.get(), t.rows)),
            _ => None,
        })
        .collect()
}

fn confirmed_positions(outputs: Vec<Output<Raw, Vec<u8>>>) -> Vec<i64> {
    outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Confirmed(c) => {
                Some(c.into_iter().map(|c| c.commit().offset).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn invariant_1_ingest_is_fire_and_forget() {
    let mut s = sink(1);
    // 500 submits with no ack at all: every one is admitted and put on the wire.
    for i in 0..500 {
        let admitted = s.submit(t(0), vec![0u8; 10], token(i)).unwrap();
        assert_eq!(admitted.offset.get(), i as u64);
    }
    let out = drain(&mut s, t(0));
    let sent = sends(&out);
    assert_eq!(sent.len(), 500);
    assert_eq!(s.watermarks().pending(), 500);
    assert_eq!(s.watermarks().delivered, 0);
    // Wire offsets are the connection's, from 0 and contiguous.
    assert!(sent.iter().enumerate().all(|(i, x)| x.2 == i as u64));
}

#[test]
fn invariant_2_confirmed_only_after_covering_durable_ack() {
    let mut s = sink(1);
    s.submit(t(0), vec![0u8; 10], token(1)).unwrap();
    s.submit(t(0), vec![0u8; 10], token(2)).unwrap();
    let out = drain(&mut s, t(0));
    let (slot, conn, ..) = sends(&out)[0];
    assert!(
        confirmed_positions(out).is_empty(),
        "nothing confirmed on submit"
    );

    // 9 of the first batch's 10 rows: not covered, nothing confirmed.
    s.handle(
        t(1),
        Input::Acked {
            slot,
            conn,
            up_to_records: 9,
        },
    )
    .unwrap();
    assert!(confirmed_positions(drain(&mut s, t(1))).is_empty());
    assert_eq!(s.watermarks().delivered, 0);

    // 15 rows: the first batch is covered, the second only half.
    s.handle(
        t(2),
        Input::Acked {
            slot,
            conn,
            up_to_records: 15,
        },
    )
    .unwrap();
    assert_eq!(confirmed_positions(drain(&mut s, t(2))), vec![1]);
    let marks = s.watermarks();
    assert_eq!(
        (marks.submitted, marks.delivered, marks.rows_delivered),
        (2, 1, 10)
    );
}

#[test]
fn invariant_3_one_ack_confirms_every_covered_item_in_order() {
    let mut s = sink(1);
    for i in 0..5 {
        s.submit(t(0), vec![0u8; 4], token(i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let (slot, conn, ..) = sends(&out)[0];
    s.handle(
        t(200),
        Input::Acked {
            slot,
            conn,
            up_to_records: 16,
        },
    )
    .unwrap();
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

#[test]
fn invariant_4_stale_generation_events_never_touch_live_connection() {
    let mut s = sink(1);
    s.submit(t(0), vec![0u8; 4], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    let (slot, old, ..) = sends(&out)[0];
    s.handle(
        t(1),
        Input::Failed {
            slot,
            conn: old,
            error: StreamError::Eof,
        },
    )
    .unwrap();
    let failed = drain(&mut s, t(1));
    assert!(failed.iter().any(|o| matches!(o, Output::Failed(_))));

    s.submit(t(2), vec![0u8; 4], token(2)).unwrap();
    let out = drain(&mut s, t(2));
    let (_, live, ..) = sends(&out)[0];
    assert_ne!(old, live);
    // Everything from the old generation is ignored: ack, failure, close, ready.
    for input in [
        Input::Acked {
            slot,
            conn: old,
            up_to_records: 4,
        },
        Input::Failed {
            slot,
            conn: old,
            error: StreamError::Eof,
        },
        Input::Closed { slot, conn: old },
        Input::Ready { slot, conn: old },
    ] {
        s.handle(t(3), input).unwrap();
    }
    assert!(drain(&mut s, t(3)).is_empty());
    assert_eq!(s.metrics().stale_inputs, 4);
    assert_eq!(s.watermarks().pending(), 1);
    s.handle(
        t(4),
        Input::Acked {
            slot,
            conn: live,
            up_to_records: 4,
        },
    )
    .unwrap();
    assert_eq!(confirmed_positions(drain(&mut s, t(4))), vec![2]);
}

#[test]
fn invariant_5_nothing_is_lost() {
    let mut s = sink(1);
    for i in 0..3 {
        s.submit(t(0), vec![7u8; 10], token(i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let (slot, conn, ..) = sends(&out)[0];
    // 14 rows durable: batch 0 whole, 4 rows of batch 1.
    s.handle(
        t(1),
        Input::Acked {
            slot,
            conn,
            up_to_records: 14,
        },
    )
    .unwrap();
    assert_eq!(confirmed_positions(drain(&mut s, t(1))), vec![0]);
    s.handle(
        t(2),
        Input::Failed {
            slot,
            conn,
            error: StreamError::Eof,
        },
    )
    .unwrap();
    let out = drain(&mut s, t(2));
    let failed: Vec<_> = out
        .into_iter()
        .filter_map(|o| match o {
            Output::Failed(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(matches!(failed[0].reason, FailureReason::Stream { .. }));
    let back: Vec<_> = failed[0]
        .batches
        .iter()
        .map(|b| (b.offset.get(), b.batch.rows(), b.durable_rows))
        .collect();
    // Batch 1 comes back sliced to its 6 non-durable rows; batch 2 whole.
    assert_eq!(back, vec![(1, 6, 4), (2, 10, 0)]);
    let m = s.watermarks();
    assert_eq!(m.submitted, m.delivered + m.failed);
    assert_eq!(m.pending(), 0);
}

#[test]
fn invariant_6_lanes_are_type_parameters() {
    // The misuses are compile_fail doctests in `zerobus_sink::lane`; this is their compiling
    // twin: a derived sink takes derived tokens and yields derived confirmations.
    let mut s = SinkCore::<Derived, Vec<u8>>::new(SinkConfig::default()).unwrap();
    s.submit(
        t(0),
        vec![1u8; 3],
        Token::derived(CoverageRange::new("orders", 2, 100, 103)),
    )
    .unwrap();
    let mut ranges: Vec<CoverageRange> = Vec::new();
    loop {
        match s.poll_output(t(0)) {
            Output::Open { slot, conn } => s.handle(t(0), Input::Ready { slot, conn }).unwrap(),
            Output::Send(x) => s
                .handle(
                    t(0),
                    Input::Acked {
                        slot: x.slot,
                        conn: x.conn,
                        up_to_records: x.rows,
                    },
                )
                .unwrap(),
            Output::Confirmed(burst) => ranges.extend(burst.into_iter().map(|c| c.commit())),
            Output::Timeout(_) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ranges, vec![CoverageRange::new("orders", 2, 100, 103)]);
}

#[test]
fn invariant_7_pool_never_opens_more_streams_than_configured() {
    let mut s = sink(3);
    let mut opens = Vec::new();
    for i in 0..300 {
        s.submit(t(0), vec![0u8; 1], token(i)).unwrap();
        loop {
            match s.poll_output(t(0)) {
                Output::Open { slot, conn } => {
                    opens.push(slot);
                    s.handle(t(0), Input::Ready { slot, conn }).unwrap();
                }
                Output::Timeout(_) => break,
                _ => {}
            }
        }
    }
    opens.sort();
    assert_eq!(
        opens,
        vec![
            SlotId::from_index(0),
            SlotId::from_index(1),
            SlotId::from_index(2)
        ]
    );
    // Round-robin: 100 batches per slot.
    for slot in s.slot_ids() {
        assert_eq!(s.slot_watermarks(slot).unwrap().submitted, 100);
    }
}

#[test]
fn invariant_8_memory_is_bounded_by_configuration() {
    let window = WindowLimits {
        max_batches: 4,
        max_bytes: 1_000,
        max_rows: 25,
    };
    let mut s: Sink = SinkCore::new(SinkConfig {
        window,
        ..SinkConfig::default()
    })
    .unwrap();
    let mut admitted = 0;
    let mut last = None;
    for i in 0..100 {
        match s.submit(t(0), vec![0u8; 10], token(i)) {
            Ok(_) => admitted += 1,
            Err(rejected) => {
                assert_eq!(rejected.batch.len(), 10, "the batch comes back whole");
                last = Some(rejected.reason);
            }
        }
        let held = s.in_flight(SlotId::from_index(0)).unwrap();
        assert!(
            held.batches <= 4 && held.bytes <= 1_000 && held.rows <= 25,
            "{held:?}"
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
    let too_big = s.submit(t(0), vec![0u8; 26], token(0)).unwrap_err();
    assert_eq!(
        too_big.reason,
        RejectReason::TooLarge {
            bound: Bound::Rows,
            value: 26,
            limit: 25
        }
    );
    assert_eq!(s.metrics().backpressured, 98);
}

#[test]
fn invariant_9_retries_never_readvance_delivered_nor_refire() {
    let mut s = sink(1);
    s.submit(t(0), vec![0u8; 5], token(1)).unwrap();
    s.submit(t(0), vec![0u8; 5], token(2)).unwrap();
    let out = drain(&mut s, t(0));
    let (slot, conn, ..) = sends(&out)[0];
    s.handle(
        t(1),
        Input::Acked {
            slot,
            conn,
            up_to_records: 5,
        },
    )
    .unwrap();
    assert_eq!(confirmed_positions(drain(&mut s, t(1))), vec![1]);
    // The same ack again (a retried burst) confirms nothing and moves nothing.
    s.handle(
        t(2),
        Input::Acked {
            slot,
            conn,
            up_to_records: 5,
        },
    )
    .unwrap();
    assert!(drain(&mut s, t(2)).is_empty());
    // A regressing ack is a typed error and changes nothing.
    let err = s
        .handle(
            t(3),
            Input::Acked {
                slot,
                conn,
                up_to_records: 2,
            },
        )
        .unwrap_err();
    assert_eq!(
        err,
        ProtocolError::AckRegressed {
            slot,
            conn,
            acked: 2,
            previous: 5
        }
    );
    assert!(drain(&mut s, t(3)).is_empty());
    assert_eq!(s.watermarks().delivered, 1);
    s.handle(
        t(4),
        Input::Acked {
            slot,
            conn,
            up_to_records: 10,
        },
    )
    .unwrap();
    assert_eq!(confirmed_positions(drain(&mut s, t(4))), vec![2]);
    assert_eq!(s.watermarks().delivered, 2);
}

#[test]
fn invariant_10_no_panic_on_any_input() {
    let mut s = sink(2);
    // Unknown slot, ack before any connection, ack before ready: typed, no panic.
    let ghost = SlotId::from_index(9);
    let conn = first_conn(&mut s);
    let err = s
        .handle(
            t(0),
            Input::Acked {
                slot: ghost,
                conn,
                up_to_records: 1,
            },
        )
        .unwrap_err();
    assert_eq!(err, ProtocolError::UnknownSlot { slot: 9, slots: 2 });
    assert_eq!(
        s.submit(t(0), Vec::new(), token(0)).unwrap_err().reason,
        RejectReason::Empty
    );

    s.submit(t(0), vec![0u8; 3], token(1)).unwrap();
    let Output::Open { slot, conn } = s.poll_output(t(0)) else {
        panic!("expected an open")
    };
    let err = s
        .handle(
            t(0),
            Input::Acked {
                slot,
                conn,
                up_to_records: 1,
            },
        )
        .unwrap_err();
    assert_eq!(err, ProtocolError::AckBeforeReady { slot, conn });
    let out = drain(&mut s, t(0));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Failed(f) if f.batches.len() == 1))
    );

    // A forward ack is terminal for the connection, and the batch comes back.
    s.submit(t(1), vec![0u8; 3], token(2)).unwrap();
    let out = drain(&mut s, t(1));
    let (slot, conn, ..) = sends(&out)[0];
    let err = s
        .handle(
            t(1),
            Input::Acked {
                slot,
                conn,
                up_to_records: u64::MAX,
            },
        )
        .unwrap_err();
    // Round-robin put it on slot 0, whose connection already carried `first_conn`'s 1 row.
    assert_eq!(
        err,
        ProtocolError::ForwardAck {
            slot,
            conn,
            acked: u64::MAX,
            sent: 1 + 3
        }
    );
    let out = drain(&mut s, t(1));
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Close {
            graceful: false,
            ..
        }
    )));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Failed(f) if f.offsets().len() == 1))
    );
    assert_eq!(s.watermarks().pending(), 0);
    assert_eq!(s.metrics().protocol_errors, 3);
}

/// A generation that exists nowhere yet (the sink numbers from 0).
fn first_conn(s: &mut Sink) -> zerobus_sink::ConnGen {
    s.submit(t(0), vec![0u8; 1], token(-1)).unwrap();
    let Output::Open { slot, conn } = s.poll_output(t(0)) else {
        panic!("expected an open")
    };
    s.handle(t(0), Input::Ready { slot, conn }).unwrap();
    let out = drain(s, t(0));
    let (slot, conn, ..) = sends(&out)[0];
    s.handle(
        t(0),
        Input::Acked {
            slot,
            conn,
            up_to_records: 1,
        },
    )
    .unwrap();
    drain(s, t(0));
    conn
}

#[test]
fn ack_timeout_fails_the_oldest_sent_batch_and_partial_progress_does_not_extend_it() {
    let mut s = sink(1);
    s.submit(t(0), vec![0u8; 10], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    let (slot, conn, ..) = sends(&out)[0];
    assert!(matches!(s.poll_output(t(0)), Output::Timeout(Some(at)) if at == t(60_000)));
    s.handle(
        t(30_000),
        Input::Acked {
            slot,
            conn,
            up_to_records: 5,
        },
    )
    .unwrap();
    assert!(matches!(s.poll_output(t(30_000)), Output::Timeout(Some(at)) if at == t(60_000)));
    let out = drain(&mut s, t(60_000));
    let reason = out.iter().find_map(|o| match o {
        Output::Failed(f) => Some(f.reason.clone()),
        _ => None,
    });
    let Some(FailureReason::AckTimeout { offset, waited, .. }) = reason else {
        panic!("{out:?}")
    };
    assert_eq!((offset.get(), waited), (0, Duration::from_secs(60)));
    assert!(matches!(s.poll_output(t(60_000)), Output::Timeout(None)));
}

#[test]
fn open_timeout_fails_a_connection_that_never_becomes_ready() {
    let mut s = sink(1);
    s.submit(t(0), vec![0u8; 1], token(1)).unwrap();
    assert!(matches!(s.poll_output(t(0)), Output::Open { .. }));
    assert!(matches!(s.poll_output(t(0)), Output::Timeout(Some(at)) if at == t(30_000)));
    let out: Vec<_> = std::iter::from_fn(|| match s.poll_output(t(30_000)) {
        Output::Timeout(_) => None,
        o => Some(o),
    })
    .collect();
    assert!(out.iter().any(
        |o| matches!(o, Output::Failed(f) if matches!(f.reason, FailureReason::OpenTimeout { .. }))
    ));
}

#[test]
fn large_batches_are_split_into_wire_messages_without_breaking_row_accounting() {
    let config = SinkConfig {
        max_message_bytes: 4,
        ..SinkConfig::default()
    };
    let mut s: Sink = SinkCore::new(config).unwrap();
    s.submit(t(0), vec![0u8; 10], token(1)).unwrap();
    s.submit(t(0), vec![0u8; 3], token(2)).unwrap();
    let out = drain(&mut s, t(0));
    let sent = sends(&out);
    // 10 rows of 1 byte at 4 bytes a message: 3 messages of 4, 4, 2 rows; then one of 3.
    let shape: Vec<_> = sent.iter().map(|x| (x.2, x.3, x.4)).collect();
    assert_eq!(shape, vec![(0, 0, 4), (1, 0, 4), (2, 0, 2), (3, 1, 3)]);
    let (slot, conn, ..) = sent[0];
    s.handle(
        t(1),
        Input::Acked {
            slot,
            conn,
            up_to_records: 8,
        },
    )
    .unwrap();
    assert!(confirmed_positions(drain(&mut s, t(1))).is_empty());
    s.handle(
        t(2),
        Input::Acked {
            slot,
            conn,
            up_to_records: 13,
        },
    )
    .unwrap();
    assert_eq!(confirmed_positions(drain(&mut s, t(2))), vec![1, 2]);
}

#[test]
fn close_drains_to_durable_then_closes_gracefully_and_hands_back_the_rest_at_the_deadline() {
    let mut s = sink(2);
    s.submit(t(0), vec![0u8; 2], token(1)).unwrap();
    s.submit(t(0), vec![0u8; 2], token(2)).unwrap();
    let out = drain(&mut s, t(0));
    let sent = sends(&out);
    s.close(t(1), t(1_000));
    assert_eq!(
        s.submit(t(1), vec![0u8; 1], token(3)).unwrap_err().reason,
        RejectReason::Closed
    );
    let (slot0, conn0, ..) = sent[0];
    s.handle(
        t(2),
        Input::Acked {
            slot: slot0,
            conn: conn0,
            up_to_records: 2,
        },
    )
    .unwrap();
    let out = drain(&mut s, t(2));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Close { slot, graceful: true, .. } if *slot == slot0))
    );
    assert!(!s.is_closed());
    let out = drain(&mut s, t(1_000));
    assert!(out.iter().any(|o| matches!(o, Output::Failed(f) if matches!(f.reason, FailureReason::CloseDeadline { .. }))));
    assert!(s.is_closed());
    let m = s.watermarks();
    assert_eq!((m.delivered, m.failed), (1, 1));
}
