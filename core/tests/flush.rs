//! A flush deals a table's queue over its streams by what each has left and its pace, so that
//! they finish together instead of up to an ack apart.

mod common;

use common::*;
use zerobus_sink::{Code, ConnId, Input, Raw, SinkConfig, StreamError, TableId, WindowLimits};

/// 100 rows in flight per slot (twenty 5-row batches), and as many queued per slot.
const WINDOW: WindowLimits = WindowLimits {
    max_batches: 1_000,
    max_bytes: 1_000_000,
    max_rows: 100,
};

/// Rows sent on `conn` among `outputs`.
fn rows_on(outputs: &[Out], conn: ConnId<Raw>) -> u64 {
    sends(outputs)
        .iter()
        .filter(|s| s.1 == conn)
        .map(|s| s.4)
        .sum()
}

/// Submits 5-row batches until the table's queue is full.
fn top_up(s: &mut Sink, table: TableId, now: u64, next: &mut i64) -> Vec<Out> {
    let mut out = Vec::new();
    while s.submit(t(now), table, vec![0u8; 5], token(*next)).is_ok() {
        *next += 1;
        out.extend(drain(s, t(now)));
    }
    out
}

/// Two READY streams of one table, both windows full and the queue full (200 rows), each
/// stream acked twice at the same pace (200 rows/s) but the second 50 ms earlier: at 200 ms
/// the first has 100 rows left and the second 90 (its pace has made 10 durable since its
/// last ack). Returns the sink, the table, the two connections and the next token.
fn paced_streams() -> (Sink, TableId, [ConnId<Raw>; 2], i64) {
    let config = SinkConfig {
        window: WINDOW,
        ..SinkConfig::default()
    };
    let (mut s, table) = sink_with(2, config);
    let mut next = 0;
    let out = top_up(&mut s, table, 0, &mut next);
    let mut conns: Vec<ConnId<Raw>> = sends(&out).iter().map(|s| s.1).collect();
    conns.sort_by_key(|c| c.slot());
    conns.dedup();
    let [a, b] = conns[..] else {
        panic!("two streams expected, got {conns:?}");
    };
    for (ms, conn, up_to) in [(50, b, 20), (100, a, 20), (150, b, 40), (200, a, 40)] {
        ack(&mut s, t(ms), conn, up_to);
        drain(&mut s, t(ms));
        top_up(&mut s, table, ms, &mut next);
    }
    assert_eq!(s.queued(table).unwrap().rows, 200, "the queue is full");
    (s, table, [a, b], next)
}

#[test]
fn a_flush_holds_back_the_stream_with_more_left_so_both_finish_together() {
    let (mut s, table, [a, b], _) = paced_streams();
    s.flush(t(200));
    assert!(
        drain(&mut s, t(200)).is_empty(),
        "no room yet: nothing moves"
    );
    // Shares of the 200 queued rows: the level is (100 + 90 + 200) / (200 + 200 rows/s) =
    // 0.975 s, so 95 rows for the first and 105 for the second.
    ack(&mut s, t(300), a, 140);
    let out = drain(&mut s, t(300));
    assert_eq!(rows_on(&out, a), 95, "room for 100, a share of 95");
    assert_eq!(s.queued(table).unwrap().rows, 105);
    ack(&mut s, t(350), b, 140);
    let out = drain(&mut s, t(350));
    assert_eq!(rows_on(&out, b), 100, "a window's worth of its 105");
    assert_eq!(
        (rows_on(&out, a), s.queued(table).unwrap().rows),
        (0, 5),
        "the first stream has room but no share: the last batch waits for the second"
    );
    ack(&mut s, t(400), b, 145);
    let out = drain(&mut s, t(400));
    assert_eq!(rows_on(&out, b), 5);
    assert_eq!(s.queued(table).unwrap().rows, 0);
}

#[test]
fn without_a_flush_the_stream_that_frees_room_first_takes_the_queue() {
    let (mut s, table, [a, _], _) = paced_streams();
    ack(&mut s, t(300), a, 140);
    let out = drain(&mut s, t(300));
    assert_eq!(rows_on(&out, a), 100, "all its room");
    assert_eq!(s.queued(table).unwrap().rows, 100);
}

#[test]
fn a_deal_ends_when_the_stream_it_waits_for_fails_and_the_other_takes_the_rest() {
    let (mut s, table, [a, b], _) = paced_streams();
    s.flush(t(200));
    ack(&mut s, t(300), a, 140);
    let out = drain(&mut s, t(300));
    assert_eq!(rows_on(&out, a), 95);
    let error = StreamError::status(Code::Unavailable, "test");
    apply(&mut s, t(310), Input::Failed { conn: b, error });
    let out = drain(&mut s, t(310));
    assert_eq!(
        rows_on(&out, a),
        5,
        "the second stream is rebuilding: the first fills its window"
    );
    assert_eq!(s.queued(table).unwrap().rows, 100);
}

#[test]
fn batches_queued_during_a_deal_join_it() {
    let (mut s, table, [a, b], mut next) = paced_streams();
    s.flush(t(200));
    ack(&mut s, t(300), a, 140);
    drain(&mut s, t(300));
    // 95 rows left the queue and 100 more join the deal, each batch to the stream whose last row
    // is due first: at 300 ms the first stream holds 95 rows (due in 0.475 s), the second 100
    // less the 30 its pace has made durable since its last ack, plus its share of 105 (0.875
    // s). So most of them go to the first, which takes 5 at once (its room).
    let joined = top_up(&mut s, table, 300, &mut next);
    assert_eq!((rows_on(&joined, a), rows_on(&joined, b)), (5, 0));
    assert_eq!(s.queued(table).unwrap().rows, 200, "full again");
    ack(&mut s, t(350), b, 140);
    assert_eq!(rows_on(&drain(&mut s, t(350)), b), 100);
    ack(&mut s, t(400), a, 240);
    let took = rows_on(&drain(&mut s, t(400)), a);
    assert!(
        (75..=90).contains(&took),
        "the first stream takes its part of what joined: {took} rows"
    );
    assert_eq!(s.queued(table).unwrap().rows, 100 - took);
}
