//! Close with work queued (official Python SDK issue #852, open there: records accepted but not
//! yet sent are lost when `flush` and `close` follow quickly). Fire-and-forget sends, then
//! `close` at once: with time enough every batch is delivered; with too little, each batch not
//! durable comes back to the confirmer, named, with exactly its rows that are not durable. In
//! both cases every row is durable in the emulator's log or handed back: none is lost silently.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Recorder, TABLE, config, emulator, ids, orders, table};
use zerobus_sink::{Raw, SinkConfig, Token, WindowLimits};
use zerobus_sink_tokio::{Sink, ZerobusSink};

const BATCHES: i64 = 200;
const ROWS: i64 = 10;

/// Sends `BATCHES` batches without awaiting a receipt (most are still queued in the sink when
/// the last send returns), closes within `within`, and returns what the confirmer heard, the
/// report's rows and the rows durable in the emulator's log.
async fn send_then_close(within: Duration) -> (Recorder, u64, BTreeMap<i64, u32>) {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c.ack_latency(Duration::from_millis(100))).await;
    // A window of 4 batches a stream on 2 streams: most of the 200 wait in the table's queue.
    let cfg = config(&emu).core(SinkConfig {
        window: WindowLimits {
            max_batches: 4,
            ..WindowLimits::default()
        },
        ..config(&emu).core
    });
    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::start(cfg, vec![table(2)], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    for b in 0..BATCHES {
        let token = Token::raw("o", 0, b * ROWS + ROWS - 1);
        let _receipt = sink.send(id, orders(b * ROWS, ROWS), token).await.unwrap();
    }
    let report = sink.close(within).await;
    let durable = ids(&emu.batches(TABLE));
    (recorder, report.rows, durable)
}

/// Every row is durable or handed back, none both, and every batch ended exactly once.
fn nothing_lost(recorder: &Recorder, durable: &BTreeMap<i64, u32>) -> usize {
    let seen = recorder.seen();
    assert_eq!(
        seen.committed.len() + seen.failed.len(),
        BATCHES as usize,
        "every batch confirmed or handed back, once: {} + {}",
        seen.committed.len(),
        seen.failed.len()
    );
    assert!(
        seen.failed_tables.iter().all(|t| t == TABLE),
        "every hand-back names its table: {:?}",
        seen.failed_tables
    );
    let mut handed_back = BTreeMap::new();
    for (first, rows, why) in &seen.failed {
        let first = first.unwrap_or_else(|| panic!("a hand-back with no rows: {why}"));
        for id in first..first + *rows as i64 {
            *handed_back.entry(id).or_insert(0u32) += 1;
        }
    }
    for id in 0..BATCHES * ROWS {
        let (d, h) = (durable.get(&id), handed_back.get(&id));
        assert!(
            d.is_some() || h.is_some(),
            "row {id} neither durable nor handed back: lost silently"
        );
        assert!(
            h.is_none() || d.is_none(),
            "row {id} handed back though durable"
        );
        assert!(h.is_none_or(|n| *n == 1), "row {id} handed back twice");
    }
    for offset in &seen.committed {
        assert_eq!(
            durable.get(offset),
            Some(&1),
            "confirmed row {offset} durable once"
        );
    }
    seen.failed.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_and_forget_sends_closed_at_once_deliver_every_batch() {
    let (recorder, rows, durable) = send_then_close(Duration::from_secs(60)).await;
    assert_eq!(nothing_lost(&recorder, &durable), 0, "nothing handed back");
    assert_eq!(rows, (BATCHES * ROWS) as u64);
    assert_eq!(durable.len(), (BATCHES * ROWS) as usize);
    assert!(durable.values().all(|n| *n == 1), "each row once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_and_forget_sends_closed_too_soon_hand_back_each_batch_not_durable() {
    // 200 batches at 4 a stream and 100 ms an ack take seconds; 300 ms delivers a few.
    let (recorder, rows, durable) = send_then_close(Duration::from_millis(300)).await;
    let handed_back = nothing_lost(&recorder, &durable);
    assert!(handed_back > 0, "a close this short hands batches back");
    assert_eq!(rows, recorder.seen().committed.len() as u64 * ROWS as u64);
}
