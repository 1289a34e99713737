//! `zerobus-local`: the loopback Zerobus emulator as a process.
//!
//! ```text
//! zerobus-local [--addr 127.0.0.1:50051] [--wal-dir ./zerobus-local-wal]
//!               [--tables ./zerobus-local-tables | s3://bucket/prefix]
//!               [--s3-endpoint URL] [--s3-region REGION] [--materialize-lag-ms 1000]
//!               [--ack-latency-ms 0] [--max-messages-per-ack 0] [--max-streams-per-table N]
//!               [--metrics-addr 127.0.0.1:9465] [--stream-limits documented|quotas]
//!               [--max-unacked-rows N] [--service-windows] [--realistic]
//!               [--oauth-client-id ID [--oauth-client-secret-env VAR] [--oauth-token-ttl-secs N]]
//! ```
//! Every flag also reads an environment variable (`ZEROBUS_LOCAL_ADDR`, ...; `--help` lists
//! them). Point a client at the printed `http://` endpoint (no TLS; any or no bearer token,
//! unless `--oauth-client-id` asks for OAuth client credentials: then the token endpoint is
//! `http://METRICS_ADDR/oidc/v1/token`, a client's `unity_catalog_url` is
//! `http://METRICS_ADDR`, and a stream without a live token it minted is refused
//! `UNAUTHENTICATED`). It
//! serves the Delta tables under `--tables` (the local catalog backend's root, a folder or
//! `s3://bucket/prefix` on S3 or an S3-compatible store, `--s3-endpoint` naming it and the
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` variables the
//! credentials; create them with `zerobus_sink_catalog::local::LocalDelta`, or let the sink
//! provision them; the write-ahead logs stay in `--wal-dir`): a stream for a
//! table that does not exist gets `NOT_FOUND`, one whose schema does not fit gets
//! `SCHEMA_VALIDATION_FAILED`, one for a table the service could not write gets
//! `INVALID_ARGUMENT` (a table or column name of other characters than ASCII letters, digits
//! and underscores, catalog-managed commits, a table property `zerobus-local.table_type` other
//! than `MANAGED`), a stream whose table is recreated under it ends `FAILED_PRECONDITION`,
//! and acked rows land in the table about `--materialize-lag-ms`
//! later, exactly once across restarts. Ctrl-C or SIGTERM stops it, materializes what is logged and prints
//! its counters (never a bearer token). A restart on the same directories carries on. With
//! `--metrics-addr` it serves the same counters for Prometheus at `/metrics`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use zerobus_sink_catalog::local::{LocalDelta, S3Storage};
use zerobus_sink_testkit::emulator::{
    Emulator, EmulatorConfig, Http2Windows, OAuthClient, StreamLimits,
};

/// A loopback Zerobus (Arrow Flight) for local runs and tests. Serves the Delta tables under
/// --tables; acks only after its write-ahead log is synced, then appends the acked rows to the
/// table's Delta log (exactly once, also across restarts). Ctrl-C materializes what is logged
/// and prints its counters.
#[derive(Debug, Parser)]
#[command(name = "zerobus-local", version)]
struct Flags {
    /// Where to listen.
    #[arg(long, env = "ZEROBUS_LOCAL_ADDR", default_value = "127.0.0.1:50051")]
    addr: SocketAddr,
    /// Write-ahead logs, one per table.
    #[arg(
        long,
        env = "ZEROBUS_LOCAL_WAL_DIR",
        default_value = "zerobus-local-wal"
    )]
    wal_dir: PathBuf,
    /// The local catalog's root: DIR/catalog/schema/table, or s3://bucket[/prefix] on S3 or an
    /// S3-compatible store (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
    /// AWS_SESSION_TOKEN; never a flag).
    #[arg(
        long,
        env = "ZEROBUS_LOCAL_TABLES",
        default_value = "zerobus-local-tables"
    )]
    tables: String,
    /// For --tables s3://…: the endpoint of an S3-compatible store or an emulator (http:// is
    /// allowed) [default: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS S3].
    #[arg(long, env = "ZEROBUS_LOCAL_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// For --tables s3://…: the region [default: AWS_REGION or AWS_DEFAULT_REGION, else
    /// us-east-1].
    #[arg(long, env = "ZEROBUS_LOCAL_S3_REGION")]
    s3_region: Option<String>,
    /// How long acked rows wait before they land in the table [default: 1000; 5000 with
    /// --realistic].
    #[arg(long, env = "ZEROBUS_LOCAL_MATERIALIZE_LAG_MS")]
    materialize_lag_ms: Option<u64>,
    /// Added time to durability.
    #[arg(long, env = "ZEROBUS_LOCAL_ACK_LATENCY_MS", default_value_t = 0)]
    ack_latency_ms: u64,
    /// At most N messages per ack (0: no limit).
    #[arg(long, env = "ZEROBUS_LOCAL_MAX_MESSAGES_PER_ACK", default_value_t = 0)]
    max_messages_per_ack: usize,
    /// Refuse streams beyond N per table with RESOURCE_EXHAUSTED.
    #[arg(long, env = "ZEROBUS_LOCAL_MAX_STREAMS_PER_TABLE")]
    max_streams_per_table: Option<usize>,
    /// Hold each stream to the service's documented per-stream limits: `documented` (100 MB/s,
    /// 15,000 rows/s) or `quotas` (100 MB/s, 100,000 rows/s).
    #[arg(long, env = "ZEROBUS_LOCAL_STREAM_LIMITS", value_enum)]
    stream_limits: Option<Limits>,
    /// Stop reading a stream while this many rows are unacked (the client waits on HTTP/2
    /// flow control; the service buffers about 50,000).
    #[arg(long, env = "ZEROBUS_LOCAL_MAX_UNACKED_ROWS")]
    max_unacked_rows: Option<u64>,
    /// Advertise the service's HTTP/2 windows: 32 MiB per connection, 2 MiB per stream.
    #[arg(long, env = "ZEROBUS_LOCAL_SERVICE_WINDOWS")]
    service_windows: bool,
    /// Behave as the service does where fast tests do not: its HTTP/2 windows, at most 50,000
    /// unacked rows per stream, and rows in the table 5 s after their ack (the documented
    /// P50). --max-unacked-rows and --materialize-lag-ms, when given, override its values.
    #[arg(long, env = "ZEROBUS_LOCAL_REALISTIC")]
    realistic: bool,
    /// Serve the emulator's counters for Prometheus at http://ADDR/metrics (and, with
    /// --oauth-client-id, the token endpoint at http://ADDR/oidc/v1/token).
    #[arg(long, env = "ZEROBUS_LOCAL_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// Require OAuth: streams need a bearer token minted at /oidc/v1/token (served on
    /// --metrics-addr) for this client id and the secret in --oauth-client-secret-env.
    #[arg(long, env = "ZEROBUS_LOCAL_OAUTH_CLIENT_ID", requires = "metrics_addr")]
    oauth_client_id: Option<String>,
    /// The environment variable that holds the OAuth client's secret.
    #[arg(
        long,
        env = "ZEROBUS_LOCAL_OAUTH_CLIENT_SECRET_ENV",
        default_value = "ZEROBUS_LOCAL_OAUTH_CLIENT_SECRET"
    )]
    oauth_client_secret_env: String,
    /// How long a minted token is accepted, in seconds.
    #[arg(
        long,
        env = "ZEROBUS_LOCAL_OAUTH_TOKEN_TTL_SECS",
        default_value_t = 3600
    )]
    oauth_token_ttl_secs: u64,
}

/// Which documented per-stream limits to enforce.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Limits {
    /// The limits page: 100 MB/s and 15,000 rows/s per stream.
    Documented,
    /// The quotas page: 100 MB/s and 100,000 rows/s per stream.
    Quotas,
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    // Listen for the stop signals before saying where we listen: a stop asked for right after
    // that line (a script, a test) must still be graceful, not the default action's kill.
    let stopped = stopped();
    let mut config = EmulatorConfig::new(flags.wal_dir)
        .ack_latency(Duration::from_millis(flags.ack_latency_ms))
        .max_messages_per_ack(flags.max_messages_per_ack)
        // A process serves its tables and logs; nothing in it reads the batches back, so it
        // does not keep them in memory (a long run's memory and restarts stay flat).
        .keep_batches(false);
    if flags.tables.starts_with("s3://") {
        let mut storage = S3Storage::from_env();
        if flags.s3_endpoint.is_some() {
            storage.endpoint = flags.s3_endpoint.clone();
        }
        if flags.s3_region.is_some() {
            storage.region = flags.s3_region.clone();
        }
        match LocalDelta::on_s3(&flags.tables, storage) {
            Ok(catalog) => config = config.delta_catalog(catalog),
            Err(e) => {
                eprintln!("zerobus-local: --tables {}: {e}", flags.tables);
                return ExitCode::FAILURE;
            }
        }
    } else {
        config = config.delta_root(PathBuf::from(&flags.tables));
    }
    if flags.realistic {
        config = config.realistic();
    }
    if flags.service_windows {
        config = config.http2_windows(Http2Windows::SERVICE);
    }
    if let Some(ms) = flags.materialize_lag_ms {
        config = config.materialize_lag(Duration::from_millis(ms));
    }
    if let Some(rows) = flags.max_unacked_rows {
        config = config.max_unacked_rows(rows);
    }
    if let Some(n) = flags.max_streams_per_table {
        config = config.max_streams_per_table(n);
    }
    if let Some(limits) = flags.stream_limits {
        config = config.stream_limits(match limits {
            Limits::Documented => StreamLimits::documented(),
            Limits::Quotas => StreamLimits::quotas(),
        });
    }
    if let Some(client_id) = &flags.oauth_client_id {
        let var = &flags.oauth_client_secret_env;
        let Some(secret) = std::env::var(var).ok().filter(|s| !s.is_empty()) else {
            eprintln!("zerobus-local: --oauth-client-id needs the client's secret in ${var}");
            return ExitCode::FAILURE;
        };
        let ttl = Duration::from_secs(flags.oauth_token_ttl_secs);
        config = config.oauth(OAuthClient::new(client_id, secret, ttl));
    }
    let addr = flags.addr;
    let emulator = match Emulator::bind(addr, config).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("zerobus-local: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let recovered = emulator.stats().recovered_messages;
    println!(
        "zerobus-local listening on {} (WAL in {}; {recovered} batches recovered from earlier runs)",
        emulator.url(),
        emulator.wal_dir().display()
    );
    let root = match emulator.delta_root() {
        Some(folder) => Some(folder.display().to_string()),
        None => emulator.tables_url(),
    };
    if let Some(root) = root {
        println!("tables: Delta tables under {root} (catalog/schema/table); acked rows land there");
    }
    let emulator = Arc::new(emulator);
    let server = match flags.metrics_addr {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener.local_addr().unwrap_or(addr);
                println!("metrics: http://{bound}/metrics");
                let tokens = emulator.token_routes();
                if flags.oauth_client_id.is_some() {
                    println!("oauth: tokens at http://{bound}/oidc/v1/token; streams need one");
                }
                let emulator = emulator.clone();
                let app = axum::Router::new()
                    .route(
                        "/metrics",
                        axum::routing::get(move || {
                            let text = emulator.stats().prometheus();
                            async move { text }
                        }),
                    )
                    .merge(tokens);
                Some(tokio::spawn(
                    async move { axum::serve(listener, app).await },
                ))
            }
            Err(e) => {
                eprintln!("zerobus-local: cannot serve metrics on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    stopped.await;
    if let Some(server) = server {
        server.abort();
        let _ = server.await;
    }
    // A graceful stop materializes what is logged; the counters include it.
    match Arc::try_unwrap(emulator) {
        Ok(emulator) => println!("{:#?}", emulator.shutdown().await),
        Err(emulator) => println!("{:#?}", emulator.stats()),
    }
    ExitCode::SUCCESS
}

/// Ctrl-C, or SIGTERM (what a container runtime sends): either stops the emulator gracefully,
/// materializing what its log holds. The handlers are installed when this is called, not when
/// the future is first polled.
fn stopped() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                return futures::future::Either::Left(async move {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => eprintln!("zerobus-local: SIGTERM: stopping"),
                    }
                });
            }
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("zerobus-local: cannot listen for SIGINT/SIGTERM: {e}");
            }
        }
    }
    futures::future::Either::Right(async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("zerobus-local: waiting for ctrl-c: {e}");
        }
    })
}
