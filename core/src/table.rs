//! Tables: what a caller registers, and how a batch is routed to one.

use crate::ids::{SchemaId, TableId};
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
    /// Whether the table is provisioned through a catalog: each new batch schema
    /// ([`SchemaId`]) is reconciled with the table ([`Output::Reconcile`](crate::Output))
    /// before any batch of it is given to a stream, and each stream is opened for one schema.
    /// Without it the table is taken as it is and every batch must fit it.
    pub reconciled: bool,
}

impl TableSpec {
    /// An order-agnostic table with the default pool sizing.
    #[must_use]
    pub fn new(name: impl Into<String>) -> TableSpec {
        TableSpec {
            name: name.into(),
            sizing: PoolSizing::default(),
            keyed: false,
            reconciled: false,
        }
    }

    /// The same table, provisioned and evolved through a catalog (see
    /// [`reconciled`](TableSpec::reconciled)). Route its batches with
    /// [`TableId::schema`](crate::TableId::schema). Not for keyed tables.
    #[must_use]
    pub fn reconciled(self) -> TableSpec {
        TableSpec {
            reconciled: true,
            ..self
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
