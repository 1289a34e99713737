//! The recovery read path and the coverage store end to end (seed sections 8.1, 8.2): derived
//! sinks write a primary-raw table through `zerobus-local`, which materializes it into a real
//! Delta table with a lag; each sink's coverage grows from its durable confirmations and is
//! saved beside the raw table; recovery reads a source range back through the catalog.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use common::{RAW, RawRig as Rig, config, ids, orders, raw, schema};
use zerobus_sink::{
    Confirmation, Coverage, CoverageRange, Derived, FailedBatch, FailureReason, Token,
};
use zerobus_sink_catalog::SinkId;
use zerobus_sink_catalog::local::coverage_store::CoverageStore;
use zerobus_sink_catalog::recovery::{Lag, Recover, RecoveryError};
use zerobus_sink_testkit::Rng;
use zerobus_sink_testkit::emulator::{Count, Fault, delta};
use zerobus_sink_tokio::{Confirmer, IsolatedRows, Provisioning, Sink, TableDef, ZerobusSink};

/// A derived sink's confirmer: its coverage grows from durable confirmations only.
#[derive(Clone, Default)]
struct Covering {
    coverage: Arc<Mutex<Coverage>>,
    failed: Arc<Mutex<Vec<String>>>,
}

impl Covering {
    fn coverage(&self) -> Coverage {
        self.coverage.lock().unwrap().clone()
    }
}

impl Confirmer<Derived> for Covering {
    fn confirmed(&mut self, _table: &str, confirmation: Confirmation<Derived>) {
        self.coverage.lock().unwrap().confirm(confirmation);
    }
    fn failed(
        &mut self,
        _table: &str,
        _batch: FailedBatch<Derived, RecordBatch>,
        reason: &FailureReason,
    ) {
        self.failed.lock().unwrap().push(reason.to_string());
    }
    fn isolated(&mut self, _table: &str, _rows: IsolatedRows<Derived>) {}
}

impl Rig {
    async fn sink(&self, name: &str, confirmer: &Covering) -> ZerobusSink<Derived> {
        let proof = self.proof().await;
        ZerobusSink::start_provisioned(
            config(&self.emulator),
            vec![TableDef::primary_raw(proof, schema()).streams(1)],
            confirmer.clone(),
            Provisioning::new(self.catalog.clone(), name),
        )
        .unwrap()
    }
}

/// Sends orders `start .. start + 10` as the derived batch covering source offsets
/// `start ..= start + 9` of `orders/partition`, and waits until it is settled.
async fn write(sink: &mut ZerobusSink<Derived>, partition: u32, start: i64) {
    let table = sink.table(RAW).unwrap();
    let range = CoverageRange::new("orders", partition, start, start + 9);
    let receipt = sink
        .send(
            table,
            orders(start + i64::from(partition) * 1_000_000, 10),
            Token::derived(range),
        )
        .await
        .unwrap();
    receipt.await.unwrap();
}

/// The order ids of `batches`, sorted, each as often as it occurs.
fn order_ids(batches: &[RecordBatch]) -> Vec<i64> {
    ids(batches)
        .into_iter()
        .flat_map(|(id, n)| std::iter::repeat_n(id, n as usize))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_is_read_back_once_the_lagging_table_shows_what_the_coverage_holds_each_row_once() {
    let rig = Rig::new().await;
    let confirmer = Covering::default();
    let mut sink = rig.sink("sink-a", &confirmer).await;
    // The service's table lags its acks (here: held back entirely), and one stream is cut
    // once five batches' rows were logged, before they were acked: the sink replays what was
    // cut, so the table will hold those rows twice.
    rig.emulator.hold_materialization(true);
    rig.emulator.inject(
        RAW,
        Fault::DropAfter {
            logged: Count::Rows(50),
        },
    );
    for i in 0..20 {
        write(&mut sink, 0, i * 10).await;
    }
    sink.close(Duration::from_secs(5)).await;
    let durable = confirmer.coverage();
    assert!(durable.covers("orders", 0, 0, 199), "{durable:?}");
    let range = CoverageRange::new("orders", 0, 0, 199);

    // Nothing is visible yet: recovery does not take the old table for the truth.
    let short = Lag {
        deadline: Duration::from_millis(300),
        poll: Duration::from_millis(50),
    };
    let Err(RecoveryError::Lagging { missing, .. }) =
        rig.catalog.recover(&raw(), &range, &durable, short).await
    else {
        panic!("recovery returned a table that lacks what the coverage says is durable")
    };
    assert_eq!(missing, vec![(0, 199)]);

    // It waits for the table to catch up.
    let patient = Lag {
        deadline: Duration::from_secs(60),
        poll: Duration::from_millis(20),
    };
    let table = raw();
    let (recovered, ()) = tokio::join!(
        rig.catalog.recover(&table, &range, &durable, patient),
        async { rig.emulator.hold_materialization(false) }
    );
    let recovered = recovered.unwrap();
    assert_eq!(order_ids(&recovered.batches), (0..200).collect::<Vec<_>>());
    assert_eq!(recovered.rows, 200);
    // The replayed batch is in the table twice and in the recovery once.
    rig.emulator.until_materialized(RAW).await;
    let (all, _) = delta::read_table(rig.emulator.delta_root().unwrap(), RAW)
        .await
        .unwrap();
    let in_table: usize = all.iter().map(RecordBatch::num_rows).sum();
    assert!(in_table > 200, "the cut stream was replayed");
    assert_eq!(recovered.duplicates as usize, in_table - 200);
    // A part of the range: the batches that meet it, whole.
    let part = rig
        .catalog
        .recover(
            &raw(),
            &CoverageRange::new("orders", 0, 45, 64),
            &durable,
            patient,
        )
        .await
        .unwrap();
    assert_eq!(order_ids(&part.batches), (40..70).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coverage_from_concurrent_writers_never_claims_what_the_table_lacks_and_survives_a_restart()
{
    // Each seed shuffles both writers' orders: ranges confirmed out of order, interleaved
    // differently between the sinks.
    for seed in 1..=3 {
        concurrent_writers(seed).await;
    }
}

/// `batches` in an order drawn from `rng` (Fisher-Yates).
fn shuffled(mut batches: Vec<(u32, i64)>, rng: &mut Rng) -> Vec<(u32, i64)> {
    for i in (1..batches.len()).rev() {
        let j = usize::try_from(rng.range(0, i as u64 + 1)).unwrap();
        batches.swap(i, j);
    }
    batches
}

async fn concurrent_writers(seed: u64) {
    const SAVE_EVERY: usize = 4;
    let mut rng = Rng::new(seed);
    let rig = Rig::new().await;
    let patient = Lag {
        deadline: Duration::from_secs(60),
        poll: Duration::from_millis(20),
    };
    // Two sinks write the same raw table at once: interleaved ranges of partition 0 and all of
    // partition 1's first 200 offsets; offsets 300..=349 of partition 0 are never written.
    let plan: [(&str, Vec<(u32, i64)>); 2] = [
        ("sink-a", (0..30).step_by(2).map(|i| (0, i * 10)).collect()),
        (
            "sink-b",
            (1..30)
                .step_by(2)
                .map(|i| (0, i * 10))
                .chain((0..20).map(|i| (1, i * 10)))
                .chain((35..40).map(|i| (0, i * 10)))
                .collect(),
        ),
    ];
    let mut writers = Vec::new();
    for (name, batches) in plan {
        let batches = shuffled(batches, &mut rng);
        let confirmer = Covering::default();
        let mut sink = rig.sink(name, &confirmer).await;
        let mut store = CoverageStore::open(rig.catalog.clone(), &raw(), SinkId(name.into()))
            .await
            .unwrap();
        let catalog = rig.catalog.clone();
        writers.push(tokio::spawn(async move {
            for (n, (partition, start)) in batches.into_iter().enumerate() {
                write(&mut sink, partition, start).await;
                if (n + 1) % SAVE_EVERY != 0 {
                    continue;
                }
                let confirmed = confirmer.coverage();
                // The lag bound: what is confirmed but not saved is at most SAVE_EVERY batches.
                let unsaved: usize = confirmed
                    .ranges()
                    .iter()
                    .flat_map(|r| store.saved().gaps(&r.topic, r.partition, r.start, r.end))
                    .map(|(s, e)| usize::try_from(e - s + 1).unwrap())
                    .sum();
                assert!(
                    unsaved <= SAVE_EVERY * 10,
                    "{name}: {unsaved} offsets unsaved"
                );
                store.save(&confirmed).await.unwrap();
                assert_eq!(
                    store.saved(),
                    &confirmed,
                    "{name}: saved what was confirmed"
                );
                // Never leads: everything any sink has saved is in the table, read back through
                // the recovery path (waiting out the materializer's lag).
                let claimed = store.load(None).await.unwrap();
                for partition in [0, 1] {
                    let range = CoverageRange::new("orders", partition, 0, 399);
                    let recovered = catalog
                        .recover(&raw(), &range, &claimed, patient)
                        .await
                        .unwrap_or_else(|e| {
                            panic!("seed {seed}, {name}: the coverage leads the table: {e}")
                        });
                    for r in claimed.ranges().iter().filter(|r| r.partition == partition) {
                        assert!(
                            recovered
                                .visible
                                .covers(&r.topic, partition, r.start, r.end),
                            "seed {seed}, {name}: {r:?} claimed, not in the table"
                        );
                    }
                }
            }
            store.save(&confirmer.coverage()).await.unwrap();
            sink.close(Duration::from_secs(5)).await;
            assert!(confirmer.failed.lock().unwrap().is_empty());
            confirmer.coverage()
        }));
    }
    let mut confirmed = Coverage::new();
    for w in writers {
        confirmed.merge(&w.await.unwrap());
    }

    // A restart: new stores load what both sinks saved, the union of their confirmations.
    let store = CoverageStore::open(rig.catalog.clone(), &raw(), SinkId("sink-a".into()))
        .await
        .unwrap();
    let loaded = store.load(None).await.unwrap();
    assert_eq!(loaded, confirmed);
    // The gaps a pipeline would re-drive.
    assert_eq!(loaded.gaps("orders", 0, 0, 399), vec![(300, 349)]);
    assert_eq!(loaded.gaps("orders", 1, 0, 199), vec![]);
    // And the table holds every covered range's rows, each once.
    let recovered = rig
        .catalog
        .recover(
            &raw(),
            &CoverageRange::new("orders", 0, 0, 399),
            &loaded,
            patient,
        )
        .await
        .unwrap();
    let want: BTreeSet<i64> = (0..300).chain(350..400).collect();
    assert_eq!(
        order_ids(&recovered.batches)
            .into_iter()
            .collect::<BTreeSet<_>>(),
        want
    );
    assert_eq!(recovered.rows as usize, want.len());
}
