//! The ~20,000x trap, measured: the sink against a deliberately inline-waiting driver (one batch
//! in flight, waiting for its durable ack before the next) on the same simulated workload, the
//! same seeds and the same service model. Reports durable rows per *virtual* second and their
//! ratio, so the numbers do not depend on this machine's load. The sink runs with its default
//! window, and each row says how much of the service's per-stream limit it reached: min(100 MB/s
//! over the row size, 100,000 rows/s, the quotas page) times its streams. The simulated service
//! itself holds a stream to 100 MB/s, not to a rate of rows, so a sink may pass the rows limit
//! here; the emulator enforces both (`cargo bench -p zerobus-sink-tokio --bench service_limits`).
//!
//! Run: `cargo bench -p zerobus-sink-testkit --bench pipelining`

use zerobus_sink::{StreamService, WindowLimits};
use zerobus_sink_testkit::{Latency, SimConfig, SimReport, simulate};

fn run(name: &str, config: &SimConfig) -> SimReport {
    simulate(name, config).unwrap_or_else(|f| panic!("{f}"))
}

fn main() {
    let seeds = 5;
    println!(
        "workload: 10,000 batches of 1-500 rows x 200 B, ack latency P50 200 ms / P95 500 ms, 100 MB/s per stream"
    );
    println!(
        "{:<44} {:>14} {:>12} {:>10} {:>9} {:>12}",
        "driver", "rows/s (virt)", "MB/s (virt)", "coalesce", "pending", "of limit"
    );
    let cases: [(&str, u16, bool); 4] = [
        ("inline wait (one batch in flight)", 1, true),
        ("sink, 1 slot, default window", 1, false),
        ("sink, 2 slots, default window", 2, false),
        ("sink, 4 slots, default window", 4, false),
    ];
    let per_stream = |bytes_per_row: u64, bandwidth: u64| {
        (bandwidth / bytes_per_row.max(1)).min(StreamService::DOCUMENTED.rows_per_sec) as f64
    };
    let mut baseline = None;
    for (name, slots, inline) in cases {
        let (mut rows, mut secs, mut coalesce, mut pending) = (0u64, 0f64, 0f64, 0u64);
        let mut limit = 0.0;
        for seed in 0..seeds {
            let mut c = SimConfig::profile("steady", seed).expect("profile");
            c.batches = 10_000;
            c.ack_latency = Latency::DOCUMENTED;
            c.faults.partial_ack = 0.0;
            c.tables = vec![zerobus_sink_testkit::SimTable {
                slots,
                keyed: false,
                provisioned: false,
            }];
            c.sink.window = WindowLimits::default();
            limit = per_stream(c.bytes_per_row, c.stream_bandwidth) * f64::from(slots);
            c.inline_wait = inline;
            c.max_steps = 10_000_000;
            let r = run(if inline { "inline" } else { "steady" }, &c);
            rows += r.rows_delivered;
            secs += r.elapsed.as_secs_f64();
            coalesce += r.metrics.coalesce.mean().unwrap_or(0.0);
            pending = pending.max(r.metrics.max_pending);
        }
        let rate = rows as f64 / secs;
        println!(
            "{name:<44} {rate:>14.0} {:>12.2} {:>10.1} {pending:>9} {:>12.2}",
            rate * 200.0 / 1e6,
            coalesce / seeds as f64,
            rate / limit
        );
        match baseline {
            None => baseline = Some(rate),
            Some(base) => println!("{:<44} {:>13.0}x the inline driver", "", rate / base),
        }
    }
}
