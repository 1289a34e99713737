//! `zerobus-local`: the loopback Zerobus emulator as a process.
//!
//! ```text
//! zerobus-local [--addr 127.0.0.1:50051] [--wal-dir ./zerobus-local-wal]
//!               [--tables ./zerobus-local-tables] [--materialize-lag-ms 1000]
//!               [--ack-latency-ms 0] [--max-messages-per-ack 0] [--max-streams-per-table N]
//! ```
//! Point a client at the printed `http://` endpoint (no TLS, any or no bearer token). It serves
//! the Delta tables under `--tables` (the local catalog backend's root: create them with
//! `zerobus_sink_catalog::local::LocalDelta`, or let the sink provision them): a stream for a
//! table that does not exist gets `NOT_FOUND`, one whose schema does not fit gets
//! `SCHEMA_VALIDATION_FAILED`, and acked rows land in the table about `--materialize-lag-ms`
//! later, exactly once across restarts. Ctrl-C stops it, materializes what is logged and prints
//! its counters (never a bearer token). A restart on the same directories carries on.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};

const USAGE: &str = "usage: zerobus-local [--addr HOST:PORT] [--wal-dir DIR] [--tables DIR] \
     [--materialize-lag-ms MS] [--ack-latency-ms MS] [--max-messages-per-ack N] \
     [--max-streams-per-table N]

A loopback Zerobus (Arrow Flight) for local runs and tests. Serves the Delta tables under
--tables; acks only after its write-ahead log is synced, then appends the acked rows to the
table's Delta log (exactly once, also across restarts). Ctrl-C materializes what is logged
and prints its counters.

  --addr HOST:PORT            where to listen (default 127.0.0.1:50051)
  --wal-dir DIR               write-ahead logs, one per table (default ./zerobus-local-wal)
  --tables DIR                the local catalog's root: DIR/catalog/schema/table
                              (default ./zerobus-local-tables)
  --materialize-lag-ms MS     how long acked rows wait before they land (default 1000)
  --ack-latency-ms MS         added time to durability (default 0)
  --max-messages-per-ack N    at most N messages per ack (default 0: no limit)
  --max-streams-per-table N   refuse streams beyond N per table with RESOURCE_EXHAUSTED
  -h, --help                  this text";

fn usage(error: &str) -> ExitCode {
    eprintln!("zerobus-local: {error}");
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut addr: SocketAddr = "127.0.0.1:50051".parse().expect("a valid address");
    let mut config = EmulatorConfig::new("zerobus-local-wal").delta_root("zerobus-local-tables");
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        const FLAGS: [&str; 7] = [
            "--addr",
            "--wal-dir",
            "--tables",
            "--materialize-lag-ms",
            "--ack-latency-ms",
            "--max-messages-per-ack",
            "--max-streams-per-table",
        ];
        if !FLAGS.contains(&flag.as_str()) {
            return usage(&format!("unknown flag {flag:?}"));
        }
        let Some(value) = args.next() else {
            return usage(&format!("{flag} needs a value"));
        };
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        let applied = match flag.as_str() {
            "--addr" => value
                .parse()
                .map(|a| addr = a)
                .map_err(|e| format!("--addr {value}: {e}")),
            "--wal-dir" => {
                config.wal_dir = value.clone().into();
                Ok(())
            }
            "--tables" => {
                config.delta_root = Some(value.clone().into());
                Ok(())
            }
            "--materialize-lag-ms" => {
                number().map(|n| config.materialize_lag = Duration::from_millis(n))
            }
            "--ack-latency-ms" => number().map(|n| config.ack_latency = Duration::from_millis(n)),
            "--max-messages-per-ack" => number().map(|n| config.max_messages_per_ack = n as usize),
            "--max-streams-per-table" => {
                number().map(|n| config.max_streams_per_table = Some(n as usize))
            }
            other => Err(format!("unknown flag {other:?}")),
        };
        if let Err(e) = applied {
            return usage(&e);
        }
    }
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
    if let Some(root) = emulator.delta_root() {
        println!(
            "tables: Delta tables under {} (catalog/schema/table); acked rows land there",
            root.display()
        );
    }
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("zerobus-local: waiting for ctrl-c: {e}");
    }
    // A graceful stop materializes what is logged; the counters include it.
    println!("{:#?}", emulator.shutdown().await);
    ExitCode::SUCCESS
}
