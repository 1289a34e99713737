//! Runs the deterministic simulator over a range of seeds and prints a progress line and a
//! summary. Until the tokio adapter and the loopback emulator exist, this is the demo.
//!
//! ```text
//! cargo run --release -p zerobus-sink-testkit --example simulate -- [--profile steady|faults|inline] [--seeds N] [--first SEED]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use zerobus_sink_testkit::{SimConfig, simulate};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let profile = arg(&args, "--profile").unwrap_or_else(|| "faults".into());
    let seeds: u64 = arg(&args, "--seeds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000);
    let first: u64 = arg(&args, "--first")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if SimConfig::profile(&profile, 0).is_none() {
        eprintln!("unknown profile {profile:?}: use steady, faults or inline");
        return ExitCode::FAILURE;
    }
    let started = Instant::now();
    let (mut steps, mut admitted, mut confirmed, mut failed, mut rows) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut virtual_secs, mut max_pending, mut bursts, mut reconnects) = (0f64, 0u64, 0u64, 0u64);
    for (i, seed) in (first..first + seeds).enumerate() {
        let config =
            SimConfig::profile(&profile, seed).unwrap_or_else(|| unreachable!("checked above"));
        match simulate(&profile, &config) {
            Ok(r) => {
                steps += r.steps;
                admitted += r.tally.admitted;
                confirmed += r.tally.confirmed;
                failed += r.tally.failed;
                rows += r.rows_delivered;
                virtual_secs += r.elapsed.as_secs_f64();
                max_pending = max_pending.max(r.metrics.max_pending);
                bursts += r.metrics.acks_applied;
                reconnects += r.metrics.connections_failed;
            }
            Err(failure) => {
                eprintln!("\n{failure}");
                return ExitCode::FAILURE;
            }
        }
        if (i + 1) % 100 == 0 || i as u64 + 1 == seeds {
            eprint!(
                "\r{profile}: {}/{seeds} seeds, {steps} steps, {confirmed} confirmed, {failed} handed back",
                i + 1
            );
        }
    }
    eprintln!();
    println!("profile {profile}, seeds {first}..{}", first + seeds);
    println!("  steps checked     {steps} (every invariant after each)");
    let lost = admitted - confirmed - failed;
    println!(
        "  batches admitted  {admitted}: {confirmed} confirmed, {failed} handed back (and resubmitted), {lost} lost"
    );
    println!("  rows durable      {rows} in {virtual_secs:.1} virtual s");
    println!(
        "  coalesce ratio    {:.1} batches per ack (mean)",
        confirmed as f64 / bursts.max(1) as f64
    );
    println!("  max pending       {max_pending} batches");
    println!("  failed conns      {reconnects}");
    println!(
        "  wall time         {:.2} s",
        started.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
