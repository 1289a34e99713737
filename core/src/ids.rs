//! Small copyable identifiers: tables, routes, schemas, slots, connection generations and
//! offsets. The lane-typed connection id is in `conn.rs`, above the lanes it names.

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
    pub const fn key(self, key_hash: u64) -> Route {
        Route {
            table: self,
            key: Some(key_hash),
            schema: SchemaId(0),
        }
    }

    /// A route to this table for a batch of schema `schema` (tables provisioned through a
    /// catalog, [`TableSpec::reconciled`](crate::TableSpec::reconciled)).
    #[must_use]
    pub const fn schema(self, schema: SchemaId) -> Route {
        Route {
            table: self,
            key: None,
            schema,
        }
    }
}

/// Where a batch goes: a table, and for keyed tables the key's hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    pub(crate) table: TableId,
    pub(crate) key: Option<u64>,
    pub(crate) schema: SchemaId,
}

impl Route {
    /// The table.
    #[must_use]
    pub fn table(&self) -> TableId {
        self.table
    }

    /// The batch's schema (`SchemaId(0)` unless routed with [`TableId::schema`]).
    #[must_use]
    pub fn schema_id(&self) -> SchemaId {
        self.schema
    }
}

impl From<TableId> for Route {
    fn from(table: TableId) -> Route {
        Route {
            table,
            key: None,
            schema: SchemaId(0),
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
/// and metric labels; inputs name connections with a [`ConnId`](crate::ConnId), which only the core mints.
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
