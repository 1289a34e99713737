//! The service's table requirements (PROTOCOL.md E): a table Zerobus cannot write is refused
//! when described for writing, naming it and the requirement, before anything is planned or
//! executed; on the local backend over real Delta tables on disk, and on the Unity Catalog
//! backend against the loopback stub.
#![cfg(all(feature = "local", feature = "unity"))]

use std::time::Duration;

use arrow_schema::{DataType, Field, Schema};
use zerobus_sink_catalog::local::{LocalDelta, TABLE_TYPE_PROPERTY};
use zerobus_sink_catalog::unity::{Auth, Secret, UnityCatalog, UnityConfig};
use zerobus_sink_catalog::{
    CatalogError, DesiredTable, Policy, RefusalReason, Requirement, Role, TableCatalog, TableRef,
};
use zerobus_sink_testkit::uc_stub::UcStub;

const TABLE: &str = "main.bronze.orders";

fn table() -> TableRef {
    TableRef::parse(TABLE).unwrap()
}

fn desired() -> DesiredTable {
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("note", DataType::Utf8, true),
    ]);
    DesiredTable::from_arrow(table(), &schema, None, Role::Standard).unwrap()
}

/// The requirements an error says the table breaks, after checking that it is the refusal
/// naming the table.
fn broken(result: Result<impl std::fmt::Debug, CatalogError>) -> Vec<Requirement> {
    match result {
        Err(CatalogError::Unwritable { table, broken }) => {
            assert_eq!(table, TABLE);
            broken
        }
        other => panic!("expected an Unwritable refusal of {TABLE}, got {other:?}"),
    }
}

/// A real Delta table under `root`, made by the local backend.
async fn made(root: &std::path::Path) -> LocalDelta {
    let catalog = LocalDelta::new(root);
    catalog
        .reconcile(&desired(), &Policy::default())
        .await
        .unwrap();
    catalog
}

#[tokio::test]
async fn local_a_table_marked_external_is_refused_naming_it_and_the_requirement() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = made(dir.path()).await;
    assert!(
        catalog
            .describe_for_write(&table())
            .await
            .unwrap()
            .is_some()
    );
    catalog
        .set_properties(
            &table(),
            [(TABLE_TYPE_PROPERTY.to_owned(), "external".to_owned())],
        )
        .await
        .unwrap();
    let err = catalog.describe_for_write(&table()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "main.bronze.orders: Zerobus writes only to managed Delta tables; this table is EXTERNAL"
    );
    assert_eq!(
        broken(catalog.reconcile(&desired(), &Policy::default()).await),
        [Requirement::Managed {
            table_type: Some("EXTERNAL".into())
        }],
        "reconcile refuses before it plans"
    );
    // Described as it is, it is still there: only writing is refused.
    let live = catalog.describe(&table()).await.unwrap().unwrap();
    assert_eq!(live.table_type.as_deref(), Some("EXTERNAL"));
    assert_eq!(live.data_source_format.as_deref(), Some("DELTA"));
}

#[tokio::test]
async fn local_a_column_name_zerobus_cannot_write_is_refused_naming_the_column() {
    use deltalake::kernel::{DataType as Kernel, StructField};
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    // Someone else made it, with a name Delta allows and Zerobus does not.
    let location = catalog.location(&table());
    std::fs::create_dir_all(&location).unwrap();
    let url = url::Url::from_directory_path(location.canonicalize().unwrap()).unwrap();
    deltalake::DeltaTable::try_from_url(url)
        .await
        .unwrap()
        .create()
        .with_columns([
            StructField::new("id", Kernel::LONG, false),
            StructField::new("prix_€", Kernel::DOUBLE, true),
        ])
        .await
        .unwrap();
    let err = catalog.describe_for_write(&table()).await.unwrap_err();
    assert!(
        err.to_string().starts_with("main.bronze.orders: column \"prix_€\": Zerobus accepts only ASCII letters, digits and underscores"),
        "{err}"
    );
    assert_eq!(
        broken(catalog.reconcile(&desired(), &Policy::default()).await),
        [Requirement::ColumnName {
            column: "prix_€".into()
        }]
    );
}

#[tokio::test]
async fn local_catalog_managed_commits_in_the_log_are_refused_naming_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = made(dir.path()).await;
    // An upgrade to catalog-managed commits, as the Delta protocol writes it (delta-rs cannot
    // make one, nor open the table after it).
    let log = catalog.location(&table()).join("_delta_log");
    let next = std::fs::read_dir(&log)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    std::fs::write(
        log.join(format!("{next:020}.json")),
        concat!(
            r#"{"commitInfo":{"timestamp":1700000000000,"inCommitTimestamp":1700000000000,"operation":"UPGRADE PROTOCOL"}}"#,
            "\n",
            r#"{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["catalogManaged"],"writerFeatures":["catalogManaged","inCommitTimestamp"]}}"#,
            "\n"
        ),
    )
    .unwrap();
    let err = catalog.describe_for_write(&table()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "main.bronze.orders: the table uses catalog-managed commits (Delta table feature \
         catalogManaged), which Zerobus does not support"
    );
    assert_eq!(
        broken(catalog.reconcile(&desired(), &Policy::default()).await),
        [Requirement::NoCatalogManagedCommits {
            feature: "catalogManaged".into()
        }]
    );
}

#[tokio::test]
async fn local_a_table_dropped_and_made_again_is_refused_naming_both_ids() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = made(dir.path()).await;
    let first = catalog
        .describe_for_write(&table())
        .await
        .unwrap()
        .unwrap()
        .table_id
        .unwrap();
    std::fs::remove_dir_all(catalog.location(&table())).unwrap();
    // Gone: this sink will not make it again (that would be recreating it).
    assert_eq!(
        broken(catalog.reconcile(&desired(), &Policy::default()).await),
        [Requirement::NotRecreated {
            first: first.clone(),
            now: None
        }]
    );
    assert_eq!(catalog.describe(&table()).await.unwrap(), None, "not made");
    // Someone else makes it again: a new id under the same name.
    made(dir.path()).await;
    let err = catalog.describe_for_write(&table()).await.unwrap_err();
    let CatalogError::Unwritable { broken, .. } = &err else {
        panic!("{err}");
    };
    let [
        Requirement::NotRecreated {
            first: was,
            now: Some(now),
        },
    ] = broken.as_slice()
    else {
        panic!("{err}");
    };
    assert_eq!(was, &first);
    assert_ne!(now, &first);
    let text = err.to_string();
    assert!(
        text.starts_with("main.bronze.orders: the table was recreated")
            && text.contains(&first)
            && text.contains(now.as_str()),
        "{text}"
    );
    // A catalog (a sink) that starts now writes to the new table.
    assert!(
        LocalDelta::new(dir.path())
            .describe_for_write(&table())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn local_a_wanted_column_zerobus_cannot_write_is_refused_at_planning_and_nothing_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = LocalDelta::new(dir.path());
    let mut wanted = desired();
    wanted.columns[1].name = "notiz_ä".into();
    let err = catalog
        .reconcile(&wanted, &Policy::default())
        .await
        .unwrap_err();
    let CatalogError::Refused {
        table: name,
        refusals,
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(name, TABLE);
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0].column.as_deref(), Some("notiz_ä"));
    assert_eq!(refusals[0].reason, RefusalReason::ColumnName);
    assert!(
        err.to_string()
            .contains("column notiz_ä: Zerobus accepts only ASCII letters, digits and underscores"),
        "{err}"
    );
    assert_eq!(catalog.describe(&table()).await.unwrap(), None, "not made");
}

fn unity(stub: &UcStub) -> UnityCatalog {
    let auth = Auth::OAuthM2M {
        client_id: UcStub::CLIENT_ID.into(),
        client_secret: Secret::new(UcStub::CLIENT_SECRET),
    };
    let mut config = UnityConfig::new(stub.url(), "warehouse-1", auth);
    config.retry_backoff = Duration::from_millis(5);
    UnityCatalog::new(config).unwrap()
}

/// A Unity Catalog table another writer made, and a backend to it.
async fn unity_table(columns: &[(&str, &str)]) -> (UcStub, UnityCatalog) {
    let stub = UcStub::start().await;
    stub.put_table(TABLE, columns);
    let uc = unity(&stub);
    (stub, uc)
}

/// `uc` refuses to write the table, and executes nothing: the requirements it says are broken.
async fn unity_refuses(stub: &UcStub, uc: &UnityCatalog) -> Vec<Requirement> {
    let described = broken(uc.describe_for_write(&table()).await);
    assert_eq!(
        broken(uc.reconcile(&desired(), &Policy::default()).await),
        described,
        "reconcile refuses the same"
    );
    assert_eq!(stub.executed(), Vec::<String>::new(), "nothing executed");
    described
}

#[tokio::test]
async fn unity_a_managed_delta_table_with_ascii_names_is_written() {
    let (_stub, uc) = unity_table(&[("id", "long")]).await;
    let live = uc.describe_for_write(&table()).await.unwrap().unwrap();
    assert_eq!(
        (
            live.table_type.as_deref(),
            live.data_source_format.as_deref()
        ),
        (Some("MANAGED"), Some("DELTA"))
    );
}

#[tokio::test]
async fn unity_an_external_or_non_delta_table_is_refused() {
    let (stub, uc) = unity_table(&[("id", "long")]).await;
    stub.set_kind(TABLE, "EXTERNAL", "DELTA");
    assert_eq!(
        unity_refuses(&stub, &uc).await,
        [Requirement::Managed {
            table_type: Some("EXTERNAL".into())
        }]
    );
    stub.set_kind(TABLE, "MANAGED", "ICEBERG");
    let broken = unity_refuses(&stub, &uc).await;
    assert_eq!(
        broken,
        [Requirement::Delta {
            format: Some("ICEBERG".into())
        }]
    );
    assert_eq!(
        broken[0].to_string(),
        "Zerobus writes only to managed Delta tables; this table's format is ICEBERG"
    );
}

#[tokio::test]
async fn unity_a_column_name_zerobus_cannot_write_is_refused() {
    let (stub, uc) = unity_table(&[("id", "long"), ("prix €", "double")]).await;
    assert_eq!(
        unity_refuses(&stub, &uc).await,
        [Requirement::ColumnName {
            column: "prix €".into()
        }]
    );
}

#[tokio::test]
async fn unity_catalog_managed_commits_in_the_properties_are_refused() {
    for feature in ["catalogManaged", "catalogOwned-preview"] {
        let (stub, uc) = unity_table(&[("id", "long")]).await;
        stub.set_properties(TABLE, &[(&format!("delta.feature.{feature}"), "supported")]);
        assert_eq!(
            unity_refuses(&stub, &uc).await,
            [Requirement::NoCatalogManagedCommits {
                feature: feature.into()
            }]
        );
    }
}

#[tokio::test]
async fn unity_a_recreated_table_is_refused_naming_both_ids() {
    let (stub, uc) = unity_table(&[("id", "long")]).await;
    let first = stub.table_id(TABLE).unwrap();
    assert!(uc.describe_for_write(&table()).await.unwrap().is_some());
    stub.recreate(TABLE);
    let now = stub.table_id(TABLE).unwrap();
    assert_ne!(first, now);
    let broken = unity_refuses(&stub, &uc).await;
    assert_eq!(
        broken,
        [Requirement::NotRecreated {
            first: first.clone(),
            now: Some(now.clone())
        }]
    );
    let text = broken[0].to_string();
    assert!(text.contains(&first) && text.contains(&now), "{text}");
    // Dropped: the sink does not make it again.
    stub.drop_table(TABLE);
    assert_eq!(
        unity_refuses(&stub, &uc).await,
        [Requirement::NotRecreated { first, now: None }]
    );
}
