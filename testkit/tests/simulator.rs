//! The deterministic simulator over many seeds, its reproduction entry point, and the
//! anti-regression harness for the inline-ack trap (seed section 10).

use std::time::Duration;

use zerobus_sink::{Input, Output, Raw, SinkCore, Token};
use zerobus_sink_testkit::{Latency, Oracle, SimBatch, SimConfig, simulate};

/// Seeds per profile in every `cargo test`; `ZEROBUS_SIM_SEEDS` raises it for a soak.
fn seeds() -> u64 {
    std::env::var("ZEROBUS_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

fn run_profile(profile: &str) -> (u64, u64) {
    let (mut steps, mut failed_batches) = (0, 0);
    for seed in 0..seeds() {
        let config = SimConfig::profile(profile, seed).expect("known profile");
        match simulate(profile, &config) {
            Ok(report) => {
                steps += report.steps;
                failed_batches += report.tally.failed;
                assert_eq!(
                    report.tally.admitted,
                    report.tally.confirmed + report.tally.failed
                );
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    println!(
        "profile {profile}: {} seeds, {steps} steps, {failed_batches} batches handed back",
        seeds()
    );
    (steps, failed_batches)
}

#[test]
fn simulator_holds_every_checked_invariant_on_the_steady_profile() {
    let (steps, failed) = run_profile("steady");
    assert!(
        steps > seeds() * 400,
        "each seed runs at least one step per batch"
    );
    assert_eq!(failed, 0, "nothing fails without faults");
}

#[test]
fn simulator_holds_every_checked_invariant_under_faults() {
    let (_, failed) = run_profile("faults");
    assert!(
        failed > 0,
        "the faults profile must actually hand batches back"
    );
}

/// Replays one seed: `ZEROBUS_SIM_PROFILE=faults ZEROBUS_SIM_SEED=7 cargo test -p
/// zerobus-sink-testkit --test simulator reproduce -- --nocapture`.
#[test]
fn reproduce() {
    let profile = std::env::var("ZEROBUS_SIM_PROFILE").unwrap_or_else(|_| "faults".into());
    let seed = std::env::var("ZEROBUS_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let config =
        SimConfig::profile(&profile, seed).unwrap_or_else(|| panic!("unknown profile {profile}"));
    let report = simulate(&profile, &config).unwrap_or_else(|f| panic!("{f}"));
    println!("{report:#?}");
    let again = simulate(&profile, &config).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(
        (report.steps, report.elapsed, report.tally),
        (again.steps, again.elapsed, again.tally),
        "deterministic"
    );
}

/// The ~20,000x trap: a sink that waits for each batch's durable ack serialises to one batch in
/// flight. Under load with a 200 ms ack latency, the pipelined sink must keep more than one batch
/// pending and confirm at least two per ack at the median; the inline driver, run on the same
/// workload as a control, must show exactly the trap (so the measurement can tell them apart).
#[test]
fn anti_regression_pipelining_under_200ms_latency() {
    let fixed = Latency {
        p50: Duration::from_millis(200),
        p95: Duration::from_millis(200),
    };
    let mut config = SimConfig::profile("steady", 42).unwrap();
    config.ack_latency = fixed;
    config.faults.partial_ack = 0.0;
    let piped = simulate("steady", &config).unwrap_or_else(|f| panic!("{f}"));
    let median = piped.metrics.coalesce.quantile_lower_bound(0.5).unwrap();
    assert!(
        piped.metrics.max_pending > 1,
        "pending depth {}",
        piped.metrics.max_pending
    );
    assert!(median >= 2, "median coalesce ratio {median} (lower bound)");

    config.inline_wait = true;
    let inline = simulate("inline", &config).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(inline.metrics.max_pending, 1);
    assert_eq!(inline.metrics.coalesce.max(), Some(1));
    assert!(piped.rows_per_sec() > 10.0 * inline.rows_per_sec());
}

/// The oracle must be able to fail: a confirmation the oracle never saw an ack for is caught as
/// a breach of invariant 2.
#[test]
fn oracle_flags_a_confirmation_without_a_durable_ack() {
    let config = zerobus_sink_testkit::Harness::config();
    let mut sink = SinkCore::<Raw, SimBatch>::new(config).unwrap();
    let mut oracle = Oracle::new(config);
    let admitted = sink
        .submit(
            zerobus_sink::Time::ZERO,
            SimBatch::new(0, 3, 8),
            Token::raw("sim", 0, 0),
        )
        .unwrap();
    oracle
        .admitted(0, 3, admitted.slot, admitted.offset)
        .unwrap();
    let now = zerobus_sink::Time::ZERO;
    let mut caught = None;
    loop {
        let out = sink.poll_output(now);
        match &out {
            Output::Open { slot, conn } => sink
                .handle(
                    now,
                    Input::Ready {
                        slot: *slot,
                        conn: *conn,
                    },
                )
                .unwrap(),
            // The ack reaches the core but is hidden from the oracle.
            Output::Send(t) => sink
                .handle(
                    now,
                    Input::Acked {
                        slot: t.slot,
                        conn: t.conn,
                        up_to_records: 3,
                    },
                )
                .unwrap(),
            Output::Timeout(_) => break,
            _ => {}
        }
        if let Err(v) = oracle.output(out) {
            caught = Some(v);
            break;
        }
    }
    assert_eq!(caught.map(|v| v.invariant), Some(2));
}
