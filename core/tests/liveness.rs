//! Liveness: a sink that never loses data but can stop making progress is broken. One test per
//! bug found by an independent driver (issue 10), each failing on the core before its fix, and
//! the inputs that cannot cross sinks or lanes.

mod common;

use std::time::Duration;

use common::*;
use zerobus_sink::{
    Code, ConnId, Derived, Handled, Ignored, Input, Output, PoolSizing, Raw, SchemaId, SinkConfig,
    SinkCore, StreamError, TableId, TableSpec, Time, Token,
};

/// Two tables of two slots under a cap of two streams, default config otherwise.
fn two_tables_under_a_cap_of_two() -> (Sink, TableId, TableId) {
    let mut s: Sink = SinkCore::new(SinkConfig {
        max_open_streams: 2,
        ..SinkConfig::default()
    })
    .unwrap();
    let a = s
        .add_table(TableSpec::new("main.bronze.a").sizing(PoolSizing::fixed(2)))
        .unwrap();
    let b = s
        .add_table(TableSpec::new("main.bronze.b").sizing(PoolSizing::fixed(2)))
        .unwrap();
    (s, a, b)
}

/// Drives the sink like a real driver would: every `Open` is answered with READY after
/// `ready_after`, every `Send` is acked after `ack_after`, and time jumps to the next event
/// or the next deadline. Returns (confirmed positions, opens) by `until`, or panics if the core
/// says `Timeout(None)` while work is pending.
fn drive(
    s: &mut Sink,
    mut now: Time,
    until: Time,
    ready_after: Duration,
    ack_after: Duration,
) -> (Vec<i64>, u64) {
    let mut pending: Vec<(Time, Input<Raw>)> = Vec::new();
    let mut rows: std::collections::BTreeMap<ConnId<Raw>, u64> = Default::default();
    let (mut confirmed, mut opens) = (Vec::new(), 0);
    while now <= until {
        let wake = loop {
            match s.poll_output(now) {
                Output::Open { conn, .. } => {
                    opens += 1;
                    pending.push((now + ready_after, Input::ready(conn)));
                }
                Output::Send(t) => {
                    let total = rows.entry(t.conn).or_default();
                    *total += t.rows;
                    pending.push((now + ack_after, Input::acked(t.conn, *total)));
                }
                Output::Close {
                    conn,
                    graceful: true,
                } => {
                    pending.push((now + Duration::from_millis(10), Input::Closed { conn }));
                }
                Output::Confirmed(b) => confirmed.extend(b.into_iter().map(|c| c.commit().offset)),
                Output::Timeout(at) => break at,
                _ => {}
            }
        };
        pending.sort_by_key(|(at, _)| *at);
        let next_input = pending.first().map(|(at, _)| *at);
        let next = match (wake, next_input) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None if s.watermarks().pending() == 0 => break,
                None => {
                    panic!("Timeout(None) at {now} with work pending: the driver sleeps for ever")
                }
            },
        };
        now = next.max(now);
        while pending.first().is_some_and(|(at, _)| *at <= now) {
            let (_, input) = pending.remove(0);
            let _ = s.handle(now, input);
        }
    }
    (confirmed, opens)
}

#[test]
fn bug_1_a_waiting_table_gets_a_wake_up_when_the_residency_ends() {
    let (mut s, a, b) = two_tables_under_a_cap_of_two();
    s.submit(t(0), a, vec![0u8; 5], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    ack(&mut s, t(0), sends(&out)[0].1, 5);
    assert_eq!(confirmed_positions(drain(&mut s, t(0))), vec![1]);
    // b's batch at 1 s: a holds both streams for its residency (10 s from its READY at 0).
    s.submit(t(1_000), b, vec![0u8; 5], token(2)).unwrap();
    assert!(drain(&mut s, t(1_000)).is_empty());
    // Before the fix: Timeout(None), with b's batch pending and nothing in flight.
    assert_eq!(s.poll_output(t(1_000)).timeout(), Some(Some(t(10_000))));
    // At the wake-up, a is evicted (nothing in flight: closed at once) and b goes.
    let out = drain_raw(&mut s, t(10_000));
    assert_eq!(s.metrics().evictions, 1);
    assert_eq!(
        transcript(&out),
        [
            "Close(slot 0, conn 0, graceful: true)",
            "Close(slot 1, conn 1, graceful: true)",
        ]
    );
    // Each call is cut after the 500 ms drain if the service has not ended it; then b opens.
    let out = drain_raw(&mut s, t(10_500));
    assert_eq!(
        transcript(&out),
        [
            "Close(slot 0, conn 0, graceful: false)",
            "Close(slot 1, conn 1, graceful: false)",
            "Open(table #1, slot 2, conn 2)",
            "Open(table #1, slot 3, conn 3)",
        ]
    );
}

#[test]
fn bug_2_tables_under_the_cap_do_not_evict_each_other_when_ready_is_slow() {
    let (mut s, a, b) = two_tables_under_a_cap_of_two();
    s.submit(t(0), a, vec![0u8; 5], token(1)).unwrap();
    s.submit(t(1_000), b, vec![0u8; 5], token(2)).unwrap();
    // The service answers READY after 12 s (well inside the 30 s open timeout).
    let slow = Duration::from_secs(12);
    let (confirmed, opens) = drive(
        &mut s,
        t(1_000),
        t(600_000),
        slow,
        Duration::from_millis(200),
    );
    // Before the fix: 0 of 2 confirmed in 600 s, 122 streams opened, 60 evictions.
    let mut confirmed = confirmed;
    confirmed.sort_unstable();
    assert_eq!(confirmed, vec![1, 2], "both batches durable");
    assert_eq!(opens, 4, "each table's pool opened once");
    assert_eq!(s.metrics().evictions, 1, "b waited its turn: one eviction");
}

/// Issue 50 (`many_tables`: 1,000 tables under a cap of 200): the tables just seated had sent
/// their one batch and sat idle within their residency, so the only tables past theirs, the
/// busy ones, were evicted, went to the back of a line of hundreds and waited ~90 s there.
#[test]
fn bug_50_an_idle_table_gives_way_before_a_busy_one_past_its_residency() {
    let mut s: Sink = SinkCore::new(SinkConfig {
        max_open_streams: 2,
        ..SinkConfig::default()
    })
    .unwrap();
    let spec = |name: &str| TableSpec::new(name).sizing(PoolSizing::fixed(1));
    let busy = s.add_table(spec("main.bronze.busy")).unwrap();
    let idle = s.add_table(spec("main.bronze.idle")).unwrap();
    let waiting = s.add_table(spec("main.bronze.waiting")).unwrap();
    // busy: READY at 0, a batch unacked from 11 s (past its residency, with work).
    s.submit(t(0), busy, vec![0u8; 5], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    ack(&mut s, t(0), sends(&out)[0].1, 5);
    drain(&mut s, t(0));
    // idle: READY at 11 s, its one batch acked (within its residency, nothing left).
    s.submit(t(11_000), idle, vec![0u8; 5], token(2)).unwrap();
    s.submit(t(11_000), busy, vec![0u8; 5], token(3)).unwrap();
    let out = drain(&mut s, t(11_000));
    let idle_conn = sends(&out)
        .into_iter()
        .find(|(slot, ..)| slot.index() == 1)
        .expect("idle's batch sent")
        .1;
    ack(&mut s, t(11_000), idle_conn, 5);
    drain(&mut s, t(11_000));
    // A third table with work waits for a stream at 12 s.
    s.submit(t(12_000), waiting, vec![0u8; 5], token(4))
        .unwrap();
    assert_eq!(s.metrics().evictions, 0, "the two fitted under the cap");
    let out = drain_raw(&mut s, t(12_000));
    // Before the fix: busy (slot 0) was evicted, its unacked batch draining first.
    assert_eq!(
        transcript(&out),
        ["Close(slot 1, conn 1, graceful: true)"],
        "the idle table's stream is closed, the busy one's kept"
    );
    assert_eq!(s.metrics().evictions, 1);
}

#[test]
fn bug_2_a_residency_below_the_backoff_is_refused_at_validation() {
    for residency in [Duration::ZERO, Duration::from_millis(100)] {
        let config = SinkConfig {
            min_residency: residency,
            ..SinkConfig::default()
        };
        let err = SinkCore::<Raw, Vec<u8>>::new(config).unwrap_err();
        assert!(err.to_string().contains("min_residency"), "{err}");
    }
}

#[test]
fn bug_3_one_expired_token_does_not_fail_a_pool_of_two() {
    let (mut s, table) = sink(2);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let out = drain_raw(&mut s, t(0));
    let conns: Vec<ConnId<Raw>> = out
        .iter()
        .filter_map(|o| match o {
            Output::Open { conn, .. } => Some(*conn),
            _ => None,
        })
        .collect();
    assert_eq!(conns.len(), 2);
    // Both opened with the same (expired) token; both are refused before READY.
    let expired = || StreamError::status(Code::Unauthenticated, "token expired");
    for conn in &conns {
        apply(
            &mut s,
            t(1),
            Input::Failed {
                conn: *conn,
                error: expired(),
            },
        );
    }
    let out = drain_raw(&mut s, t(1));
    let lines = transcript(&out);
    // Before the fix: the second refusal failed the table and handed the batch back.
    assert!(!s.table_failed(table));
    assert!(failed(out).is_empty(), "nothing handed back");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("InvalidateCredentials"))
            .count(),
        1,
        "one refresh for the table, not one per connection"
    );
    // Both reopen (with the refreshed token) after their backoff and the batch lands.
    let out = drain(&mut s, t(2_001));
    let (_, conn, ..) = sends(&out)[0];
    ack(&mut s, t(2_002), conn, 3);
    assert_eq!(confirmed_positions(drain(&mut s, t(2_002))), vec![1]);
    // A refusal of a connection opened with the refreshed token, before any READY with it,
    // is final: the credentials themselves are refused.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    for at in [0, 2_001] {
        let out = drain_raw(&mut s, t(at));
        let Some(conn) = out.iter().find_map(|o| match o {
            Output::Open { conn, .. } => Some(*conn),
            _ => None,
        }) else {
            panic!("expected an open at {at}: {out:?}")
        };
        apply(
            &mut s,
            t(at),
            Input::Failed {
                conn,
                error: expired(),
            },
        );
    }
    assert!(s.table_failed(table));
}

#[test]
fn bug_4_deadlines_are_always_in_the_future() {
    // Found on the old core by the harness with a future-deadline check (shrunk): a keyed
    // batch, READY, a rotation with a grace below the 500 ms drain (so it half-closes at once),
    // and time passing beyond the drain. The timer that ends the drain armed an immediate
    // reopen, and the core returned it as `Timeout(Some(now))` instead of firing it.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 6], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    apply(
        &mut s,
        t(0),
        Input::rotate(conn, Duration::from_millis(482)),
    );
    assert_eq!(
        transcript(&drain_raw(&mut s, t(0))),
        [format!("Close({conn}, graceful: true)")]
    );
    let now = t(4_857);
    let mut lines = Vec::new();
    loop {
        match s.poll_output(now) {
            Output::Timeout(at) => {
                assert!(at.is_none_or(|at| at > now), "Timeout({at:?}) at {now}");
                break;
            }
            other => lines.push(format!("{other:?}")),
        }
    }
    assert_eq!(
        lines,
        [
            format!("Close({conn}, graceful: false)"),
            "Open(table #0, slot 0, conn 1)".to_owned()
        ],
        "the drain ended, and the reopen it armed fired at once"
    );
}

/// Polls until `Timeout`; every other output is returned in `seen`.
fn timeout(s: &mut Sink, now: Time, seen: &mut Vec<String>) -> Option<Time> {
    loop {
        match s.poll_output(now) {
            Output::Timeout(at) => return at,
            other => seen.push(format!("{other:?}")),
        }
    }
}

#[test]
fn a_timer_an_ack_left_stale_is_early_never_late_and_fires_nothing() {
    // The timer heap keeps a slot's entry when an ack moves its deadline later (or the slot
    // goes idle), so that the steady state does not touch the heap per batch
    // (core/src/sink/sched.rs). Its timeout is then early; coming due, it must fire nothing,
    // and the real deadline behind it must still fire on time.
    let (mut s, table) = sink(1);
    let ack_timeout = SinkConfig::default().ack_timeout;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap();
    s.submit(t(0), table, vec![0u8; 10], token(0)).unwrap();
    let (_, conn, ..) = sends(&drain(&mut s, t(0)))[0];
    ack(&mut s, t(5), conn, 10);
    assert_eq!(confirmed_positions(drain(&mut s, t(5))), [0]);
    // The steady state: a batch sent at 1 s; a second at 2 s; the first acked at 2 s.
    s.submit(t(1_000), table, vec![0u8; 10], token(1)).unwrap();
    assert_eq!(sends(&drain(&mut s, t(1_000))).len(), 1);
    s.submit(t(2_000), table, vec![0u8; 10], token(2)).unwrap();
    assert_eq!(sends(&drain(&mut s, t(2_000))).len(), 1);
    let passes = s.metrics().full_passes;
    ack(&mut s, t(2_000), conn, 20);
    let mut seen = Vec::new();
    let early = timeout(&mut s, t(2_000), &mut seen);
    assert_eq!(seen.len(), 1, "the first batch confirmed: {seen:?}");
    assert_eq!(
        s.metrics().full_passes,
        passes,
        "the ack took the fast path"
    );
    // The second batch's ack is due 60 s after it was sent, at 62 s; the heap still holds
    // the entry armed when the very first batch was sent at 0 s, which says 60 s.
    let real = t(2_000 + ms(ack_timeout));
    let early = early.expect("a deadline: a batch is in flight");
    assert!(
        early <= real,
        "Timeout({early}) after the real deadline {real}"
    );
    assert!(early > t(2_000), "Timeout({early}) not in the future");
    // Coming due early: a full pass that fires nothing, and the real deadline next.
    let mut seen = Vec::new();
    let next = timeout(&mut s, early, &mut seen);
    assert!(seen.is_empty(), "fired early: {seen:?}");
    assert_eq!(s.metrics().ack_timeouts, 0);
    assert_eq!(next, Some(real), "after the full pass, the real deadline");
    // And the real deadline fires.
    let _ = timeout(&mut s, real, &mut seen);
    assert_eq!(
        s.metrics().ack_timeouts,
        1,
        "the ack timeout fired at {real}: {seen:?}"
    );
    // Idle again with nothing in flight: no deadline at all once a full pass has looked.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 10], token(0)).unwrap();
    let (_, conn, ..) = sends(&drain(&mut s, t(0)))[0];
    ack(&mut s, t(5), conn, 10);
    let mut seen = Vec::new();
    if let Some(at) = timeout(&mut s, t(5), &mut seen) {
        assert!(
            at <= t(ms(ack_timeout)),
            "Timeout({at}) after the stale entry"
        );
        assert_eq!(timeout(&mut s, at, &mut seen), None, "idle: {seen:?}");
    }
    assert_eq!(seen.len(), 1, "only the confirmation: {seen:?}");
}

#[test]
fn bug_5_a_graceful_close_is_a_half_close_not_a_claim_of_durability() {
    // The rotation half-closes with 3 rows unacked; the docs now say a graceful close is a
    // half-close, and the rows are replayed on the next connection.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let out = drain(&mut s, t(0));
    let (_, conn, ..) = sends(&out)[0];
    apply(
        &mut s,
        t(1),
        Input::rotate(conn, Duration::from_millis(600)),
    );
    let out = drain_raw(&mut s, t(101));
    assert_eq!(transcript(&out), [format!("Close({conn}, graceful: true)")]);
    assert_eq!(
        s.watermarks().delivered,
        0,
        "nothing was durable at the half-close"
    );
    apply(&mut s, t(102), Input::Closed { conn });
    let out = drain(&mut s, t(102));
    // The contract the docs now state: a half-closed call ends with a `Close` that is not
    // graceful once the core stops listening to it (the old core just forgot it).
    assert_eq!(
        transcript(&out[..1]),
        [format!("Close({conn}, graceful: false)")]
    );
    assert_eq!(sends(&out).len(), 1, "the unacked batch is replayed");
}

#[test]
fn an_input_from_another_sink_of_the_same_lane_is_ignored_as_stale() {
    let (mut one, table_one) = sink(1);
    let (mut two, table_two) = sink(1);
    one.submit(t(0), table_one, vec![0u8; 3], token(1)).unwrap();
    two.submit(t(0), table_two, vec![0u8; 3], token(2)).unwrap();
    let Output::Open { conn: theirs, .. } = two.poll_output(t(0)) else {
        panic!("expected an open")
    };
    let Output::Open { conn: ours, .. } = one.poll_output(t(0)) else {
        panic!("expected an open")
    };
    // Same slot index, same generation number: only the sink identity tells them apart.
    assert_eq!(
        (ours.slot(), ours.generation()),
        (theirs.slot(), theirs.generation())
    );
    assert_ne!(ours, theirs);
    for input in [
        Input::ready(theirs),
        Input::acked(theirs, 3),
        Input::Closed { conn: theirs },
    ] {
        assert_eq!(one.handle(t(1), input), Handled::Ignored(Ignored::Stale));
    }
    assert_eq!(one.metrics().stale_inputs, 3);
    // Its own READY still works.
    assert_eq!(one.handle(t(1), Input::ready(ours)), Handled::Applied);
}

#[test]
fn a_derived_sink_takes_its_own_inputs() {
    // The compiling twin of the compile_fail doctest on `Input`: a derived sink's own
    // connection ids are inputs for it.
    let mut s = SinkCore::<Derived, Vec<u8>>::new(SinkConfig::default()).unwrap();
    let table = s.add_table(TableSpec::new("main.silver.orders")).unwrap();
    let range = zerobus_sink::CoverageRange::new("orders", 0, 0, 3);
    s.submit(t(0), table, vec![0u8; 3], Token::derived(range))
        .unwrap();
    let Output::Open { conn, .. } = s.poll_output(t(0)) else {
        panic!("expected an open")
    };
    assert_eq!(s.handle(t(0), Input::ready(conn)), Handled::Applied);
}

#[test]
fn the_first_response_decides_ready_by_its_offset_alone() {
    // As the official client: only ack_up_to_offset == -1 makes READY; a close field on it is
    // ignored; a normal ack first is a violation and the connection restarts.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let Output::Open { conn, .. } = s.poll_output(t(0)) else {
        panic!("expected an open")
    };
    let ready_with_close = zerobus_sink::PutResultMeta {
        ack_up_to_offset: -1,
        ack_up_to_records: 0,
        close_stream_duration_ms: Some(1_000),
    };
    assert_eq!(
        s.handle(
            t(0),
            Input::Result {
                conn,
                result: ready_with_close
            }
        ),
        Handled::Applied
    );
    assert_eq!(
        s.metrics().rotations,
        0,
        "the close field on READY is ignored"
    );
    // A second READY changes nothing.
    assert_eq!(
        s.handle(t(0), Input::ready(conn)),
        Handled::Ignored(Ignored::DuplicateReady)
    );
    // Unreadable metadata after READY is ignored; a zero-row ack changes nothing.
    let unreadable = Input::Unreadable {
        conn,
        reason: "not JSON".into(),
    };
    assert!(matches!(
        s.handle(t(0), unreadable),
        Handled::Ignored(Ignored::Unreadable { .. })
    ));
    assert_eq!(
        s.handle(t(0), Input::acked(conn, 0)),
        Handled::Ignored(Ignored::NoProgress)
    );
    // The call ending before READY is a (retryable) failure; after READY a close.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 3], token(1)).unwrap();
    let Output::Open { conn, .. } = s.poll_output(t(0)) else {
        panic!("expected an open")
    };
    apply(&mut s, t(0), Input::Closed { conn });
    assert_eq!(s.metrics().transient_failures, 1);
    assert!(
        failed(drain_raw(&mut s, t(0))).is_empty(),
        "nothing handed back"
    );
}

/// Drives `s` as a driver that sleeps until each deadline it is given: polls at `now`, and on
/// `Timeout(Some(at))` moves to `at`, until `wanted` holds of the sink and the outputs of that
/// wake-up; returns when it did, or `None` if the sink named no deadline first (or after 100
/// wake-ups).
fn when_due(
    s: &mut Sink,
    mut now: Time,
    wanted: impl Fn(&Sink, &[String]) -> bool,
) -> Option<Time> {
    for _ in 0..100 {
        let mut seen = Vec::new();
        let next = timeout(s, now, &mut seen);
        if wanted(s, &seen) {
            return Some(now);
        }
        now = next?;
    }
    None
}

#[test]
fn a_named_deadline_is_the_earliest_of_what_is_due_never_a_later_one() {
    // "Early, never late" (`Output::Timeout`), with two deadlines at once where the core
    // combines them. A driver that sleeps until the named time must see each timer fire at
    // its own time, not at the later one's.
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap();
    let due = t(ms(SinkConfig::default().ack_timeout));
    let timed_out = |s: &Sink, _: &[String]| s.metrics().ack_timeouts == 1;

    // Two slots in the steady state (the fast path: both streams open, one batch acked on
    // each): a batch on one slot at 1 s, due at 61 s, and one on the other at 2 s, due at 62 s.
    let (mut s, table) = sink(2);
    s.submit(t(0), table, vec![0u8; 6], token(0)).unwrap();
    s.submit(t(0), table, vec![0u8; 6], token(1)).unwrap();
    let warm = sends(&drain(&mut s, t(0)));
    assert_eq!(warm.len(), 2, "both slots open and send: {warm:?}");
    for &(_, conn, ..) in &warm {
        ack(&mut s, t(5), conn, 6);
    }
    assert_eq!(confirmed_positions(drain(&mut s, t(5))).len(), 2);
    s.submit(t(1_000), table, vec![0u8; 6], token(2)).unwrap();
    let first = sends(&drain(&mut s, t(1_000)));
    s.submit(t(2_000), table, vec![0u8; 6], token(3)).unwrap();
    let mut seen = Vec::new();
    let named = timeout(&mut s, t(2_000), &mut seen);
    assert!(
        seen.len() == 1
            && seen[0].starts_with("Send(")
            && !seen[0].contains(&first[0].1.to_string()),
        "the second batch sent on the other slot: {seen:?}"
    );
    assert!(
        named.is_some_and(|at| at <= due + Duration::from_secs(1)),
        "Timeout({named:?}) after the first batch's ack timeout at 61 s"
    );
    let passes = s.metrics().full_passes;
    let fired = when_due(&mut s, t(2_000), |s, _| s.metrics().ack_timeouts >= 1);
    assert_eq!(
        fired,
        Some(due + Duration::from_secs(1)),
        "the first batch's ack timeout at 61 s, not the second's at 62 s"
    );
    assert!(s.metrics().full_passes > passes);

    // A sink-wide timer (asking a catalog again after `reconcile_timeout`, 120 s) beside a
    // slot's ack timeouts: a provisioned table serving schema 1 with two batches in flight
    // (sent at 0 and 0.5 s, due at 60 and 60.5 s), then a batch of schema 2 whose reconcile
    // is asked at 1 s and never answered, then the first batch acked at 2 s.
    let mut config = SinkConfig::default();
    config.retry.jitter = 0.0;
    let mut s = SinkCore::new(config).unwrap();
    let spec = TableSpec::new("main.bronze.orders").sizing(PoolSizing::fixed(1));
    let table = s.add_table(spec.reconciled()).unwrap();
    let schema_1 = table.schema(SchemaId(1));
    s.submit(t(0), schema_1, vec![1u8; 5], token(1)).unwrap();
    let _ = drain(&mut s, t(0));
    s.reconciled(t(0), table, SchemaId(1), Ok(()));
    let (_, conn, ..) = sends(&drain(&mut s, t(0)))[0];
    s.submit(t(500), schema_1, vec![1u8; 5], token(2)).unwrap();
    assert_eq!(sends(&drain(&mut s, t(500))).len(), 1);
    s.submit(t(1_000), table.schema(SchemaId(2)), vec![2u8; 5], token(3))
        .unwrap();
    let mut seen = Vec::new();
    let named = timeout(&mut s, t(1_000), &mut seen);
    assert!(
        seen.iter().any(|l| l.starts_with("Reconcile(")),
        "schema 2 asked for: {seen:?}"
    );
    assert!(
        named.is_some_and(|at| at <= due),
        "Timeout({named:?}) after the first ack timeout at 60 s"
    );
    ack(&mut s, t(2_000), conn, 5);
    let mut seen = Vec::new();
    let named = timeout(&mut s, t(2_000), &mut seen);
    assert_eq!(seen.len(), 1, "the first batch confirmed: {seen:?}");
    let second_due = due + Duration::from_millis(500);
    assert!(
        named.is_some_and(|at| at <= second_due),
        "Timeout({named:?}) after the second batch's ack timeout at 60.5 s"
    );
    assert_eq!(when_due(&mut s, t(2_000), timed_out), Some(second_due));

    // One slot, two deadlines: a stream that stopped acking drains, is acked in full and is
    // half-closed to reconnect; the half-closed call is cut 500 ms later (PROTOCOL.md A.6)
    // while the slot's backoff runs 2 s.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 6], token(1)).unwrap();
    let (_, conn, ..) = sends(&drain(&mut s, t(0)))[0];
    assert_eq!(when_due(&mut s, t(0), timed_out), Some(due));
    let acked = due + Duration::from_millis(100);
    ack(&mut s, acked, conn, 6);
    let mut seen = Vec::new();
    let _ = timeout(&mut s, acked, &mut seen);
    let half = format!("Close({conn}, graceful: true)");
    assert!(seen.contains(&half), "drained and half-closed: {seen:?}");
    let cut = format!("Close({conn}, graceful: false)");
    let at = when_due(&mut s, acked, |_, seen| seen.contains(&cut));
    assert_eq!(
        at,
        Some(acked + Duration::from_millis(500)),
        "the half-closed call cut at 500 ms, not at the end of the 2 s backoff"
    );

    // The sink's close deadline before a slot's ack timeout.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 6], token(1)).unwrap();
    assert_eq!(sends(&drain(&mut s, t(0))).len(), 1);
    s.close(t(0), t(1_000));
    let handed_back = |_: &Sink, seen: &[String]| seen.iter().any(|l| l.starts_with("Failed("));
    let at = when_due(&mut s, t(0), handed_back);
    assert_eq!(
        at,
        Some(t(1_000)),
        "the unacked batch handed back at the close deadline"
    );

    // And a slot's ack timeout before a far close deadline.
    let (mut s, table) = sink(1);
    s.submit(t(0), table, vec![0u8; 6], token(1)).unwrap();
    assert_eq!(sends(&drain(&mut s, t(0))).len(), 1);
    s.close(t(0), due + Duration::from_secs(60));
    assert_eq!(
        when_due(&mut s, t(0), timed_out),
        Some(due),
        "the ack timeout at 60 s"
    );
}
