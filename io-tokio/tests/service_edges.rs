//! The service's sharp edges, emulated by zerobus-local and survived by the sink, over loopback
//! TCP: the HTTP/2 windows the service advertises (official SDK issue #766), its per-stream
//! buffer of unacked records without rate limits, acks that repeat one offset (official SDK
//! issue #639) and a stream stuck repeating its last ack, which the sink must give up on
//! within its ack timeout.

mod common;

use std::time::Duration;

use common::{Recorder, TABLE, config, emulator, ids, orders, per_batch, table};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zerobus_sink::{Raw, SinkConfig, Token, WindowLimits};
use zerobus_sink_testkit::emulator::{Count, Emulator, Fault, Http2Windows};
use zerobus_sink_tokio::{Report, Sink, ZerobusConfig, ZerobusSink};

const ROWS: i64 = 100;

/// Sends `batches` batches of `ROWS` rows on one stream, closes within `within`; returns what
/// the confirmer heard and the report.
async fn send_all(cfg: ZerobusConfig, batches: i64, within: Duration) -> (Recorder, Report) {
    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::start(cfg, vec![table(1)], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    for b in 0..batches {
        let token = Token::raw("o", 0, b * ROWS + ROWS - 1);
        drop(sink.send(id, orders(b * ROWS, ROWS), token).await.unwrap());
    }
    let report = sink.close(within).await;
    (recorder, report)
}

/// Every batch confirmed, nothing handed back, and each row logged by the emulator once.
fn landed_once(recorder: &Recorder, emu: &Emulator, batches: i64) {
    let seen = recorder.seen();
    assert!(seen.failed.is_empty(), "{:?}", seen.failed);
    assert_eq!(seen.committed.len(), batches as usize);
    let logged = ids(&emu.batches(TABLE));
    assert_eq!(logged.len(), (batches * ROWS) as usize);
    assert!(logged.values().all(|n| *n == 1), "each row logged once");
}

/// The server's HTTP/2 SETTINGS_INITIAL_WINDOW_SIZE and its connection window (65,535 plus
/// the increments of its connection-level WINDOW_UPDATEs), read off the wire after a client
/// preface: every frame the server sends until it has sent both, or until it has been silent
/// for a second (a server that keeps the default window sends no WINDOW_UPDATE).
async fn advertised_windows(emu: &Emulator) -> (Option<u32>, u32) {
    let mut tcp = tokio::net::TcpStream::connect(emu.addr()).await.unwrap();
    // The preface and an empty SETTINGS frame.
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let (mut stream_window, mut connection) = (None, 65_535u32);
    let (mut settings, mut update) = (false, false);
    while !(settings && update) {
        let mut head = [0u8; 9];
        let read = tokio::time::timeout(Duration::from_secs(1), tcp.read_exact(&mut head)).await;
        if !matches!(read, Ok(Ok(_))) {
            break;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        tcp.read_exact(&mut payload).await.unwrap();
        match kind {
            // SETTINGS, not an ack: 6-byte entries.
            4 if flags & 1 == 0 => {
                settings = true;
                for entry in payload.chunks_exact(6) {
                    let id = u16::from_be_bytes([entry[0], entry[1]]);
                    let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
                    if id == 4 {
                        stream_window = Some(value);
                    }
                }
            }
            8 if stream == 0 => {
                update = true;
                let increment =
                    u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                connection = connection.saturating_add(increment & 0x7fff_ffff);
            }
            _ => {}
        }
    }
    (stream_window, connection)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zerobus_local_advertises_the_services_http2_windows_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let service = emulator(&dir, |c| c.http2_windows(Http2Windows::SERVICE)).await;
    assert_eq!(
        advertised_windows(&service).await,
        (Some(2 << 20), 32 << 20),
        "2 MiB per stream, 32 MiB per connection"
    );
    let realistic = emulator(&dir, |c| c.realistic()).await;
    assert_eq!(
        advertised_windows(&realistic).await,
        (Some(2 << 20), 32 << 20)
    );
    // And hyper's own otherwise: the test can tell them apart.
    let plain = emulator(&dir, |c| c).await;
    assert_ne!(advertised_windows(&plain).await, (Some(2 << 20), 32 << 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_stream_buffer_bounds_unacked_rows_without_rate_limits_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // No stream limits: only the buffer of 500 unacked rows (5 batches) pushes back.
    let emu = emulator(&dir, |c| {
        c.max_unacked_rows(500)
            .ack_latency(Duration::from_millis(20))
    })
    .await;
    let (recorder, report) = send_all(per_batch(&emu), 50, Duration::from_secs(30)).await;
    landed_once(&recorder, &emu, 50);
    assert_eq!(report.rows, 50 * ROWS as u64);
    let stats = emu.stats();
    assert!(
        (ROWS as u64..=500).contains(&stats.max_unacked_rows),
        "at most the buffer unacked at once: {}",
        stats.max_unacked_rows
    );
    assert_eq!(stats.throttled_acks, 0, "no rate limit was in play");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_acks_of_each_offset_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    emu.inject(TABLE, Fault::RepeatAcks { times: 3 });
    let (recorder, report) = send_all(per_batch(&emu), 30, Duration::from_secs(30)).await;
    landed_once(&recorder, &emu, 30);
    assert!(emu.stats().repeated_acks >= 3, "{:?}", emu.stats());
    let m = &report.metrics;
    assert_eq!(
        (m.protocol_errors, m.ack_timeouts),
        (0, 0),
        "a repeat is neither a violation nor progress"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stuck_repeating_one_offset_is_given_up_within_the_ack_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    // After 1,000 rows the first stream acks nothing new and repeats its last ack every 50 ms
    // (official SDK issue #639: repeats reset that client's timer, so it never recovered).
    emu.inject(
        TABLE,
        Fault::StuckAfter {
            acked: Count::Rows(1_000),
            every: Duration::from_millis(50),
        },
    );
    let ack_timeout = Duration::from_secs(2);
    // Two batches in flight at a time, so that the stream is acked batch by batch.
    let cfg = per_batch(&emu).core(SinkConfig {
        ack_timeout,
        open_timeout: ack_timeout,
        window: WindowLimits {
            max_batches: 2,
            ..WindowLimits::default()
        },
        ..config(&emu).core
    });
    // The close's deadline is the bound: the ack timeout, the drain, a backoff and the replay.
    // Were the repeats holding off the timeout, the stuck batches would come back at it.
    let (recorder, report) = send_all(cfg, 30, 4 * ack_timeout).await;
    landed_once(&recorder, &emu, 30);
    assert_eq!(report.metrics.ack_timeouts, 1, "{report}");
    let stats = emu.stats();
    assert!(stats.repeated_acks > 0, "{stats:?}");
    assert_eq!(stats.ready, 2, "the stuck stream, then one new stream");
}
