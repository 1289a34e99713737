//! Small copyable identifiers: slots, connection generations and offsets.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::lane::Lane;

/// A table registered with the sink (see [`SinkCore::add_table`](crate::SinkCore::add_table)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableId(pub(crate) u16);

impl TableId {
    /// The table with this index (a table the sink does not have is reported, never a panic).
    #[must_use]
    pub const fn from_index(index: u16) -> TableId {
        TableId(index)
    }

    /// The table's index, in order of registration.
    #[must_use]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// A route to this table's slot for ordering key `key_hash`: batches with one key hash stay
    /// on one stream, so the service keeps their order.
    #[must_use]
    pub const fn key(self, key_hash: u64) -> crate::table::Route {
        crate::table::Route {
            table: self,
            key: Some(key_hash),
            schema: SchemaId(0),
        }
    }

    /// A route to this table for a batch of schema `schema` (tables provisioned through a
    /// catalog, [`TableSpec::reconciled`](crate::TableSpec::reconciled)).
    #[must_use]
    pub const fn schema(self, schema: SchemaId) -> crate::table::Route {
        crate::table::Route {
            table: self,
            key: None,
            schema,
        }
    }
}

/// A batch schema of one table, numbered by the driver (the same Arrow schema, the same id).
/// The core never compares schemas: it only asks for each new id to be reconciled with the
/// table before any batch of it reaches a stream, and opens each stream for one id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchemaId(pub u32);

impl fmt::Display for SchemaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "schema #{}", self.0)
    }
}

impl fmt::Display for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table #{}", self.0)
    }
}

/// One stream slot of the sink (slots are numbered across all tables). A slot belongs to one
/// table and holds at most one live connection at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotId(pub(crate) u16);

impl SlotId {
    /// The slot with this index (a slot the pool does not have is reported, never a panic).
    #[must_use]
    pub const fn from_index(index: u16) -> SlotId {
        SlotId(index)
    }

    /// The slot's index in the pool, from 0.
    #[must_use]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for SlotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot {}", self.0)
    }
}

/// The generation of a connection (one Zerobus `DoPut` call) within its slot's sink: every
/// connection a sink opens gets a fresh, never reused generation. A plain label for logs, errors
/// and metric labels; inputs name connections with a [`ConnId`], which only the core mints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnGen(pub(crate) u64);

impl ConnGen {
    /// The generation as a number, for logs and metric labels.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ConnGen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn {}", self.0)
    }
}

/// Hands out sink identities: one per [`SinkCore`](crate::SinkCore), never reused in a process.
static NEXT_SINK: AtomicU32 = AtomicU32::new(1);

/// A fresh sink identity.
pub(crate) fn next_sink() -> u32 {
    NEXT_SINK.fetch_add(1, Ordering::Relaxed)
}

/// One connection of one sink of lane `L`: the sink's identity, the slot and the generation.
///
/// Only the core mints these (in [`Output::Open`](crate::Output::Open)); there is no public
/// constructor. Every [`Input`](crate::Input) names the connection it is about with one, so:
/// - an input for a connection of a derived-lane sink cannot be handed to a raw-lane sink: it
///   does not compile (the lane is a type parameter, see [`crate::lane`]);
/// - an input for a connection of another sink of the same lane, or of a connection this sink
///   has closed, is ignored as stale (invariant 4).
pub struct ConnId<L: Lane> {
    pub(crate) sink: u32,
    pub(crate) slot: SlotId,
    pub(crate) generation: ConnGen,
    lane: PhantomData<fn() -> L>,
}

impl<L: Lane> ConnId<L> {
    pub(crate) fn new(sink: u32, slot: SlotId, generation: ConnGen) -> ConnId<L> {
        ConnId {
            sink,
            slot,
            generation,
            lane: PhantomData,
        }
    }

    /// The slot the connection belongs to.
    #[must_use]
    pub fn slot(self) -> SlotId {
        self.slot
    }

    /// The connection's generation (a label for logs).
    #[must_use]
    pub fn generation(self) -> ConnGen {
        self.generation
    }

    fn key(self) -> (u32, SlotId, ConnGen) {
        (self.sink, self.slot, self.generation)
    }
}

impl<L: Lane> Clone for ConnId<L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L: Lane> Copy for ConnId<L> {}

impl<L: Lane> PartialEq for ConnId<L> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<L: Lane> Eq for ConnId<L> {}

impl<L: Lane> PartialOrd for ConnId<L> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<L: Lane> Ord for ConnId<L> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl<L: Lane> Hash for ConnId<L> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl<L: Lane> fmt::Debug for ConnId<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConnId({}, sink {}, {}, {})",
            L::NAME,
            self.sink,
            self.slot,
            self.generation
        )
    }
}

impl<L: Lane> fmt::Display for ConnId<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {}", self.slot, self.generation)
    }
}

/// A batch's logical offset: per slot, from 0, one per admitted batch, monotonic for the sink's
/// life. It never changes when a batch is replayed on a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogicalOffset(pub(crate) u64);

impl LogicalOffset {
    /// The first offset of every slot.
    pub const ZERO: LogicalOffset = LogicalOffset(0);

    /// The offset as a number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for LogicalOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offset {}", self.0)
    }
}

/// A wire offset: the `offset_id` of one `FlightData` message, connection-local, from 0 on every
/// connection and rising by one per message (PROTOCOL.md A.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WireOffset(pub(crate) u64);

impl WireOffset {
    /// The offset as sent in `{"offset_id":N}`.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for WireOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wire offset {}", self.0)
    }
}
