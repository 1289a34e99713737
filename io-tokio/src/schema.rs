//! Schemas at the sink's edge: what a table may be declared with (checked at start, against the
//! catalog's type map), and how a batch differs from its table, in plain words.

use std::collections::HashSet;

use arrow_schema::{DataType, Field, Schema};
use zerobus_sink_catalog::{DeltaType, TableRef};

use crate::config::TableDef;
use crate::error::StartError;

/// Refuses, at start, what would only fail later: a name that is not `catalog.schema.table`,
/// a table registered twice, a dictionary-encoded column (the wire carries values), and a
/// column of a type Delta cannot hold (named, with the cast to use).
pub(crate) fn check_tables(tables: &[TableDef]) -> Result<(), StartError> {
    let mut seen = HashSet::new();
    for def in tables {
        let name = &def.spec.name;
        let refuse = |reason: String| StartError::Table {
            table: name.clone(),
            reason,
        };
        TableRef::parse(name).map_err(|e| refuse(e.to_string()))?;
        if !seen.insert(name.as_str()) {
            return Err(refuse("is registered twice".into()));
        }
        check_schema(&def.schema).map_err(refuse)?;
    }
    Ok(())
}

/// Whether every column of `schema` can go to a Delta table: not dictionary-encoded (the wire
/// carries values), of a type Delta can hold. The error names the column and what to do.
pub(crate) fn check_schema(schema: &Schema) -> Result<(), String> {
    for field in schema.fields() {
        if let DataType::Dictionary(_, values) = field.data_type() {
            return Err(format!(
                "column `{}` is dictionary-encoded: cast it to its value type ({values})",
                field.name()
            ));
        }
        DeltaType::from_arrow(field.name(), field.data_type()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn describe(field: &Field) -> String {
    let nullable = if field.is_nullable() {
        "nullable"
    } else {
        "not null"
    };
    format!("{} {nullable}", kind(field.data_type()))
}

fn kind(data_type: &DataType) -> String {
    match data_type {
        DataType::Timestamp(unit, Some(tz)) => format!("timestamp ({unit:?}) in time zone {tz:?}"),
        DataType::Timestamp(unit, None) => format!("timestamp ({unit:?}) without time zone"),
        other => other.to_string(),
    }
}

/// How `found` (a batch's schema) differs from `expected` (its table's), in plain words naming
/// each column concerned; `None` if they are equal.
pub(crate) fn difference(expected: &Schema, found: &Schema) -> Option<String> {
    if expected == found {
        return None;
    }
    let mut differences = Vec::new();
    for want in expected.fields() {
        let Ok(have) = found.field_with_name(want.name()) else {
            differences.push(format!(
                "column `{}` ({}) is missing",
                want.name(),
                describe(want)
            ));
            continue;
        };
        if want.data_type() != have.data_type() {
            differences.push(format!(
                "column `{}` is {} in the batch but {} in the table",
                want.name(),
                kind(have.data_type()),
                kind(want.data_type())
            ));
        }
        if want.is_nullable() != have.is_nullable() {
            let (batch, table) = if have.is_nullable() {
                ("nullable", "not null")
            } else {
                ("not null", "nullable")
            };
            differences.push(format!(
                "column `{}` is {batch} in the batch but {table} in the table",
                want.name()
            ));
        }
        if want.metadata() != have.metadata() {
            differences.push(format!(
                "column `{}` has field metadata {:?} in the batch but {:?} in the table",
                want.name(),
                have.metadata(),
                want.metadata()
            ));
        }
    }
    for have in found.fields() {
        if expected.field_with_name(have.name()).is_err() {
            differences.push(format!(
                "column `{}` ({}) is not in the table",
                have.name(),
                describe(have)
            ));
        }
    }
    let names = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>()
    };
    if differences.is_empty() && names(expected) != names(found) {
        differences.push(format!(
            "the columns are in another order: {:?} in the batch, {:?} in the table",
            names(found),
            names(expected)
        ));
    }
    if differences.is_empty() {
        differences.push(format!(
            "the schema metadata differs: {:?} in the batch, {:?} in the table",
            found.metadata(),
            expected.metadata()
        ));
    }
    Some(differences.join("; "))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow_schema::TimeUnit;

    use super::*;

    fn schema(fields: Vec<Field>) -> Schema {
        Schema::new(fields)
    }

    #[test]
    fn differences_are_named_in_plain_words() {
        let table = schema(vec![
            Field::new("id", DataType::Int64, false),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                false,
            ),
            Field::new("note", DataType::Utf8, true),
        ]);
        assert_eq!(difference(&table, &table), None);
        let batch = schema(vec![
            Field::new("id", DataType::Int32, true),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
            Field::new("extra", DataType::Boolean, true),
        ]);
        let d = difference(&table, &batch).unwrap();
        for says in [
            "column `id` is Int32 in the batch but Int64 in the table",
            "column `id` is nullable in the batch but not null in the table",
            "column `at` is timestamp (Microsecond) in time zone \"UTC\" in the batch but timestamp (Microsecond) without time zone in the table",
            "column `note` (Utf8 nullable) is missing",
            "column `extra` (Boolean nullable) is not in the table",
        ] {
            assert!(d.contains(says), "{d}\nshould say: {says}");
        }
        assert!(!d.contains("Field {"), "no Debug dumps: {d}");
        let meta = Field::new("id", DataType::Int64, false)
            .with_metadata(HashMap::from([("k".to_owned(), "v".to_owned())]));
        let one = schema(vec![Field::new("id", DataType::Int64, false)]);
        let d = difference(&one, &schema(vec![meta])).unwrap();
        assert!(d.contains("column `id` has field metadata"), "{d}");
        let two = schema(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
        ]);
        let swapped = schema(vec![
            Field::new("b", DataType::Int64, false),
            Field::new("a", DataType::Int64, false),
        ]);
        assert!(
            difference(&two, &swapped)
                .unwrap()
                .contains("another order")
        );
    }

    #[test]
    fn tables_are_checked_at_start() {
        let def = |name: &str, data_type: DataType| {
            TableDef::new(
                name,
                Arc::new(schema(vec![Field::new("col", data_type, false)])),
            )
        };
        let ok = def("main.bronze.t", DataType::Int64);
        assert!(check_tables(std::slice::from_ref(&ok)).is_ok());
        let cases = [
            (vec![def("orders", DataType::Int64)], "orders"),
            (vec![ok.clone(), ok.clone()], "registered twice"),
            (
                vec![def("main.bronze.t", DataType::UInt64)],
                "column col: Arrow type UInt64",
            ),
            (
                vec![def(
                    "main.bronze.t",
                    DataType::Timestamp(TimeUnit::Millisecond, None),
                )],
                "Microsecond",
            ),
            (
                vec![def(
                    "main.bronze.t",
                    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                )],
                "dictionary-encoded",
            ),
        ];
        for (tables, says) in cases {
            let err = check_tables(&tables).unwrap_err();
            assert!(err.to_string().contains(says), "{err}\nshould say: {says}");
        }
    }
}
