//! Invariant 13: a drain of `poll_output` reaches a fixed point. Once it has answered
//! `Timeout(at)`, a second call at the same `now` answers `Timeout(at)` again and changes no
//! state; so a driver that sleeps until `at` leaves no work waiting (issue 54). One test per
//! cause found, each failing on the core before the fix (a pass repeated only when a table
//! went cold).

mod common;

use std::time::Duration;

use common::*;
use zerobus_sink::{
    Code, ConnId, Handled, InFlight, Input, Metrics, Output, PoolSizing, Raw, SchemaId, SinkConfig,
    SinkCore, StreamError, TableId, TableSpec, Time, Watermarks,
};

/// What the sink shows through its getters (the count of full passes, a cost, aside).
#[derive(Debug, PartialEq)]
struct Shown {
    slots: Vec<(Option<Watermarks>, Option<InFlight>)>,
    tables: Vec<(Option<InFlight>, usize, bool)>,
    open: usize,
    metrics: Metrics,
}

fn shown(s: &Sink) -> Shown {
    Shown {
        slots: s
            .slot_ids()
            .map(|slot| (s.slot_watermarks(slot), s.in_flight(slot)))
            .collect(),
        tables: s
            .table_ids()
            .map(|t| (s.queued(t), s.table_streams(t), s.table_failed(t)))
            .collect(),
        open: s.open_streams(),
        metrics: Metrics {
            full_passes: 0,
            ..s.metrics().clone()
        },
    }
}

/// Drains to `Timeout` without answering anything, then checks the fixed point: a second
/// `poll_output` at `now` answers the same and the sink shows the same. Returns the drain.
fn settle(s: &mut Sink, now: Time) -> Vec<Out> {
    let mut seen = Vec::new();
    let at = loop {
        match s.poll_output(now) {
            Output::Timeout(at) => break at,
            other => seen.push(other),
        }
    };
    let before = shown(s);
    let again = s.poll_output(now);
    assert!(
        matches!(again, Output::Timeout(a) if a == at),
        "after Timeout({at:?}) at {now}, a second poll returned {again:?}"
    );
    assert_eq!(before, shown(s), "a second poll at {now} changed the sink");
    seen
}

/// The connections a drain opened, for `table`.
fn opened(outputs: &[Out], table: TableId) -> Vec<ConnId<Raw>> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Open { table: t, conn, .. } if *t == table => Some(*conn),
            _ => None,
        })
        .collect()
}

fn two_tables(cap: u16, config: SinkConfig) -> (Sink, TableId, TableId) {
    let config = SinkConfig {
        max_open_streams: cap,
        ..config
    };
    let mut s = SinkCore::new(config).unwrap();
    let a = s
        .add_table(TableSpec::new("main.bronze.a").sizing(PoolSizing::fixed(2)))
        .unwrap();
    let b = s
        .add_table(TableSpec::new("main.bronze.b").sizing(PoolSizing::fixed(2)))
        .unwrap();
    (s, a, b)
}

fn no_jitter(initial_backoff: Duration) -> SinkConfig {
    let mut config = SinkConfig {
        min_residency: Duration::from_secs(10),
        ..SinkConfig::default()
    };
    config.retry.jitter = 0.0;
    config.retry.initial_backoff = initial_backoff;
    config
}

#[test]
fn invariant_13_a_second_poll_at_the_same_instant_answers_the_same_and_changes_nothing() {
    // Every kind of drain of a small life: warming, sending, acks, a failure and its backoff,
    // an eviction, a flush, a close; after each, the fixed point.
    let (mut s, a, b) = two_tables(3, no_jitter(Duration::from_secs(2)));
    let mut now = t(0);
    for i in 0..4 {
        s.submit(now, a, vec![0u8; 10], token(i)).unwrap();
    }
    let out = settle(&mut s, now);
    let conns = opened(&out, a);
    assert_eq!(conns.len(), 2);
    apply(&mut s, now, Input::ready(conns[0]));
    let sent = sends(&settle(&mut s, now));
    assert!(!sent.is_empty());
    let failed = StreamError::status(Code::Unavailable, "restarting");
    apply(
        &mut s,
        now,
        Input::Failed {
            conn: conns[1],
            error: failed,
        },
    );
    settle(&mut s, now);
    now = t(11_000);
    s.submit(now, b, vec![0u8; 10], token(9)).unwrap();
    settle(&mut s, now);
    ack(&mut s, now, conns[0], 40);
    settle(&mut s, now);
    s.flush(now);
    settle(&mut s, now);
    s.close(now, now + Duration::from_secs(1));
    settle(&mut s, now);
    now = now + Duration::from_secs(2);
    settle(&mut s, now);
    assert!(s.is_closed());
}

/// Cause 1: evicting a table frees a stream without the table going cold. Its slot that was
/// backing off rests at once, while another slot still has a batch on the wire; the waiting
/// table may take the freed streams now, not at the next input.
#[test]
fn an_evicting_tables_backing_off_slot_frees_its_stream_for_the_waiting_table_in_the_same_drain() {
    // Cap 3: table a holds 2 (one READY with a batch on the wire, one backing off until
    // 15 s); table b, needing 2, arrives at 11 s, after a's residency.
    let (mut s, a, b) = two_tables(3, no_jitter(Duration::from_secs(10)));
    s.submit(t(0), a, vec![0u8; 10], token(1)).unwrap();
    let conns = opened(&settle(&mut s, t(0)), a);
    apply(&mut s, t(0), Input::ready(conns[0]));
    assert_eq!(sends(&settle(&mut s, t(0))).len(), 1);
    let failed = StreamError::status(Code::Unavailable, "restarting");
    apply(
        &mut s,
        t(5_000),
        Input::Failed {
            conn: conns[1],
            error: failed,
        },
    );
    settle(&mut s, t(5_000));
    assert_eq!(s.open_streams(), 2);

    s.submit(t(11_000), b, vec![0u8; 10], token(2)).unwrap();
    let out = settle(&mut s, t(11_000));
    // a is evicted: its backing-off slot rests (a stream freed), its READY one waits for its
    // ack; so b's two streams fit under the cap in this very drain.
    assert_eq!(opened(&out, b).len(), 2, "{out:?}");
    assert_eq!(s.open_streams(), 3);
}

/// Cause 2: a stream that starts draining to switch schemas leaves a flush's deal, which then
/// gives the queue's next batches to the other stream; a pass that only changes phases and
/// hands out batches (nothing to send yet: they wait for streams of their schema) must be
/// followed by another in the same drain, not at the next poll.
#[test]
fn a_stream_leaving_a_flush_deal_to_switch_schemas_lets_the_other_take_the_queue_at_once() {
    let mut config = SinkConfig::default();
    config.window.max_batches = 4;
    config.retry.jitter = 0.0;
    let mut s = SinkCore::new(config).unwrap();
    let table = s
        .add_table(
            TableSpec::new("main.bronze.orders")
                .sizing(PoolSizing::fixed(2))
                .reconciled(),
        )
        .unwrap();
    let one = table.schema(SchemaId(1));
    for i in 1..=6 {
        s.submit(t(0), one, vec![1u8; 10], token(i)).unwrap();
    }
    settle(&mut s, t(0));
    assert_eq!(
        s.reconciled(t(0), table, SchemaId(1), Ok(())),
        Handled::Applied
    );
    let conns = opened(&settle(&mut s, t(0)), table);
    let [x, y] = [conns[0], conns[1]];
    apply(&mut s, t(0), Input::ready(x));
    apply(&mut s, t(0), Input::ready(y));
    assert_eq!(
        sends(&settle(&mut s, t(0))).len(),
        6,
        "three batches on each"
    );
    // x: 75 rows/s with 5 rows unacked; y: 20 rows/s with 16 unacked.
    for (ms, x_rows, y_rows) in [(100, 10, 10), (200, 20, 12), (300, 25, 14)] {
        ack(&mut s, t(ms), x, x_rows);
        ack(&mut s, t(ms), y, y_rows);
        settle(&mut s, t(ms));
    }
    // Schema 2 arrives, is reconciled, and a flush deals its six batches: x is due first
    // until its window is full, then it drains to reopen for schema 2 (its last batch of
    // schema 1 unacked) and leaves the deal; y, with room for two, takes them now.
    let two = table.schema(SchemaId(2));
    for i in 7..=12 {
        s.submit(t(400), two, vec![2u8; 10], token(i)).unwrap();
    }
    settle(&mut s, t(400));
    assert_eq!(
        s.reconciled(t(400), table, SchemaId(2), Ok(())),
        Handled::Applied
    );
    s.flush(t(400));
    settle(&mut s, t(400));
    let held = |conn: ConnId<Raw>| s.in_flight(conn.slot()).map_or(0, |f| f.batches);
    assert_eq!((held(x), held(y)), (4, 4));
    assert_eq!(s.queued(table).map(|q| q.batches), Some(1));
}

/// A cold table keeps its place in the line of tables waiting for streams only while it waits:
/// once its batches are handed back it leaves the line, and cannot come back ahead of the
/// tables that waited meanwhile.
#[test]
fn a_table_whose_batches_were_handed_back_leaves_the_line_for_streams() {
    let (mut s, a, b) = two_tables(2, no_jitter(Duration::from_secs(2)));
    s.submit(t(0), a, vec![0u8; 10], token(1)).unwrap();
    let conns = opened(&settle(&mut s, t(0)), a);
    for &conn in &conns {
        apply(&mut s, t(0), Input::ready(conn));
    }
    settle(&mut s, t(0));
    // b waits behind a, whose residency holds the cap.
    s.submit(t(1), b, vec![0u8; 10], token(2)).unwrap();
    settle(&mut s, t(1));
    assert!(s.table_place_in_line(b).is_some());
    assert_eq!(s.table_place_in_line(a), None, "a holds streams");
    // The close deadline passes: b's batch is handed back, and b waits no more.
    s.close(t(1), t(1));
    let out = settle(&mut s, t(1));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Failed(f) if f.table == b))
    );
    assert_eq!(s.table_place_in_line(b), None);
}
