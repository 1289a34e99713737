//! Conformance: the official client (`databricks-zerobus-ingest-sdk` 2.12.0, Arrow Flight) ingests,
//! flushes and closes against the emulator over loopback TCP (PROTOCOL.md G shows the setup). If
//! the emulator spoke the protocol differently from the service, the official client would fail
//! here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use databricks_zerobus_ingest_sdk::ZerobusSdk;
use zerobus_sink_testkit::emulator::{Count, Emulator, EmulatorConfig, Fault, wal};

const TABLE: &str = "main.bronze.conformance";

fn ids(start: i64, n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let col: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + n));
    RecordBatch::try_new(schema, vec![col]).unwrap()
}

fn counts(batches: &[RecordBatch]) -> BTreeMap<i64, u32> {
    let mut out = BTreeMap::new();
    for b in batches {
        let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        for v in col.values() {
            *out.entry(*v).or_default() += 1;
        }
    }
    out
}

/// Ingests each phase's batches, flushing after each phase; then closes. Phase `i > 0` starts
/// once the client has opened its `i + 1`-th stream (a fault made it reconnect), so that close
/// never races the client's own recovery.
async fn ingest(emu: &Emulator, phases: Vec<Vec<RecordBatch>>) {
    let sdk = ZerobusSdk::builder()
        .endpoint(emu.url())
        .no_tls()
        .build()
        .expect("sdk builds");
    let mut stream = sdk
        .stream_builder()
        .table(TABLE)
        .no_auth()
        .arrow(phases[0][0].schema())
        .recovery_backoff_ms(100)
        .build_arrow()
        .await
        .expect("stream opens: READY understood");
    for (i, batches) in phases.into_iter().enumerate() {
        let streams = i as u64 + 1;
        let reconnected = emu.until(|s| s.ready >= streams);
        tokio::time::timeout(Duration::from_secs(30), reconnected)
            .await
            .expect("the client reconnected");
        for b in batches {
            stream.ingest_batch(b).await.expect("batch accepted");
        }
        stream.flush().await.expect("flush: every batch acked");
    }
    stream.close().await.expect("close");
    assert!(stream.get_unacked_batches().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_ingests_flushes_and_closes() {
    let dir = tempfile::tempdir().unwrap();
    let emu = Emulator::start(EmulatorConfig::new(dir.path()))
        .await
        .unwrap();
    // 600k Int64 rows (4.8 MB) are split by the client into several wire messages: the emulator
    // must count rows from the IPC headers for the acks to complete the batch.
    ingest(
        &emu,
        vec![vec![
            ids(0, 1_000),
            ids(1_000, 600_000),
            ids(601_000, 1_000),
        ]],
    )
    .await;
    let stats = emu.stats();
    assert!(stats.messages >= 4, "the big batch was split: {stats:?}");
    assert_eq!(stats.rows, 602_000);
    assert_eq!(
        stats.codecs.get("zstd"),
        Some(&stats.messages),
        "the client's default codec"
    );
    assert_eq!(stats.half_closes, 1, "close half-closes");
    assert!(
        stats
            .user_agents
            .iter()
            .any(|a| a.starts_with("zerobus-sdk-rs/2.12.0")),
        "{stats:?}"
    );
    let logged = counts(&wal::read(&emu.wal_path(TABLE)).unwrap());
    assert_eq!(logged.len(), 602_000);
    assert!(logged.values().all(|n| *n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_follows_a_rotation_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let emu =
        Emulator::start(EmulatorConfig::new(dir.path()).ack_latency(Duration::from_millis(5)))
            .await
            .unwrap();
    emu.inject(
        TABLE,
        Fault::RotateAfter {
            acked: Count::Messages(2),
            grace: Duration::from_millis(1_000),
        },
    );
    // Two batches earn the rotation signal; the rest are sent while the client drains, waits
    // and reconnects, and must land on the new stream.
    let first = (0..2).map(|i| ids(i * 100, 100)).collect();
    let rest = (2..20).map(|i| ids(i * 100, 100)).collect();
    ingest(&emu, vec![first, rest]).await;
    let stats = emu.stats();
    assert!(
        stats.calls >= 2,
        "the client reconnected after the rotation: {stats:?}"
    );
    let logged = counts(&emu.batches(TABLE));
    assert_eq!(logged.len(), 2_000, "every row landed");
}
