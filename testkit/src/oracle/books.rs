//! The oracle's own window books: where every admitted, unended batch is held (its table's
//! queue, or a slot), computed from admissions, first sends and ends only; never from the
//! core's counters, so that a counter leak in the core cannot pass as a full window.
//!
//! The memory bound these books check (invariant 8): a slot holds at most one
//! [`WindowLimits`]; a table's queue (order-agnostic tables) at most its slot count times them;
//! so the sink holds at most twice the sum over tables of `slots x WindowLimits`. A batch
//! larger than the limits alone is admitted only into an empty queue or window and holds it
//! alone: so where books merge places, the largest batches (one per place) are set apart
//! before the limits are checked.

use std::collections::{BTreeMap, BTreeSet};

use zerobus_sink::{SlotId, TableId, WindowLimits};

use super::{Violation, violation};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Held {
    batches: u64,
    rows: u64,
    bytes: u64,
}

impl Held {
    fn add(&mut self, rows: u64, bytes: u64) {
        self.batches += 1;
        self.rows += rows;
        self.bytes += bytes;
    }

    fn remove(&mut self, rows: u64, bytes: u64) {
        self.batches = self.batches.saturating_sub(1);
        self.rows = self.rows.saturating_sub(rows);
        self.bytes = self.bytes.saturating_sub(bytes);
    }

    fn plus(self, o: Held) -> Held {
        Held {
            batches: self.batches + o.batches,
            rows: self.rows + o.rows,
            bytes: self.bytes + o.bytes,
        }
    }

    /// Whether one more batch of `rows`/`bytes` would exceed `scale` times `limits` (an empty
    /// window takes any one batch, however large).
    fn full(&self, limits: &WindowLimits, scale: u64, rows: u64, bytes: u64) -> bool {
        self.batches > 0
            && (self.batches >= u64::from(limits.max_batches).saturating_mul(scale)
                || self.bytes.saturating_add(bytes) > limits.max_bytes.saturating_mul(scale)
                || self.rows.saturating_add(rows) > limits.max_rows.saturating_mul(scale))
    }

    /// Whether it is within `scale` times `limits`, or holds one batch alone (which may be
    /// larger than the limits).
    fn within(&self, limits: &WindowLimits, scale: u64) -> bool {
        self.batches <= 1
            || (self.batches <= u64::from(limits.max_batches).saturating_mul(scale)
                && self.bytes <= limits.max_bytes.saturating_mul(scale)
                && self.rows <= limits.max_rows.saturating_mul(scale))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Queue(TableId),
    Slot(SlotId),
}

/// Where each unended batch is held. See the module docs.
#[derive(Debug)]
pub struct Books {
    limits: WindowLimits,
    batches: BTreeMap<u64, (u64, u64, Place)>,
    queues: BTreeMap<TableId, Held>,
    slots: BTreeMap<SlotId, Held>,
    table_slots: BTreeMap<TableId, u64>,
    /// Tables provisioned through a catalog: a batch given to a slot that is switching to its
    /// schema is not yet sent, so these books (which move a batch to its slot at its first
    /// send) count it with the queue; their unsent batches are bounded by the queue plus the
    /// slots' windows, twice the slot count.
    provisioned: BTreeSet<TableId>,
}

impl Books {
    pub(super) fn new(limits: WindowLimits) -> Books {
        Books {
            limits,
            batches: BTreeMap::new(),
            queues: BTreeMap::new(),
            slots: BTreeMap::new(),
            table_slots: BTreeMap::new(),
            provisioned: BTreeSet::new(),
        }
    }

    /// `table` is provisioned through a catalog (see the field).
    pub(super) fn provisioned(&mut self, table: TableId) {
        self.provisioned.insert(table);
    }

    /// `table` has `slots` slots (for its queue's bound and the sink's total).
    pub fn register(&mut self, table: TableId, slots: u64) {
        self.table_slots.insert(table, slots);
    }

    pub(super) fn admit(
        &mut self,
        id: u64,
        rows: u64,
        bytes: u64,
        table: TableId,
        slot: Option<SlotId>,
    ) {
        let place = match slot {
            Some(s) => {
                self.slots.entry(s).or_default().add(rows, bytes);
                Place::Slot(s)
            }
            None => {
                self.queues.entry(table).or_default().add(rows, bytes);
                Place::Queue(table)
            }
        };
        self.batches.insert(id, (rows, bytes, place));
    }

    /// The batch's first send: it left its table's queue for `slot`.
    pub(super) fn place(&mut self, id: u64, slot: SlotId) {
        let Some((rows, bytes, place)) = self.batches.get_mut(&id) else {
            return;
        };
        if let Place::Queue(table) = *place {
            if let Some(q) = self.queues.get_mut(&table) {
                q.remove(*rows, *bytes);
            }
            self.slots.entry(slot).or_default().add(*rows, *bytes);
            *place = Place::Slot(slot);
        }
    }

    pub(super) fn end(&mut self, id: u64) {
        if let Some((rows, bytes, place)) = self.batches.remove(&id) {
            let held = match place {
                Place::Queue(t) => self.queues.get_mut(&t),
                Place::Slot(s) => self.slots.get_mut(&s),
            };
            if let Some(h) = held {
                h.remove(rows, bytes);
            }
        }
    }

    /// Whether a submit of `rows`/`bytes` had to be refused as full: for a keyed table, its
    /// slot's window; otherwise its queue, at `slots` times the limits.
    pub(super) fn full(
        &self,
        table: TableId,
        slot: Option<SlotId>,
        slots: u64,
        rows: u64,
        bytes: u64,
    ) -> bool {
        match slot {
            Some(s) => {
                self.slots
                    .get(&s)
                    .copied()
                    .unwrap_or_default()
                    .full(&self.limits, 1, rows, bytes)
            }
            None => self.queues.get(&table).copied().unwrap_or_default().full(
                &self.limits,
                slots,
                rows,
                bytes,
            ),
        }
    }

    pub(super) fn describe(&self, table: TableId, slot: Option<SlotId>) -> String {
        match slot {
            Some(s) => format!(
                "{s} holds {:?}",
                self.slots.get(&s).copied().unwrap_or_default()
            ),
            None => format!(
                "{table}'s queue holds {:?}",
                self.queues.get(&table).copied().unwrap_or_default()
            ),
        }
    }

    /// What the places `keep` selects hold apart from their `k` largest batches (by rows and
    /// by bytes, each bound on its own). Each place holds either what its limits allow or one
    /// batch alone, however large; so with `k` places, what is left once the `k` largest are
    /// set apart is within the places' limits.
    fn apart_from_largest(&self, keep: impl Fn(Place) -> bool, k: u64) -> Held {
        let mut rows: Vec<u64> = Vec::new();
        let mut bytes: Vec<u64> = Vec::new();
        for &(r, b, place) in self.batches.values() {
            if keep(place) {
                rows.push(r);
                bytes.push(b);
            }
        }
        rows.sort_unstable_by(|a, b| b.cmp(a));
        bytes.sort_unstable_by(|a, b| b.cmp(a));
        let skip = usize::try_from(k).unwrap_or(usize::MAX);
        Held {
            batches: (rows.len() as u64).saturating_sub(k),
            rows: rows.iter().skip(skip).sum(),
            bytes: bytes.iter().skip(skip).sum(),
        }
    }

    /// Invariant 8, from these books alone.
    pub(super) fn check(&self) -> Result<(), Violation> {
        let l = &self.limits;
        if let Some((slot, held)) = self.slots.iter().find(|(_, h)| !h.within(l, 1)) {
            return Err(violation(8, format!("{slot} holds {held:?}, limits {l:?}")));
        }
        for (table, held) in &self.queues {
            let slots = self.table_slots.get(table).copied().unwrap_or(1);
            // Provisioned: the queue and the batches its slots hold unsent, so as many places
            // as slots plus one, each within its limits or holding one batch alone.
            let (n, places) = if self.provisioned.contains(table) {
                (2 * slots, slots + 1)
            } else {
                (slots, 1)
            };
            let rest = self.apart_from_largest(|p| p == Place::Queue(*table), places);
            if !held.within(l, n) && !rest.within(l, n) {
                return Err(violation(
                    8,
                    format!(
                        "{table} queues {held:?}, {rest:?} apart from its {places} largest \
                         batches, beyond {n} x {l:?}"
                    ),
                ));
            }
        }
        let total = self
            .slots
            .values()
            .chain(self.queues.values())
            .fold(Held::default(), |a, b| a.plus(*b));
        let n: u64 = self.table_slots.values().sum::<u64>().max(1);
        let places = n + self.table_slots.len() as u64;
        let rest = self.apart_from_largest(|_| true, places);
        if !total.within(l, 2 * n) && !rest.within(l, 2 * n) {
            return Err(violation(
                8,
                format!(
                    "the sink holds {total:?}, {rest:?} apart from its {places} largest \
                     batches, beyond 2 x {n} slots x {l:?}"
                ),
            ));
        }
        Ok(())
    }
}
