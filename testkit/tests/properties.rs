//! quickcheck properties over random operation schedules. The operations are
//! [`zerobus_sink_testkit::Op`], the same enum the fuzz target decodes its input into.
//!
//! Each property is its own check: the oracle runs with only the checks of the invariant the
//! property names ([`Checks::only`]), so a property fails for its own invariant and no other.
//! And each asserts that its schedules reached what it is meant to explore (rotations,
//! evictions, late acks, spent retry budgets, fatal errors, ...), with a floor per kind: a
//! property whose generator never reaches a state proves nothing about it.

use std::cell::Cell;

use quickcheck::{QuickCheck, TestResult};
use zerobus_sink_testkit::{Checks, Coverage, Harness, Op};

fn tests() -> u64 {
    std::env::var("QUICKCHECK_TESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000)
}

thread_local! {
    /// What the schedules of the property running on this thread reached.
    static REACHED: Cell<Coverage> = Cell::new(Coverage::default());
    static INVARIANT: Cell<u8> = const { Cell::new(0) };
}

/// One schedule under the current property's invariant alone.
fn holds(ops: Vec<Op>) -> TestResult {
    let invariant = INVARIANT.get();
    match Harness::run_checking(&ops, Checks::only(invariant)) {
        Ok(run) => {
            REACHED.set(REACHED.get().plus(run.coverage));
            TestResult::passed()
        }
        Err(v) => TestResult::error(format!("{v}")),
    }
}

/// A state a property must reach: its name, how to count it, and the floor per 1,000 schedules.
type Floor = (&'static str, fn(&Coverage) -> u64, u64);

/// Checks `invariant` over random schedules, then that the schedules reached each state in
/// `floors` at least the given number of times per 1,000 schedules.
fn property(invariant: u8, floors: &[Floor]) {
    INVARIANT.set(invariant);
    REACHED.set(Coverage::default());
    QuickCheck::new()
        .rng(quickcheck::Gen::new(200))
        .tests(tests())
        .max_tests(tests() * 10)
        .quickcheck(holds as fn(Vec<Op>) -> TestResult);
    let reached = REACHED.get();
    println!(
        "invariant {invariant}: {} schedules reached {reached:?}",
        tests()
    );
    for (what, count, per_thousand) in floors {
        let floor = per_thousand * tests() / 1_000;
        assert!(
            count(&reached) >= floor,
            "invariant {invariant}: only {} {what} in {} schedules (floor {floor})",
            count(&reached),
            tests()
        );
    }
}

const ROTATIONS: Floor = ("rotations", |c| c.rotations, 20);
const EVICTIONS: Floor = ("evictions", |c| c.evictions, 20);
const LATE_ACKS: Floor = ("late acks", |c| c.late_acks, 3);
const BUDGETS: Floor = ("spent retry budgets", |c| c.budgets_spent, 20);
const FATAL: Floor = ("failed tables", |c| c.tables_failed, 20);
const FORWARD: Floor = ("forward acks", |c| c.forward_acks, 20);
const FULL: Floor = ("full windows", |c| c.backpressured, 20);
const TIMEOUTS: Floor = ("ack timeouts", |c| c.ack_timeouts, 5);
const FOREIGN: Floor = ("inputs from another sink", |c| c.foreign_inputs, 50);
const SWITCHES: Floor = (
    "streams reopened for a new schema",
    |c| c.schema_switches,
    20,
);
const REFUSED: Floor = ("schemas refused", |c| c.schemas_refused, 5);
const RETIRED: Floor = ("schemas retired", |c| c.schemas_retired, 20);

#[test]
fn prop_refused_submits_meet_a_bound_from_the_oracles_own_books() {
    property(1, &[FULL, FATAL]);
}

#[test]
fn prop_confirm_only_after_a_covering_ack() {
    property(2, &[ROTATIONS, LATE_ACKS, FORWARD, BUDGETS]);
}

#[test]
fn prop_one_ack_confirms_every_covered_item_in_order() {
    property(3, &[ROTATIONS, LATE_ACKS, EVICTIONS]);
}

#[test]
fn prop_stale_and_foreign_connections_never_touch_the_live_one() {
    property(4, &[FOREIGN, ROTATIONS, BUDGETS]);
}

#[test]
fn prop_nothing_is_lost() {
    property(5, &[FATAL, BUDGETS, FORWARD, TIMEOUTS, EVICTIONS]);
}

#[test]
fn prop_streams_stay_within_the_cap_and_the_backoff() {
    property(7, &[EVICTIONS, BUDGETS, ROTATIONS]);
}

#[test]
fn prop_windows_stay_within_their_bounds() {
    property(8, &[FULL, EVICTIONS]);
}

#[test]
fn prop_each_token_is_confirmed_at_most_once() {
    property(9, &[ROTATIONS, BUDGETS, FORWARD]);
}

#[test]
fn prop_a_deadline_whenever_work_is_pending() {
    property(11, &[EVICTIONS, TIMEOUTS, BUDGETS]);
}

#[test]
fn prop_provisioned_before_sent() {
    property(12, &[SWITCHES, REFUSED, RETIRED, EVICTIONS]);
}

/// The core's fast path (dirty slots and tables and a timer heap, core/src/sink/sched.rs)
/// against full passes over every timer, table and slot: after every operation of a schedule
/// both cores hold the same batches in the same windows and queues with the same metrics, and
/// neither oracle objects; returns the full passes each made.
fn fast_path_agrees(ops: &[Op]) -> Result<(u64, u64), String> {
    let mut fast = Harness::default();
    let mut full = Harness::default().full_passes_only();
    for (i, op) in ops.iter().enumerate() {
        fast.apply(op)
            .map_err(|v| format!("op {i} {op:?}, fast path: {v}"))?;
        full.apply(op)
            .map_err(|v| format!("op {i} {op:?}, full passes: {v}"))?;
        let (a, b) = (fast.snapshot(), full.snapshot());
        if a != b {
            return Err(format!(
                "after op {i} {op:?}\nfast path:\n{a}\nfull passes:\n{b}"
            ));
        }
    }
    let passes = (fast.full_passes(), full.full_passes());
    let fast = fast
        .finish()
        .map_err(|v| format!("finish, fast path: {v}"))?;
    let full = full
        .finish()
        .map_err(|v| format!("finish, full passes: {v}"))?;
    if fast.tally != full.tally {
        return Err(format!(
            "tallies: fast {:?}, full {:?}",
            fast.tally, full.tally
        ));
    }
    Ok(passes)
}

thread_local! {
    static PASSES: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

#[test]
fn prop_fast_path_matches_full_passes() {
    fn agrees(ops: Vec<Op>) -> TestResult {
        match fast_path_agrees(&ops) {
            Ok((fast, full)) => {
                let (a, b) = PASSES.get();
                PASSES.set((a + fast, b + full));
                TestResult::passed()
            }
            Err(e) => TestResult::error(e),
        }
    }
    PASSES.set((0, 0));
    QuickCheck::new()
        .rng(quickcheck::Gen::new(200))
        .tests(tests())
        .max_tests(tests() * 10)
        .quickcheck(agrees as fn(Vec<Op>) -> TestResult);
    let (fast, full) = PASSES.get();
    println!("full passes: {fast} with the fast path, {full} without");
    // The comparison means something only if the fast path was taken: it must have saved
    // a good share of the full passes.
    assert!(
        fast * 20 < full * 19,
        "the fast path was hardly taken: {fast} full passes against {full}"
    );
}

/// The random schedules fault, evict and close often (the harness holds 5 slots under a cap of
/// 4), so the sink is seldom calm; a steady schedule (one table, its streams open, batches and
/// acks) must take the fast path nearly always, and still agree.
#[test]
fn fast_path_matches_full_passes_in_a_steady_schedule() {
    let mut ops = vec![Op::Submit { rows: 5 }];
    ops.extend((0..3).map(|slot| Op::Ready { slot }));
    for i in 0..2_000u32 {
        ops.push(Op::Submit {
            rows: u8::try_from(i % 7 + 1).unwrap_or(1),
        });
        if i % 3 == 2 {
            let slot = u8::try_from(i % 4).unwrap_or(0);
            ops.push(Op::Ack { slot, rows: 40 });
        }
    }
    let (fast, full) = fast_path_agrees(&ops).unwrap_or_else(|e| panic!("{e}"));
    println!("steady schedule: {fast} full passes with the fast path, {full} without");
    assert!(
        fast * 20 < full,
        "the fast path was not taken in a steady state: {fast} full passes against {full}"
    );
}

/// Invariant 13: after every drain (and every `Op::PollAgain`), a second `poll_output` at the
/// same instant answers the same `Timeout` and changes nothing.
#[test]
fn prop_a_drain_reaches_a_fixed_point() {
    property(13, &[EVICTIONS, ROTATIONS, SWITCHES, BUDGETS]);
}
