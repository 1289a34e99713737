//! The primary-raw role end to end (seed section 8): a table validated for the role, written
//! through `zerobus-local` into a real Delta table, then changed under the running pipeline by
//! an owner (deletion vectors turned on). The sink finds it at its timed check, or at a
//! stream's open, fails the table with a typed error and hands back everything not durable;
//! what was confirmed is exactly what the table holds.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{RAW, RawRig as Rig, Recorder, config, ids, orders, raw, schema};
use zerobus_sink::{FailureReason, Raw, RejectReason, StreamError, TableId, Token};
use zerobus_sink_catalog::PrimaryRawShape;
use zerobus_sink_catalog::primary_raw::validate;
use zerobus_sink_testkit::emulator::{Code, Count, Fault, delta};
use zerobus_sink_tokio::{
    DeliveryError, Provisioning, SendError, Sink, StartError, TableDef, ZerobusSink,
};

impl Rig {
    async fn sink(&self, recorder: &Recorder, recheck: Duration) -> ZerobusSink<Raw> {
        let proof = self.proof().await;
        ZerobusSink::start_provisioned(
            config(&self.emulator).primary_raw_recheck(recheck),
            vec![TableDef::primary_raw(proof, schema()).streams(1)],
            recorder.clone(),
            Provisioning::new(self.catalog.clone(), "raw-sink"),
        )
        .unwrap()
    }

    /// A rig, its recorder, and a sink on its primary-raw table checked every `recheck`.
    async fn running(recheck: Duration) -> (Rig, Recorder, ZerobusSink<Raw>, TableId) {
        let rig = Rig::new().await;
        let recorder = Recorder::default();
        let sink = rig.sink(&recorder, recheck).await;
        let table = sink.table(RAW).unwrap();
        (rig, recorder, sink, table)
    }

    /// An owner turns deletion vectors on.
    async fn flip(&self) {
        self.catalog
            .set_properties(
                &raw(),
                [("delta.enableDeletionVectors".into(), "true".into())],
            )
            .await
            .unwrap();
    }

    /// Checks the books after a run that sent orders `0 .. sent`: every row is confirmed or
    /// handed back, never both; the table holds every confirmed row once, and nothing else but
    /// rows handed back (a batch the service made durable whose ack the sink never read: it
    /// cannot know, so it hands the batch back; a replay is deduplicated by `_twg_source_*`).
    /// Returns the confirmed and handed-back ids.
    async fn books(
        &self,
        recorder: &Recorder,
        sent: i64,
        report: &zerobus_sink_tokio::Report,
    ) -> (BTreeSet<i64>, BTreeSet<i64>) {
        let (confirmed, handed_back) = {
            let seen = recorder.seen();
            let confirmed: BTreeSet<i64> = seen
                .committed
                .iter()
                .flat_map(|last| last - 9..=*last)
                .collect();
            let handed_back: BTreeSet<i64> = seen
                .failed
                .iter()
                .flat_map(|(first, rows, _)| {
                    let first = first.unwrap();
                    first..first + i64::try_from(*rows).unwrap()
                })
                .collect();
            for (_, _, why) in &seen.failed {
                assert!(why.contains("deletion vectors are enabled"), "{why}");
            }
            (confirmed, handed_back)
        };
        assert!(confirmed.is_disjoint(&handed_back), "{report}");
        let all: BTreeSet<i64> = confirmed.union(&handed_back).copied().collect();
        assert_eq!(
            all,
            (0..sent).collect(),
            "every row accounted for: {report}"
        );
        let in_table = self.table_ids().await;
        assert!(
            in_table.is_superset(&confirmed),
            "a confirmed row is missing"
        );
        assert!(
            in_table
                .difference(&confirmed)
                .all(|id| handed_back.contains(id)),
            "the table holds rows nobody sent"
        );
        (confirmed, handed_back)
    }

    async fn table_ids(&self) -> BTreeSet<i64> {
        self.emulator.until_materialized(RAW).await;
        let (batches, _) = delta::read_table(&self.dir.path().join("tables"), RAW)
            .await
            .unwrap();
        let counts = ids(&batches);
        assert!(counts.values().all(|n| *n == 1), "no row twice");
        counts.into_keys().collect()
    }
}

/// The failure a batch of the changed table comes back with names the role and the property.
fn assert_precondition(reason: &FailureReason) {
    let FailureReason::TableFailed { error, .. } = reason else {
        panic!("expected the table to fail, got: {reason}")
    };
    let StreamError::Precondition { role, unmet } = error else {
        panic!("expected a precondition error, got: {error}")
    };
    assert_eq!(*role, "primary-raw");
    assert!(unmet.contains("deletion vectors are enabled"), "{unmet}");
}

/// Sends orders `first .. first + 10` and waits until they are durable.
async fn durable(sink: &mut ZerobusSink<Raw>, table: TableId, first: i64) {
    let receipt = sink
        .send(table, orders(first, 10), Token::raw("orders", 0, first + 9))
        .await
        .unwrap();
    receipt.await.unwrap();
}

/// Sends orders `first .. first + 10`, which must be refused because the table failed; returns
/// the refusal's reason.
async fn refused(sink: &mut ZerobusSink<Raw>, table: TableId, first: i64) -> String {
    match sink
        .send(table, orders(first, 10), Token::raw("orders", 0, first + 9))
        .await
    {
        Err(SendError::Rejected {
            reason: RejectReason::TableFailed { reason, .. },
            ..
        }) => reason,
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a batch was admitted for a failed table"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_property_flipped_mid_run_stops_the_table_and_hands_back_what_is_not_durable() {
    let (rig, recorder, mut sink, table) = Rig::running(Duration::from_millis(100)).await;
    let mut sent = 0i64;
    // Before the change: every batch is durable.
    for _ in 0..20 {
        durable(&mut sink, table, sent).await;
        sent += 10;
    }
    rig.flip().await;
    // Keep writing, each batch awaited (no sleeping): the timed check finds the change.
    let refused = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let token = Token::raw("orders", 0, sent + 9);
            match sink.send(table, orders(sent, 10), token).await {
                Ok(receipt) => {
                    sent += 10;
                    match receipt.await {
                        Ok(_) => continue,
                        Err(DeliveryError::Failed { reason, .. }) => {
                            assert_precondition(&reason);
                            break;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                Err(e) => panic!("refused before any batch was handed back: {e}"),
            }
        }
        // Admission has stopped for the table, with the typed reason.
        refused(&mut sink, table, sent).await
    })
    .await
    .expect("the change is found within the check interval");
    assert!(
        refused.contains("primary-raw preconditions no longer met"),
        "{refused}"
    );
    let report = sink.close(Duration::from_secs(5)).await;

    let (confirmed, handed_back) = rig.books(&recorder, sent, &report).await;
    assert!(
        !handed_back.is_empty(),
        "the batch that failed was handed back"
    );
    assert!(
        confirmed.len() >= 200,
        "the writes before the change are durable"
    );
}

/// The race the test above can meet, made certain: the timed check fails the table while
/// nothing is in flight, so nothing is handed back and the handle has not heard. The next
/// batch, handed over without a round trip, still comes back with the table's own failure
/// (not a bare "not admitted"), and the send after it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_failed_with_nothing_in_flight_fails_the_next_batch_with_its_own_reason() {
    let (rig, recorder, mut sink, table) = Rig::running(Duration::from_millis(100)).await;
    durable(&mut sink, table, 0).await;
    rig.flip().await;
    // Await the check's verdict in the sink's own state: each health answer is a round trip
    // to the driver.
    let observer = sink.observer();
    tokio::time::timeout(Duration::from_secs(60), async {
        while !observer.health().await.unwrap().tables[0].failed {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the timed check finds the change");
    let receipt = sink
        .send(table, orders(10, 10), Token::raw("orders", 0, 19))
        .await
        .expect("the handle has not heard: the batch is handed over");
    match receipt.await {
        Err(DeliveryError::Failed {
            reason,
            durable_rows: 0,
        }) => assert_precondition(&reason),
        other => panic!("expected the table's failure, got {other:?}"),
    }
    let reason = refused(&mut sink, table, 20).await;
    assert!(reason.contains("deletion vectors are enabled"), "{reason}");
    let report = sink.close(Duration::from_secs(5)).await;
    let (confirmed, handed_back) = rig.books(&recorder, 20, &report).await;
    assert_eq!(confirmed, (0..10).collect());
    assert_eq!(handed_back, (10..20).collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_does_not_reopen_on_a_table_changed_since_validation() {
    let rig = Rig::new().await;
    let recorder = Recorder::default();
    // A timer that never fires here: the reopen's own check must find the change.
    let mut sink = rig.sink(&recorder, Duration::from_secs(3_600)).await;
    let table = sink.table(RAW).unwrap();
    // The service ends the stream at its second message (after the change below): the slot
    // reopens, and the open checks.
    rig.emulator.inject(
        RAW,
        Fault::FailAfter {
            logged: Count::Messages(2),
            code: Code::Unavailable,
        },
    );
    durable(&mut sink, table, 0).await;
    rig.flip().await;
    let receipt = sink
        .send(table, orders(10, 10), Token::raw("orders", 0, 19))
        .await
        .unwrap();
    let Err(DeliveryError::Failed { reason, .. }) = receipt.await else {
        panic!("the batch was confirmed on a table that no longer meets the role")
    };
    assert_precondition(&reason);
    let report = sink.close(Duration::from_secs(5)).await;
    assert_eq!(
        rig.emulator.stats().calls,
        1,
        "the stream was not opened again"
    );
    let (confirmed, handed_back) = rig.books(&recorder, 20, &report).await;
    assert_eq!(confirmed, (0..10).collect());
    assert_eq!(handed_back, (10..20).collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_batch_after_the_change_is_refused_by_the_catalog_before_any_stream() {
    let rig = Rig::new().await;
    let recorder = Recorder::default();
    let mut sink = rig.sink(&recorder, Duration::from_secs(3_600)).await;
    let table = sink.table(RAW).unwrap();
    rig.flip().await;
    // The schema's first batch is reconciled: the catalog refuses the role, every reason named.
    let Err(SendError::Unreconcilable { columns, .. }) = sink
        .send(table, orders(0, 10), Token::raw("orders", 0, 9))
        .await
    else {
        panic!("a batch was admitted for a table that no longer meets the role")
    };
    let text = columns.iter().map(ToString::to_string).collect::<String>();
    assert!(text.contains("deletion vectors are enabled"), "{text}");
    let report = sink.close(Duration::from_secs(5)).await;
    assert_eq!(
        (report.rows, rig.emulator.stats().calls),
        (0, 0),
        "{report}"
    );
}

#[tokio::test]
async fn the_role_needs_a_catalog_to_check_it_again() {
    let rig = Rig::new().await;
    let proof = validate(&rig.catalog, &raw(), PrimaryRawShape::DeltaReadable)
        .await
        .unwrap();
    let started = ZerobusSink::<Raw>::start(
        config(&rig.emulator),
        vec![TableDef::primary_raw(proof, Arc::clone(&schema()))],
        Recorder::default(),
    );
    let Err(StartError::Table { table, reason }) = started else {
        panic!("a primary-raw table was started without a catalog")
    };
    assert_eq!(table, RAW);
    assert!(reason.contains("start_provisioned"), "{reason}");
}
