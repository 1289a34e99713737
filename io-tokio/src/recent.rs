//! The batch schemas a sink's handle remembers for its provisioned tables: an id for each, and
//! its plan once the driver made one, for the [`SCHEMAS_KEPT`] most recently sent per table.
//!
//! A source that drifts for months must not cost memory for every schema it ever had (a
//! plan, its wire schema and the batch schema: about 4 KB per table per schema, measured in
//! the hour's soak). A schema that falls out of the handle's memory is retired: the driver
//! drops its plan once no batch of it is pending and the core agrees
//! ([`SinkCore::retire_schema`](zerobus_sink::SinkCore::retire_schema)). If it is sent again
//! it gets a new id and is planned again (one catalog round trip), as any new schema is.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use zerobus_sink::{SchemaId, TableId};

use crate::driver::command::Known;

/// How many batch schemas per table the handle remembers (and the driver keeps plans for,
/// with any an unconfirmed batch still needs): the old and the new one of a rolling deploy,
/// whose producers alternate between them. A source alternating among more schemas than this
/// has one of them planned again (a catalog round trip) at each switch. Two, not more: the
/// hour's soak drifts six times, and with four kept its live heap still grew by a plan per
/// table at each of the first four drifts.
pub(crate) const SCHEMAS_KEPT: usize = 2;

/// One table's recent schemas.
#[derive(Debug, Default, Clone)]
struct Table {
    /// A table that is not provisioned has one schema, its wire schema, under the id its
    /// routes carry: its plan is kept for the sink's life (nothing to retire).
    fixed: bool,
    /// Least recently sent first.
    seen: Vec<(SchemaRef, SchemaId)>,
    /// The id the next new schema gets: ids are never reused, so that a retired id cannot
    /// stand for another schema in a batch still on its way.
    next: u32,
}

/// Every provisioned table's recent schemas, and the plans the handle has learned for them
/// and for the one schema of each table that is not provisioned.
#[derive(Debug)]
pub(crate) struct RecentSchemas {
    tables: Vec<Table>,
    known: HashMap<(TableId, SchemaId), Known>,
}

impl RecentSchemas {
    /// For the tables in order, each `true` if it is provisioned (its schemas drift).
    pub(crate) fn new(provisioned: impl IntoIterator<Item = bool>) -> RecentSchemas {
        RecentSchemas {
            tables: provisioned
                .into_iter()
                .map(|p| Table {
                    fixed: !p,
                    ..Table::default()
                })
                .collect(),
            known: HashMap::new(),
        }
    }

    /// The id of `schema` for `table`, and the schema it pushed out of memory if it is new
    /// (the driver is told to retire it). The same schema keeps its id while it is
    /// remembered.
    pub(crate) fn id(
        &mut self,
        table: TableId,
        schema: &SchemaRef,
    ) -> (SchemaId, Option<SchemaId>) {
        let Some(t) = self.tables.get_mut(table.index()) else {
            return (SchemaId(0), None);
        };
        let same = |(s, _): &(SchemaRef, SchemaId)| Arc::ptr_eq(s, schema) || **s == **schema;
        // The usual case: the schema of the table's last batch.
        if let Some((_, id)) = t.seen.last().filter(|e| same(e)) {
            return (*id, None);
        }
        if let Some(i) = t.seen.iter().position(same) {
            let entry = t.seen.remove(i);
            let id = entry.1;
            t.seen.push(entry);
            return (id, None);
        }
        let id = SchemaId(t.next);
        t.next = t.next.saturating_add(1);
        let out = (t.seen.len() >= SCHEMAS_KEPT).then(|| t.seen.remove(0).1);
        if let Some(old) = out {
            self.known.remove(&(table, old));
        }
        t.seen.push((schema.clone(), id));
        (id, out)
    }

    /// What the handle knows of the schema's plan.
    pub(crate) fn known(&self, table: TableId, schema: SchemaId) -> Option<&Known> {
        self.known.get(&(table, schema))
    }

    /// The driver's answer for a schema: its plan, or its refusal. Kept only while the schema
    /// is remembered (always, for a table that is not provisioned).
    pub(crate) fn learn(&mut self, table: TableId, schema: SchemaId, known: Known) {
        let remembered = self
            .tables
            .get(table.index())
            .is_some_and(|t| t.fixed || t.seen.iter().any(|(_, id)| *id == schema));
        if remembered {
            self.known.insert((table, schema), known);
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn schema(columns: usize) -> SchemaRef {
        let fields: Vec<Field> = (0..columns)
            .map(|i| Field::new(format!("c{i}"), DataType::Int64, true))
            .collect();
        Arc::new(Schema::new(fields))
    }

    #[test]
    fn a_schema_keeps_its_id_while_remembered_and_the_least_recent_is_pushed_out() {
        let table = TableId::from_index(0);
        let mut r = RecentSchemas::new([true]);
        let schemas: Vec<SchemaRef> = (1..=SCHEMAS_KEPT + 2).map(schema).collect();
        for (i, s) in schemas.iter().take(SCHEMAS_KEPT).enumerate() {
            let expected = SchemaId(u32::try_from(i).unwrap());
            assert_eq!(r.id(table, s), (expected, None));
            r.learn(table, expected, Known::Refused(Vec::new()));
        }
        // An equal schema in another Arc is the same schema; sending it makes it the most
        // recent, so the next new one pushes out schema 1 (id 1), not schema 0.
        assert_eq!(r.id(table, &schema(1)), (SchemaId(0), None));
        let kept = u32::try_from(SCHEMAS_KEPT).unwrap();
        let (id, out) = r.id(table, &schemas[SCHEMAS_KEPT]);
        assert_eq!((id, out), (SchemaId(kept), Some(SchemaId(1))));
        assert!(r.known(table, SchemaId(1)).is_none(), "forgotten with it");
        assert!(r.known(table, SchemaId(0)).is_some());
        // Back again, the pushed-out schema is new: a fresh id, never a reused one. It pushes
        // out the least recent now: schema 2 (id 2), or schema 0 if only two are kept.
        let least = if kept > 2 { 2 } else { 0 };
        let (id, out) = r.id(table, &schemas[1]);
        assert_eq!((id, out), (SchemaId(kept + 1), Some(SchemaId(least))));
        // An answer for a schema no longer remembered is not kept.
        r.learn(table, SchemaId(least), Known::Refused(Vec::new()));
        assert!(r.known(table, SchemaId(least)).is_none());
    }

    #[test]
    fn a_table_that_is_not_provisioned_keeps_its_one_plan_so_sends_do_not_wait() {
        // A table not provisioned never numbers schemas: its routes carry one id, and the
        // plan the driver answers with is kept, so that later sends hand over without asking
        // (asking waits until the core admits the batch: the hand-off buffer would go unused).
        let (fixed, drifting) = (TableId::from_index(0), TableId::from_index(1));
        let mut r = RecentSchemas::new([false, true]);
        r.learn(fixed, SchemaId(0), Known::Refused(Vec::new()));
        assert!(r.known(fixed, SchemaId(0)).is_some());
        r.learn(drifting, SchemaId(0), Known::Refused(Vec::new()));
        assert!(
            r.known(drifting, SchemaId(0)).is_none(),
            "a provisioned table's schema is known only once numbered"
        );
    }
}
