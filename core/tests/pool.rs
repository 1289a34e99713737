//! The pool and failure handling: sizing, routing, the global stream cap, the error taxonomy,
//! rebuild and replay, rotation and shutdown.

mod common;

use std::time::Duration;

use common::*;
use zerobus_sink::{
    Code, ConnId, FailureReason, Input, Output, PoolSizing, Raw, RejectReason, SchemaCause,
    SinkConfig, SinkCore, SlotId, StreamError, TableSpec,
};

fn status(code: Code) -> StreamError {
    StreamError::status(code, format!("{code:?} (test)"))
}

fn opens(outputs: &[Out]) -> Vec<(SlotId, ConnId<Raw>)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Open { conn, .. } => Some((conn.slot(), *conn)),
            _ => None,
        })
        .collect()
}

#[test]
fn pool_size_is_derived_from_bandwidth_and_exposed() {
    let mut s: Sink = SinkCore::new(SinkConfig::default()).unwrap();
    // The seed's worked example: 15 KB rows at 10,000 rows/s is 150 MB/s: two streams.
    let big = s
        .add_table(TableSpec::new("main.bronze.wide").sizing(PoolSizing::for_peak(150.0, 10_000.0)))
        .unwrap();
    let small = s
        .add_table(TableSpec::new("main.bronze.narrow").sizing(PoolSizing::for_peak(1.0, 10_000.0)))
        .unwrap();
    let pool = s.table_pool(big).unwrap();
    assert_eq!((pool.slots, pool.by_bytes, pool.by_rows), (2, 2, 1));
    assert_eq!(s.table_pool(small).unwrap().slots, 1);
    assert_eq!(
        s.table_slots(big).count() + s.table_slots(small).count(),
        s.slot_ids().count()
    );
    let err = s
        .add_table(TableSpec::new("x.y.z").sizing(PoolSizing::fixed(65)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "table `x.y.z` needs 65 streams but max_open_streams is 64"
    );
}

#[test]
fn keyed_batches_stay_on_their_slot_and_wait_while_it_rebuilds() {
    let mut s: Sink = SinkCore::new(SinkConfig::default()).unwrap();
    let table = s
        .add_table(
            TableSpec::new("main.bronze.cdc")
                .sizing(PoolSizing::fixed(3))
                .keyed(),
        )
        .unwrap();
    for i in 0..6 {
        s.submit(t(0), table.key(7), vec![0u8; 2], token(i))
            .unwrap();
    }
    let out = drain(&mut s, t(0));
    let sent = sends(&out);
    assert!(
        sent.iter().all(|x| x.0 == SlotId::from_index(1)),
        "7 % 3 = slot 1"
    );
    let (_, conn, ..) = sent[0];
    // The slot breaks: more batches for the key wait for it; no other stream is opened.
    apply(
        &mut s,
        t(1),
        Input::Failed {
            conn,
            error: status(Code::Unavailable),
        },
    );
    s.submit(t(1), table.key(7), vec![0u8; 2], token(6))
        .unwrap();
    let out = drain(&mut s, t(1));
    assert!(opens(&out).is_empty() && sends(&out).is_empty());
    let out = drain(&mut s, t(2_001));
    assert_eq!(
        s.metrics().connections_opened,
        3 + 1,
        "the pool of 3, then one reopen"
    );
    let replay: Vec<u64> = sends(&out).iter().map(|x| x.3).collect();
    assert_eq!(
        replay,
        (0..7).collect::<Vec<_>>(),
        "replay in logical order, then the waiting batch"
    );
    assert!(sends(&out).iter().all(|x| x.0 == conn.slot()));
}

#[test]
fn the_global_stream_cap_drains_and_closes_the_least_recently_used_table_first() {
    let config = SinkConfig {
        max_open_streams: 2,
        ..SinkConfig::default()
    };
    let mut s: Sink = SinkCore::new(config).unwrap();
    let one = PoolSizing::fixed(1);
    let a = s
        .add_table(TableSpec::new("main.bronze.a").sizing(one))
        .unwrap();
    let b = s
        .add_table(TableSpec::new("main.bronze.b").sizing(one))
        .unwrap();
    let c = s
        .add_table(TableSpec::new("main.bronze.c").sizing(one))
        .unwrap();
    s.submit(t(0), a, vec![0u8; 1], token(1)).unwrap();
    let out_a = drain(&mut s, t(0));
    s.submit(t(10), b, vec![0u8; 1], token(2)).unwrap();
    drain(&mut s, t(10));
    assert_eq!(s.open_streams(), 2);
    // C needs a stream. Nobody has held theirs for the minimum residency (10 s): C waits.
    s.submit(t(20), c, vec![0u8; 1], token(3)).unwrap();
    let out = drain(&mut s, t(20));
    assert!(opens(&out).is_empty());
    assert_eq!(s.metrics().evictions, 0);
    // Then A, the least recently used, drains first; C still waits for it.
    assert!(drain(&mut s, t(10_000)).is_empty());
    assert_eq!(s.metrics().evictions, 1);
    let (_, conn_a, ..) = sends(&out_a)[0];
    ack(&mut s, t(10_030), conn_a, 1);
    let out = drain_raw(&mut s, t(10_030));
    assert_eq!(
        transcript(&out),
        [
            "Confirmed(slot 0, [LogicalOffset(0)])",
            "Close(slot 0, conn 0, graceful: true)"
        ]
    );
    // A's half-closed call still holds its stream until the service ends it (or 500 ms pass).
    assert_eq!(s.open_streams(), 2);
    apply(&mut s, t(10_040), Input::Closed { conn: conn_a });
    let out = drain_raw(&mut s, t(10_040));
    assert_eq!(
        transcript(&out),
        [
            "Close(slot 0, conn 0, graceful: false)",
            "Open(table #2, slot 2, conn 2)"
        ]
    );
    assert!(s.open_streams() <= 2);
}

#[test]
fn a_concurrency_reject_backs_off_that_slot_while_the_others_carry_the_traffic() {
    let (mut s, table) = sink(3);
    s.submit(t(0), table, vec![0u8; 1], token(0)).unwrap();
    let out = drain_raw(&mut s, t(0));
    let pool = opens(&out);
    assert_eq!(pool.len(), 3);
    apply(&mut s, t(1), Input::ready(pool[0].1));
    apply(
        &mut s,
        t(1),
        Input::Failed {
            conn: pool[1].1,
            error: status(Code::ResourceExhausted),
        },
    );
    apply(&mut s, t(1), Input::ready(pool[2].1));
    for i in 1..10 {
        s.submit(t(1), table, vec![0u8; 1], token(i)).unwrap();
    }
    let out = drain_raw(&mut s, t(1));
    assert!(opens(&out).is_empty(), "no reopen at once");
    assert!(
        sends(&out).iter().all(|x| x.0 != pool[1].0),
        "traffic avoids the rejected slot"
    );
    assert_eq!(sends(&out).len(), 10);
    assert_eq!(s.metrics().concurrency_rejects, 1);
    // One reopen of that slot after its backoff, not before.
    assert!(opens(&drain_raw(&mut s, t(1_999))).is_empty());
    assert_eq!(
        opens(&drain_raw(&mut s, t(2_001)))
            .iter()
            .map(|o| o.0)
            .collect::<Vec<_>>(),
        vec![pool[1].0]
    );
}

#[test]
fn a_slot_past_its_retry_budget_hands_its_batches_back_naming_the_last_failure() {
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let mut back = Vec::new();
    for attempt in 1..=5u64 {
        // Backoffs are 2, 4, 8, 16 s (no jitter here); two minutes covers each.
        let now = t((attempt - 1) * 120_000);
        let out = drain_raw(&mut s, now);
        let (_, conn) = opens(&out)[0];
        s.handle(
            now,
            Input::Failed {
                conn,
                error: status(Code::Unavailable),
            },
        );
        back = failed(drain_raw(&mut s, now));
        assert_eq!(back.is_empty(), attempt < 5, "attempt {attempt}");
    }
    assert_eq!(back.len(), 1);
    let FailureReason::RetryBudgetSpent { attempts, last, .. } = &back[0].reason else {
        panic!("{}", back[0].reason)
    };
    assert_eq!(*attempts, 5);
    assert!(last.to_string().contains("Unavailable"), "{last}");
    assert_eq!(s.metrics().retry_budgets_spent, 1);
    assert_eq!(s.metrics().transient_failures, 5);
}

#[test]
fn an_auth_rejection_refreshes_credentials_once_and_a_second_fails_the_table() {
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let out = drain_raw(&mut s, t(0));
    let (_, conn) = opens(&out)[0];
    apply(
        &mut s,
        t(1),
        Input::Failed {
            conn,
            error: status(Code::Unauthenticated),
        },
    );
    let out = drain_raw(&mut s, t(1));
    assert!(
        transcript(&out).contains(&"InvalidateCredentials(table #0)".to_owned()),
        "{out:?}"
    );
    assert!(failed(out).is_empty());
    let out = drain_raw(&mut s, t(2_001));
    let (_, conn) = opens(&out)[0];
    apply(
        &mut s,
        t(2_002),
        Input::Failed {
            conn,
            error: status(Code::PermissionDenied),
        },
    );
    let back = failed(drain_raw(&mut s, t(2_002)));
    assert!(
        matches!(back[0].reason, FailureReason::TableFailed { .. }),
        "{}",
        back[0].reason
    );
    assert!(s.table_failed(table));
    let refused = s
        .submit(t(3_000), table, vec![0u8; 1], token(2))
        .unwrap_err();
    assert!(matches!(refused.reason, RejectReason::TableFailed { .. }));
    assert!(
        drain_raw(&mut s, t(10_000)).is_empty(),
        "a failed table never reopens"
    );
}

#[test]
fn fatal_errors_fail_the_table_and_hand_back_assigned_and_queued_batches() {
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    s.submit(t(1), table, vec![0u8; 3], token(2)).unwrap();
    let schema = StreamError::SchemaRejected {
        causes: SchemaCause::parse_list("TYPE_INCOMPATIBLE"),
        error_code: Some("8001".into()),
        message: "column amount".into(),
    };
    apply(
        &mut s,
        t(1),
        Input::Failed {
            conn,
            error: schema,
        },
    );
    let back = failed(drain_raw(&mut s, t(1)));
    let offsets: Vec<_> = back.iter().flat_map(|f| f.offsets()).collect();
    assert_eq!(offsets.len(), 2, "{offsets:?}");
    assert!(
        back.iter()
            .all(|f| f.reason.to_string().contains("TypeIncompatible"))
    );
    assert_eq!(s.metrics().tables_failed, 1);
    let m = s.watermarks();
    assert_eq!((m.submitted, m.failed, m.pending()), (2, 2, 0));
}

#[test]
fn a_role_precondition_found_unmet_fails_the_table_and_hands_back_what_is_not_durable() {
    let (mut s, table) = sink(1);
    for i in 0..3 {
        s.submit(t(0), table, vec![0u8; 10], token(i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    // The first batch is durable before the adapter finds the table changed.
    ack(&mut s, t(10), conn, 10);
    assert_eq!(confirmed_positions(drain(&mut s, t(10))), vec![0]);
    s.submit(t(11), table, vec![0u8; 10], token(3)).unwrap();
    let error = StreamError::Precondition {
        role: "primary-raw",
        unmet: "deletion vectors are enabled".into(),
    };
    assert!(!error.is_retryable());
    apply(&mut s, t(12), Input::Failed { conn, error });
    let back = failed(drain_raw(&mut s, t(12)));
    let offsets: Vec<_> = back.iter().flat_map(|f| f.offsets()).collect();
    assert_eq!(
        offsets.len(),
        3,
        "the two sent and the queued one: {offsets:?}"
    );
    for f in &back {
        let FailureReason::TableFailed { error, .. } = &f.reason else {
            panic!("{}", f.reason)
        };
        assert!(matches!(error, StreamError::Precondition { .. }), "{error}");
        assert!(
            f.reason
                .to_string()
                .contains("primary-raw preconditions no longer met: deletion vectors are enabled")
        );
    }
    assert!(s.table_failed(table));
    let refused = s.submit(t(13), table, vec![0u8; 1], token(4)).unwrap_err();
    assert!(matches!(refused.reason, RejectReason::TableFailed { .. }));
    let m = s.watermarks();
    assert_eq!(
        (m.submitted, m.delivered, m.failed, m.pending()),
        (4, 1, 3, 0)
    );
}

#[test]
fn a_rotation_drains_half_closes_applies_late_acks_and_replays_the_rest() {
    let (mut s, table) = sink(1);
    for i in 0..3 {
        s.submit(t(0), table, vec![0u8; 10], token(i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    ack(&mut s, t(100), conn, 5);
    apply(
        &mut s,
        t(100),
        Input::rotate(conn, Duration::from_millis(2_000)),
    );
    // Paused: a new batch is admitted but not sent on the rotating stream.
    s.submit(t(100), table, vec![0u8; 10], token(3)).unwrap();
    assert!(sends(&drain(&mut s, t(100))).is_empty());
    ack(&mut s, t(500), conn, 12);
    assert_eq!(confirmed_positions(drain(&mut s, t(500))), vec![0]);
    // Grace less 500 ms: half-close; a late ack still applies; then the server ends the call.
    let out = drain(&mut s, t(1_600));
    assert_eq!(
        transcript(&out),
        vec![format!("Close({conn}, graceful: true)")]
    );
    ack(&mut s, t(1_700), conn, 20);
    assert_eq!(confirmed_positions(drain(&mut s, t(1_700))), vec![1]);
    apply(&mut s, t(1_750), Input::Closed { conn });
    let out = drain(&mut s, t(1_750));
    assert_eq!(
        transcript(&out[..1]),
        vec![format!("Close({conn}, graceful: false)")],
        "the core forgets the rotated call"
    );
    let replay: Vec<_> = sends(&out).iter().map(|x| (x.2, x.3, x.4)).collect();
    assert_eq!(
        replay,
        vec![(0, 2, 10), (1, 3, 10)],
        "no backoff; unacked batch 2, then the paused one"
    );
    assert_eq!(s.metrics().rotations, 1);
    assert_eq!(s.metrics().connections_failed, 0);
}

#[test]
fn a_rebuild_on_one_slot_does_not_delay_confirmations_on_another() {
    let (mut s, table) = sink(2);
    s.submit(t(0), table, vec![0u8; 1], token(0)).unwrap();
    let mut out = drain(&mut s, t(0));
    s.submit(t(0), table, vec![0u8; 1], token(1)).unwrap();
    out.extend(drain(&mut s, t(0)));
    let sent = sends(&out);
    let (a, conn_a, ..) = sent[0];
    let (b, conn_b, ..) = sent[1];
    assert_ne!(a, b);
    apply(
        &mut s,
        t(1),
        Input::Failed {
            conn: conn_a,
            error: StreamError::Eof,
        },
    );
    drain(&mut s, t(1));
    ack(&mut s, t(2), conn_b, 1);
    assert_eq!(
        confirmed_positions(drain(&mut s, t(2))),
        vec![1],
        "slot b confirms while slot a backs off"
    );
}

#[test]
fn shutdown_reports_exactly_which_batches_were_not_acked_per_table() {
    let mut s: Sink = SinkCore::new(SinkConfig::default()).unwrap();
    let a = s
        .add_table(TableSpec::new("main.bronze.a").sizing(PoolSizing::fixed(1)))
        .unwrap();
    let b = s
        .add_table(TableSpec::new("main.bronze.b").sizing(PoolSizing::fixed(1)))
        .unwrap();
    for i in 0..3 {
        s.submit(t(0), a, vec![0u8; 1], token(i)).unwrap();
        s.submit(t(0), b, vec![0u8; 1], token(10 + i)).unwrap();
    }
    let out = drain(&mut s, t(0));
    let sent = sends(&out);
    let (_, conn_a, ..) = sent
        .iter()
        .copied()
        .find(|x| s.slot_table(x.0) == Some(a))
        .unwrap();
    s.close(t(1), t(5_000));
    ack(&mut s, t(2), conn_a, 3);
    let out = drain(&mut s, t(2));
    assert!(
        transcript(&out)
            .iter()
            .any(|l| l.starts_with("Close(slot 0") && l.ends_with("graceful: true)"))
    );
    let back = failed(drain(&mut s, t(5_000)));
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].table, b);
    let tokens: Vec<i64> = back[0]
        .batches
        .iter()
        .map(|x| x.token.position().offset)
        .collect();
    assert_eq!(tokens, vec![10, 11, 12]);
    assert!(s.is_closed());
}

#[test]
fn a_failing_slot_reopens_after_backoffs_that_grow_and_are_capped() {
    // No jitter (see `sink_with`): the n-th consecutive failure waits 2 s x 2^(n-1), at most
    // 10 s here. Each reopen must come exactly at its due time: not a millisecond earlier (the
    // core is polled 1 ms before) and not later (it is due at that instant).
    let config = SinkConfig {
        retry: zerobus_sink::RetryPolicy {
            max_backoff: Duration::from_secs(10),
            max_attempts: 100,
            ..zerobus_sink::RetryPolicy::default()
        },
        ..SinkConfig::default()
    };
    let (mut s, table) = sink_with(1, config);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let (_, mut conn) = opens(&drain_raw(&mut s, t(0)))[0];
    let mut now = 0;
    let mut waits = Vec::new();
    for _ in 0..6 {
        apply(
            &mut s,
            t(now),
            Input::Failed {
                conn,
                error: status(Code::Unavailable),
            },
        );
        let Output::Close { .. } = s.poll_output(t(now)) else {
            panic!("the failed call is dropped first")
        };
        let Output::Timeout(Some(due)) = s.poll_output(t(now)) else {
            panic!("a reopen is scheduled")
        };
        let wait = due.as_micros() / 1_000 - now;
        assert!(opens(&drain_raw(&mut s, t(now + wait - 1))).is_empty());
        let reopened = opens(&drain_raw(&mut s, t(now + wait)));
        assert_eq!(reopened.len(), 1, "reopened at its due time");
        conn = reopened[0].1;
        waits.push(wait);
        now += wait;
    }
    assert_eq!(waits, [2_000, 4_000, 8_000, 10_000, 10_000, 10_000]);
    // Progress (an ack after READY) resets the count: the next failure waits 2 s again.
    apply(&mut s, t(now), Input::ready(conn));
    drain_raw(&mut s, t(now));
    ack(&mut s, t(now), conn, 3);
    drain_raw(&mut s, t(now));
    s.submit(t(now), table, vec![0u8; 1], token(2)).unwrap();
    drain_raw(&mut s, t(now));
    apply(
        &mut s,
        t(now),
        Input::Failed {
            conn,
            error: status(Code::Unavailable),
        },
    );
    let _close = s.poll_output(t(now));
    assert!(matches!(
        s.poll_output(t(now)),
        Output::Timeout(Some(due)) if due == t(now + 2_000)
    ));
}
