//! The oracle must be able to fail: for every check, a deliberately wrong driver (one that hides,
//! reorders, duplicates or forges what passes between the core and the oracle, or an oracle
//! told a tighter configuration than the core runs with) breaks the thing the check guards, and
//! that check (its invariant and its own message), not another, fires.

use std::time::Duration;

use zerobus_sink::{
    ConnId, Failed, FailedBatch, FailureReason, Input, Output, PoolSizing, Raw, RetryPolicy,
    SinkConfig, SinkCore, TableId, TableSpec, Time, Token, Transmit, WindowLimits,
};
use zerobus_sink_testkit::{Checks, Oracle, SimBatch, Violation};

/// A core with one table of `slots` slots and the oracle watching it.
struct Rig {
    sink: SinkCore<Raw, SimBatch>,
    oracle: Oracle,
    table: TableId,
    now: Time,
    next: u64,
}

fn config() -> SinkConfig {
    SinkConfig {
        retry: RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        },
        ..SinkConfig::default()
    }
}

impl Rig {
    fn new(slots: u16) -> Rig {
        Rig::with(slots, config(), config())
    }

    /// The core runs with `core`; the oracle is told `told`.
    fn with(slots: u16, core: SinkConfig, told: SinkConfig) -> Rig {
        Rig::checking(slots, core, told, Checks::ALL)
    }

    /// As [`Rig::with`], the oracle checking only `checks` (for a wrong driver that breaks
    /// more than one thing at once, to show the check under test fires).
    fn checking(slots: u16, core: SinkConfig, told: SinkConfig, checks: Checks) -> Rig {
        let mut sink = SinkCore::new(core).unwrap();
        let table = sink
            .add_table(TableSpec::new("main.sim.t").sizing(PoolSizing::fixed(slots)))
            .unwrap();
        let mut oracle = Oracle::with_checks(told, checks);
        oracle.register_table(table, u64::from(slots));
        Rig {
            sink,
            oracle,
            table,
            now: Time::ZERO,
            next: 0,
        }
    }

    fn submit(&mut self, rows: u64) -> Result<(), Violation> {
        let id = self.next;
        self.next += 1;
        let token = Token::raw("sim", 0, i64::try_from(id).unwrap());
        let batch = SimBatch::new(id, rows, 8);
        self.oracle.set_now(self.now);
        match self.sink.submit(self.now, self.table, batch, token) {
            Ok(_) => self.oracle.admitted(id, rows, rows * 8, self.table, None),
            Err(r) => {
                let n = self.sink.table_slots(self.table).count() as u64;
                let sink = &self.sink;
                self.oracle
                    .refused(sink, rows, rows * 8, self.table, None, n, &r.reason)
            }
        }
    }

    /// Polls every output, hands each to `wrong` (the wrong driver: it may answer the core,
    /// and decides what the oracle sees), and checks the oracle after the drain.
    fn drain(
        &mut self,
        mut wrong: impl FnMut(
            &mut SinkCore<Raw, SimBatch>,
            Time,
            Output<Raw, SimBatch>,
        ) -> Vec<Output<Raw, SimBatch>>,
    ) -> Result<(), Violation> {
        self.oracle.set_now(self.now);
        loop {
            let out = self.sink.poll_output(self.now);
            let timeout = matches!(out, Output::Timeout(_));
            for seen in wrong(&mut self.sink, self.now, out) {
                self.oracle.output(seen)?;
            }
            if timeout {
                return self.oracle.check(&mut self.sink);
            }
        }
    }

    /// A correct driver: READY at once, nothing else answered.
    fn honest(&mut self) -> Result<(), Violation> {
        self.drain(|sink, now, out| {
            if let Output::Open { conn, .. } = &out {
                let _ = sink.handle(now, Input::ready(*conn));
            }
            vec![out]
        })
    }

    fn ack(&mut self, conn: ConnId<Raw>, up_to: u64) {
        let _ = self.sink.handle(self.now, Input::acked(conn, up_to));
        self.oracle.acked(conn, up_to);
    }
}

/// That `result` is a violation of `invariant` whose message says `says`.
fn expect(result: Result<(), Violation>, invariant: u8, says: &str) {
    let v = result.expect_err("the check must fire");
    assert_eq!(v.invariant, invariant, "{v}");
    assert!(v.message.contains(says), "{v}");
}

fn copy(t: &Transmit<Raw, SimBatch>) -> Transmit<Raw, SimBatch> {
    Transmit {
        table: t.table,
        conn: t.conn,
        wire_offset: t.wire_offset,
        offset: t.offset,
        batch: t.batch,
        rows: t.rows,
    }
}

#[test]
fn check_1_fires_on_a_refusal_the_oracles_books_do_not_justify() {
    // The core's window holds one batch; the oracle believes it holds eight.
    let tight = SinkConfig {
        window: WindowLimits {
            max_batches: 1,
            ..WindowLimits::default()
        },
        ..config()
    };
    let mut rig = Rig::with(1, tight, config());
    rig.submit(5).unwrap();
    expect(rig.submit(5), 1, "refused");
}

#[test]
fn check_2_fires_on_a_confirmation_without_a_covering_ack() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    // The driver acks everything it sends but hides the acks from the oracle.
    expect(
        rig.drain(|sink, now, out| {
            match &out {
                Output::Open { conn, .. } => {
                    let _ = sink.handle(now, Input::ready(*conn));
                }
                Output::Send(t) => {
                    let _ = sink.handle(now, Input::acked(t.conn, t.rows));
                }
                _ => {}
            }
            vec![out]
        }),
        2,
        "confirmed with 0 of 3 rows durable",
    );
}

#[test]
fn check_3_fires_on_a_durable_batch_left_unconfirmed() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    let mut conn = None;
    rig.drain(|sink, now, out| {
        match &out {
            Output::Open { conn: c, .. } => {
                let _ = sink.handle(now, Input::ready(*c));
            }
            Output::Send(t) => conn = Some(t.conn),
            _ => {}
        }
        vec![out]
    })
    .unwrap();
    // The oracle is told of an ack the core never got.
    rig.oracle.acked(conn.unwrap(), 3);
    expect(rig.honest(), 3, "durable but not confirmed");
}

#[test]
fn check_3_fires_on_confirmations_out_of_offset_order() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    rig.submit(3).unwrap();
    let mut conn = None;
    rig.drain(|sink, now, out| {
        match &out {
            Output::Open { conn: c, .. } => {
                let _ = sink.handle(now, Input::ready(*c));
            }
            Output::Send(t) => conn = Some(t.conn),
            _ => {}
        }
        vec![out]
    })
    .unwrap();
    let conn = conn.unwrap();
    // Two acks, two bursts; the driver delivers the second first.
    rig.ack(conn, 3);
    rig.ack(conn, 6);
    let mut held = None;
    let result = rig.drain(|_, _, out| match out {
        Output::Confirmed(_) if held.is_none() => {
            held = Some(out);
            vec![]
        }
        Output::Confirmed(_) => vec![out, held.take().unwrap()],
        other => vec![other],
    });
    expect(result, 3, "confirmed offset 0 after");
}

#[test]
fn check_4_fires_on_a_send_on_a_connection_that_is_not_live() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    let mut first = None;
    rig.drain(|_, _, out| {
        if let Output::Open { conn, .. } = &out {
            first = Some(*conn);
        }
        vec![out]
    })
    .unwrap();
    // The first connection fails before READY; after the backoff a second one opens and the
    // driver shows the oracle the replay on the first (stale) one.
    let old = first.unwrap();
    let error = zerobus_sink::StreamError::Eof;
    let _ = rig.sink.handle(rig.now, Input::Failed { conn: old, error });
    rig.honest().unwrap();
    rig.now = rig.now + Duration::from_secs(3);
    let result = rig.drain(|sink, now, out| match out {
        Output::Open { conn, .. } => {
            let _ = sink.handle(now, Input::ready(conn));
            vec![out]
        }
        Output::Send(t) => vec![Output::Send(Transmit { conn: old, ..t })],
        other => vec![other],
    });
    expect(result, 4, "not the live connection");
}

#[test]
fn check_4_fires_on_wire_offsets_that_skip_or_repeat() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    // The driver shows the oracle the same message twice (as if sent twice).
    let result = rig.drain(|sink, now, out| match out {
        Output::Open { conn, .. } => {
            let _ = sink.handle(now, Input::ready(conn));
            vec![out]
        }
        Output::Send(t) => vec![Output::Send(copy(&t)), Output::Send(t)],
        other => vec![other],
    });
    expect(result, 4, "sent wire offset 0 after 1 messages");
}

#[test]
fn check_5_fires_on_a_batch_that_never_ends() {
    // A dropped hand-back also leaves the oracle with work pending at `Timeout(None)`
    // (invariant 11): this oracle checks invariant 5 alone.
    let mut rig = Rig::checking(1, config(), config(), Checks::only(5));
    rig.submit(3).unwrap();
    rig.sink.close(rig.now, rig.now + Duration::from_secs(1));
    rig.oracle.closing();
    rig.honest().unwrap();
    rig.now = rig.now + Duration::from_secs(2);
    // The driver drops the hand-back at the close deadline.
    let dropped = rig.drain(|_, _, out| match out {
        Output::Failed(_) => vec![],
        other => vec![other],
    });
    expect(dropped, 5, "disagree with the oracle's");
    expect(rig.oracle.finish(&rig.sink).map(|_| ()), 5, "never ended");
}

#[test]
fn check_5_fires_on_a_hand_back_with_the_wrong_rows() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    rig.sink.close(rig.now, rig.now + Duration::from_secs(1));
    rig.oracle.closing();
    rig.honest().unwrap();
    rig.now = rig.now + Duration::from_secs(2);
    // The driver hands back one row fewer than the batch had.
    let result = rig.drain(|_, _, out| match out {
        Output::Failed(mut f) => {
            f.batches[0].batch.rows -= 1;
            vec![Output::Failed(f)]
        }
        other => vec![other],
    });
    expect(result, 5, "handed back as rows 0+2 of 3");
}

#[test]
fn check_7_fires_on_two_live_connections_on_one_slot() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    rig.honest().unwrap();
    // The connection fails; the driver hides the core's Close from the oracle.
    let live = {
        let mut found = None;
        rig.sink
            .submit(
                rig.now,
                rig.table,
                SimBatch::new(99, 1, 8),
                Token::raw("sim", 0, 99),
            )
            .unwrap();
        rig.oracle.admitted(99, 1, 8, rig.table, None).unwrap();
        rig.drain(|_, _, out| {
            if let Output::Send(t) = &out {
                found = Some(t.conn);
            }
            vec![out]
        })
        .unwrap();
        found.unwrap()
    };
    let _ = rig.sink.handle(
        rig.now,
        Input::Failed {
            conn: live,
            error: zerobus_sink::StreamError::Eof,
        },
    );
    rig.drain(|_, _, out| match out {
        Output::Close { .. } => vec![],
        other => vec![other],
    })
    .unwrap();
    rig.now = rig.now + Duration::from_secs(3);
    expect(rig.honest(), 7, "while");
}

#[test]
fn check_7_fires_on_more_streams_than_the_cap() {
    let told = SinkConfig {
        max_open_streams: 2,
        ..config()
    };
    let mut rig = Rig::with(3, config(), told);
    rig.submit(3).unwrap();
    expect(rig.honest(), 7, "streams held");
}

#[test]
fn check_7_fires_on_a_reopen_before_the_minimum_backoff() {
    // The core backs off 2 s; the oracle is told 10 s.
    let told = SinkConfig {
        min_residency: Duration::from_secs(10),
        retry: RetryPolicy {
            initial_backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(60),
            jitter: 0.0,
            ..RetryPolicy::default()
        },
        ..config()
    };
    let mut rig = Rig::with(1, config(), told);
    rig.submit(3).unwrap();
    let mut conn = None;
    rig.drain(|_, _, out| {
        if let Output::Open { conn: c, .. } = &out {
            conn = Some(*c);
        }
        vec![out]
    })
    .unwrap();
    let error = zerobus_sink::StreamError::Eof;
    let _ = rig.sink.handle(
        rig.now,
        Input::Failed {
            conn: conn.unwrap(),
            error,
        },
    );
    rig.honest().unwrap();
    rig.now = rig.now + Duration::from_secs(3);
    expect(rig.honest(), 7, "before the minimum backoff");
}

#[test]
fn check_7_fires_on_too_many_opens_in_a_minute() {
    // Rotations reopen at once; a driver that does not tell the oracle the service asked for
    // them makes every reopen count against the slot's budget (37 a minute with the defaults).
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    let mut result = Ok(());
    for _ in 0..40 {
        let mut live = None;
        result = rig.drain(|sink, now, out| {
            if let Output::Open { conn, .. } = &out {
                let _ = sink.handle(now, Input::ready(*conn));
                live = Some(*conn);
            }
            if let Output::Close {
                conn,
                graceful: true,
            } = &out
            {
                let _ = sink.handle(now, Input::Closed { conn: *conn });
            }
            vec![out]
        });
        if result.is_err() {
            break;
        }
        if let Some(conn) = live {
            let _ = rig
                .sink
                .handle(rig.now, Input::rotate(conn, Duration::ZERO));
        }
        rig.now = rig.now + Duration::from_millis(100);
    }
    expect(result, 7, "times in a minute");
}

#[test]
fn check_8_fires_on_a_window_beyond_its_bound() {
    // The core's windows hold 1,000 batches; the oracle is told 1.
    let told = SinkConfig {
        window: WindowLimits {
            max_batches: 1,
            ..WindowLimits::default()
        },
        ..config()
    };
    let mut rig = Rig::with(1, config(), told);
    rig.submit(3).unwrap();
    rig.submit(3).unwrap();
    expect(rig.honest(), 8, "slot 0 holds");
}

#[test]
fn check_9_fires_on_durable_rows_sent_again() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    let mut sent = None;
    rig.drain(|sink, now, out| {
        match &out {
            Output::Open { conn, .. } => {
                let _ = sink.handle(now, Input::ready(*conn));
            }
            Output::Send(t) => sent = Some(copy(t)),
            _ => {}
        }
        vec![out]
    })
    .unwrap();
    let sent = sent.unwrap();
    // The service made 2 rows durable (the oracle knows); the driver replays the whole
    // message to the oracle as if the core had sent it again.
    rig.oracle.acked(sent.conn, 2);
    let result = rig.drain(|_, _, out| match out {
        Output::Timeout(_) => vec![Output::Send(copy(&sent)), out],
        other => vec![other],
    });
    expect(result, 9, "resent from row 0 though 2 rows are durable");
}

#[test]
fn check_9_fires_on_a_confirmation_after_the_batch_ended() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    let mut conn = None;
    rig.drain(|sink, now, out| {
        match &out {
            Output::Open { conn: c, .. } => {
                let _ = sink.handle(now, Input::ready(*c));
            }
            Output::Send(t) => conn = Some(t.conn),
            _ => {}
        }
        vec![out]
    })
    .unwrap();
    rig.ack(conn.unwrap(), 3);
    // The driver forges a hand-back of the batch before passing on its confirmation.
    let forged = Failed {
        table: rig.table,
        slot: None,
        reason: FailureReason::CloseDeadline { table: rig.table },
        batches: vec![FailedBatch {
            offset: None,
            batch: SimBatch::new(0, 3, 8),
            token: Token::raw("sim", 0, 0),
            durable_rows: 0,
        }],
    };
    let mut forged = Some(forged);
    let result = rig.drain(|_, _, out| match out {
        Output::Confirmed(_) => {
            let mut seen: Vec<_> = forged.take().map(Output::Failed).into_iter().collect();
            seen.push(out);
            seen
        }
        other => vec![other],
    });
    expect(result, 9, "confirmed after it ended");
}

#[test]
fn check_11_fires_on_timeout_none_with_work_pending() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    // The driver reports that the core has nothing due (it does: the open timeout).
    let result = rig.drain(|_, _, out| match out {
        Output::Timeout(Some(_)) => vec![Output::Timeout(None)],
        other => vec![other],
    });
    expect(result, 11, "Timeout(None) with 1 batches pending");
}

#[test]
fn check_11_fires_on_a_deadline_in_the_past() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    let now = rig.now;
    let result = rig.drain(|_, _, out| match out {
        Output::Timeout(Some(_)) => vec![Output::Timeout(Some(now))],
        other => vec![other],
    });
    expect(result, 11, "is not in the future");
}

#[test]
fn check_11_fires_when_pending_work_makes_no_progress_within_the_bound() {
    let mut rig = Rig::new(1);
    rig.submit(3).unwrap();
    rig.honest().unwrap();
    // Faults stop; the service never acks (a driver that drops every ack) for 61 s, with a
    // bound of 60 s.
    rig.oracle.faults_stopped(Duration::from_secs(60));
    rig.now = rig.now + Duration::from_secs(61);
    expect(rig.honest(), 11, "none ended");
}

/// A rig whose table is provisioned through a catalog, one batch of schema 1 submitted; the
/// oracle is told schema 1 is reconciled (the drivers below answer the core's request).
fn provisioned_rig() -> Rig {
    let mut sink = SinkCore::new(config()).unwrap();
    let table = sink
        .add_table(
            TableSpec::new("main.sim.t")
                .sizing(PoolSizing::fixed(1))
                .reconciled(),
        )
        .unwrap();
    let mut oracle = Oracle::new(config());
    oracle.register_table(table, 1);
    oracle.provisioned(table);
    let mut rig = Rig {
        sink,
        oracle,
        table,
        now: Time::ZERO,
        next: 1,
    };
    let batch = SimBatch::new(0, 3, 8).of_schema(1);
    let route = table.schema(zerobus_sink::SchemaId(1));
    rig.sink
        .submit(Time::ZERO, route, batch, Token::raw("sim", 0, 0))
        .unwrap();
    rig.oracle.admitted(0, 3, 24, table, None).unwrap();
    rig.oracle.reconciled(table, 1, true);
    rig
}

/// Answers the core's reconcile request (reconciled); `None` for any other output.
fn answer(
    sink: &mut SinkCore<Raw, SimBatch>,
    now: Time,
    out: &Output<Raw, SimBatch>,
) -> Option<()> {
    let Output::Reconcile { table, schema } = out else {
        return None;
    };
    let _ = sink.reconciled(now, *table, *schema, Ok(()));
    Some(())
}

#[test]
fn check_12_fires_on_a_stream_opened_for_a_schema_never_reconciled() {
    let mut rig = provisioned_rig();
    // The oracle never heard of the answer (the driver kept it from the oracle): the open is
    // for a schema it does not know as reconciled.
    let result = rig.drain(|sink, now, out| match out {
        Output::Reconcile { .. } => {
            answer(sink, now, &out);
            vec![out]
        }
        Output::Open { table, conn, .. } => vec![Output::Open {
            table,
            conn,
            schema: zerobus_sink::SchemaId(9),
        }],
        other => vec![other],
    });
    expect(result, 12, "not reconciled");
}

#[test]
fn check_12_fires_on_a_schema_retired_while_a_batch_of_it_is_pending() {
    let mut rig = provisioned_rig();
    rig.oracle.schema_of(0, rig.table, 1);
    // The driver says the core retired schema 1 (the core would have refused: batch 0 is
    // still queued, and a replay would need its schema).
    let result = rig.oracle.retired(rig.table, 1);
    expect(result, 12, "retired while batch Some(0)");
}

#[test]
fn check_12_fires_on_a_batch_sent_on_a_stream_of_another_schema() {
    let mut rig = provisioned_rig();
    let result = rig.drain(|sink, now, out| match out {
        Output::Reconcile { .. } => {
            answer(sink, now, &out);
            vec![out]
        }
        Output::Open { conn, .. } => {
            let _ = sink.handle(now, Input::ready(conn));
            vec![out]
        }
        // The driver shows the oracle a batch of another schema on the stream.
        Output::Send(t) => vec![Output::Send(Transmit {
            batch: t.batch.of_schema(2),
            ..copy(&t)
        })],
        other => vec![other],
    });
    expect(result, 12, "opened for schema");
}

#[test]
fn check_13_fires_when_a_second_poll_at_the_same_instant_finds_work() {
    // The wrong driver: after its drain ended with a Timeout it submits a batch and checks the
    // sink without draining again, so a second poll at that instant finds the `Open` it owes.
    let mut rig = Rig::checking(1, config(), config(), Checks::only(13));
    rig.honest().unwrap();
    rig.submit(10).unwrap();
    expect(
        rig.oracle.check(&mut rig.sink),
        13,
        "a second poll_output at the same instant returned",
    );
}
