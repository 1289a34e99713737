//! A flush's deal: a table's queued batches shared out over its READY streams so that they all
//! finish together, rather than up to an ack apart.
//!
//! Without a deal, a queued batch goes to whichever stream frees room first, and room comes
//! back an ack at a time: when the source stops, the last batches fall to the streams whose
//! acks happened to come last, and a flush waits for the stream that ends up with the most.
//! With one, each READY stream gets a share of the queue's rows, sized from what it has left
//! and its pace ([`SlotWindow::left`]) so that every stream's last row is due at the same
//! time (water-filling); a stream whose share is taken waits while the others take theirs.

use crate::batch::Batch;
use crate::config::WindowLimits;
use crate::lane::Lane;
use crate::time::Time;
use crate::window::SlotWindow;

use super::pump::room_in;
use super::{SinkCore, TableState, TableStatus};

/// A slot's part in a deal.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Share {
    /// Rows it may still take from the queue.
    rows: u64,
    /// Its pace in rows per second when the deal was made; 0 for a slot outside the deal.
    per_sec: u64,
}

impl<L: Lane, B: Batch> SinkCore<L, B> {
    /// Deals `table`'s queue if it is an order-agnostic warm table with batches queued and at
    /// least two READY streams, each with a pace to go by (two acks since it last had nothing
    /// in flight); ends any deal it had otherwise.
    pub(super) fn deal(&mut self, table: usize, now: Time) {
        let Some(t) = self.tables.get_mut(table) else {
            return;
        };
        t.deal.clear();
        if t.spec.keyed || t.status != TableStatus::Warm || t.queue.is_empty() {
            return;
        }
        let slots = &self.slots[t.slots()];
        t.deal.extend(slots.iter().map(|w| {
            let (rows, per_sec) = w.left(now).unwrap_or_default();
            Share { rows, per_sec }
        }));
        // Only READY streams have a pace (`left` is `None` otherwise, and a pace is never 0).
        let ready = slots.iter().filter(|w| w.is_ready()).count();
        let paced = t.deal.iter().filter(|s| s.per_sec > 0).count();
        if ready < 2 || paced < ready {
            t.deal.clear();
            return;
        }
        fill(&mut t.deal, t.queued.rows);
        if t.deal.iter().all(|s| s.rows == 0) {
            t.deal.clear();
        }
    }

    /// A batch of `rows` queued for `table` during its deal joins it: its rows go to the share
    /// of the stream whose last row would otherwise be due first.
    pub(super) fn join_deal(&mut self, table: usize, rows: u64, now: Time) {
        let Some(t) = self.tables.get_mut(table) else {
            return;
        };
        if t.deal.is_empty() {
            return;
        }
        let slots = &self.slots[t.slots()];
        // A stream that has sent again since it was last all acked has no pace of its own yet:
        // all it holds is left, at the pace the deal took.
        let due = |k: usize, share: &Share| {
            let left = slots
                .get(k)
                .map_or(0, |w| w.left(now).map_or(w.usage().rows, |(left, _)| left));
            left.saturating_add(share.rows) as f64 / share.per_sec as f64
        };
        let first = t
            .deal
            .iter()
            .enumerate()
            .filter(|(k, s)| s.per_sec > 0 && slots.get(*k).is_some_and(SlotWindow::is_ready))
            .min_by(|(a, sa), (b, sb)| due(*a, sa).total_cmp(&due(*b, sb)))
            .map(|(k, _)| k);
        if let Some(share) = first.and_then(|k| t.deal.get_mut(k)) {
            share.rows = share.rows.saturating_add(rows);
        }
    }
}

/// Turns each stream's rows left (in `rows`) into its share of `queued` more rows, so that at
/// their paces every stream that gets a share finishes at the same time and none that gets
/// none finishes later: the level `until` solves `sum(max(0, until x pace - left)) = queued`
/// over the streams in order of when they finish now.
fn fill(streams: &mut [Share], queued: u64) {
    let due = |s: &Share| s.rows as f64 / s.per_sec as f64;
    let mut order: Vec<usize> = (0..streams.len())
        .filter(|&k| streams[k].per_sec > 0)
        .collect();
    order.sort_by(|&a, &b| due(&streams[a]).total_cmp(&due(&streams[b])));
    let (mut rows, mut pace, mut until) = (queued as f64, 0.0, 0.0);
    for (i, &k) in order.iter().enumerate() {
        rows += streams[k].rows as f64;
        pace += streams[k].per_sec as f64;
        until = rows / pace;
        if order
            .get(i + 1)
            .is_none_or(|&next| until <= due(&streams[next]))
        {
            break;
        }
    }
    for s in streams.iter_mut() {
        s.rows = if s.per_sec == 0 {
            0
        } else {
            // Saturating: a float out of range becomes 0 or u64::MAX, never a panic.
            (until * s.per_sec as f64 - s.rows as f64).max(0.0).round() as u64
        };
    }
}

/// The slot (within the table) that takes a queued batch of `rows`/`bytes` next, if one may:
/// round-robin among READY slots with room, and during a deal among those with a share left.
/// A deal holds a batch back only while a READY slot with a share left has batches pending,
/// whose acks bring it room; when none has, or every share is taken, the deal ends.
pub(super) fn pick<L: Lane, B: Batch>(
    t: &mut TableState<L, B>,
    slots: &[SlotWindow<L, B>],
    limits: &WindowLimits,
    rows: u64,
    bytes: u64,
) -> Option<usize> {
    if t.deal.is_empty() {
        return room_in(t, slots, limits, rows, bytes, |_| true);
    }
    let deal = &t.deal;
    let share_left = |k: usize| deal.get(k).is_some_and(|s| s.rows > 0);
    if let Some(k) = room_in(t, slots, limits, rows, bytes, share_left) {
        if let Some(share) = t.deal.get_mut(k) {
            share.rows = share.rows.saturating_sub(rows);
        }
        if t.deal.iter().all(|s| s.rows == 0) {
            t.deal.clear();
        }
        return Some(k);
    }
    let room_comes = t.deal.iter().enumerate().any(|(k, s)| {
        s.rows > 0
            && slots
                .get(t.first_slot + k)
                .is_some_and(|w| w.is_ready() && w.has_pending())
    });
    if room_comes {
        return None;
    }
    t.deal.clear();
    room_in(t, slots, limits, rows, bytes, |_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(streams: &[(u64, u64)], queued: u64) -> Vec<u64> {
        let mut deal: Vec<Share> = streams
            .iter()
            .map(|&(rows, per_sec)| Share { rows, per_sec })
            .collect();
        fill(&mut deal, queued);
        deal.iter().map(|s| s.rows).collect()
    }

    #[test]
    fn a_deal_levels_what_streams_of_one_pace_have_left() {
        // 60,000 rows left against 48,000 (its ack is due): the second gets 12,000 more first.
        assert_eq!(
            shares(&[(60_000, 100_000), (48_000, 100_000)], 100_000),
            [44_000, 56_000]
        );
        // Too little queued to reach the fuller one: all of it to the other.
        assert_eq!(
            shares(&[(60_000, 100_000), (48_000, 100_000)], 5_000),
            [0, 5_000]
        );
        // Already level: halves.
        assert_eq!(shares(&[(0, 10), (0, 10)], 10), [5, 5]);
    }

    #[test]
    fn a_faster_stream_gets_a_larger_share_and_one_outside_the_deal_none() {
        // Twice the pace, twice the rows in the same time: 300 rows at 1,000 and 2,000 rows/s
        // are 100 and 200 rows, both due at 0.1 s.
        assert_eq!(
            shares(&[(0, 1_000), (0, 2_000), (500, 0)], 300),
            [100, 200, 0]
        );
        // Nothing to deal, nothing shared.
        assert_eq!(shares(&[(10, 1_000), (20, 1_000)], 0), [0, 0]);
        // No stream with a pace: no shares (and no division by zero).
        assert_eq!(shares(&[(10, 0), (20, 0)], 100), [0, 0]);
    }

    #[test]
    fn extreme_terms_saturate_instead_of_panicking() {
        let s = shares(&[(u64::MAX, 1), (0, u64::MAX)], u64::MAX);
        assert_eq!(s[0], 0);
        assert!(s[1] > 0);
    }
}
