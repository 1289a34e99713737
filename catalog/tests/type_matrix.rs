//! Every table the local backend creates or evolves stays writable and evolvable by the
//! delta-rs this crate ships with: for every Arrow type the type map supports, a real table on
//! disk goes through create, a property change, an added column, an append and a read back.
//! (Before the fix a `TIMESTAMP_NTZ` column made the table unwritable after its first property
//! change: delta-rs rewrote the protocol's features into ones its own writer refuses.)
#![cfg(feature = "local")]

mod common;

use common::with_reserved;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder, MapBuilder, MapFieldNames, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array,
    Float64Array, Int8Array, Int16Array, Int32Array, Int64Array, RecordBatch, StringArray,
    StructArray, TimestampMicrosecondArray, new_null_array,
};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::{Contract, DesiredTable, Policy, Role, SinkId, TableCatalog, TableRef};

/// Every Arrow type the map takes (top level), with a column of three values of it.
fn cases() -> Vec<(&'static str, DataType, ArrayRef)> {
    let list = DataType::List(Field::new("element", DataType::Int64, true).into());
    let strct = DataType::Struct(Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ]));
    let entries = Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Int64, true),
    ]);
    let map = DataType::Map(
        Field::new("key_value", DataType::Struct(entries), false).into(),
        false,
    );
    let list_type = list.clone();
    let mut list = ListBuilder::new(Int64Builder::new()).with_field(Field::new(
        "element",
        DataType::Int64,
        true,
    ));
    list.values().append_value(1);
    list.values().append_value(2);
    list.append(true);
    list.append(false);
    list.append(true);
    let list_values = list.finish();
    let struct_values = StructArray::new(
        Fields::from(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
        ]),
        vec![
            Arc::new(Int32Array::from(vec![Some(1), None, Some(3)])),
            Arc::new(StringArray::from(vec![Some("x"), Some("y"), None])),
        ],
        None,
    );
    let names = MapFieldNames {
        entry: "key_value".into(),
        key: "key".into(),
        value: "value".into(),
    };
    let mut map_builder = MapBuilder::new(Some(names), StringBuilder::new(), Int64Builder::new());
    map_builder.keys().append_value("k1");
    map_builder.values().append_value(7);
    map_builder.append(true).unwrap();
    map_builder.append(true).unwrap();
    map_builder.keys().append_value("k2");
    map_builder.values().append_null();
    map_builder.append(true).unwrap();
    let map_values = map_builder.finish();
    assert_eq!(
        map_values.data_type(),
        &map,
        "the map's Arrow type is the table's"
    );
    vec![
        (
            "c_bool",
            DataType::Boolean,
            Arc::new(BooleanArray::from(vec![true, false, true])),
        ),
        (
            "c_i8",
            DataType::Int8,
            Arc::new(Int8Array::from(vec![1, -2, 3])),
        ),
        (
            "c_i16",
            DataType::Int16,
            Arc::new(Int16Array::from(vec![1, -2, 3])),
        ),
        (
            "c_i32",
            DataType::Int32,
            Arc::new(Int32Array::from(vec![1, -2, 3])),
        ),
        (
            "c_i64",
            DataType::Int64,
            Arc::new(Int64Array::from(vec![1, -2, 3])),
        ),
        (
            "c_f32",
            DataType::Float32,
            Arc::new(Float32Array::from(vec![1.5, -2.0, 3.25])),
        ),
        (
            "c_f64",
            DataType::Float64,
            Arc::new(Float64Array::from(vec![1.5, -2.0, 3.25])),
        ),
        (
            "c_utf8",
            DataType::Utf8,
            Arc::new(StringArray::from(vec!["a", "", "c"])),
        ),
        (
            "c_binary",
            DataType::Binary,
            Arc::new(BinaryArray::from(vec![&b"a"[..], b"", b"\x00\xff"])),
        ),
        (
            "c_date",
            DataType::Date32,
            Arc::new(Date32Array::from(vec![0, 19_000, -1])),
        ),
        (
            "c_ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Arc::new(TimestampMicrosecondArray::from(vec![0, 1, 2]).with_timezone("UTC")),
        ),
        (
            "c_ts_ntz",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            Arc::new(TimestampMicrosecondArray::from(vec![0, 1, 2])),
        ),
        (
            "c_decimal",
            DataType::Decimal128(12, 2),
            Arc::new(
                Decimal128Array::from(vec![100, -250, 0])
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
            ),
        ),
        ("c_list", list_type, Arc::new(list_values)),
        ("c_struct", strct, Arc::new(struct_values)),
        ("c_map", map, Arc::new(map_values)),
    ]
}

fn desired(table: &TableRef, fields: Vec<Field>, contract: &Contract) -> DesiredTable {
    DesiredTable::from_arrow(
        table.clone(),
        &Schema::new(fields),
        Some(contract),
        Role::Standard,
    )
    .unwrap()
}

/// The batch a sink sends for `d`: its columns, the payload ones from `payload`, the reserved
/// ones filled, each with the Arrow type the table expects.
fn batch_for(d: &DesiredTable, payload: &[(String, ArrayRef)]) -> RecordBatch {
    let rows = payload.first().map_or(3, |(_, a)| a.len());
    let fields: Vec<Field> = d
        .columns
        .iter()
        .map(|c| Field::new(&c.name, c.data_type.to_arrow(), c.nullable))
        .collect();
    let columns: Vec<ArrayRef> = d
        .columns
        .iter()
        .zip(&fields)
        .map(|(c, f)| {
            if let Some((_, a)) = payload.iter().find(|(n, _)| *n == c.name) {
                return a.clone();
            }
            match f.data_type() {
                DataType::Timestamp(_, Some(_)) => {
                    Arc::new(TimestampMicrosecondArray::from(vec![42; rows]).with_timezone("UTC"))
                }
                // The source position (`_twg_source_*`), NOT NULL.
                DataType::Utf8 => Arc::new(StringArray::from(vec!["topic"; rows])),
                DataType::Int32 => Arc::new(Int32Array::from(vec![0; rows])),
                DataType::Int64 => Arc::new(Int64Array::from(vec![0; rows])),
                other => new_null_array(other, rows),
            }
        })
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .unwrap_or_else(|e| panic!("batch for {}: {e}", d.table))
}

async fn append(catalog: &LocalDelta, table: &TableRef, batch: RecordBatch) -> Result<u64, String> {
    let url =
        url::Url::from_directory_path(std::fs::canonicalize(catalog.location(table)).unwrap())
            .unwrap();
    let mut t = deltalake::open_table(url)
        .await
        .map_err(|e| e.to_string())?;
    let mut writer =
        deltalake::writer::RecordBatchWriter::for_table(&t).map_err(|e| e.to_string())?;
    deltalake::writer::DeltaWriter::write(&mut writer, batch)
        .await
        .map_err(|e| e.to_string())?;
    deltalake::writer::DeltaWriter::flush_and_commit(&mut writer, &mut t)
        .await
        .map_err(|e| e.to_string())
}

/// Every row of the table, read back from its Parquet files through delta-rs.
async fn read_back(catalog: &LocalDelta, table: &TableRef) -> Vec<RecordBatch> {
    catalog.read_table(table).await.unwrap().0
}

#[tokio::test]
async fn every_mapped_type_survives_create_property_change_add_column_append_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    for (name, data_type, values) in cases() {
        let table = TableRef::parse(&format!("main.matrix.t_{name}")).unwrap();
        let what = |step: &str| format!("{name} ({data_type}): {step}");
        let fields = vec![
            Field::new("id", DataType::Int64, false),
            Field::new(name, data_type.clone(), true),
        ];
        // Create.
        let mut contract = Contract::default();
        catalog
            .reconcile(
                &desired(&table, fields.clone(), &contract),
                &Policy::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", what("create")));
        // A property change (an owner), and a sink registering itself.
        contract.owner = Some("data-eng".into());
        catalog
            .reconcile(
                &desired(&table, fields.clone(), &contract),
                &Policy::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", what("set a property")));
        catalog
            .register_sink(&table, &SinkId("matrix".into()))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", what("register a sink")));
        // An added column.
        let mut evolved = fields.clone();
        evolved.push(Field::new("added", DataType::Utf8, true));
        let d = desired(&table, evolved, &contract);
        catalog
            .reconcile(&d, &Policy::default())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", what("add a column")));
        // An append, then the rows read back.
        let payload = vec![
            (
                "id".to_owned(),
                Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
            ),
            (name.to_owned(), values.clone()),
            (
                "added".to_owned(),
                Arc::new(StringArray::from(vec![Some("x"), None, Some("z")])) as ArrayRef,
            ),
        ];
        append(&catalog, &table, batch_for(&d, &payload))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", what("append")));
        let batches = read_back(&catalog, &table).await;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 3, "{}", what("read back"));
        let col = batches[0]
            .column_by_name(name)
            .unwrap_or_else(|| panic!("{}", what("the column is in the file")));
        assert_eq!(
            col.to_data().len(),
            values.len(),
            "{}",
            what("values read back")
        );
        // The table is still writable and its protocol claims nothing delta-rs cannot write.
        let live = catalog.describe(&table).await.unwrap().unwrap();
        let protocol = live
            .protocol
            .clone()
            .expect("the local backend reads the protocol");
        for refused in ["invariants", "columnMapping", "icebergCompatV2"] {
            assert!(
                !protocol.has(refused),
                "{}: {protocol:?}",
                what("no feature the writer refuses")
            );
        }
        assert!(live.column(name).is_some());
        append(&catalog, &table, batch_for(&d, &payload))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", what("append again")));
    }
}

#[tokio::test]
async fn a_primary_raw_table_on_the_local_backend_claims_only_what_its_protocol_enables() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    let table = TableRef::parse("main.raw.events").unwrap();
    let d = DesiredTable::from_arrow(
        table.clone(),
        &Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]),
        None,
        Role::PrimaryRaw,
    )
    .unwrap();
    catalog.reconcile(&d, &Policy::default()).await.unwrap();
    let live = catalog.describe(&table).await.unwrap().unwrap();
    assert_eq!(
        live.properties
            .get("delta.enableDeletionVectors")
            .map(String::as_str),
        Some("false")
    );
    for claim in [
        "delta.columnMapping.mode",
        "delta.enableIcebergCompatV2",
        "delta.universalFormat.enabledFormats",
    ] {
        assert!(
            !live.properties.contains_key(claim),
            "{claim} would be a claim the protocol does not enable: {:?}",
            live.properties
        );
    }
    let protocol = live.protocol.unwrap();
    assert!(!protocol.has("columnMapping") && !protocol.has("deletionVectors"));
    // It holds the role (re-sync refuses nothing), evolves and takes appends.
    let evolved: Vec<Field> = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("kind", DataType::Utf8, true),
    ];
    let d2 = DesiredTable::from_arrow(
        table.clone(),
        &Schema::new(evolved.clone()),
        None,
        Role::PrimaryRaw,
    )
    .unwrap();
    catalog.reconcile(&d2, &Policy::default()).await.unwrap();
    let payload = vec![(
        "id".to_owned(),
        Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
    )];
    append(&catalog, &table, batch_for(&d2, &payload))
        .await
        .unwrap();
    // Deletion vectors turned on by someone else: the role is refused, naming why.
    let t = deltalake::open_table(
        url::Url::from_directory_path(std::fs::canonicalize(catalog.location(&table)).unwrap())
            .unwrap(),
    )
    .await
    .unwrap();
    t.set_tbl_properties()
        .with_properties(std::collections::HashMap::from([(
            "delta.enableDeletionVectors".to_owned(),
            "true".to_owned(),
        )]))
        .await
        .unwrap();
    let err = catalog
        .reconcile(&d2, &Policy::default())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("primary-raw")
            && err.to_string().contains("delta.enableDeletionVectors"),
        "{err}"
    );
}

#[tokio::test]
async fn two_sinks_provisioning_one_table_at_once_both_succeed_and_change_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let one = LocalDelta::new(dir.path());
    let two = LocalDelta::new(dir.path());
    let table = TableRef::parse("main.race.orders").unwrap();
    let contract = Contract {
        column_descriptions: BTreeMap::from([("id".into(), "Order id".into())]),
        owner: Some("a".into()),
        ..Contract::default()
    };
    let d = desired(
        &table,
        vec![
            Field::new("id", DataType::Int64, false),
            Field::new("note", DataType::Utf8, true),
        ],
        &contract,
    );
    let policy = Policy::default();
    for round in 0..5 {
        let round_table = TableRef::parse(&format!("main.race.orders_{round}")).unwrap();
        let d = DesiredTable {
            table: round_table.clone(),
            ..d.clone()
        };
        let (a, b) = tokio::join!(one.reconcile(&d, &policy), two.reconcile(&d, &policy));
        a.unwrap_or_else(|e| panic!("round {round}, first: {e}"));
        b.unwrap_or_else(|e| panic!("round {round}, second: {e}"));
        let live = one.describe(&round_table).await.unwrap().unwrap();
        let names: Vec<&str> = live.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, with_reserved(&["id", "note"]), "round {round}");
        // A third pass plans nothing: the table is as wanted, once.
        let again = one.reconcile(&d, &Policy::default()).await.unwrap();
        assert!(
            again.executed.is_empty(),
            "round {round}: {:?}",
            again.executed
        );
    }
}

/// What an independent reader must find in one table: its columns as we wrote them (Delta JSON
/// types, comments; those `created` with, in order, then the ones evolution added at the end),
/// the properties we set, its row count.
fn expectation(
    catalog: &LocalDelta,
    created: &DesiredTable,
    d: &DesiredTable,
    rows: usize,
) -> serde_json::Value {
    let mut ordered: Vec<&zerobus_sink_catalog::DesiredColumn> = created
        .columns
        .iter()
        .filter_map(|c| d.columns.iter().find(|w| w.name == c.name))
        .collect();
    ordered.extend(
        d.columns
            .iter()
            .filter(|w| created.columns.iter().all(|c| c.name != w.name)),
    );
    let columns: Vec<serde_json::Value> = ordered
        .into_iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "type": c.data_type.to_json(),
                "nullable": c.nullable,
                "comment": c.comment.as_ref().map(|c| c.text.clone()),
            })
        })
        .collect();
    let mut properties = d.properties.clone();
    if d.role == Role::PrimaryRaw {
        for (k, v) in zerobus_sink_catalog::LOCAL_PRIMARY_RAW_PROPERTIES {
            properties.insert(k.to_owned(), v.to_owned());
        }
    }
    serde_json::json!({
        "path": std::fs::canonicalize(catalog.location(&d.table)).unwrap(),
        "columns": columns,
        "properties": properties,
        "rows": rows,
        "table_comment": d.comment,
    })
}

/// Run by `scripts/check-delta-reader` (which installs the Python `deltalake` reader and names
/// it in `ZEROBUS_DELTA_READER`): every kind of table the local backend creates (each mapped
/// type, evolved and appended to; a primary-raw table; a commented table) is read back by a
/// reader we did not write, which checks columns, types, comments, properties and rows.
#[tokio::test]
#[ignore = "needs the Python deltalake reader: run scripts/check-delta-reader"]
async fn an_independent_reader_reads_every_table_the_local_backend_writes() {
    let python = std::env::var("ZEROBUS_DELTA_READER")
        .expect("ZEROBUS_DELTA_READER names a python with deltalake (scripts/check-delta-reader)");
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    let contract = Contract {
        column_descriptions: BTreeMap::from([("id".into(), "The row's id".into())]),
        table_description: Some("Every mapped type, one per table".into()),
        owner: Some("data-eng".into()),
        source_topic: Some("orders".into()),
        ..Contract::default()
    };
    let mut expected = Vec::new();
    for (name, data_type, values) in cases() {
        let table = TableRef::parse(&format!("main.reader.t_{name}")).unwrap();
        let fields = vec![
            Field::new("id", DataType::Int64, false),
            Field::new(name, data_type, true),
        ];
        let created = desired(&table, fields.clone(), &contract);
        catalog
            .reconcile(&created, &Policy::default())
            .await
            .unwrap();
        let mut evolved = fields;
        evolved.push(Field::new("added", DataType::Utf8, true));
        let d = desired(&table, evolved, &contract);
        catalog.reconcile(&d, &Policy::default()).await.unwrap();
        catalog
            .register_sink(&table, &SinkId("reader-check".into()))
            .await
            .unwrap();
        let payload = vec![
            (
                "id".to_owned(),
                Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
            ),
            (name.to_owned(), values),
        ];
        append(&catalog, &table, batch_for(&d, &payload))
            .await
            .unwrap();
        expected.push(expectation(&catalog, &created, &d, 3));
    }
    let raw = TableRef::parse("main.reader.raw").unwrap();
    let d = DesiredTable::from_arrow(
        raw.clone(),
        &Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]),
        Some(&contract),
        Role::PrimaryRaw,
    )
    .unwrap();
    catalog.reconcile(&d, &Policy::default()).await.unwrap();
    let payload = vec![(
        "id".to_owned(),
        Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
    )];
    append(&catalog, &raw, batch_for(&d, &payload))
        .await
        .unwrap();
    expected.push(expectation(&catalog, &d, &d, 3));

    let file = dir.path().join("expected.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&expected).unwrap()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/read_delta.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("run {python}: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{said}");
    assert!(
        out.status.success(),
        "the independent reader disagrees:\n{said}"
    );
    assert!(said.contains(&format!(
        "{} tables read by deltalake, 0 mismatches",
        expected.len()
    )));
}
