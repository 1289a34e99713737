//! `zerobus-sinkctl`: the operator's command line.
//!
//! ```text
//! zerobus-sinkctl check sink.toml [--offline] [--schema TABLE=FILE]...
//! zerobus-sinkctl ingest sink.toml --table main.bronze.orders orders-*.parquet events.arrow
//! zerobus-sinkctl ingest ... (again, after a stop: continues from its state file)
//! zerobus-sinkctl status [http://127.0.0.1:9464]
//! ```
//!
//! Logs go to stderr, filtered by `RUST_LOG` (default: the sink's own warnings).
//!
//! Exit codes: 0 done (healthy), 1 refused or failed (unhealthy), 2 usage, unreadable input or
//! an endpoint that does not answer.

mod check;
mod ingest;
mod input;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Operate zerobus-sink: check a configuration file, load files into a table, read a running
/// sink's health.
#[derive(Debug, Parser)]
#[command(
    name = "zerobus-sinkctl",
    version,
    about = "Operate zerobus-sink: check a configuration file, load files into a table, read a \
             running sink's health"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a configuration file; print what it derives (pools, windows) and what the
    /// catalog would do for each table (planned, not executed).
    Check {
        /// The sink's TOML file.
        config: PathBuf,
        /// Do not reach the catalog: check the file only.
        #[arg(long)]
        offline: bool,
        /// A table's schema from a file (Arrow IPC or Parquet), for tables the file lists no
        /// columns for: TABLE=FILE.
        #[arg(long = "schema", value_name = "TABLE=FILE")]
        schemas: Vec<String>,
    },
    /// Send Parquet, Arrow IPC (file or stream), CSV or newline-delimited JSON files into one
    /// table, with a progress bar of durable rows (a progress line every 5 s without a
    /// terminal); prints the summary at the end.
    Ingest {
        /// The sink's TOML file.
        config: PathBuf,
        /// The table (one of the file's `[[table]]`s).
        #[arg(long)]
        table: String,
        /// The files, sent in order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Rows per batch read from Parquet, CSV and JSON (IPC files keep their batches).
        #[arg(long, default_value_t = 65_536)]
        batch_rows: usize,
        /// Serve /metrics (Prometheus text) and /health at this address while loading, as a
        /// sink's operator endpoint does (`status` reads it).
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// Where rows the table refuses (under `bad_rows = "isolate"`) are written, a JSON line
        /// each with its file and its row in it.
        #[arg(long, value_name = "FILE", default_value = "rejects.jsonl")]
        rejects: PathBuf,
        /// Where the load records how far each file is durable (written only from
        /// confirmations); a rerun continues from it. Default: `<table>.ingest-state.json`.
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
        /// Continue the load the state file records (the default when it exists); refuse if
        /// there is none.
        #[arg(long, conflicts_with = "fresh")]
        resume: bool,
        /// Begin the load again, replacing the state file: every row is sent again.
        #[arg(long)]
        fresh: bool,
        /// On resume, how long after the last run stopped to wait before reading the table
        /// back for rows it made durable past the state file (the service publishes acked rows
        /// within about 30 s at P95). Rows published later are sent again, as duplicates
        /// their source columns identify.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
        publication_wait: std::time::Duration,
    },
    /// Print a running sink's health tree (from its operator endpoint's /health).
    Status {
        /// The operator endpoint.
        #[arg(env = "ZEROBUS_SINK_OPS_URL", default_value = "http://127.0.0.1:9464")]
        url: String,
        /// Print the JSON as served.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The sink's logs on stderr, filtered by RUST_LOG (default: the sink's warnings, so an
    // outage shows once per stream with its cause; its dependencies' only when asked).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "zerobus_sink=warn,zerobus_sink_tokio=warn,zerobus_sink_catalog=warn",
        )
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("zerobus-sinkctl: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Check {
                config,
                offline,
                schemas,
            } => check::run(&config, offline, &schemas).await,
            Command::Ingest {
                config,
                table,
                files,
                batch_rows,
                metrics_addr,
                rejects,
                state,
                resume,
                fresh,
                publication_wait,
            } => {
                let mode = match (resume, fresh) {
                    (true, _) => ingest::Mode::Resume,
                    (_, true) => ingest::Mode::Fresh,
                    _ => ingest::Mode::Auto,
                };
                ingest::run(ingest::Args {
                    config,
                    table,
                    files,
                    batch_rows,
                    metrics_addr,
                    rejects,
                    state,
                    mode,
                    publication_wait,
                })
                .await
            }
            Command::Status { url, json } => status::run(&url, json).await,
        }
    })
}
