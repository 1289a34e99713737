//! Tables: what a caller registers (how a batch is routed to one is a [`Route`](crate::Route)).

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
    /// ([`SchemaId`](crate::SchemaId)) is reconciled with the table ([`Output::Reconcile`](crate::Output))
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
