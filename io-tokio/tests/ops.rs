//! The operator endpoint against zerobus-local: a run with faults (a stream that dies, an open
//! refused for concurrency, a table whose credentials are refused), then `/metrics` scraped
//! over HTTP and parsed as Prometheus text, and `/health` read as JSON. Each series is checked
//! against what the run did (the confirmer's record, the emulator's counters, the report).
//!
//! One test in this binary: the `metrics` recorder is global to the process.

mod common;

use std::time::Duration;

use common::{Recorder, config, emulator, orders, parse, schema, sum};
use zerobus_sink::{PoolSizing, Raw, Token};
use zerobus_sink_testkit::emulator::{Code, Count, Fault};
use zerobus_sink_tokio::{Sink, TableDef, ZerobusSink, ops, telemetry};

const DYING: &str = "main.bronze.orders";
const CALM: &str = "main.bronze.refunds";
const DENIED: &str = "main.bronze.denied";
const ROWS: i64 = 100;

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("the endpoint answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_and_the_health_tree_show_what_the_run_did() {
    let prometheus = ops::install_prometheus().expect("the only recorder in this binary");
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c.ack_latency(Duration::from_millis(5))).await;
    // The dying table: its first stream ends with UNAVAILABLE after 5 batches' rows (poisoned,
    // replayed), its second open is refused for concurrency (retried), the third serves.
    emu.inject(
        DYING,
        Fault::FailAfter {
            logged: Count::Rows(5 * ROWS as u64),
            code: Code::Unavailable,
        },
    );
    emu.inject(
        DYING,
        Fault::RejectOpen {
            code: Code::ResourceExhausted,
        },
    );
    // The denied table: refused twice for its credentials, which fails the table.
    for _ in 0..2 {
        emu.inject(
            DENIED,
            Fault::RejectOpen {
                code: Code::PermissionDenied,
            },
        );
    }
    let tables = vec![
        TableDef::new(DYING, schema()).sizing(PoolSizing::fixed(1)),
        TableDef::new(CALM, schema()).sizing(PoolSizing::fixed(2)),
        TableDef::new(DENIED, schema()).sizing(PoolSizing::fixed(1)),
    ];
    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::start(config(&emu), tables, recorder.clone()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(ops::serve(listener, sink.observer(), prometheus));

    let batches = 40;
    for (name, n) in [(DYING, batches), (CALM, batches), (DENIED, 3)] {
        let id = sink.table(name).unwrap();
        for b in 0..n {
            let token = Token::raw(name, 0, b * ROWS + ROWS - 1);
            let _receipt = sink.send(id, orders(b * ROWS, ROWS), token).await.unwrap();
        }
    }
    // The denied table's batches are handed back: the flush says how many.
    let flushed = sink.flush().await;
    assert!(flushed.is_err(), "the denied table failed: {flushed:?}");
    let report = sink.report().await.unwrap();
    let failed = recorder.seen().failed.len();
    assert_eq!(failed, 3, "{:?}", recorder.seen().failed);

    let (status, text) = get(&format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    let samples = parse(&text);
    assert!(
        samples.iter().all(|s| !s.name.starts_with("zerobus_")
            || s.labels.get("lane").map(String::as_str) == Some("raw")),
        "every series names its lane:\n{text}"
    );
    let rows = (batches * ROWS) as f64;
    for table in [DYING, CALM] {
        assert_eq!(
            sum(&samples, telemetry::ROWS_DURABLE, table),
            rows,
            "{table}"
        );
        assert_eq!(
            sum(&samples, telemetry::BATCHES_DURABLE, table),
            batches as f64,
            "{table}"
        );
        // The coalesce histogram's sum is the batches its acks confirmed; one latency per batch.
        let coalesced = sum(&samples, &format!("{}_sum", telemetry::ACK_COALESCE), table);
        assert_eq!(coalesced, batches as f64, "{table}");
        let latencies = sum(
            &samples,
            &format!("{}_count", telemetry::DELIVERY_LATENCY),
            table,
        );
        assert_eq!(latencies, batches as f64, "{table}");
        assert_eq!(sum(&samples, telemetry::PENDING_OFFSETS, table), 0.0);
        assert!(
            sum(&samples, telemetry::BYTES_DURABLE, table) > rows,
            "{table}"
        );
    }
    // The calm table's two streams each have their own series.
    let calm_streams: Vec<_> = samples
        .iter()
        .filter(|s| s.name == telemetry::ROWS_DURABLE && s.labels["table"] == CALM)
        .map(|s| s.labels["stream"].clone())
        .collect();
    assert_eq!(calm_streams.len(), 2, "{calm_streams:?}");
    // The causes, each on the table it happened to and nowhere else.
    assert_eq!(sum(&samples, telemetry::POISONED, DYING), 1.0, "{text}");
    assert_eq!(sum(&samples, telemetry::CONCURRENCY_REJECTS, DYING), 1.0);
    assert_eq!(
        sum(&samples, telemetry::REBUILDS, DYING),
        2.0,
        "opened 3 times: {report:?} {:?}",
        emu.stats()
    );
    assert!(sum(&samples, telemetry::AUTH_REJECTIONS, DENIED) >= 1.0);
    for cause in [
        telemetry::POISONED,
        telemetry::CONCURRENCY_REJECTS,
        telemetry::AUTH_REJECTIONS,
    ] {
        assert_eq!(sum(&samples, cause, CALM), 0.0, "{cause}");
    }
    assert_eq!(sum(&samples, telemetry::REBUILDS, CALM), 0.0);
    // The whole sink's counters agree with the core's.
    let all = |name: &str| -> f64 {
        samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum()
    };
    assert_eq!(all(telemetry::POISONED), report.metrics.poisoned as f64);
    assert_eq!(
        all(telemetry::AUTH_REJECTIONS),
        report.metrics.auth_rejections as f64
    );
    assert_eq!(
        all(telemetry::ROWS_DURABLE),
        report.rows as f64,
        "durable rows agree with the report"
    );
    let handed_back: Vec<_> = samples
        .iter()
        .filter(|s| s.name == telemetry::HANDED_BACK)
        .collect();
    assert_eq!(handed_back.len(), 1, "{handed_back:?}");
    assert_eq!(handed_back[0].labels["table"], DENIED);
    assert_eq!(handed_back[0].value, failed as f64);

    // The health tree: the denied table failed, so the sink is not healthy (503).
    let (status, json) = get(&format!("{base}/health")).await;
    assert_eq!(status, 503, "{json}");
    let health: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(health["healthy"], false);
    assert_eq!(health["lane"], "raw");
    let tables = health["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 3);
    let by_name = |n: &str| tables.iter().find(|t| t["name"] == n).unwrap().clone();
    assert_eq!(by_name(DENIED)["failed"], true);
    let dying = by_name(DYING);
    assert_eq!(dying["failed"], false);
    let stream = &dying["streams"][0];
    assert_eq!(stream["phase"], "live", "{json}");
    assert!(stream["last_ack_age"].as_f64().unwrap() >= 0.0);
    assert_eq!(stream["last_error"], "status ResourceExhausted", "{json}");
    assert_eq!(stream["pending_batches"], 0);
    assert_eq!(by_name(CALM)["streams"].as_array().unwrap().len(), 2);

    sink.close(Duration::from_secs(10)).await;
    let (status, json) = get(&format!("{base}/health")).await;
    assert_eq!(
        (status, json.contains("\"closed\":true")),
        (503, true),
        "{json}"
    );
    server.abort();
}
