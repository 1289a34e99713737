//! A flush deals a table's queue over its streams, each batch to the stream whose last row
//! would be due first with it, so that they finish together instead of up to a window apart.

mod common;

use common::*;
use zerobus_sink::{Code, ConnId, Input, Raw, SinkConfig, StreamError, TableId, WindowLimits};

/// 100 rows in flight per slot (twenty 5-row batches), and as many queued per slot.
const WINDOW: WindowLimits = WindowLimits {
    max_batches: 1_000,
    max_bytes: 1_000_000,
    max_rows: 100,
};

fn config() -> SinkConfig {
    SinkConfig {
        window: WINDOW,
        ..SinkConfig::default()
    }
}

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
/// stream acked twice at 200 rows/s, the second 50 ms before the first: at 200 ms the first
/// has 100 rows left and the second 90 (its pace has made 10 durable since its last ack).
/// Returns the sink, the table, the two connections (by slot) and the next token.
fn paced_streams() -> (Sink, TableId, [ConnId<Raw>; 2], i64) {
    let (mut s, table) = sink_with(2, config());
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
fn a_flush_holds_a_batch_for_the_stream_due_first_though_another_has_room() {
    let (mut s, table, [a, b], _) = paced_streams();
    s.flush(t(200));
    assert!(
        sends(&drain(&mut s, t(200))).is_empty(),
        "no room: nothing moves"
    );
    // The second stream's ack at 300 ms comes late: its pace falls to 40 rows in 250 ms
    // (160 rows/s), 80 rows left, due in 0.53 s with one batch more; the first has 100 rows
    // less the 20 its pace of 200 rows/s made durable in 100 ms, due in 0.425 s.
    ack(&mut s, t(300), b, 60);
    assert!(
        sends(&drain(&mut s, t(300))).is_empty(),
        "room for 20 on the second, but the batch waits for the first"
    );
    assert_eq!(s.queued(table).unwrap().rows, 200);
    // The first's ack brings its room, 20 rows; its pace is now 40 rows in 210 ms (190
    // rows/s), 80 rows left, and the second has 79. Each batch goes to the stream due first
    // with it: three to the first (due in 0.45, 0.47 and 0.5 s with them), one to the second
    // (0.525 s), a fourth to the first (0.526 s), and then the first is due first again, full.
    ack(&mut s, t(310), a, 60);
    let out = drain(&mut s, t(310));
    assert_eq!((rows_on(&out, a), rows_on(&out, b)), (20, 5));
    assert_eq!(s.queued(table).unwrap().rows, 175);
}

#[test]
fn without_a_flush_the_stream_with_room_takes_the_queue() {
    let (mut s, table, [_, b], _) = paced_streams();
    ack(&mut s, t(300), b, 60);
    let out = drain(&mut s, t(300));
    assert_eq!(rows_on(&out, b), 20, "all its room");
    assert_eq!(s.queued(table).unwrap().rows, 180);
}

#[test]
fn a_deal_ends_when_the_stream_it_waits_for_fails_and_the_other_takes_the_rest() {
    let (mut s, table, [a, b], _) = paced_streams();
    s.flush(t(200));
    ack(&mut s, t(300), b, 60);
    assert!(
        sends(&drain(&mut s, t(300))).is_empty(),
        "waiting for the first"
    );
    let error = StreamError::status(Code::Unavailable, "test");
    apply(&mut s, t(310), Input::Failed { conn: a, error });
    let out = drain(&mut s, t(310));
    assert_eq!(
        rows_on(&out, b),
        20,
        "the first stream is rebuilding: the second fills its window"
    );
    assert_eq!(s.queued(table).unwrap().rows, 180);
}

/// Two streams paced at 300 and 200 rows/s (a token bucket each, filled every 10 ms while it
/// has rows unacked, acking whole 5-row batches), a source of 200 batches (1,000 rows, 600 more
/// than the windows and the queue hold) that keeps the queue full, flushing once it has
/// submitted `flush_after` of them. Returns when each stream's last ack came, in ms, once every
/// row is acked.
fn last_acks(flush_after: Option<usize>) -> [u64; 2] {
    const PACE: [u64; 2] = [300, 200];
    const BATCHES: usize = 200;
    let (mut s, table) = sink_with(2, config());
    let mut conns: [Option<ConnId<Raw>>; 2] = [None; 2];
    let (mut sent, mut acked, mut budget, mut last) = ([0u64; 2], [0u64; 2], [0u64; 2], [0u64; 2]);
    let mut submitted = 0;
    for ms in (0..20_000).step_by(10) {
        for k in 0..2 {
            let Some(conn) = conns[k] else { continue };
            if acked[k] == sent[k] {
                budget[k] = 0;
                continue;
            }
            budget[k] += PACE[k] / 100;
            let before = acked[k];
            while budget[k] >= 5 && acked[k] < sent[k] {
                acked[k] += 5;
                budget[k] -= 5;
            }
            if acked[k] > before {
                ack(&mut s, t(ms), conn, acked[k]);
                last[k] = ms;
            }
        }
        while submitted < BATCHES
            && s.submit(t(ms), table, vec![0u8; 5], token(submitted as i64))
                .is_ok()
        {
            submitted += 1;
            if flush_after == Some(submitted) {
                s.flush(t(ms));
            }
        }
        for (slot, conn, _, _, rows) in sends(&drain(&mut s, t(ms))) {
            let k = slot.index();
            conns[k] = Some(conn);
            sent[k] += rows;
        }
        if submitted == BATCHES && sent.iter().sum::<u64>() == 1_000 && acked == sent {
            return last;
        }
    }
    panic!("not all acked: sent {sent:?}, acked {acked:?}");
}

#[test]
fn a_flush_makes_streams_of_different_paces_finish_together() {
    // One batch is 17 ms at 300 rows/s and 25 ms at 200; acks come every 10 ms.
    let [a, b] = last_acks(Some(200));
    assert!(
        a.abs_diff(b) <= 30,
        "last acks at {a} and {b} ms: more than a batch and an ack apart"
    );
    // The control: first come first served leaves each stream a full window at the end, 0.33 s
    // of rows on the faster and 0.5 s on the slower.
    let [a, b] = last_acks(None);
    assert!(
        a.abs_diff(b) > 100,
        "last acks at {a} and {b} ms without a flush"
    );
}

#[test]
fn batches_queued_after_a_flush_are_dealt_too() {
    // Flushing after the 120th batch of 200, while 80 are still to come.
    let [a, b] = last_acks(Some(120));
    assert!(a.abs_diff(b) <= 30, "last acks at {a} and {b} ms");
}
