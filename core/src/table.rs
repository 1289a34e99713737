//! Tables: what a caller registers, and how a batch is routed to one.

use crate::ids::TableId;
use crate::sizing::PoolSizing;

/// A target table and how to write it.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    /// The table's full name, `catalog.schema.table`, as the service's table header wants it.
    pub name: String,
    /// How many streams it gets.
    pub sizing: PoolSizing,
    /// Whether batches carry an ordering key: each key hash then maps to one fixed slot.
    pub keyed: bool,
}

impl TableSpec {
    /// An order-agnostic table with the default pool sizing.
    #[must_use]
    pub fn new(name: impl Into<String>) -> TableSpec {
        TableSpec {
            name: name.into(),
            sizing: PoolSizing::default(),
            keyed: false,
        }
    }

    /// The same table with `sizing`.
    #[must_use]
    pub fn sizing(self, sizing: PoolSizing) -> TableSpec {
        TableSpec { sizing, ..self }
    }

    /// The same table with an ordering key: every batch must be routed with
    /// [`TableId::key`](crate::TableId::key).
    #[must_use]
    pub fn keyed(self) -> TableSpec {
        TableSpec {
            keyed: true,
            ..self
        }
    }
}

/// Where a batch goes: a table, and for keyed tables the key's hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    pub(crate) table: TableId,
    pub(crate) key: Option<u64>,
}

impl Route {
    /// The table.
    #[must_use]
    pub fn table(&self) -> TableId {
        self.table
    }
}

impl From<TableId> for Route {
    fn from(table: TableId) -> Route {
        Route { table, key: None }
    }
}
