//! Every rendered statement is parsed by an independent SQL parser (`sqlparser`, Databricks
//! dialect): exactly one statement each, and the names and comments it reads back are exactly
//! the ones in the plan, including names and comments built to break out.

use std::collections::BTreeMap;

use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use sqlparser::ast::{AlterTableOperation, ColumnOption, Expr, Ident, SqlOption, Statement, Value};
use sqlparser::dialect::DatabricksDialect;
use sqlparser::parser::Parser;
use zerobus_sink_catalog::{
    Action, Authority, Comment, Contract, DeltaType, DesiredColumn, DesiredTable, Policy,
    ReconcilePlan, Role, TableRef, ddl, plan,
};

const HOSTILE: [&str; 8] = [
    "plain",
    "back`tick",
    "quote's",
    "double\"quote",
    "semi; DROP TABLE x; --",
    "new\nline and\ttab\r",
    "back\\slash\\' then quote",
    "unicode ünïcødé 注释",
];

fn parse_one(sql: &str) -> Statement {
    let mut statements =
        Parser::parse_sql(&DatabricksDialect {}, sql).unwrap_or_else(|e| panic!("{e}\n{sql}"));
    assert_eq!(statements.len(), 1, "exactly one statement: {sql}");
    statements.remove(0)
}

fn ident(i: &Ident) -> String {
    i.value.clone()
}

fn literal(o: &SqlOption) -> Option<(String, String)> {
    let SqlOption::KeyValue { key, value } = o else {
        return None;
    };
    let Expr::Value(v) = value else { return None };
    let Value::SingleQuotedString(s) = &v.value else {
        return None;
    };
    let key: Vec<String> = key
        .0
        .iter()
        .map(|part| part.as_ident().map(ident).unwrap_or_default())
        .collect();
    Some((key.join("."), s.clone()))
}

fn column(name: &str, data_type: DeltaType, comment: &str) -> DesiredColumn {
    DesiredColumn {
        name: name.to_owned(),
        data_type,
        nullable: false,
        comment: Some(Comment {
            text: comment.to_owned(),
            authority: Authority::Contract,
        }),
    }
}

#[test]
fn create_table_round_trips_hostile_names_and_comments_through_the_parser() {
    let columns: Vec<DesiredColumn> = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, s)| column(&format!("{s}{i}"), DeltaType::Long, s))
        .collect();
    let properties: BTreeMap<String, String> = HOSTILE
        .iter()
        .map(|s| (format!("k.{s}"), (*s).to_owned()))
        .collect();
    let plan = ReconcilePlan {
        table: TableRef::parse("main.bronze.orders").unwrap(),
        actions: vec![Action::CreateTable {
            columns: columns.clone(),
            comment: Some(HOSTILE[6].to_owned()),
            properties: properties.clone(),
        }],
        notes: vec![],
    };
    let sql = ddl::render(&plan).unwrap();
    assert_eq!(sql.len(), 2, "create, then the table comment");
    let Statement::CreateTable(create) = parse_one(&sql[0]) else {
        panic!("{}", sql[0])
    };
    let name: Vec<String> = create
        .name
        .0
        .iter()
        .map(|p| p.as_ident().map(ident).unwrap_or_default())
        .collect();
    assert_eq!(name, ["main", "bronze", "orders"]);
    assert_eq!(create.columns.len(), columns.len());
    for (parsed, wanted) in create.columns.iter().zip(&columns) {
        assert_eq!(parsed.name.value, wanted.name);
        let comment = parsed.options.iter().find_map(|o| {
            if let ColumnOption::Comment(c) = &o.option {
                Some(c.clone())
            } else {
                None
            }
        });
        assert_eq!(
            comment.as_deref(),
            Some(wanted.comment.as_ref().unwrap().text.as_str()),
            "{}",
            parsed.name
        );
        assert!(
            parsed
                .options
                .iter()
                .any(|o| matches!(o.option, ColumnOption::NotNull))
        );
    }
    let parsed_props: BTreeMap<String, String> = match &create.table_options {
        sqlparser::ast::CreateTableOptions::TableProperties(p) => {
            p.iter().filter_map(literal).collect()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(parsed_props, properties);
    let Statement::AlterTable(alter) = parse_one(&sql[1]) else {
        panic!("{}", sql[1])
    };
    let [AlterTableOperation::SetTblProperties { table_properties }] = alter.operations.as_slice()
    else {
        panic!("{}", sql[1])
    };
    assert_eq!(
        table_properties
            .iter()
            .filter_map(literal)
            .collect::<Vec<_>>(),
        vec![("comment".to_owned(), HOSTILE[6].to_owned())]
    );
}

#[test]
fn every_type_renders_to_ddl_the_parser_reads() {
    let kv = Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Int64, true),
    ]);
    let fields = vec![
        Field::new("b", DataType::Boolean, true),
        Field::new("i8", DataType::Int8, true),
        Field::new("i16", DataType::Int16, true),
        Field::new("i32", DataType::Int32, true),
        Field::new("i64", DataType::Int64, true),
        Field::new("f32", DataType::Float32, true),
        Field::new("f64", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("bin", DataType::Binary, true),
        Field::new("d", DataType::Date32, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new(
            "ntz",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new("dec", DataType::Decimal128(38, 9), true),
        Field::new(
            "arr",
            DataType::List(Field::new("item", DataType::Utf8, true).into()),
            true,
        ),
        Field::new(
            "st",
            DataType::Struct(
                vec![
                    Field::new("a", DataType::Int32, false),
                    Field::new("b_c", DataType::Utf8, true),
                ]
                .into(),
            ),
            true,
        ),
        Field::new(
            "m",
            DataType::Map(
                Field::new("entries", DataType::Struct(kv), false).into(),
                false,
            ),
            true,
        ),
    ];
    let d = DesiredTable::from_arrow(
        TableRef::parse("c.s.all_types").unwrap(),
        &Schema::new(fields),
        None,
        Role::PrimaryRaw,
    )
    .unwrap();
    let sql = ddl::render(&plan(None, &d, &Policy::default())).unwrap();
    let Statement::CreateTable(create) = parse_one(&sql[0]) else {
        panic!()
    };
    let types: Vec<String> = create
        .columns
        .iter()
        .map(|c| c.data_type.to_string())
        .collect();
    assert_eq!(
        types,
        [
            "BOOLEAN",
            "TINYINT",
            "SMALLINT",
            "INT",
            "BIGINT",
            "FLOAT",
            "DOUBLE",
            "STRING",
            "BINARY",
            "DATE",
            "TIMESTAMP",
            "TIMESTAMP_NTZ",
            "DECIMAL(38,9)",
            "ARRAY<STRING>",
            "STRUCT<`a` INT, `b_c` STRING>",
            "MAP<STRING, BIGINT>",
            // The reserved columns: _twg_emit_ts and the _twg_source_* position.
            "TIMESTAMP",
            "STRING",
            "INT",
            "BIGINT",
            "BIGINT",
            "INT",
        ]
    );
}

#[test]
fn alter_statements_parse_and_carry_hostile_text_intact() {
    let table = TableRef::parse("main.bronze.orders").unwrap();
    let d = DesiredTable::from_arrow(
        table.clone(),
        &Schema::new(vec![Field::new("id", DataType::Int32, false)]),
        None,
        Role::Standard,
    )
    .unwrap();
    let mut live = zerobus_sink_catalog::LiveTable {
        table: table.clone(),
        columns: vec![zerobus_sink_catalog::LiveColumn {
            name: "id".into(),
            data_type: DeltaType::Short,
            nullable: false,
            comment: None,
        }],
        comment: None,
        properties: BTreeMap::new(),
        table_id: None,
        storage_location: None,
        protocol: None,
        table_type: Some("MANAGED".into()),
        data_source_format: Some("DELTA".into()),
    };
    live.properties.insert("twg.managed".into(), "true".into());
    let p = plan(
        Some(&live),
        &d,
        &Policy {
            allow_widening: true,
            ..Policy::default()
        },
    );
    for sql in ddl::render(&p).unwrap() {
        parse_one(&sql);
    }
    for text in HOSTILE {
        let col = column(&format!("c_{text}"), DeltaType::Integer, text);
        let actions = vec![
            Action::AddColumn(col.clone()),
            Action::SetColumnComment {
                column: col.name.clone(),
                data_type: DeltaType::Integer,
                comment: text.to_owned(),
            },
            Action::WidenColumn {
                column: col.name.clone(),
                from: DeltaType::Integer,
                to: DeltaType::Long,
            },
            Action::SetTableComment(text.to_owned()),
        ];
        let sql = ddl::render(&ReconcilePlan {
            table: table.clone(),
            actions,
            notes: vec![],
        })
        .unwrap();
        assert_eq!(sql.len(), 4, "{sql:?}");
        let Statement::AlterTable(add) = parse_one(&sql[0]) else {
            panic!()
        };
        let [AlterTableOperation::AddColumn { column_def, .. }] = add.operations.as_slice() else {
            panic!("{}", sql[0])
        };
        assert_eq!(column_def.name.value, col.name);
        assert!(
            column_def
                .options
                .iter()
                .any(|o| matches!(&o.option, ColumnOption::Comment(c) if c == text)),
            "{}",
            sql[0]
        );
        let Statement::AlterTable(change) = parse_one(&sql[1]) else {
            panic!()
        };
        let [
            AlterTableOperation::ChangeColumn {
                old_name,
                new_name,
                options,
                ..
            },
        ] = change.operations.as_slice()
        else {
            panic!("{}", sql[1])
        };
        assert_eq!(
            (old_name.value.as_str(), new_name.value.as_str()),
            (col.name.as_str(), col.name.as_str())
        );
        assert!(
            options
                .iter()
                .any(|o| matches!(o, ColumnOption::Comment(c) if c == text)),
            "{}",
            sql[1]
        );
        let Statement::AlterTable(widen) = parse_one(&sql[2]) else {
            panic!()
        };
        assert!(
            matches!(widen.operations.as_slice(), [AlterTableOperation::AlterColumn { column_name, .. }] if column_name.value == col.name)
        );
        parse_one(&sql[3]);
    }
}

#[test]
fn a_refusing_plan_renders_nothing() {
    let table = TableRef::parse("main.bronze.orders").unwrap();
    let d = DesiredTable::from_arrow(
        table.clone(),
        &Schema::new(vec![Field::new("id", DataType::Utf8, false)]),
        None,
        Role::Standard,
    )
    .unwrap();
    let live = zerobus_sink_catalog::LiveTable {
        table,
        columns: vec![zerobus_sink_catalog::LiveColumn {
            name: "id".into(),
            data_type: DeltaType::Long,
            nullable: false,
            comment: None,
        }],
        comment: None,
        properties: BTreeMap::new(),
        table_id: None,
        storage_location: None,
        protocol: None,
        table_type: Some("MANAGED".into()),
        data_source_format: Some("DELTA".into()),
    };
    let err = ddl::render(&plan(Some(&live), &d, &Policy::default()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("column id: type conflict bigint vs string"),
        "{err}"
    );
    let _ = Contract::default();
}
