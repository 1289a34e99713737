//! The operator endpoint (feature `ops`): one small HTTP server beside the pipeline with
//! `GET /metrics` (the Prometheus text format of every metric the sink emits through the
//! [`metrics`] facade; [`crate::telemetry`] names them) and `GET /health` (the health tree as
//! JSON, [`SinkHealth::to_json`](crate::health::SinkHealth::to_json); `503` when a table
//! cannot make progress or the sink is closed). Nothing here runs on the commit path: both
//! answers are built when asked.
//!
//! ```no_run
//! # async fn run(sink: &zerobus_sink_tokio::ZerobusSink<zerobus_sink::Raw>) -> std::io::Result<()> {
//! // Before starting the sink: the metrics' handles are registered with the recorder then.
//! let prometheus = zerobus_sink_tokio::ops::install_prometheus().expect("no other recorder");
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
//! tokio::spawn(zerobus_sink_tokio::ops::serve(listener, sink.observer(), prometheus));
//! # Ok(()) }
//! ```

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
pub use metrics_exporter_prometheus::{BuildError, PrometheusHandle};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tokio::net::TcpListener;

use crate::observer::Observer;
use crate::telemetry::{ACK_COALESCE, DELIVERY_LATENCY};

/// Burst sizes (batches per ack) the coalesce histogram counts in.
const COALESCE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];
/// Delivery latencies in seconds: the service's documented P50 (~200 ms) and P95 (~500 ms)
/// fall between buckets, and the ack timeout (60 s) is the last.
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
];

/// Installs a Prometheus recorder as the process's `metrics` recorder, with histogram buckets
/// for the sink's two histograms, and returns the handle that renders it. Call it before
/// starting the sink. Fails if another recorder is installed.
pub fn install_prometheus() -> Result<PrometheusHandle, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(ACK_COALESCE.into()), COALESCE_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(DELIVERY_LATENCY.into()), LATENCY_BUCKETS)?
        .install_recorder()
}

#[derive(Clone)]
struct Endpoint {
    observer: Observer,
    prometheus: PrometheusHandle,
}

/// Serves `/metrics` and `/health` on `listener` until the task is dropped or the listener
/// fails.
pub async fn serve(
    listener: TcpListener,
    observer: Observer,
    prometheus: PrometheusHandle,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .with_state(Endpoint {
            observer,
            prometheus,
        });
    axum::serve(listener, app).await
}

async fn metrics(State(e): State<Endpoint>) -> impl IntoResponse {
    e.prometheus.run_upkeep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        e.prometheus.render(),
    )
}

async fn health(State(e): State<Endpoint>) -> impl IntoResponse {
    let json = [(header::CONTENT_TYPE, "application/json")];
    match e.observer.health().await {
        Some(h) if h.healthy() => (StatusCode::OK, json, h.to_json()),
        Some(h) => (StatusCode::SERVICE_UNAVAILABLE, json, h.to_json()),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            json,
            r#"{"healthy":false,"closed":true}"#.to_owned(),
        ),
    }
}
