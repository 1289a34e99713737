//! The source position a pipeline may commit: the unbroken durable run, never a maximum.
//!
//! Confirmations come in offset order per slot, not per source partition: a table's batches go
//! to several slots, and one source record may fan out to several tables (and so several
//! batches). Committing each confirmation's position as it comes, or the highest one seen,
//! advances the source past records that are not durable yet, and loses them if the pipeline
//! then restarts (or if they are handed back and dropped). [`SourceTracker`] turns
//! confirmations into the position below which every record is durable in every table it was
//! written to.
//!
//! ```
//! use zerobus_sink::SourceTracker;
//!
//! let mut tracker = SourceTracker::new();
//! // Records 0..=99 of orders/0 fan out to two tables: two batches, two tokens.
//! let [orders_a, lines_a] = tracker.read("orders", 0, 99, 2)?.try_into().unwrap();
//! // Records 100..=199: two more.
//! let [orders_b, lines_b] = tracker.read("orders", 0, 199, 2)?.try_into().unwrap();
//! # let _ = (orders_a, lines_a, orders_b, lines_b);
//! // ... submit each token with its batch; feed every confirmation to the tracker:
//! //     if let Some(p) = tracker.confirm(confirmation)? { commit(p) }
//! assert_eq!(tracker.committed("orders", 0), None); // nothing is durable yet
//! # Ok::<(), zerobus_sink::TrackerError>(())
//! ```
//!
//! Rules: per (topic, partition), [`read`](SourceTracker::read) positions must rise; each read
//! covers the records after the previous one up to and including its position, and yields one
//! token per batch it is written as (its *parts*). A read is durable once all of its parts are
//! confirmed; the committed position is the end of the longest prefix of durable reads. A
//! handed-back batch keeps its read open until it is resubmitted (with its token) and
//! confirmed, so the run stops below it. A batch split after the read asks for one more part
//! with [`split`](SourceTracker::split).

use std::collections::{BTreeMap, VecDeque};

use crate::lane::{Confirmation, Raw, SourcePosition, Token};

/// Why the tracker refused a call. Each names the topic, partition and offset concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TrackerError {
    /// A read must end after the previous read of its partition.
    #[error("{topic}/{partition}: read up to {offset} is not after the previous read ({previous})")]
    NotAfter {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The position given.
        offset: i64,
        /// The end of the previous read (or the resumed position).
        previous: i64,
    },
    /// A read must produce at least one batch (a read written nowhere is durable at once: use
    /// [`SourceTracker::skip`]).
    #[error("{topic}/{partition}: read up to {offset} has no parts")]
    NoParts {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The position given.
        offset: i64,
    },
    /// A confirmation (or split) for a position the tracker did not hand out, or one already
    /// confirmed as many times as it has parts.
    #[error("{topic}/{partition}: no outstanding part at offset {offset}")]
    Unknown {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The position.
        offset: i64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Read {
    end: i64,
    /// Parts not confirmed yet.
    outstanding: u32,
}

#[derive(Debug, Default, Clone)]
struct Partition {
    /// The committed position: every record up to it (inclusive) is durable.
    committed: Option<i64>,
    /// Reads not yet committed, in order.
    open: VecDeque<Read>,
}

impl Partition {
    fn last(&self) -> Option<i64> {
        self.open.back().map(|r| r.end).or(self.committed)
    }

    fn find(&mut self, offset: i64) -> Option<&mut Read> {
        // Reads are in rising order of `end`.
        let i = self.open.binary_search_by_key(&offset, |r| r.end).ok()?;
        self.open.get_mut(i)
    }

    /// Pops the durable prefix; returns the new committed position if it moved.
    fn advance(&mut self) -> Option<i64> {
        let before = self.committed;
        while self.open.front().is_some_and(|r| r.outstanding == 0) {
            self.committed = self.open.pop_front().map(|r| r.end);
        }
        crate::window::release_peak(&mut self.open);
        (self.committed != before)
            .then_some(self.committed)
            .flatten()
    }
}

/// Per (topic, partition), the position below which every record is durable in every table it
/// was written to. Pure: no I/O, no clock. See the module docs.
#[derive(Debug, Default, Clone)]
pub struct SourceTracker {
    partitions: BTreeMap<(String, u32), Partition>,
}

impl SourceTracker {
    /// An empty tracker: every partition starts with nothing committed.
    #[must_use]
    pub fn new() -> SourceTracker {
        SourceTracker::default()
    }

    /// Starts `topic`/`partition` at a position committed earlier (a restart): the next read
    /// covers the records after it.
    pub fn resume(&mut self, topic: &str, partition: u32, committed: i64) {
        self.partitions.insert(
            (topic.to_owned(), partition),
            Partition {
                committed: Some(committed),
                open: VecDeque::new(),
            },
        );
    }

    /// The source read the records of `topic`/`partition` after the previous read, up to and
    /// including `offset`, and writes them as `parts` batches (one per table they fan out to,
    /// or more): one token per part, to submit with its batch.
    pub fn read(
        &mut self,
        topic: &str,
        partition: u32,
        offset: i64,
        parts: u32,
    ) -> Result<Vec<Token<Raw>>, TrackerError> {
        if parts == 0 {
            return Err(TrackerError::NoParts {
                topic: topic.to_owned(),
                partition,
                offset,
            });
        }
        let p = self
            .partitions
            .entry((topic.to_owned(), partition))
            .or_default();
        if let Some(previous) = p.last().filter(|&last| offset <= last) {
            return Err(TrackerError::NotAfter {
                topic: topic.to_owned(),
                partition,
                offset,
                previous,
            });
        }
        p.open.push_back(Read {
            end: offset,
            outstanding: parts,
        });
        Ok((0..parts)
            .map(|_| Token::raw(topic, partition, offset))
            .collect())
    }

    /// The source read records up to `offset` that go nowhere (filtered out): durable at once.
    /// Returns the committed position if it moved.
    pub fn skip(
        &mut self,
        topic: &str,
        partition: u32,
        offset: i64,
    ) -> Result<Option<SourcePosition>, TrackerError> {
        let tokens = self.read(topic, partition, offset, 1)?;
        let mut moved = None;
        for token in tokens {
            moved = self.settle(token.position())?;
        }
        Ok(moved)
    }

    /// A batch made with `token` is being sent as one more batch (it was split): its read now
    /// waits for one more confirmation. Returns the token for the new part.
    pub fn split(&mut self, token: &Token<Raw>) -> Result<Token<Raw>, TrackerError> {
        let p = token.position();
        let read = self
            .partitions
            .get_mut(&(p.topic.clone(), p.partition))
            .and_then(|part| part.find(p.offset))
            .filter(|r| r.outstanding > 0)
            .ok_or_else(|| unknown(p))?;
        read.outstanding += 1;
        Ok(Token::raw(p.topic.clone(), p.partition, p.offset))
    }

    /// A batch is durable: counts its part. Returns the partition's new committed position if
    /// it moved (commit it to the source), `None` if the run is still broken below it.
    pub fn confirm(
        &mut self,
        confirmation: Confirmation<Raw>,
    ) -> Result<Option<SourcePosition>, TrackerError> {
        self.settle(&confirmation.commit())
    }

    fn settle(&mut self, p: &SourcePosition) -> Result<Option<SourcePosition>, TrackerError> {
        let part = self
            .partitions
            .get_mut(&(p.topic.clone(), p.partition))
            .ok_or_else(|| unknown(p))?;
        let read = part
            .find(p.offset)
            .filter(|r| r.outstanding > 0)
            .ok_or_else(|| unknown(p))?;
        read.outstanding -= 1;
        Ok(part.advance().map(|offset| SourcePosition {
            topic: p.topic.clone(),
            partition: p.partition,
            offset,
        }))
    }

    /// The committed position of `topic`/`partition`: every record up to it is durable.
    #[must_use]
    pub fn committed(&self, topic: &str, partition: u32) -> Option<i64> {
        self.partitions
            .get(&(topic.to_owned(), partition))
            .and_then(|p| p.committed)
    }

    /// Every partition's committed position.
    pub fn positions(&self) -> impl Iterator<Item = SourcePosition> + '_ {
        self.partitions
            .iter()
            .filter_map(|((topic, partition), p)| {
                p.committed.map(|offset| SourcePosition {
                    topic: topic.clone(),
                    partition: *partition,
                    offset,
                })
            })
    }

    /// Parts read but not yet confirmed, over every partition (zero once everything read is
    /// durable).
    #[must_use]
    pub fn outstanding(&self) -> u64 {
        self.partitions
            .values()
            .flat_map(|p| p.open.iter())
            .map(|r| u64::from(r.outstanding))
            .sum()
    }
}

fn unknown(p: &SourcePosition) -> TrackerError {
    TrackerError::Unknown {
        topic: p.topic.clone(),
        partition: p.partition,
        offset: p.offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(t: &mut SourceTracker, token: Token<Raw>) -> Option<i64> {
        t.settle(token.position()).unwrap().map(|p| p.offset)
    }

    #[test]
    fn a_backlog_of_reads_does_not_stay_allocated_after_it_commits() {
        let mut t = SourceTracker::new();
        let tokens: Vec<_> = (0..5_000)
            .flat_map(|i| t.read("o", 0, i, 1).unwrap())
            .collect();
        for token in tokens {
            settle(&mut t, token);
        }
        assert_eq!(t.committed("o", 0), Some(4_999));
        let open = &t.partitions[&("o".to_owned(), 0)].open;
        assert!(
            open.capacity() <= 256,
            "kept {} reads' room",
            open.capacity()
        );
    }

    #[test]
    fn the_run_advances_only_when_every_part_below_is_durable() {
        let mut t = SourceTracker::new();
        let [a1, a2] = t.read("o", 0, 9, 2).unwrap().try_into().unwrap();
        let [b1, b2] = t.read("o", 0, 19, 2).unwrap().try_into().unwrap();
        // b is whole first (out of order across tables): nothing moves.
        assert_eq!(settle(&mut t, b1), None);
        assert_eq!(settle(&mut t, b2), None);
        assert_eq!(settle(&mut t, a1), None);
        assert_eq!(t.committed("o", 0), None);
        // a's last part: the run is whole up to b's end at once.
        assert_eq!(settle(&mut t, a2), Some(19));
        assert_eq!(t.outstanding(), 0);
    }

    #[test]
    fn partitions_are_independent_and_reads_must_rise() {
        let mut t = SourceTracker::new();
        t.resume("o", 1, 41);
        let [x] = t.read("o", 1, 50, 1).unwrap().try_into().unwrap();
        let [y] = t.read("o", 2, 5, 1).unwrap().try_into().unwrap();
        assert_eq!(settle(&mut t, y), Some(5));
        assert_eq!(t.committed("o", 1), Some(41));
        assert_eq!(settle(&mut t, x), Some(50));
        assert!(matches!(
            t.read("o", 1, 50, 1),
            Err(TrackerError::NotAfter { previous: 50, .. })
        ));
        assert!(matches!(
            t.read("o", 3, 1, 0),
            Err(TrackerError::NoParts { .. })
        ));
        let stray = Token::raw("o", 9, 1);
        assert!(matches!(
            t.settle(stray.position()),
            Err(TrackerError::Unknown { partition: 9, .. })
        ));
    }

    #[test]
    fn a_split_part_and_a_skip_count() {
        let mut t = SourceTracker::new();
        let [a] = t.read("o", 0, 9, 1).unwrap().try_into().unwrap();
        let extra = t.split(&a).unwrap();
        assert_eq!(settle(&mut t, a), None, "the split half is not durable yet");
        assert_eq!(t.skip("o", 0, 14).unwrap(), None, "behind the open read");
        assert_eq!(settle(&mut t, extra), Some(14));
        assert_eq!(
            t.positions().collect::<Vec<_>>(),
            vec![SourcePosition {
                topic: "o".into(),
                partition: 0,
                offset: 14
            }]
        );
    }
}
