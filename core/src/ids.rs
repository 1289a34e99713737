//! Small copyable identifiers: slots, connection generations and offsets.

use std::fmt;

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
        }
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

/// The generation of a connection (one Zerobus `DoPut` call). Every connection the sink opens
/// gets a fresh, never reused generation, so an input tagged with an old generation can be told
/// apart from one for the live connection and ignored (invariant 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnGen(pub(crate) u64);

impl ConnGen {
    /// The first generation a sink hands out.
    pub const FIRST: ConnGen = ConnGen(0);

    /// The generation `n` after this one (sinks number generations 0, 1, 2, ... as they open
    /// connections; handy in tests and transcripts).
    #[must_use]
    pub const fn plus(self, n: u64) -> ConnGen {
        ConnGen(self.0.saturating_add(n))
    }

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
