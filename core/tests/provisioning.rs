//! Tables provisioned through a catalog: nothing reaches a stream before its schema is
//! reconciled, a drift costs one reconcile and one reopen per slot, a refused drift hands its
//! batches back while the table keeps serving, and an unanswered request is asked again.
//!
//! Every batch here is filled with its schema number, so the tests check what is on each
//! stream from the bytes themselves, not from the core's labels.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use zerobus_sink::{
    ConfigError, ConnId, FailureReason, Handled, Ignored, Input, Output, PoolSizing, Raw,
    RejectReason, SchemaId, SinkConfig, SinkCore, TableId, TableSpec, Time,
};

fn provisioned(slots: u16) -> (Sink, TableId) {
    let mut config = SinkConfig::default();
    config.retry.jitter = 0.0;
    let mut s = SinkCore::new(config).unwrap();
    let table = s
        .add_table(
            TableSpec::new("main.bronze.orders")
                .sizing(PoolSizing::fixed(slots))
                .reconciled(),
        )
        .unwrap();
    (s, table)
}

/// A batch of `rows` rows of schema `schema` (each row holds the schema's number).
/// A provisioned table with `slots` streams serving schema 1: one batch (token 1) submitted,
/// its schema reconciled, everything the core asked for performed.
fn serving_schema_1(slots: u16) -> (Sink, TableId, Wire) {
    let (mut s, table) = provisioned(slots);
    let mut wire = Wire::default();
    s.submit(t(0), table.schema(SchemaId(1)), batch(1, 5), token(1))
        .unwrap();
    wire.drain(&mut s, t(0));
    s.reconciled(t(0), table, SchemaId(1), Ok(()));
    wire.drain(&mut s, t(0));
    (s, table, wire)
}

fn batch(schema: u32, rows: usize) -> Vec<u8> {
    vec![u8::try_from(schema).unwrap(); rows]
}

/// What the driver saw: reconciles asked, the schema each connection was opened with, and
/// every send checked against its connection's schema from the batch's own bytes.
#[derive(Default)]
struct Wire {
    reconciles: Vec<(TableId, SchemaId)>,
    opened: BTreeMap<ConnId<Raw>, SchemaId>,
    sent: Vec<(ConnId<Raw>, u64)>,
    confirmed: Vec<i64>,
    failed: Vec<(FailureReason, Vec<i64>)>,
    closes: usize,
}

impl Wire {
    /// Drains, answering each Open with READY; a send of a batch whose bytes are not its
    /// connection's schema fails the test.
    fn drain(&mut self, s: &mut Sink, now: Time) {
        loop {
            match s.poll_output(now) {
                Output::Open { conn, schema, .. } => {
                    self.opened.insert(conn, schema);
                    assert_eq!(s.handle(now, Input::ready(conn)), Handled::Applied);
                }
                Output::Reconcile { table, schema } => self.reconciles.push((table, schema)),
                Output::Send(t) => {
                    let on = self.opened[&t.conn];
                    assert!(
                        t.batch.iter().all(|b| u32::from(*b) == on.0),
                        "a batch of schema {:?} sent on a stream opened for {on}",
                        t.batch.first()
                    );
                    self.sent.push((t.conn, t.rows));
                }
                Output::Confirmed(c) => self
                    .confirmed
                    .extend(c.into_iter().map(|c| c.commit().offset)),
                Output::Failed(f) => {
                    let positions = f
                        .batches
                        .iter()
                        .map(|b| b.token.position().offset)
                        .collect();
                    self.failed.push((f.reason, positions));
                }
                Output::Close { .. } => self.closes += 1,
                Output::Timeout(_) => return,
                _ => {}
            }
        }
    }

    /// Acks everything sent so far on each connection (cumulative rows).
    fn ack_all(&mut self, s: &mut Sink, now: Time) {
        let mut per_conn: BTreeMap<ConnId<Raw>, u64> = BTreeMap::new();
        for (conn, rows) in &self.sent {
            *per_conn.entry(*conn).or_default() += rows;
        }
        for (conn, rows) in per_conn {
            let _ = s.handle(now, Input::acked(conn, rows));
        }
        self.drain(s, now);
    }
}

#[test]
fn invariant_12_no_batch_reaches_a_stream_before_its_schema_is_reconciled() {
    let (mut s, table) = provisioned(2);
    s.submit(t(0), table.schema(SchemaId(1)), batch(1, 5), token(1))
        .unwrap();
    s.submit(t(0), table.schema(SchemaId(1)), batch(1, 5), token(2))
        .unwrap();
    let mut wire = Wire::default();
    wire.drain(&mut s, t(0));
    // One request for the schema, and nothing opened or sent before the answer.
    assert_eq!(wire.reconciles, [(table, SchemaId(1))]);
    assert!(wire.opened.is_empty() && wire.sent.is_empty());
    // Work is pending, so the core has a deadline (it asks again if no answer comes).
    assert_eq!(
        s.poll_output(t(0)).timeout(),
        Some(Some(t(0) + s.config().reconcile_timeout))
    );
    assert_eq!(
        s.reconciled(t(10), table, SchemaId(1), Ok(())),
        Handled::Applied
    );
    wire.drain(&mut s, t(10));
    assert!(wire.opened.values().all(|schema| *schema == SchemaId(1)));
    assert_eq!(wire.opened.len(), 2);
    wire.ack_all(&mut s, t(20));
    assert_eq!(wire.confirmed, [1, 2]);
    assert_eq!(s.metrics().reconciles_asked, 1);
}

#[test]
fn a_drift_costs_one_reconcile_and_one_reopen_per_slot_and_earlier_batches_confirm_in_order() {
    let (mut s, table, mut wire) = serving_schema_1(2);
    // Two more of the old schema, on the wire and not yet acked; then the drift.
    for n in 2..4 {
        s.submit(t(1), table.schema(SchemaId(1)), batch(1, 5), token(n))
            .unwrap();
    }
    wire.drain(&mut s, t(1));
    for n in 4..10 {
        s.submit(t(2), table.schema(SchemaId(2)), batch(2, 5), token(n))
            .unwrap();
    }
    wire.drain(&mut s, t(2));
    assert_eq!(
        wire.reconciles,
        [(table, SchemaId(1)), (table, SchemaId(2))]
    );
    let sent_before = wire.sent.len();
    s.reconciled(t(3), table, SchemaId(2), Ok(()));
    wire.drain(&mut s, t(3));
    assert_eq!(
        wire.sent.len(),
        sent_before,
        "no new-schema batch on an old stream"
    );
    // The old batches' acks arrive; each slot drains, half-closes and reopens for schema 2.
    wire.ack_all(&mut s, t(4));
    wire.drain(&mut s, t(600));
    wire.ack_all(&mut s, t(600));
    // Every batch confirmed once (each slot in its own order; across slots the source's
    // tracker orders them).
    let mut confirmed = wire.confirmed.clone();
    confirmed.sort_unstable();
    assert_eq!(confirmed, (1..10).collect::<Vec<_>>());
    let reopened: Vec<SchemaId> = wire
        .opened
        .values()
        .copied()
        .filter(|s| *s == SchemaId(2))
        .collect();
    assert_eq!(reopened.len(), 2, "one reopen per slot: {:?}", wire.opened);
    assert_eq!(s.metrics().schema_switches, 2);
    assert_eq!(
        s.metrics().reconciles_asked,
        2,
        "cached: no reconcile per batch"
    );
    // More batches of schema 2 need nothing new.
    s.submit(t(700), table.schema(SchemaId(2)), batch(2, 5), token(10))
        .unwrap();
    wire.drain(&mut s, t(700));
    wire.ack_all(&mut s, t(701));
    assert_eq!(wire.confirmed.last(), Some(&10));
    assert_eq!(s.metrics().reconciles_asked, 2);
    assert_eq!(s.metrics().connections_opened, 4);
}

#[test]
fn a_refused_drift_hands_its_batches_back_and_the_table_keeps_serving_the_old_schema() {
    let (mut s, table, mut wire) = serving_schema_1(1);
    s.submit(t(1), table.schema(SchemaId(2)), batch(2, 5), token(2))
        .unwrap();
    s.submit(t(1), table.schema(SchemaId(1)), batch(1, 5), token(3))
        .unwrap();
    wire.drain(&mut s, t(1));
    let words = "column amount: narrowing from bigint to int";
    s.reconciled(t(2), table, SchemaId(2), Err(words.into()));
    wire.drain(&mut s, t(2));
    let [(reason, positions)] = wire.failed.as_slice() else {
        panic!("{:?}", wire.failed)
    };
    assert_eq!(positions, &[2]);
    assert!(
        matches!(reason, FailureReason::SchemaRefused { schema: SchemaId(2), reason, .. } if reason == words),
        "{reason}"
    );
    // Later batches of the refused schema are refused at admission, naming why.
    let r = s
        .submit(t(3), table.schema(SchemaId(2)), batch(2, 5), token(4))
        .unwrap_err();
    assert!(
        matches!(r.reason, RejectReason::SchemaRefused { .. }),
        "{}",
        r.reason
    );
    assert!(r.reason.to_string().contains("amount"));
    // The old schema still flows.
    wire.ack_all(&mut s, t(4));
    assert_eq!(wire.confirmed, [1, 3]);
    assert!(!s.table_failed(table));
}

#[test]
fn an_unanswered_reconcile_is_asked_again_after_the_timeout() {
    let (mut s, table) = provisioned(1);
    s.submit(t(0), table.schema(SchemaId(7)), batch(7, 5), token(1))
        .unwrap();
    let mut wire = Wire::default();
    wire.drain(&mut s, t(0));
    let again = t(0) + s.config().reconcile_timeout;
    assert_eq!(s.poll_output(t(1)).timeout(), Some(Some(again)));
    wire.drain(&mut s, again);
    assert_eq!(
        wire.reconciles,
        [(table, SchemaId(7)), (table, SchemaId(7))]
    );
    // An answer for a schema never seen changes nothing.
    assert_eq!(
        s.reconciled(again, table, SchemaId(9), Ok(())),
        Handled::Ignored(Ignored::UnknownSchema)
    );
    s.reconciled(again, table, SchemaId(7), Ok(()));
    wire.drain(&mut s, again);
    wire.ack_all(&mut s, again + Duration::from_millis(1));
    assert_eq!(wire.confirmed, [1]);
}

#[test]
fn a_table_taken_as_it_is_never_asks_and_ignores_schema_routes() {
    let (mut s, table) = sink(1);
    s.submit(t(0), table.schema(SchemaId(3)), vec![0u8; 5], token(1))
        .unwrap();
    let out = drain(&mut s, t(0));
    assert!(!out.iter().any(|o| matches!(o, Output::Reconcile { .. })));
    assert_eq!(sends(&out).len(), 1);
}

#[test]
fn keyed_tables_cannot_be_provisioned_through_the_catalog() {
    let mut s = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
    let err = s
        .add_table(TableSpec::new("main.bronze.keyed").keyed().reconciled())
        .unwrap_err();
    assert!(matches!(err, ConfigError::KeyedReconciled { .. }), "{err}");
}

/// What an ignored reconcile answer must leave as it was: watermarks, metrics, and the next
/// output at the same instant.
fn unchanged_by(s: &mut Sink, now: Time, answer: impl FnOnce(&mut Sink) -> Handled) -> Handled {
    let before = (
        s.watermarks(),
        s.metrics().clone(),
        s.poll_output(now).timeout(),
    );
    let handled = answer(s);
    let after = (
        s.watermarks(),
        s.metrics().clone(),
        s.poll_output(now).timeout(),
    );
    assert_eq!(before.0, after.0, "watermarks moved");
    assert_eq!(
        (before.1.reconciles_ok, before.1.schemas_refused, before.2),
        (after.1.reconciles_ok, after.1.schemas_refused, after.2),
        "an ignored answer changed the sink"
    );
    handled
}

#[test]
fn reconciled_an_answer_that_comes_twice_is_applied_once() {
    let (mut s, table, mut wire) = serving_schema_1(1);
    // Schema 2 is asked about; the driver answers it, then answers schema 1 and 2 again
    // (a catalog task that retried, a late copy): neither may stand for a later question.
    s.submit(t(1), table.schema(SchemaId(2)), batch(2, 5), token(2))
        .unwrap();
    wire.drain(&mut s, t(1));
    assert_eq!(wire.reconciles.last(), Some(&(table, SchemaId(2))));
    assert_eq!(
        s.reconciled(t(1), table, SchemaId(2), Err("narrowing".into())),
        Handled::Applied
    );
    wire.drain(&mut s, t(1));
    for schema in [1, 2] {
        let handled = unchanged_by(&mut s, t(1), |s| {
            s.reconciled(t(1), table, SchemaId(schema), Ok(()))
        });
        assert_eq!(handled, Handled::Ignored(Ignored::AlreadyAnswered));
    }
    // The refusal stands: schema 2 is still refused at admission.
    let r = s
        .submit(t(2), table.schema(SchemaId(2)), batch(2, 5), token(3))
        .unwrap_err();
    assert!(matches!(r.reason, RejectReason::SchemaRefused { .. }));
    // A newer question is not answered by a late copy of an older answer.
    s.submit(t(2), table.schema(SchemaId(3)), batch(3, 5), token(4))
        .unwrap();
    wire.drain(&mut s, t(2));
    assert_eq!(wire.reconciles.last(), Some(&(table, SchemaId(3))));
    let handled = unchanged_by(&mut s, t(2), |s| {
        s.reconciled(t(2), table, SchemaId(1), Ok(()))
    });
    assert_eq!(handled, Handled::Ignored(Ignored::AlreadyAnswered));
    assert_eq!(s.metrics().reconciles_ok, 1);
}

#[test]
fn reconciled_an_answer_that_comes_before_its_question_is_ignored() {
    let (mut s, table) = provisioned(1);
    let mut wire = Wire::default();
    // Schemas 5 then 6 admitted: the core asks about 5 only, one question at a time.
    s.submit(t(0), table.schema(SchemaId(5)), batch(5, 5), token(1))
        .unwrap();
    s.submit(t(0), table.schema(SchemaId(6)), batch(6, 5), token(2))
        .unwrap();
    wire.drain(&mut s, t(0));
    assert_eq!(wire.reconciles, [(table, SchemaId(5))]);
    let handled = unchanged_by(&mut s, t(0), |s| {
        s.reconciled(t(0), table, SchemaId(6), Ok(()))
    });
    assert_eq!(handled, Handled::Ignored(Ignored::NotAsked));
    // Its question comes after 5 is answered, and then the answer is applied.
    assert_eq!(
        s.reconciled(t(0), table, SchemaId(5), Ok(())),
        Handled::Applied
    );
    wire.drain(&mut s, t(0));
    assert_eq!(
        wire.reconciles,
        [(table, SchemaId(5)), (table, SchemaId(6))]
    );
    assert_eq!(
        s.reconciled(t(0), table, SchemaId(6), Ok(())),
        Handled::Applied
    );
    assert_eq!(s.metrics().reconciles_ok, 2);
}

#[test]
fn reconciled_an_answer_for_a_schema_never_seen_is_ignored() {
    let (mut s, table, _wire) = serving_schema_1(1);
    let handled = unchanged_by(&mut s, t(1), |s| {
        s.reconciled(t(1), table, SchemaId(42), Ok(()))
    });
    assert_eq!(handled, Handled::Ignored(Ignored::UnknownSchema));
    // Nor for a table the sink does not have.
    let handled = unchanged_by(&mut s, t(1), |s| {
        s.reconciled(t(1), TableId::from_index(9), SchemaId(1), Ok(()))
    });
    assert_eq!(handled, Handled::Ignored(Ignored::UnknownSchema));
    // Schema 42 was not taken as reconciled: its first batch still asks.
    let mut wire = Wire::default();
    s.submit(t(2), table.schema(SchemaId(42)), batch(42, 5), token(2))
        .unwrap();
    wire.drain(&mut s, t(2));
    assert_eq!(wire.reconciles, [(table, SchemaId(42))]);
}

#[test]
fn a_schema_is_retired_only_once_no_batch_and_no_idle_stream_can_need_it() {
    let (mut s, table, mut wire) = serving_schema_1(1);
    // Batch 1 of schema 1 is on the wire, not acked: a replay would need its schema.
    assert_eq!(
        s.retire_schema(table, SchemaId(1)),
        Handled::Ignored(Ignored::SchemaInUse)
    );
    // The drift: schema 2's batch waits for its answer behind schema 1's pending one.
    s.submit(t(1), table.schema(SchemaId(2)), batch(2, 5), token(2))
        .unwrap();
    wire.drain(&mut s, t(1));
    assert_eq!(
        s.retire_schema(table, SchemaId(2)),
        Handled::Ignored(Ignored::UnknownSchema),
        "asked, not answered"
    );
    s.reconciled(t(2), table, SchemaId(2), Ok(()));
    wire.drain(&mut s, t(2));
    assert_eq!(
        s.retire_schema(table, SchemaId(1)),
        Handled::Ignored(Ignored::SchemaInUse),
        "batch 1 still pending"
    );
    // Batch 1 acked: the stream drains and reopens for schema 2, which carries batch 2.
    wire.ack_all(&mut s, t(3));
    wire.drain(&mut s, t(600));
    wire.ack_all(&mut s, t(600));
    assert_eq!(wire.confirmed, [1, 2]);
    assert_eq!(s.retire_schema(table, SchemaId(1)), Handled::Applied);
    // The latest stays: an idle stream opens with it.
    assert_eq!(
        s.retire_schema(table, SchemaId(2)),
        Handled::Ignored(Ignored::SchemaInUse)
    );
    // Retired, schema 1 is new again: a late answer about it is not taken, and its next
    // batch is reconciled before it is sent.
    assert_eq!(
        s.reconciled(t(601), table, SchemaId(1), Ok(())),
        Handled::Ignored(Ignored::UnknownSchema)
    );
    assert_eq!(
        s.retire_schema(table, SchemaId(1)),
        Handled::Ignored(Ignored::UnknownSchema)
    );
    let sent = wire.sent.len();
    s.submit(t(601), table.schema(SchemaId(1)), batch(1, 5), token(3))
        .unwrap();
    wire.drain(&mut s, t(601));
    assert_eq!(wire.reconciles.last(), Some(&(table, SchemaId(1))));
    assert_eq!(wire.sent.len(), sent, "nothing sent before the answer");
    s.reconciled(t(602), table, SchemaId(1), Ok(()));
    wire.drain(&mut s, t(602));
    wire.ack_all(&mut s, t(603));
    wire.drain(&mut s, t(1_300));
    wire.ack_all(&mut s, t(1_300));
    assert_eq!(wire.confirmed, [1, 2, 3]);
}

#[test]
fn a_refused_schema_is_retired_and_then_asked_about_again() {
    let (mut s, table, mut wire) = serving_schema_1(1);
    s.submit(t(1), table.schema(SchemaId(2)), batch(2, 5), token(2))
        .unwrap();
    wire.drain(&mut s, t(1));
    s.reconciled(
        t(2),
        table,
        SchemaId(2),
        Err("column amount: narrowing".into()),
    );
    wire.drain(&mut s, t(2));
    assert_eq!(wire.failed.len(), 1);
    assert_eq!(s.retire_schema(table, SchemaId(2)), Handled::Applied);
    // No longer refused at admission: asked about again (the catalog may have changed).
    s.submit(t(3), table.schema(SchemaId(2)), batch(2, 5), token(3))
        .unwrap();
    wire.drain(&mut s, t(3));
    assert_eq!(wire.reconciles.last(), Some(&(table, SchemaId(2))));
    // A table the sink does not have.
    assert_eq!(
        s.retire_schema(TableId::from_index(9), SchemaId(1)),
        Handled::Ignored(Ignored::UnknownSchema)
    );
}
