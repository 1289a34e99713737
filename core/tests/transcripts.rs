//! Transcript tests (as rustls does): the exact sequence of outputs for the main scenarios,
//! compared with a golden list. A change in behaviour shows up as a readable diff.

mod common;

use std::time::Duration;

use common::*;
use zerobus_sink::{Code, ConnId, Input, Output, Raw, StreamError};

/// What happens at one instant of a scenario.
enum Step {
    /// Submit a batch of this many rows to table 0.
    Submit(usize),
    /// Feed an input about the `n`th connection the sink opened.
    In(usize, Ev),
    /// Close with a deadline this many ms from the start.
    Close(u64),
}

/// An input, before it is addressed to a connection.
enum Ev {
    Ready,
    Ack(u64),
    Fail(StreamError),
    Closed,
    Rotate(Duration),
}

impl Ev {
    fn on(self, conn: ConnId<Raw>) -> Input<Raw> {
        match self {
            Ev::Ready => Input::ready(conn),
            Ev::Ack(rows) => Input::acked(conn, rows),
            Ev::Fail(error) => Input::Failed { conn, error },
            Ev::Closed => Input::Closed { conn },
            Ev::Rotate(grace) => Input::rotate(conn, grace),
        }
    }
}

/// Runs `steps` (time in ms, then what happens) and records every output, each line prefixed
/// with the time it appeared at.
fn record(slots: u16, steps: Vec<(u64, Vec<Step>)>) -> Vec<String> {
    let (mut s, table) = sink(slots);
    let mut lines: Vec<String> = Vec::new();
    let mut opened: Vec<ConnId<Raw>> = Vec::new();
    let mut n = 0;
    for (ms, actions) in steps {
        for action in actions {
            match action {
                Step::Submit(rows) => {
                    n += 1;
                    s.submit(t(ms), table, vec![0u8; rows], token(n)).unwrap();
                }
                Step::In(k, ev) => {
                    let _ = s.handle(t(ms), ev.on(opened[k]));
                }
                Step::Close(deadline) => s.close(t(ms), t(deadline)),
            }
        }
        let out = drain_raw(&mut s, t(ms));
        opened.extend(out.iter().filter_map(|o| match o {
            Output::Open { conn, .. } => Some(*conn),
            _ => None,
        }));
        for line in transcript(&out) {
            lines.push(format!("{ms:>5} {line}"));
        }
    }
    lines
}

#[test]
fn transcript_happy_path() {
    let lines = record(
        1,
        vec![
            (0, vec![Step::Submit(3), Step::Submit(2)]),
            (50, vec![Step::In(0, Ev::Ready)]),
            (250, vec![Step::In(0, Ev::Ack(5))]),
        ],
    );
    assert_eq!(
        lines,
        [
            "    0 Open(table #0, slot 0, conn 0)",
            "   50 Send(slot 0, conn 0, wire offset 0, offset 0, rows 3)",
            "   50 Send(slot 0, conn 0, wire offset 1, offset 1, rows 2)",
            "  250 Confirmed(slot 0, [LogicalOffset(0), LogicalOffset(1)])",
        ]
    );
}

#[test]
fn transcript_poison_then_rebuild_then_replay() {
    let unavailable = StreamError::status(Code::Unavailable, "pod draining");
    let lines = record(
        1,
        vec![
            (0, vec![Step::Submit(10), Step::Submit(10)]),
            (50, vec![Step::In(0, Ev::Ready)]),
            (250, vec![Step::In(0, Ev::Ack(13))]),
            (300, vec![Step::In(0, Ev::Fail(unavailable))]),
            (2_300, vec![]),
            (2_350, vec![Step::In(1, Ev::Ready)]),
            (2_550, vec![Step::In(1, Ev::Ack(7))]),
        ],
    );
    assert_eq!(
        lines,
        [
            "    0 Open(table #0, slot 0, conn 0)",
            "   50 Send(slot 0, conn 0, wire offset 0, offset 0, rows 10)",
            "   50 Send(slot 0, conn 0, wire offset 1, offset 1, rows 10)",
            "  250 Confirmed(slot 0, [LogicalOffset(0)])",
            "  300 Close(slot 0, conn 0, graceful: false)",
            " 2300 Open(table #0, slot 0, conn 1)",
            // Batch 1 had 3 rows durable: only its 7-row suffix is replayed, from wire offset 0.
            " 2350 Send(slot 0, conn 1, wire offset 0, offset 1, rows 7)",
            " 2550 Confirmed(slot 0, [LogicalOffset(1)])",
        ]
    );
}

#[test]
fn transcript_concurrency_reject() {
    let exhausted = StreamError::status(Code::ResourceExhausted, "too many streams");
    let lines = record(
        2,
        vec![
            (0, vec![Step::Submit(1)]),
            (
                50,
                vec![
                    Step::In(0, Ev::Ready),
                    Step::In(1, Ev::Fail(exhausted)),
                    Step::Submit(1),
                ],
            ),
            (2_050, vec![]),
        ],
    );
    assert_eq!(
        lines,
        [
            "    0 Open(table #0, slot 0, conn 0)",
            "    0 Open(table #0, slot 1, conn 1)",
            "   50 Close(slot 1, conn 1, graceful: false)",
            // Both batches go to the slot that is READY; the rejected one waits out its backoff.
            "   50 Send(slot 0, conn 0, wire offset 0, offset 0, rows 1)",
            "   50 Send(slot 0, conn 0, wire offset 1, offset 1, rows 1)",
            " 2050 Open(table #0, slot 1, conn 2)",
        ]
    );
}

#[test]
fn transcript_rotation() {
    let lines = record(
        1,
        vec![
            (0, vec![Step::Submit(4)]),
            (50, vec![Step::In(0, Ev::Ready)]),
            (
                100,
                vec![
                    Step::In(0, Ev::Rotate(Duration::from_secs(2))),
                    Step::Submit(2),
                ],
            ),
            (200, vec![Step::In(0, Ev::Ack(4))]),
            (250, vec![Step::In(0, Ev::Closed)]),
            (300, vec![Step::In(1, Ev::Ready)]),
        ],
    );
    assert_eq!(
        lines,
        [
            "    0 Open(table #0, slot 0, conn 0)",
            "   50 Send(slot 0, conn 0, wire offset 0, offset 0, rows 4)",
            // Everything sent is acked before the grace ends: half-close at once.
            "  200 Confirmed(slot 0, [LogicalOffset(0)])",
            "  200 Close(slot 0, conn 0, graceful: true)",
            // The server ends the call: the core forgets it, reopens with no backoff and sends
            // what waited.
            "  250 Close(slot 0, conn 0, graceful: false)",
            "  250 Open(table #0, slot 0, conn 1)",
            "  300 Send(slot 0, conn 1, wire offset 0, offset 1, rows 2)",
        ]
    );
}

#[test]
fn transcript_shutdown() {
    let lines = record(
        2,
        vec![
            (0, vec![Step::Submit(1)]),
            (
                50,
                vec![
                    Step::In(0, Ev::Ready),
                    Step::In(1, Ev::Ready),
                    Step::Submit(1),
                    Step::Close(5_000),
                ],
            ),
            (250, vec![Step::In(0, Ev::Ack(1))]),
            (5_000, vec![]),
        ],
    );
    assert_eq!(
        lines,
        [
            "    0 Open(table #0, slot 0, conn 0)",
            "    0 Open(table #0, slot 1, conn 1)",
            "   50 Send(slot 0, conn 0, wire offset 0, offset 0, rows 1)",
            "   50 Send(slot 1, conn 1, wire offset 0, offset 0, rows 1)",
            "  250 Confirmed(slot 0, [LogicalOffset(0)])",
            "  250 Close(slot 0, conn 0, graceful: true)",
            // The half-closed call did not end within 500 ms: cut (seen at the next step).
            " 5000 Close(slot 0, conn 0, graceful: false)",
            // Slot 1's batch was never acked: handed back at the deadline, naming table and offset.
            " 5000 Close(slot 1, conn 1, graceful: false)",
            " 5000 Failed(table #0, Some(SlotId(1)), [Some(LogicalOffset(0))]: table #0: close deadline passed with batches still unacked)",
        ]
    );
}
