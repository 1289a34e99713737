//! quickcheck properties over random operation schedules. The operations are
//! [`zerobus_sink_testkit::Op`], the same enum the fuzz target decodes its input into.

use quickcheck::{QuickCheck, TestResult};
use zerobus_sink_testkit::{Harness, Op, Violation};

fn tests() -> u64 {
    std::env::var("QUICKCHECK_TESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000)
}

/// Runs the schedule; a violation of `invariant` fails the property, any other violation too
/// (each property names the one it is about, the oracle checks them all).
fn holds(
    ops: &[Op],
    invariant: u8,
    extra: impl Fn(&zerobus_sink_testkit::Tally) -> bool,
) -> TestResult {
    match Harness::run(ops) {
        Ok(tally) => TestResult::from_bool(extra(&tally)),
        Err(Violation {
            invariant: broken,
            message,
        }) => TestResult::error(format!(
            "invariant {broken} (property about {invariant}): {message}"
        )),
    }
}

fn check(prop: fn(Vec<Op>) -> TestResult) {
    QuickCheck::new()
        .rng(quickcheck::Gen::new(200))
        .tests(tests())
        .max_tests(tests() * 10)
        .quickcheck(prop);
}

#[test]
fn prop_confirm_only_after_a_covering_ack() {
    check(|ops| holds(&ops, 2, |_| true));
}

#[test]
fn prop_one_ack_confirms_every_covered_item_in_order() {
    check(|ops| holds(&ops, 3, |t| t.bursts <= t.confirmed));
}

#[test]
fn prop_delivered_is_monotonic_and_never_above_submitted() {
    check(|ops| holds(&ops, 2, |t| t.confirmed <= t.admitted));
}

#[test]
fn prop_each_token_is_confirmed_at_most_once() {
    check(|ops| holds(&ops, 9, |t| t.confirmed + t.failed <= t.admitted));
}

#[test]
fn prop_nothing_is_lost() {
    check(|ops| holds(&ops, 5, |t| t.admitted == t.confirmed + t.failed));
}

#[test]
fn schedules_reach_the_interesting_states() {
    // A property whose schedules never confirm or never fail would prove little: check that the
    // generator reaches both outcomes.
    let mut g = quickcheck::Gen::new(100);
    let (mut confirmed, mut failed) = (0, 0);
    for _ in 0..200 {
        let ops: Vec<Op> = quickcheck::Arbitrary::arbitrary(&mut g);
        let tally = Harness::run(&ops).unwrap_or_else(|v| panic!("{v}"));
        confirmed += tally.confirmed;
        failed += tally.failed;
    }
    assert!(
        confirmed > 0 && failed > 0,
        "confirmed {confirmed}, failed {failed}"
    );
}
