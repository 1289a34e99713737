//! The local backend on real Delta tables in temp folders, read back through delta-rs.
#![cfg(feature = "local")]

mod common;

use common::with_reserved;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use deltalake::kernel::MetadataValue;
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::{
    Access, CatalogError, Contract, DeltaType, DesiredTable, Policy, Role, SinkId, TableCatalog,
    TableRef,
};

fn contract() -> Contract {
    Contract {
        column_descriptions: BTreeMap::from([
            ("id".into(), "Order id".into()),
            ("note".into(), "Free text; may hold 'quotes'".into()),
        ]),
        table_description: Some("Orders landed by zerobus-sink".into()),
        owner: Some("data-eng".into()),
        source_topic: Some("orders".into()),
        ..Contract::default()
    }
}

fn fields() -> Vec<Field> {
    vec![
        Field::new("id", DataType::Int64, false),
        Field::new("note", DataType::Utf8, true),
    ]
}

fn desired(fields: Vec<Field>, contract: &Contract) -> DesiredTable {
    DesiredTable::from_arrow(
        TableRef::parse("main.bronze.orders").unwrap(),
        &Schema::new(fields),
        Some(contract),
        Role::Standard,
    )
    .unwrap()
}

#[tokio::test]
async fn create_describe_evolve_and_resync_a_real_delta_table() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    let table = TableRef::parse("main.bronze.orders").unwrap();
    assert_eq!(catalog.describe(&table).await.unwrap(), None, "absent");

    let c = contract();
    let created = catalog
        .reconcile(&desired(fields(), &c), &Policy::default())
        .await
        .unwrap();
    assert!(
        created.executed[0].starts_with("create table"),
        "{:?}",
        created.executed
    );

    // Read it back through delta-rs itself, not through our describe.
    let url =
        url::Url::from_directory_path(std::fs::canonicalize(catalog.location(&table)).unwrap())
            .unwrap();
    let t = deltalake::open_table(url.clone()).await.unwrap();
    let snapshot = t.snapshot().unwrap();
    let schema = serde_json::to_value(snapshot.schema().as_ref()).unwrap();
    let names: Vec<&str> = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, with_reserved(&["id", "note"]));
    assert_eq!(schema["fields"][0]["type"], "long");
    assert_eq!(schema["fields"][0]["nullable"], false);
    assert_eq!(
        schema["fields"][1]["metadata"]["comment"],
        "Free text; may hold 'quotes'"
    );
    assert_eq!(
        snapshot.metadata().description(),
        Some("Orders landed by zerobus-sink")
    );
    assert_eq!(
        snapshot
            .metadata()
            .configuration()
            .get("twg.owner")
            .map(String::as_str),
        Some("data-eng")
    );

    // Our describe agrees, and a second reconcile does nothing.
    let live = catalog.describe(&table).await.unwrap().unwrap();
    assert_eq!(
        live.column("_twg_emit_ts").unwrap().data_type,
        DeltaType::Timestamp
    );
    assert_eq!(
        live.comment.as_deref(),
        Some("Orders landed by zerobus-sink")
    );
    let again = catalog
        .reconcile(&desired(fields(), &c), &Policy::default())
        .await
        .unwrap();
    assert!(
        again.plan.is_noop() && again.executed.is_empty(),
        "{}",
        again.plan
    );

    // Evolve: a new column with its comment, and a changed description of an old one.
    let mut c2 = c.clone();
    c2.column_descriptions
        .insert("currency".into(), "ISO 4217".into());
    c2.column_descriptions
        .insert("id".into(), "Order id (global)".into());
    let mut evolved = fields();
    evolved.push(Field::new("currency", DataType::Utf8, true));
    let outcome = catalog
        .reconcile(&desired(evolved.clone(), &c2), &Policy::default())
        .await
        .unwrap();
    assert!(
        outcome
            .executed
            .iter()
            .any(|a| a == "add column currency string"),
        "{:?}",
        outcome.executed
    );
    let live = catalog.describe(&table).await.unwrap().unwrap();
    assert_eq!(
        live.column("currency").unwrap().comment.as_deref(),
        Some("ISO 4217")
    );
    assert_eq!(
        live.column("id").unwrap().comment.as_deref(),
        Some("Order id (global)")
    );
    assert!(
        catalog
            .reconcile(&desired(evolved.clone(), &c2), &Policy::default())
            .await
            .unwrap()
            .plan
            .is_noop()
    );

    // A person edits a managed comment: respected by default.
    let t = deltalake::open_table(url.clone()).await.unwrap();
    let edit = HashMap::from([(
        "comment".to_owned(),
        MetadataValue::String("Order id, see the wiki".into()),
    )]);
    t.update_field_metadata()
        .with_field_name("id")
        .with_metadata(edit)
        .await
        .unwrap();
    let respected = catalog
        .reconcile(&desired(evolved, &c2), &Policy::default())
        .await
        .unwrap();
    assert!(respected.plan.is_noop(), "{}", respected.plan);
    assert!(
        respected
            .plan
            .notes
            .iter()
            .any(|n| n.contains("id: comment edited by a person"))
    );

    // A lossy change is refused by name, and nothing is written.
    let lossy = vec![Field::new("id", DataType::Float64, false)];
    let err = catalog
        .reconcile(&desired(lossy, &c2), &Policy::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CatalogError::Refused { .. }) && err.to_string().contains("column id"),
        "{err}"
    );

    // Writers register; credentials are the local path.
    catalog
        .register_sink(&table, &SinkId("pipeline-7".into()))
        .await
        .unwrap();
    let live = catalog.describe(&table).await.unwrap().unwrap();
    assert_eq!(
        live.properties
            .get("twg.sink.pipeline-7")
            .map(String::as_str),
        Some("registered")
    );
    let creds = catalog
        .vend_credentials(&table, Access::Read)
        .await
        .unwrap();
    assert_eq!(creds.url, url.to_string());
}

#[tokio::test]
async fn a_table_the_catalog_created_takes_the_batches_its_schema_describes() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    let d = desired(fields(), &contract());
    catalog.reconcile(&d, &Policy::default()).await.unwrap();
    // The batch schema the sink sends: the desired columns mapped back to Arrow.
    let arrow_fields: Vec<Field> = d
        .columns
        .iter()
        .map(|c| Field::new(&c.name, c.data_type.to_arrow(), c.nullable))
        .collect();
    let schema = Arc::new(Schema::new(arrow_fields));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![1, 2, 3])),
        Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
        Arc::new(TimestampMicrosecondArray::from(vec![10, 20, 30]).with_timezone("UTC")),
        // The source position the sink stamps from each batch's token.
        Arc::new(StringArray::from(vec!["orders"; 3])),
        Arc::new(Int32Array::from(vec![0; 3])),
        Arc::new(Int64Array::from(vec![7; 3])),
        Arc::new(Int64Array::from(vec![7; 3])),
        Arc::new(Int32Array::from(vec![0, 1, 2])),
    ];
    let batch = RecordBatch::try_new(schema, columns).unwrap();
    let url = table_url(&catalog, &d.table);
    let mut table = deltalake::open_table(url.clone()).await.unwrap();
    let version = commit(&mut table, batch).await;
    assert_eq!(version, 1);
    let reread = deltalake::open_table(url).await.unwrap();
    assert_eq!(reread.get_file_uris().unwrap().count(), 1);
}

#[tokio::test]
async fn widening_on_the_local_backend_keeps_every_row_and_reads_it_at_the_wider_type() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    let narrow = vec![Field::new("n", DataType::Int32, true)];
    catalog
        .reconcile(&desired(narrow, &Contract::default()), &Policy::default())
        .await
        .unwrap();
    let table = TableRef::parse("main.bronze.orders").unwrap();
    append(&catalog, &table, vec![1, 2, 3], "EUR").await;
    let wide = vec![Field::new("n", DataType::Int64, true)];
    let widen = Policy {
        allow_widening: true,
        ..Policy::default()
    };
    let outcome = catalog
        .reconcile(&desired(wide.clone(), &Contract::default()), &widen)
        .await
        .unwrap();
    assert!(
        outcome.executed.iter().any(|e| e.contains("n")),
        "{:?}",
        outcome.executed
    );
    let live = catalog.describe(&table).await.unwrap().unwrap();
    assert_eq!(live.column("n").unwrap().data_type, DeltaType::Long);
    // The rows written before, their files still INT, read back as BIGINT.
    append(&catalog, &table, vec![4, 5], "EUR").await;
    let (batches, _) = catalog.read_table(&table).await.unwrap();
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 5);
    for b in &batches {
        assert_eq!(
            b.schema().field_with_name("n").unwrap().data_type(),
            &DataType::Int64
        );
    }
    // Reconciling again is a no-op: the widening is not repeated.
    let again = catalog
        .reconcile(&desired(wide, &Contract::default()), &widen)
        .await
        .unwrap();
    assert!(again.executed.is_empty(), "{:?}", again.executed);
}

/// The table's directory as the URL delta-rs opens.
fn table_url(catalog: &LocalDelta, table: &TableRef) -> url::Url {
    url::Url::from_directory_path(std::fs::canonicalize(catalog.location(table)).unwrap()).unwrap()
}

/// Writes `batch` to `table` as one commit; the version it made.
async fn commit(table: &mut deltalake::DeltaTable, batch: RecordBatch) -> u64 {
    let mut writer = deltalake::writer::RecordBatchWriter::for_table(table).unwrap();
    deltalake::writer::DeltaWriter::write(&mut writer, batch)
        .await
        .unwrap();
    deltalake::writer::DeltaWriter::flush_and_commit(&mut writer, table)
        .await
        .unwrap()
}

/// One batch of `ids` for the table's current columns: each `NOT NULL` column filled (the
/// source position the sink stamps), `currency` with `currency` where the table has it, every
/// other nullable column null.
async fn append(catalog: &LocalDelta, table: &TableRef, ids: Vec<i64>, currency: &str) {
    let mut delta = deltalake::open_table(table_url(catalog, table))
        .await
        .unwrap();
    let schema = deltalake::writer::RecordBatchWriter::for_table(&delta)
        .unwrap()
        .arrow_schema();
    let rows = ids.len();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| -> ArrayRef {
            match (f.name().as_str(), f.data_type()) {
                ("id", _) => Arc::new(Int64Array::from(ids.clone())),
                ("currency", _) => Arc::new(StringArray::from(vec![currency; rows])),
                (_, _) if f.is_nullable() => arrow_array::new_null_array(f.data_type(), rows),
                (_, DataType::Utf8) => Arc::new(StringArray::from(vec!["orders"; rows])),
                (_, DataType::Int32) => Arc::new(Int32Array::from(vec![0; rows])),
                (_, DataType::Int64) => Arc::new(Int64Array::from(vec![0; rows])),
                (_, DataType::Timestamp(TimeUnit::Microsecond, tz)) => Arc::new(
                    TimestampMicrosecondArray::from(vec![0; rows]).with_timezone_opt(tz.clone()),
                ),
                (name, other) => panic!("no value for NOT NULL column {name} of {other}"),
            }
        })
        .collect();
    let batch = RecordBatch::try_new(schema, columns).unwrap();
    commit(&mut delta, batch).await;
}

#[tokio::test]
async fn a_file_written_before_a_column_was_added_reads_it_as_nulls() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    let table = TableRef::parse("main.bronze.orders").unwrap();
    let c = contract();
    catalog
        .reconcile(&desired(fields(), &c), &Policy::default())
        .await
        .unwrap();
    append(&catalog, &table, vec![1, 2], "unused").await;
    let mut evolved = fields();
    evolved.push(Field::new("currency", DataType::Utf8, true));
    catalog
        .reconcile(&desired(evolved, &c), &Policy::default())
        .await
        .unwrap();
    append(&catalog, &table, vec![3], "EUR").await;

    let (batches, version) = catalog.read_table(&table).await.unwrap();
    assert_eq!(version, 3, "create, append, evolve, append");
    let mut seen = BTreeMap::new();
    for b in &batches {
        // Every batch has the table's current columns, the old file's too.
        let schema = b.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let mut want = with_reserved(&["id", "note"]);
        want.push("currency");
        assert_eq!(names, want);
        let ids = b.column_by_name("id").unwrap();
        let ids = ids.as_any().downcast_ref::<Int64Array>().unwrap();
        let currency = b.column_by_name("currency").unwrap();
        let currency = currency.as_any().downcast_ref::<StringArray>().unwrap();
        for row in 0..b.num_rows() {
            let value = currency
                .is_valid(row)
                .then(|| currency.value(row).to_owned());
            seen.insert(ids.value(row), value);
        }
    }
    assert_eq!(
        seen,
        BTreeMap::from([(1, None), (2, None), (3, Some("EUR".to_owned()))])
    );
}

/// A drift reconciles every table of a sink at once; delta-rs loads each table's whole state to
/// do it (about 3 MiB for a table of 400 commits), so the backend works on a bounded number of
/// tables at a time and the others wait for a place (catalog/src/local/gate.rs).
#[tokio::test(flavor = "current_thread")]
async fn a_drift_over_many_tables_works_on_a_bounded_number_at_once() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path()).with_tables_at_once(2);
    let c = contract();
    let names = ["main.bronze.a", "main.bronze.b", "main.bronze.c"];
    let desired_for = |name: &str, fields: Vec<Field>| {
        DesiredTable::from_arrow(
            TableRef::parse(name).unwrap(),
            &Schema::new(fields),
            Some(&c),
            Role::Standard,
        )
        .unwrap()
    };
    for name in names {
        catalog
            .reconcile(&desired_for(name, fields()), &Policy::default())
            .await
            .unwrap();
    }
    assert_eq!(
        catalog.tables_free(),
        2,
        "every permit back after the creates"
    );

    // The drift: a column added to all three at once.
    let mut drifted = fields();
    drifted.push(Field::new("currency", DataType::Utf8, true));
    let plans: Vec<DesiredTable> = names
        .iter()
        .map(|n| desired_for(n, drifted.clone()))
        .collect();
    let policy = Policy::default();
    let mut a = pin!(catalog.reconcile(&plans[0], &policy));
    let mut b = pin!(catalog.reconcile(&plans[1], &policy));
    let mut third = pin!(catalog.reconcile(&plans[2], &policy));
    let mut cx = Context::from_waker(Waker::noop());
    // The first two take the places and wait on delta-rs's file reads (blocking threads).
    assert!(a.as_mut().poll(&mut cx).is_pending());
    assert!(b.as_mut().poll(&mut cx).is_pending());
    assert_eq!(catalog.tables_free(), 0, "two tables loaded at once");
    assert!(third.as_mut().poll(&mut cx).is_pending(), "the third waits");
    let (a, b) = tokio::join!(a, b);
    assert_eq!(
        catalog.tables_free(),
        1,
        "the third took a place as the others left"
    );
    let third = third.await;
    for outcome in [a, b, third] {
        let executed = outcome.unwrap().executed;
        assert!(
            executed.iter().any(|e| e.contains("currency")),
            "each table gained the column: {executed:?}"
        );
    }
    assert_eq!(catalog.tables_free(), 2);
    for name in names {
        let live = catalog
            .describe(&TableRef::parse(name).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(
            live.columns.iter().any(|col| col.name == "currency"),
            "{name}"
        );
    }
}
