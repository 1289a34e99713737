//! A batch schema's plan against its table, made once when the table is described: per wire
//! column, where its values come from (a batch column and its [`Rule`], or a stamp) and
//! whether the table requires a value.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use zerobus_sink_catalog::LiveTable;

use super::rules::{self, Rule};
use super::{ColumnRefusal, Conversions};

/// The column the sink stamps on every row: when it was sent (UTC, microseconds).
pub const EMIT_TS: &str = "_twg_emit_ts";

/// What the sink stamps, by column name.
const STAMPS: [(&str, Stamp); 6] = [
    (EMIT_TS, Stamp::EmitTs),
    ("_twg_source_topic", Stamp::Topic),
    ("_twg_source_partition", Stamp::Partition),
    ("_twg_source_start", Stamp::Start),
    ("_twg_source_end", Stamp::End),
    ("_twg_source_row", Stamp::Row),
];

/// A value the sink stamps on every row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamp {
    EmitTs,
    Topic,
    Partition,
    Start,
    End,
    Row,
}

impl Stamp {
    fn data_type(self) -> DataType {
        match self {
            Stamp::EmitTs => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Stamp::Topic => DataType::Utf8,
            Stamp::Partition | Stamp::Row => DataType::Int32,
            Stamp::Start | Stamp::End => DataType::Int64,
        }
    }
}

/// Where a wire column's values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Column `index` of the batch, by `rule`. `required`: the table declares it NOT NULL and
    /// the batch's field is nullable, so each batch is checked for nulls. `declared` is the
    /// table's type, for faults.
    Batch {
        index: usize,
        rule: Rule,
        required: bool,
        declared: String,
    },
    /// Stamped by the sink.
    Stamp(Stamp),
}

/// How batches of one schema go to one table. See the module docs.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The stream's schema message.
    pub(crate) schema: SchemaRef,
    /// Per wire column, in the table's order.
    pub(crate) sources: Vec<Source>,
    /// Whether any batch column needs a per-row check (nulls, checked casts).
    pub(crate) checks_rows: bool,
    /// Whether every column passes as it is and nothing is stamped: the batch is the wire.
    pub(crate) identity: bool,
}

impl Plan {
    /// A table taken as it is (a sink that does not provision): the batch is the wire.
    pub(crate) fn identity(schema: &SchemaRef) -> Plan {
        Plan {
            schema: schema.clone(),
            sources: (0..schema.fields().len())
                .map(|index| Source::Batch {
                    index,
                    rule: Rule::Pass,
                    required: false,
                    declared: String::new(),
                })
                .collect(),
            checks_rows: false,
            identity: true,
        }
    }

    /// The plan for batches of `batch` into `live`, or every column that cannot go.
    pub(crate) fn new(
        batch: &Schema,
        live: &LiveTable,
        conversions: Conversions,
    ) -> Result<Plan, Vec<ColumnRefusal>> {
        let mut fields = Vec::with_capacity(live.columns.len());
        let mut sources = Vec::with_capacity(live.columns.len());
        let mut refusals = Vec::new();
        for column in &live.columns {
            let stamp = STAMPS
                .iter()
                .find(|(name, _)| column.name.eq_ignore_ascii_case(name))
                .map(|(_, s)| *s);
            if let Some(stamp) = stamp {
                fields.push(Field::new(&column.name, stamp.data_type(), column.nullable));
                sources.push(Source::Stamp(stamp));
                continue;
            }
            let found = batch
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(&column.name));
            let Some(index) = found else {
                if !column.nullable {
                    refusals.push(ColumnRefusal::MissingRequired {
                        column: column.name.clone(),
                    });
                }
                // A nullable column the batch lacks is left out: the service accepts that.
                continue;
            };
            let field = batch.field(index);
            match rules::rule(
                &column.name,
                field.data_type(),
                &column.data_type,
                conversions,
            ) {
                Ok(rule) => {
                    let data_type = match &rule {
                        Rule::Pass => field.data_type().clone(),
                        Rule::Cast { to, .. } => to.clone(),
                        Rule::Json => DataType::Utf8,
                        Rule::UtcWall { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
                    };
                    let nullable = column.nullable && field.is_nullable();
                    fields.push(
                        Field::new(&column.name, data_type, nullable)
                            .with_metadata(field.metadata().clone()),
                    );
                    sources.push(Source::Batch {
                        index,
                        rule,
                        required: !column.nullable && field.is_nullable(),
                        declared: column.data_type.type_text(),
                    });
                }
                Err(refusal) => refusals.push(refusal),
            }
        }
        for field in batch.fields() {
            if live.column(field.name()).is_none() {
                refusals.push(ColumnRefusal::NotInTable {
                    column: field.name().clone(),
                    incoming: field.data_type().to_string(),
                });
            }
        }
        if !refusals.is_empty() {
            return Err(refusals);
        }
        let checks_rows = sources.iter().any(|s| {
            matches!(
                s,
                Source::Batch { required: true, .. }
                    | Source::Batch {
                        rule: Rule::Cast { checked: true, .. } | Rule::UtcWall { checked: true },
                        ..
                    }
            )
        });
        Ok(Plan {
            schema: Arc::new(Schema::new(fields)),
            sources,
            checks_rows,
            identity: false,
        })
    }

    /// The rule kinds of the plan's batch columns, for the counters.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.sources.iter().filter_map(|s| match s {
            Source::Batch { rule, .. } => Some(rule.kind()),
            Source::Stamp(_) => None,
        })
    }
}

/// The Delta type of `data_type`, for a schema the catalog has not described (tests).
#[cfg(test)]
pub(crate) fn live_of(name: &str, schema: &Schema) -> LiveTable {
    use zerobus_sink_catalog::{DeltaType, LiveColumn, TableRef};
    LiveTable {
        table: TableRef::parse(name).unwrap(),
        columns: schema
            .fields()
            .iter()
            .map(|f| LiveColumn {
                name: f.name().clone(),
                data_type: DeltaType::from_arrow(f.name(), f.data_type()).unwrap(),
                nullable: f.is_nullable(),
                comment: None,
            })
            .collect(),
        comment: None,
        properties: Default::default(),
        table_id: None,
        storage_location: None,
        protocol: None,
        table_type: Some("MANAGED".into()),
        data_source_format: Some("DELTA".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_follows_the_tables_order_stamps_and_names_every_refusal() {
        let table = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new(
                EMIT_TS,
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
            Field::new("_twg_source_row", DataType::Int32, true),
            Field::new("note", DataType::Utf8, true),
            Field::new("gone", DataType::Utf8, true),
        ]);
        let live = live_of("main.bronze.t", &table);
        let batch = Schema::new(vec![
            Field::new("note", DataType::LargeUtf8, true),
            Field::new("id", DataType::Int32, true),
        ]);
        let plan = Plan::new(&batch, &live, Conversions::default()).unwrap();
        let names: Vec<_> = plan
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["id", EMIT_TS, "_twg_source_row", "note"]);
        assert_eq!(plan.schema.field(0).data_type(), &DataType::Int64);
        assert!(!plan.schema.field(0).is_nullable(), "the table's NOT NULL");
        assert!(
            plan.checks_rows,
            "a nullable batch column for a NOT NULL one"
        );
        let kinds: Vec<_> = plan.kinds().collect();
        assert_eq!(kinds, ["lossless_cast", "lossless_cast"]);

        let bad = Schema::new(vec![
            Field::new("note", DataType::Int64, true),
            Field::new("extra", DataType::Utf8, true),
        ]);
        let refusals = Plan::new(&bad, &live, Conversions::default()).unwrap_err();
        let words: Vec<String> = refusals.iter().map(ToString::to_string).collect();
        assert_eq!(
            words,
            [
                "column `id` is NOT NULL in the table and missing from the batch",
                "column `note`: no conversion from Int64 to the table's string",
                "column `extra` (Utf8) is not in the table",
            ]
        );
    }
}
