//! Coverage: which source ranges a derived-lane sink holds durably (seed section 8.2), the
//! derived lane's counterpart of the [`SourceTracker`](crate::SourceTracker).
//!
//! Per (topic, partition), a set of disjoint offset ranges, gap-aware: ranges that touch or
//! overlap are union-merged, never overwritten (a late, lower confirmation cannot shrink what
//! is covered, as a last-write-wins record would). It grows only from durable confirmations
//! ([`Coverage::confirm`] takes a [`Confirmation<Derived>`], which only the core makes), so it
//! may lag what is durable, never lead it. Two writers' coverages merge into their union in any
//! order ([`Coverage::merge`]: commutative, associative, idempotent), and
//! [`Coverage::gaps`] lists what a source range still lacks, for a pipeline to re-drive.
//!
//! ```
//! use zerobus_sink::{Coverage, CoverageRange};
//!
//! // What a store read back for one sink (ranges it recorded from confirmations).
//! let mut coverage = Coverage::from_durable([
//!     CoverageRange::new("orders", 0, 0, 99),
//!     CoverageRange::new("orders", 0, 200, 299),
//! ]);
//! coverage.merge(&Coverage::from_durable([CoverageRange::new("orders", 0, 100, 149)]));
//! assert_eq!(coverage.gaps("orders", 0, 0, 299), vec![(150, 199)]);
//! assert!(coverage.covers("orders", 0, 0, 149));
//! ```
//!
//! A raw-lane confirmation cannot extend coverage (mismatched types):
//!
//! ```compile_fail,E0308
//! use zerobus_sink::{Coverage, Output, Raw, SinkConfig, SinkCore, Time};
//! let mut sink = SinkCore::<Raw, Vec<u8>>::new(SinkConfig::default()).unwrap();
//! let mut coverage = Coverage::new();
//! if let Output::Confirmed(burst) = sink.poll_output(Time::ZERO) {
//!     for confirmation in burst {
//!         coverage.confirm(confirmation);
//!     }
//! }
//! ```

use std::collections::BTreeMap;

use crate::lane::{Confirmation, CoverageRange, Derived};

/// Durable source ranges per (topic, partition). See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Per (topic, partition): disjoint, non-touching ranges, start -> end (inclusive).
    partitions: BTreeMap<(String, u32), BTreeMap<i64, i64>>,
}

impl Coverage {
    /// Nothing covered.
    #[must_use]
    pub fn new() -> Coverage {
        Coverage::default()
    }

    /// Coverage as a store recorded it: ranges each made durable by a confirmation (a range
    /// whose end is before its start covers nothing).
    #[must_use]
    pub fn from_durable(ranges: impl IntoIterator<Item = CoverageRange>) -> Coverage {
        let mut c = Coverage::new();
        for r in ranges {
            c.insert(&r);
        }
        c
    }

    /// A batch is durable: its range is covered. Returns the covered range it is now part of
    /// (merged with its neighbours), or `None` for a range whose end is before its start.
    pub fn confirm(&mut self, confirmation: Confirmation<Derived>) -> Option<CoverageRange> {
        let range = confirmation.commit();
        self.insert(&range)
    }

    /// Adds everything `other` covers (the union).
    pub fn merge(&mut self, other: &Coverage) {
        for r in other.ranges() {
            self.insert(&r);
        }
    }

    /// Every covered range, by topic, partition and start.
    #[must_use]
    pub fn ranges(&self) -> Vec<CoverageRange> {
        self.partitions
            .iter()
            .flat_map(|((topic, partition), ranges)| {
                ranges
                    .iter()
                    .map(|(&start, &end)| CoverageRange::new(topic.clone(), *partition, start, end))
            })
            .collect()
    }

    /// Whether every offset of `start..=end` is covered (an empty range is).
    #[must_use]
    pub fn covers(&self, topic: &str, partition: u32, start: i64, end: i64) -> bool {
        self.gaps(topic, partition, start, end).is_empty()
    }

    /// The parts of `start..=end` not covered, in order, each `(first, last)` inclusive.
    #[must_use]
    pub fn gaps(&self, topic: &str, partition: u32, start: i64, end: i64) -> Vec<(i64, i64)> {
        let mut gaps = Vec::new();
        if end < start {
            return gaps;
        }
        let Some(ranges) = self.partitions.get(&(topic.to_owned(), partition)) else {
            return vec![(start, end)];
        };
        let mut next = start;
        // The range that may begin before `start` and reach into it, then every later one.
        let first = ranges.range(..=start).next_back().map(|(&s, &e)| (s, e));
        let later = ranges
            .range(start.saturating_add(1)..)
            .map(|(&s, &e)| (s, e));
        for (s, e) in first.into_iter().chain(later) {
            if s > end {
                break;
            }
            if e < next {
                continue;
            }
            if s > next {
                gaps.push((next, s - 1));
            }
            if e >= end {
                return gaps;
            }
            next = e + 1;
        }
        gaps.push((next, end));
        gaps
    }

    fn insert(&mut self, range: &CoverageRange) -> Option<CoverageRange> {
        if range.end < range.start {
            return None;
        }
        let ranges = self
            .partitions
            .entry((range.topic.clone(), range.partition))
            .or_default();
        let (mut start, mut end) = (range.start, range.end);
        // Every range that overlaps or touches [start, end] joins it.
        let touching: Vec<(i64, i64)> = ranges
            .range(..=end.saturating_add(1))
            .rev()
            .take_while(|(_, e)| **e >= start.saturating_sub(1))
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            ranges.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        ranges.insert(start, end);
        Some(CoverageRange::new(
            range.topic.clone(),
            range.partition,
            start,
            end,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cov(ranges: &[(i64, i64)]) -> Coverage {
        Coverage::from_durable(
            ranges
                .iter()
                .map(|&(s, e)| CoverageRange::new("t", 0, s, e)),
        )
    }

    fn spans(c: &Coverage) -> Vec<(i64, i64)> {
        c.ranges().iter().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn touching_and_overlapping_ranges_merge_and_gaps_are_what_is_left() {
        let c = cov(&[(10, 19), (30, 39), (20, 24), (38, 50), (0, 3)]);
        assert_eq!(spans(&c), vec![(0, 3), (10, 24), (30, 50)]);
        assert_eq!(c.gaps("t", 0, 0, 60), vec![(4, 9), (25, 29), (51, 60)]);
        assert_eq!(c.gaps("t", 0, 12, 22), vec![]);
        assert_eq!(c.gaps("t", 0, 22, 31), vec![(25, 29)]);
        assert_eq!(c.gaps("t", 1, 0, 5), vec![(0, 5)], "another partition");
        assert_eq!(c.gaps("t", 0, 5, 4), vec![], "an empty range");
        // A late, lower range never shrinks what is covered.
        let mut later = c.clone();
        later.merge(&cov(&[(11, 12)]));
        assert_eq!(later, c);
        assert_eq!(
            cov(&[(5, 4)]),
            Coverage::new(),
            "an inverted range covers nothing"
        );
        let extremes = cov(&[(i64::MIN, -1), (0, i64::MAX)]);
        assert_eq!(spans(&extremes), vec![(i64::MIN, i64::MAX)]);
        assert!(extremes.covers("t", 0, i64::MIN, i64::MAX));
    }
}
