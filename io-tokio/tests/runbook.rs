//! docs/runbook.md's five branches, each produced against zerobus-local by fault injection,
//! with the metrics (scraped as Prometheus text) and the log line the runbook gives for it.
//! Each branch writes its own table, so its series and log lines are its own.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use common::{Logs, Recorder, config, emulator, orders, parse, schema, sum};
use metrics_exporter_prometheus::PrometheusHandle;
use zerobus_sink::{Raw, RejectReason, Token};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_testkit::emulator::{Code, Count, Fault};
use zerobus_sink_tokio::{
    Credentials, Provisioning, ResubmitPolicy, Secret, SendError, Sink, TableDef, ZerobusConfig,
    ZerobusSink, ops, telemetry,
};

const ROWS: i64 = 100;

/// The process's recorder and log capture, installed once for every test of this binary.
fn observed() -> &'static (PrometheusHandle, Logs) {
    static ONCE: OnceLock<(PrometheusHandle, Logs)> = OnceLock::new();
    ONCE.get_or_init(|| {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        (ops::install_prometheus().expect("the only recorder"), logs)
    })
}

/// The sum of a metric over the table's series, scraped now.
fn metric(name: &str, table: &str) -> f64 {
    sum(&parse(&observed().0.render()), name, table)
}

/// Log lines at `level` that name `table` and contain `text`.
fn logged(level: &str, table: &str, text: &str) -> usize {
    observed()
        .1
        .text()
        .lines()
        .filter(|l| l.contains(level) && l.contains(table) && l.contains(text))
        .count()
}

async fn send_all(sink: &mut ZerobusSink<Raw>, table: &str, batches: i64) {
    let id = sink.table(table).unwrap();
    for b in 0..batches {
        let token = Token::raw(table, 0, b * ROWS + ROWS - 1);
        let _receipt = sink.send(id, orders(b * ROWS, ROWS), token).await.unwrap();
    }
}

fn start(cfg: ZerobusConfig, table: &str, streams: u16, recorder: &Recorder) -> ZerobusSink<Raw> {
    let def = TableDef::new(table, schema()).streams(streams);
    ZerobusSink::<Raw>::start(cfg, vec![def], recorder.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_our_stream_died() {
    const T: &str = "main.runbook.poison";
    observed();
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c.ack_latency(Duration::from_millis(5))).await;
    emu.inject(
        T,
        Fault::FailAfter {
            logged: Count::Rows(5 * ROWS as u64),
            code: Code::Unavailable,
        },
    );
    let recorder = Recorder::default();
    let mut sink = start(config(&emu), T, 1, &recorder);
    send_all(&mut sink, T, 30).await;
    sink.flush().await.unwrap();
    assert_eq!(metric(telemetry::POISONED, T), 1.0);
    assert!(metric(telemetry::REBUILDS, T) >= 1.0);
    assert_eq!(
        metric(telemetry::ACK_TIMEOUTS, T),
        0.0,
        "not the slow branch"
    );
    assert_eq!(
        metric(telemetry::ROWS_DURABLE, T),
        (30 * ROWS) as f64,
        "rows keep landing"
    );
    assert!(logged("WARN", T, "stream failing; retrying with backoff") >= 1);
    assert!(logged("WARN", T, "Unavailable") >= 1);
    assert_eq!(logged("INFO", T, "stream recovered"), 1);
    sink.close(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environmental_the_service_is_slow() {
    const T: &str = "main.runbook.slow";
    observed();
    let dir = tempfile::tempdir().unwrap();
    // Acks take 300 ms; the sink gives them 100 ms, then one retry, and resubmits nothing.
    let emu = emulator(&dir, |c| c.ack_latency(Duration::from_millis(300))).await;
    let mut cfg = config(&emu).resubmit(ResubmitPolicy {
        max_attempts: 0,
        backoff: Duration::from_millis(10),
    });
    cfg.core.ack_timeout = Duration::from_millis(100);
    cfg.core.retry.drain_budget = Duration::from_millis(50);
    cfg.core.retry.max_attempts = 1;
    let recorder = Recorder::default();
    let mut sink = start(cfg, T, 1, &recorder);
    send_all(&mut sink, T, 2).await;
    assert!(sink.flush().await.is_err(), "the batches were handed back");
    assert!(metric(telemetry::ACK_TIMEOUTS, T) >= 1.0);
    assert_eq!(metric(telemetry::POISONED, T), 0.0, "poisoned stays flat");
    let failed = recorder.seen().failed.len() as f64;
    assert_eq!(metric(telemetry::HANDED_BACK, T), failed);
    assert!(failed >= 1.0);
    assert!(logged("WARN", T, "acks slower than ack_timeout") >= 1);
    sink.close(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_rejects_too_many_streams() {
    const T: &str = "main.runbook.crowded";
    observed();
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c.max_streams_per_table(1)).await;
    let recorder = Recorder::default();
    let mut sink = start(config(&emu), T, 2, &recorder);
    send_all(&mut sink, T, 20).await;
    sink.flush().await.unwrap();
    assert!(metric(telemetry::CONCURRENCY_REJECTS, T) >= 1.0);
    assert_eq!(metric(telemetry::POISONED, T), 0.0);
    assert_eq!(
        metric(telemetry::ROWS_DURABLE, T),
        (20 * ROWS) as f64,
        "the other stream writes"
    );
    assert!(logged("WARN", T, "ResourceExhausted") >= 1);
    sink.close(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_credentials_refused() {
    const T: &str = "main.runbook.auth";
    const BEARER: &str = "runbook-refused-token";
    observed();
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    emu.reject_token(BEARER);
    let cfg = config(&emu).credentials(Credentials::Bearer(Secret::new(BEARER)));
    let recorder = Recorder::default();
    let mut sink = start(cfg, T, 1, &recorder);
    send_all(&mut sink, T, 3).await;
    assert!(sink.flush().await.is_err());
    assert!(metric(telemetry::AUTH_REJECTIONS, T) >= 1.0);
    assert_eq!(metric(telemetry::HANDED_BACK, T), 3.0);
    let health = sink.health().await.unwrap();
    assert!(health.tables[0].failed && !health.healthy());
    let id = sink.table(T).unwrap();
    let refused = sink.send(id, orders(0, 1), Token::raw(T, 0, 1_000)).await;
    assert!(
        matches!(
            refused,
            Err(SendError::Rejected {
                reason: RejectReason::TableFailed { .. },
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(logged("WARN", T, "stream failing; retrying with backoff") >= 1);
    assert!(logged("WARN", T, "batches handed back") >= 1);
    sink.close(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_a_column_no_rule_converts() {
    const T: &str = "main.runbook.schema";
    observed();
    let dir = tempfile::tempdir().unwrap();
    let (emu, root) = common::with_tables(&dir, |c| c).await;
    let recorder = Recorder::default();
    let def = TableDef::new(T, schema()).streams(1);
    let mut sink = ZerobusSink::<Raw>::start_provisioned(
        config(&emu),
        vec![def],
        recorder.clone(),
        Provisioning::new(LocalDelta::new(&root), "runbook"),
    )
    .unwrap();
    send_all(&mut sink, T, 2).await;
    // A producer turned order_id into text.
    let ids: ArrayRef = Arc::new(StringArray::from(vec!["a-1"]));
    let text = RecordBatch::try_from_iter([
        ("order_id", ids),
        ("customer", orders(0, 1).column(1).clone()),
        ("amount", orders(0, 1).column(2).clone()),
    ])
    .unwrap();
    let id = sink.table(T).unwrap();
    let refused = sink.send(id, text, Token::raw(T, 0, 5_000)).await;
    let Err(SendError::Unreconcilable { columns, .. }) = refused else {
        panic!("{refused:?}");
    };
    assert_eq!(columns.len(), 1);
    sink.flush().await.unwrap();
    let scrape = parse(&observed().0.render());
    let refusals: f64 = scrape
        .iter()
        .filter(|s| {
            s.name == telemetry::TYPE_RECONCILE
                && s.labels["table"] == T
                && s.labels["kind"].starts_with("refused_")
        })
        .map(|s| s.value)
        .sum();
    assert_eq!(refusals, 1.0);
    assert_eq!(
        metric(telemetry::HANDED_BACK, T),
        0.0,
        "nothing through failed"
    );
    assert_eq!(metric(telemetry::POISONED, T), 0.0, "streams unaffected");
    assert_eq!(metric(telemetry::ROWS_DURABLE, T), (2 * ROWS) as f64);
    assert_eq!(
        logged(
            "ERROR",
            T,
            "schema refused; its batches come back from send"
        ),
        1
    );
    sink.close(Duration::from_secs(10)).await;
}
