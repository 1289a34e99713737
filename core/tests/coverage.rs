//! Coverage (seed 8.2): the merge laws, gaps against a model, and growth only from durable
//! confirmations of a derived-lane sink.

use std::collections::BTreeSet;

use quickcheck::{Arbitrary, Gen, QuickCheck};
use zerobus_sink::{
    Coverage, CoverageRange, Derived, Input, Output, PoolSizing, SinkConfig, SinkCore, TableSpec,
    Time, Token,
};

/// Ranges over a small offset space, so that they touch and overlap often.
#[derive(Debug, Clone)]
struct Ranges(Vec<(u32, i64, i64)>);

impl Arbitrary for Ranges {
    fn arbitrary(g: &mut Gen) -> Ranges {
        let n = usize::arbitrary(g) % 12;
        Ranges(
            (0..n)
                .map(|_| {
                    let start = i64::from(u8::arbitrary(g) % 64);
                    let len = i64::from(u8::arbitrary(g) % 10);
                    (u32::from(bool::arbitrary(g)), start, start + len)
                })
                .collect(),
        )
    }
}

fn coverage(r: &Ranges) -> Coverage {
    Coverage::from_durable(
        r.0.iter()
            .map(|&(p, s, e)| CoverageRange::new("t", p, s, e)),
    )
}

/// The offsets a coverage holds, one by one.
fn offsets(c: &Coverage) -> BTreeSet<(u32, i64)> {
    c.ranges()
        .iter()
        .flat_map(|r| (r.start..=r.end).map(move |o| (r.partition, o)))
        .collect()
}

fn merged(a: &Coverage, b: &Coverage) -> Coverage {
    let mut m = a.clone();
    m.merge(b);
    m
}

#[test]
fn merge_is_commutative_associative_and_idempotent() {
    fn laws(a: Ranges, b: Ranges, c: Ranges) -> bool {
        let (a, b, c) = (coverage(&a), coverage(&b), coverage(&c));
        merged(&a, &b) == merged(&b, &a)
            && merged(&merged(&a, &b), &c) == merged(&a, &merged(&b, &c))
            && merged(&a, &a) == a
            // The union, offset by offset: nothing gained, nothing lost.
            && offsets(&merged(&a, &b)) == offsets(&a).union(&offsets(&b)).copied().collect()
    }
    QuickCheck::new()
        .tests(2_000)
        .quickcheck(laws as fn(Ranges, Ranges, Ranges) -> bool);
}

#[test]
fn gaps_are_exactly_the_offsets_not_covered() {
    fn gaps(r: Ranges, start: u8, len: u8) -> bool {
        let c = coverage(&r);
        let (start, end) = (
            i64::from(start % 80),
            i64::from(start % 80) + i64::from(len % 30),
        );
        let held = offsets(&c);
        let want: Vec<i64> = (start..=end).filter(|o| !held.contains(&(0, *o))).collect();
        let got: Vec<i64> = c
            .gaps("t", 0, start, end)
            .into_iter()
            .flat_map(|(a, b)| a..=b)
            .collect();
        // Disjoint ranges in order, never touching: the stored form is canonical.
        let ranges = c.ranges();
        let canonical = ranges
            .windows(2)
            .all(|w| w[0].partition != w[1].partition || w[0].end.saturating_add(1) < w[1].start);
        got == want && canonical && c.covers("t", 0, start, end) == want.is_empty()
    }
    QuickCheck::new()
        .tests(2_000)
        .quickcheck(gaps as fn(Ranges, u8, u8) -> bool);
}

#[test]
fn coverage_grows_only_from_a_derived_sinks_durable_confirmations() {
    let mut sink = SinkCore::<Derived, Vec<u8>>::new(SinkConfig::default()).unwrap();
    let spec = TableSpec::new("main.silver.daily").sizing(PoolSizing::fixed(1));
    let table = sink.add_table(spec).unwrap();
    let now = Time::ZERO;
    for (start, end) in [(0, 9), (20, 29), (10, 19)] {
        let token = Token::derived(CoverageRange::new("orders", 0, start, end));
        sink.submit(now, table, vec![0u8; 10], token).unwrap();
    }
    let mut coverage = Coverage::new();
    let mut conns = Vec::new();
    loop {
        match sink.poll_output(now) {
            Output::Open { conn, .. } => {
                sink.handle(now, Input::ready(conn));
                conns.push(conn);
            }
            Output::Timeout(_) => break,
            _ => {}
        }
    }
    assert!(
        coverage.gaps("orders", 0, 0, 29) == vec![(0, 29)],
        "sent is not durable"
    );
    // One stream, in order: the first two batches (20 rows) are durable, 0..=9 and 20..=29,
    // and the coverage keeps the gap between them.
    sink.handle(now, Input::acked(conns[0], 20));
    loop {
        match sink.poll_output(now) {
            Output::Confirmed(burst) => {
                for c in burst {
                    coverage.confirm(c);
                }
            }
            Output::Timeout(_) => break,
            _ => {}
        }
    }
    assert_eq!(coverage.gaps("orders", 0, 0, 29), vec![(10, 19)]);
}
