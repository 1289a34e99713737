//! The deterministic simulator over many seeds, its reproduction entry point, and the
//! anti-regression harness for the inline-ack trap (seed section 10).

use std::time::Duration;

use zerobus_sink::{Input, Output, Raw, SinkCore, TableSpec, Token};
use zerobus_sink_testkit::{Latency, Oracle, SimBatch, SimConfig, simulate};

/// Seeds per profile in every `cargo test` (`ZEROBUS_SIM_SEEDS` overrides it for a soak).
fn seeds(default: u64) -> u64 {
    std::env::var("ZEROBUS_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `seeds` seeds of `profile`; returns the steps, the batches handed back and the core's
/// metrics summed over the seeds.
fn run_profile(profile: &str, seeds: u64) -> (u64, u64, zerobus_sink::Metrics) {
    let (mut steps, mut failed_batches) = (0, 0);
    let mut sum = zerobus_sink::Metrics::default();
    for seed in 0..seeds {
        let config = SimConfig::profile(profile, seed).expect("known profile");
        match simulate(profile, &config) {
            Ok(report) => {
                steps += report.steps;
                failed_batches += report.tally.failed;
                assert_eq!(
                    report.tally.admitted,
                    report.tally.confirmed + report.tally.failed
                );
                let m = report.metrics;
                sum.poisoned += m.poisoned;
                sum.transient_failures += m.transient_failures;
                sum.concurrency_rejects += m.concurrency_rejects;
                sum.rotations += m.rotations;
                sum.credential_refreshes += m.credential_refreshes;
                sum.tables_failed += m.tables_failed;
                sum.evictions += m.evictions;
                sum.protocol_errors += m.protocol_errors;
                sum.stale_inputs += m.stale_inputs;
                sum.retry_budgets_spent += m.retry_budgets_spent;
                sum.connections_opened += m.connections_opened;
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    println!(
        "profile {profile}: {seeds} seeds, {steps} steps, {failed_batches} batches handed back"
    );
    println!(
        "  opened {} | poisoned {} | transient {} | concurrency rejects {} | rotations {} | auth refreshes {} | tables failed {} | evictions {} | protocol errors {} | stale {} | budgets spent {}",
        sum.connections_opened,
        sum.poisoned,
        sum.transient_failures,
        sum.concurrency_rejects,
        sum.rotations,
        sum.credential_refreshes,
        sum.tables_failed,
        sum.evictions,
        sum.protocol_errors,
        sum.stale_inputs,
        sum.retry_budgets_spent
    );
    (steps, failed_batches, sum)
}

#[test]
fn simulator_holds_every_checked_invariant_on_the_steady_profile() {
    let seeds = seeds(1_000);
    let (steps, failed, _) = run_profile("steady", seeds);
    assert!(
        steps > seeds * 400,
        "each seed runs at least one step per batch"
    );
    assert_eq!(failed, 0, "nothing fails without faults");
}

/// Issue 3's bar: at least 10,000 seeds with every fault kind, each checked after every step.
#[test]
fn simulator_holds_every_checked_invariant_under_every_fault_kind() {
    let (_, failed, m) = run_profile("faults", seeds(10_000));
    assert!(
        failed > 0,
        "the faults profile must actually hand batches back"
    );
    // Every fault kind must actually have happened, or this test proves less than it says.
    let kinds = [
        ("poison (stream broke, or stopped acking)", m.poisoned),
        ("transient open failure", m.transient_failures),
        ("concurrency reject", m.concurrency_rejects),
        ("rotation", m.rotations),
        ("auth rejection", m.credential_refreshes),
        ("table failed (second auth rejection)", m.tables_failed),
        ("eviction under the stream cap", m.evictions),
        ("protocol error (forward ack)", m.protocol_errors),
        ("stale input", m.stale_inputs),
    ];
    for (kind, count) in kinds {
        assert!(count > 0, "no {kind} in the faults profile");
    }
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
    let table = sink.add_table(TableSpec::new("main.sim.t")).unwrap();
    let mut oracle = Oracle::new(config);
    let now = zerobus_sink::Time::ZERO;
    sink.submit(now, table, SimBatch::new(0, 3, 8), Token::raw("sim", 0, 0))
        .unwrap();
    oracle.admitted(0, 3, table).unwrap();
    let mut caught = None;
    loop {
        let out = sink.poll_output(now);
        match &out {
            Output::Open { slot, conn, .. } => sink
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
