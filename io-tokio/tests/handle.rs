//! The handle under pressure: `send` futures dropped at each point of their life, a report and a
//! close while a send waits for room, a handle dropped with batches handed over, an endpoint
//! without a scheme, and what an outage logs.

mod common;

use std::time::Duration;

use common::{Logs, Recorder, TABLE, config, emulator, orders, table};
use zerobus_sink::{Raw, SinkConfig, Token, WindowLimits};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};
use zerobus_sink_tokio::{SendError, Sink, StartError, ZerobusConfig, ZerobusSink};

/// A window of one batch and one hand-off beyond it: once the window and the table's queue
/// are full, one batch waits in the driver, one in the channel, and the next `send` waits for
/// room to hand over.
fn tight(emu: &Emulator) -> ZerobusConfig {
    config(emu)
        .core(SinkConfig {
            window: WindowLimits {
                max_batches: 1,
                ..WindowLimits::default()
            },
            retry: config(emu).core.retry,
            ..SinkConfig::default()
        })
        .handoffs(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_send_either_never_admits_its_batch_or_accounts_for_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c.ack_latency(Duration::from_millis(400))).await;
    let recorder = Recorder::default();
    let mut sink =
        ZerobusSink::<Raw>::start(tight(&emu), vec![table(1)], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    // A first batch opens the stream; once it is durable, the next two fill the stream's
    // window (one batch) and the table's queue (one more).
    let _receipt = sink
        .send(id, orders(0, 10), Token::raw("o", 0, 9))
        .await
        .unwrap();
    sink.flush().await.unwrap();
    // The window, the queue, the driver (waiting for room) and the channel: each `send`
    // returns once its batch is handed over, without waiting for the driver.
    let patience = Duration::from_millis(100);
    for start in [10i64, 20, 30, 40] {
        let token = Token::raw("o", 0, start + 9);
        let send = sink.send(id, orders(start, 10), token);
        let receipt = tokio::time::timeout(patience, send).await;
        drop(receipt.expect("handed over at once").unwrap());
    }
    // The next two wait for room to hand over, and give up after 100 ms each: the window holds
    // for ~400 ms.
    for start in [50i64, 60] {
        let send = sink.send(id, orders(start, 10), Token::raw("o", 0, start + 9));
        assert!(
            tokio::time::timeout(patience, send).await.is_err(),
            "the send of rows {start}.. should still wait"
        );
    }
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(5)).await;
    let committed = recorder.seen().committed.clone();
    // Every batch handed over is confirmed, whether its send returned (the four above) or not.
    // The two dropped while waiting for room to hand over: never admitted, never confirmed.
    assert_eq!(committed, vec![9, 19, 29, 39, 49], "{report}");
    assert_eq!(report.watermarks.submitted, 5);
    assert!(recorder.seen().failed.is_empty());
    let logged: u64 = emu.batches(TABLE).iter().map(|b| b.num_rows() as u64).sum();
    assert_eq!(logged, 50, "the sixth batch never reached the service");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_and_a_close_do_not_queue_behind_a_send_waiting_for_room() {
    let dir = tempfile::tempdir().unwrap();
    // The service never answers READY: nothing will ever be durable, the window stays full.
    let emu = emulator(&dir, |c| c).await;
    emu.inject(TABLE, zerobus_sink_testkit::emulator::Fault::HoldReady);
    let recorder = Recorder::default();
    let mut sink =
        ZerobusSink::<Raw>::start(tight(&emu), vec![table(1)], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    let _first = sink
        .send(id, orders(0, 10), Token::raw("o", 0, 9))
        .await
        .unwrap();
    // Two more are handed over (one waits in the driver for room, one in the channel); a
    // fourth waits for room to hand over (the future is parked here, not dropped).
    for start in [10i64, 20] {
        let token = Token::raw("o", 0, start + 9);
        let send = sink.send(id, orders(start, 10), token);
        let receipt = tokio::time::timeout(Duration::from_millis(100), send).await;
        drop(receipt.expect("handed over at once").unwrap());
    }
    let mut waiting = Box::pin(sink.send(id, orders(30, 10), Token::raw("o", 0, 39)));
    assert!(
        tokio::time::timeout(Duration::from_millis(100), waiting.as_mut())
            .await
            .is_err()
    );
    drop(waiting);
    let report = tokio::time::timeout(Duration::from_secs(1), sink.report())
        .await
        .expect("a report answers at once")
        .expect("the driver runs");
    assert_eq!(report.watermarks.submitted, 1);
    let started = std::time::Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(5), sink.close(Duration::from_secs(1)))
        .await
        .expect("close within its deadline, not behind the send");
    assert!(started.elapsed() < Duration::from_secs(3));
    // The three handed over come back: the admitted one at the close deadline, the one the
    // driver held and the one in the channel refused as closed, to the confirmer. The fourth
    // (its send dropped while waiting for room) was never handed over.
    let failed = recorder.seen().failed.clone();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(
        failed
            .iter()
            .any(|(_, _, why)| why.contains("not admitted")),
        "{failed:?}"
    );
    assert_eq!(report.failed_batches, 3);
}

#[tokio::test]
async fn an_endpoint_without_a_scheme_is_refused_at_start() {
    let err = ZerobusSink::<Raw>::start(
        ZerobusConfig::new("1234.zerobus.example.com"),
        vec![table(1)],
        Recorder::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, StartError::Endpoint { endpoint, .. } if endpoint == "1234.zerobus.example.com"),
        "{err}"
    );
    assert!(err.to_string().contains("https://"), "{err}");
}

/// `http://` alone (an address left empty in a script) was accepted, and every stream then
/// failed with "invalid URI" until the retries ran out.
#[tokio::test]
async fn an_endpoint_without_a_host_is_refused_at_start() {
    for endpoint in ["http://", "https://", "http://:50051"] {
        let err = ZerobusSink::<Raw>::start(
            ZerobusConfig::new(endpoint),
            vec![table(1)],
            Recorder::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, StartError::Endpoint { endpoint: e, .. } if e == endpoint),
            "{endpoint}: {err}"
        );
        assert!(err.to_string().contains("has no host"), "{err}");
    }
}

#[tokio::test]
async fn an_outage_is_logged_once_per_stream_with_its_cause_and_its_recovery() {
    // A current-thread runtime: the driver and its connections log on this thread.
    let (logs, _guard) = Logs::capture(tracing::Level::DEBUG);
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().join("wal");
    let emu = Emulator::start(EmulatorConfig::new(&wal)).await.unwrap();
    let addr = emu.addr();
    let recorder = Recorder::default();
    let mut sink =
        ZerobusSink::<Raw>::start(config(&emu), vec![table(2)], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    let _receipt = sink
        .send(id, orders(0, 10), Token::raw("o", 0, 9))
        .await
        .unwrap();
    sink.flush().await.unwrap();
    // Down for 1.5 s (with 50 ms backoffs: many retries per stream), then back.
    emu.kill().await;
    let _receipt = sink
        .send(id, orders(10, 10), Token::raw("o", 0, 19))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let _back = Emulator::bind(addr, EmulatorConfig::new(&wal))
        .await
        .unwrap();
    sink.flush().await.unwrap();
    let _ = sink.close(Duration::from_secs(5)).await;
    let retries = logs.lines("DEBUG", "stream still failing");
    let warned = logs.lines("WARN", "stream failing");
    assert!(
        retries >= 2,
        "the streams retried quietly ({retries} debug lines)"
    );
    // Per stream: one WARN when it broke (the live call cut: an h2 error), one more when the
    // cause changed (the reconnects refused); never one per retry.
    assert!(
        (1..=4).contains(&warned),
        "at most two WARNs per stream, not one per retry: {warned} (and {retries} retries)"
    );
    assert!(
        logs.lines("WARN", "Connection refused") >= 1,
        "the root cause is in the warning"
    );
    assert!(logs.lines("INFO", "stream recovered") >= 1);
    assert_eq!(recorder.seen().committed, vec![9, 19]);
}

#[tokio::test]
async fn a_spent_retry_budget_names_the_attempts_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    let down = emu.addr();
    emu.kill().await;
    let recorder = Recorder::default();
    let cfg = ZerobusConfig::new(format!("http://{down}"))
        .core(config_for_budget())
        .resubmit(zerobus_sink_tokio::ResubmitPolicy {
            max_attempts: 0,
            backoff: Duration::ZERO,
        });
    let mut sink = ZerobusSink::<Raw>::start(cfg, vec![table(1)], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    let _receipt = sink
        .send(id, orders(0, 10), Token::raw("o", 0, 9))
        .await
        .unwrap();
    let _ = sink.flush().await;
    let failed = recorder.seen().failed.clone();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0]
            .2
            .contains("3 failed attempts in a row, past the retry budget of 2 retries"),
        "{}",
        failed[0].2
    );
    let err = sink.send(id, orders(10, 10), Token::raw("o", 0, 19)).await;
    assert!(err.is_ok() || matches!(err, Err(SendError::Rejected { .. })));
    let _ = sink.close(Duration::from_millis(100)).await;
}

fn config_for_budget() -> SinkConfig {
    let mut core = SinkConfig::default();
    core.retry.initial_backoff = Duration::from_millis(20);
    core.retry.max_backoff = Duration::from_millis(40);
    core.min_residency = Duration::from_millis(20);
    core.retry.max_attempts = 2;
    core
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_dropped_right_after_its_sends_still_lands_every_batch_it_handed_over() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c.ack_latency(Duration::from_millis(50))).await;
    let recorder = Recorder::default();
    let mut sink =
        ZerobusSink::<Raw>::start(config(&emu), vec![table(1)], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    // Sends return once their batch is handed over; most are still in the channel or the
    // driver when the handle goes.
    let mut receipts = Vec::new();
    for b in 0..40i64 {
        let token = Token::raw("o", 0, b * 10 + 9);
        receipts.push(sink.send(id, orders(b * 10, 10), token).await.unwrap());
    }
    drop(sink);
    for (b, receipt) in receipts.into_iter().enumerate() {
        let delivered = receipt.await.unwrap_or_else(|e| panic!("batch {b}: {e}"));
        assert_eq!(delivered.rows, 10);
    }
    let expected: Vec<i64> = (0..40).map(|b| b * 10 + 9).collect();
    assert_eq!(recorder.seen().committed, expected);
    let logged: u64 = emu.batches(TABLE).iter().map(|b| b.num_rows() as u64).sum();
    assert_eq!(logged, 400);
}

/// Orders `0 .. 10` whose row 3 has a 1,000-byte customer.
fn with_a_large_row() -> arrow_array::RecordBatch {
    let customers = arrow_array::StringArray::from_iter_values((0..10).map(|i| {
        if i == 3 {
            "x".repeat(1_000)
        } else {
            format!("c-{i}")
        }
    }));
    let mut columns = orders(0, 10).columns().to_vec();
    columns[1] = std::sync::Arc::new(customers);
    arrow_array::RecordBatch::try_new(common::schema(), columns).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_a_schema_is_known_its_oversized_rows_are_isolated_on_the_handle() {
    const ISOLATING: &str = "main.bronze.orders_isolating";
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    let recorder = Recorder::default();
    // A row too large for a message cannot be sent under either policy: it is isolated under
    // both (the batch's other rows are not at fault).
    let defs = vec![
        table(1),
        zerobus_sink_tokio::TableDef::new(ISOLATING, common::schema())
            .streams(1)
            .bad_rows(zerobus_sink_tokio::BadRows::Isolate),
    ];
    let cfg = config(&emu).max_row_bytes(200);
    let mut sink = ZerobusSink::<Raw>::start(cfg, defs, recorder.clone()).unwrap();
    let ids = [sink.table(TABLE).unwrap(), sink.table(ISOLATING).unwrap()];
    // A clean first batch each: the driver plans the schema and the handle keeps the plan.
    for id in ids {
        let receipt = sink.send(id, orders(0, 10), Token::raw("o", 0, 9)).await;
        receipt.unwrap().await.unwrap();
    }
    // The next batches are checked on the handle; the isolated row reaches the confirmer
    // before the good rows are confirmed.
    for id in ids {
        let token = Token::raw("o", 0, 19);
        let receipt = sink.send(id, with_a_large_row(), token).await.unwrap();
        assert_eq!(receipt.await.unwrap().rows, 9);
    }
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(5)).await;
    let isolated = recorder.seen().isolated.clone();
    let seen: Vec<_> = isolated
        .iter()
        .map(|(table, position, rows, faults)| {
            assert!(faults[0].starts_with("row 3"), "{faults:?}");
            (table.as_str(), *position, rows.num_rows())
        })
        .collect();
    assert_eq!(seen, [(TABLE, 19, 1), (ISOLATING, 19, 1)]);
    // Counted, though the handle found them.
    let bad: Vec<_> = report
        .tables
        .iter()
        .map(|t| (t.bad_rows, t.isolated_rows))
        .collect();
    assert_eq!(bad, [(1, 1), (1, 1)], "{report}");
}
