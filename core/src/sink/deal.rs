//! A flush's deal: a table's queued batches handed out over its READY streams so that they all
//! finish together, rather than up to an ack apart.
//!
//! Without a deal, a queued batch goes to whichever stream frees room first, and room comes
//! back an ack at a time: when the source stops, the last batches fall to the streams whose
//! acks happened to come last, and a flush waits for the stream that ends up with the most.
//! With one, each queued batch goes to the READY stream whose last row would be due first
//! with it, from what each has left and its pace ([`SlotWindow::left`]); when that stream has
//! no room, the batch waits for its ack. Each batch is placed by the estimates of the moment
//! it leaves the queue, so the streams end about a batch apart at most, as far as their paces
//! are known. (Shares of the queue fixed at the flush, tried first, ended up to five batches
//! apart on eight streams: a share rounds up to a whole batch, and the paces were estimated a
//! second before the end; docs/performance.md.)

use crate::batch::Batch;
use crate::config::WindowLimits;
use crate::lane::Lane;
use crate::time::Time;
use crate::window::SlotWindow;

use super::{SinkCore, TableState, TableStatus};

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
        t.deal.extend(
            slots
                .iter()
                .map(|w| w.left(now).map_or(0, |(_, per_sec)| per_sec)),
        );
        // Only READY streams have a pace (`left` is `None` otherwise, and a pace is never 0).
        let ready = slots.iter().filter(|w| w.is_ready()).count();
        let paced = t.deal.iter().filter(|&&per_sec| per_sec > 0).count();
        if ready < 2 || paced < ready {
            t.deal.clear();
        }
    }
}

/// When `w`'s last row would be due, in seconds from `now`, if it took `rows` more: what it
/// has left plus `rows`, at its pace. A stream that has sent again since it was last all acked
/// has no pace of its own yet: all it holds is left, at `dealt`, its pace when the deal was
/// made. `None` for a stream outside the deal (`dealt` 0) or not READY.
fn due<L: Lane, B: Batch>(w: &SlotWindow<L, B>, dealt: u64, rows: u64, now: Time) -> Option<f64> {
    if dealt == 0 || !w.is_ready() {
        return None;
    }
    let (left, per_sec) = w.left(now).unwrap_or((w.usage().rows, dealt));
    Some(left.saturating_add(rows) as f64 / per_sec as f64)
}

/// The slot (within the table) that takes a queued batch of `rows`/`bytes` next, if one may:
/// round-robin among READY slots with room, and during a deal the READY slot whose last row
/// would be due first with it. A deal holds the batch back only while that slot has batches
/// pending, whose acks bring it room; when it has none, or no slot in the deal is READY, the
/// deal ends.
pub(super) fn pick<L: Lane, B: Batch>(
    t: &mut TableState<L, B>,
    slots: &[SlotWindow<L, B>],
    limits: &WindowLimits,
    (rows, bytes): (u64, u64),
    now: Time,
) -> Option<usize> {
    if !t.deal.is_empty() {
        let first = t
            .deal
            .iter()
            .enumerate()
            .filter_map(|(k, &dealt)| {
                let w = slots.get(t.first_slot + k)?;
                Some((k, w, due(w, dealt, rows, now)?))
            })
            .min_by(|a, b| a.2.total_cmp(&b.2));
        match first {
            Some((k, w, _)) if has_room(w, limits, rows, bytes) => return Some(k),
            Some((_, w, _)) if w.has_pending() => return None,
            _ => t.deal.clear(),
        }
    }
    room_in(t, slots, limits, rows, bytes)
}

/// The table's next slot, round-robin from its cursor, that is READY and has room for a batch
/// of `rows`/`bytes`, as its index within the table's pool.
#[inline]
pub(super) fn room_in<L: Lane, B: Batch>(
    t: &TableState<L, B>,
    slots: &[SlotWindow<L, B>],
    limits: &WindowLimits,
    rows: u64,
    bytes: u64,
) -> Option<usize> {
    let n = usize::from(t.pool.slots);
    // Round-robin from the cursor without a division per step (it is on every batch's path).
    let start = t.cursor.min(n);
    (start..n).chain(0..start).find(|&k| {
        slots
            .get(t.first_slot + k)
            .is_some_and(|w| has_room(w, limits, rows, bytes))
    })
}

/// Whether `w` is READY and has room for a batch of `rows`/`bytes`.
#[inline]
pub(super) fn has_room<L: Lane, B: Batch>(
    w: &SlotWindow<L, B>,
    limits: &WindowLimits,
    rows: u64,
    bytes: u64,
) -> bool {
    w.is_ready() && w.usage().exceeded(limits, 1, rows, bytes).is_none()
}
