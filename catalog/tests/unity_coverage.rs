//! The coverage store on Unity Catalog (ADR 0011) end to end against the loopback UC/Statement
//! stub (testkit): the coverage table created by the backend's DDL, saves appended with
//! `INSERT`, loads read with `SELECT` (`JSON_ARRAY`, `INLINE`, in chunks), the stub parsing every
//! statement with sqlparser and checking each value against the column it goes to. Its rules:
//! union-merged across sinks and restarts, lag never lead.
#![cfg(feature = "unity")]

use std::time::Duration;

use zerobus_sink::{Coverage, CoverageRange};
use zerobus_sink_catalog::coverage::{CoverageStore, coverage_table};
use zerobus_sink_catalog::unity::{Auth, Secret, UnityCatalog, UnityConfig};
use zerobus_sink_catalog::{AnyCatalog, CatalogError, SinkId, TableCatalog, TableRef};
use zerobus_sink_testkit::uc_stub::UcStub;

const RAW: &str = "main.raw.orders";
const COVERAGE: &str = "main.raw.orders__twg_coverage";

fn raw() -> TableRef {
    TableRef::parse(RAW).unwrap()
}

/// A backend of its own for each sink (and each restart): nothing is shared but the service.
fn catalog(stub: &UcStub) -> UnityCatalog {
    let auth = Auth::OAuthM2M {
        client_id: UcStub::CLIENT_ID.into(),
        client_secret: Secret::new(UcStub::CLIENT_SECRET),
    };
    let mut config = UnityConfig::new(stub.url(), "warehouse-1", auth);
    config.retry_backoff = Duration::from_millis(5);
    UnityCatalog::new(config).unwrap()
}

fn ranges(r: &[(&str, u32, i64, i64)]) -> Coverage {
    Coverage::from_durable(
        r.iter().map(|&(topic, partition, start, end)| {
            CoverageRange::new(topic, partition, start, end)
        }),
    )
}

fn inserts(stub: &UcStub) -> usize {
    stub.executed()
        .iter()
        .filter(|s| s.starts_with("INSERT INTO"))
        .count()
}

#[tokio::test]
async fn coverage_is_union_merged_across_two_sinks_on_unity_catalog() {
    let stub = UcStub::start().await;
    let (a, b) = (SinkId("sink-a".into()), SinkId("sink-b".into()));
    let mut store_a = CoverageStore::open(catalog(&stub), &raw(), a.clone())
        .await
        .unwrap();
    assert_eq!(store_a.table(), &coverage_table(&raw()).unwrap());
    assert_eq!(store_a.saved(), &Coverage::new());
    // Made by the backend's own DDL, as a managed Delta table with the reserved columns.
    let live = catalog(&stub)
        .describe(store_a.table())
        .await
        .unwrap()
        .expect("the coverage table exists");
    assert_eq!(live.table_type.as_deref(), Some("MANAGED"));
    for column in [
        "sink",
        "_twg_source_topic",
        "_twg_source_partition",
        "_twg_source_start",
        "_twg_source_end",
    ] {
        assert!(live.column(column).is_some(), "{column}");
    }
    let mut store_b = CoverageStore::open(catalog(&stub), &raw(), b.clone())
        .await
        .unwrap();

    // Two sinks save concurrently, overlapping each other; one sink's topic needs escaping.
    let for_a = ranges(&[
        ("orders", 0, 0, 99),
        ("orders", 0, 200, 249),
        ("it's", 1, 0, 9),
    ]);
    let for_b = ranges(&[("orders", 0, 50, 199), ("orders", 2, 5, 5)]);
    let (saved_a, saved_b) = tokio::join!(store_a.save(&for_a), store_b.save(&for_b));
    assert_eq!((saved_a.unwrap(), saved_b.unwrap()), (3, 2));
    assert_eq!(inserts(&stub), 2, "one INSERT (one commit) per save");
    assert_eq!(stub.row_count(COVERAGE), 5);

    // Every sink's union; each sink's own; the same whichever store asks.
    let mut union = for_a.clone();
    union.merge(&for_b);
    assert_eq!(store_a.load(None).await.unwrap(), union);
    assert_eq!(store_b.load(None).await.unwrap(), union);
    assert_eq!(union.gaps("orders", 0, 0, 249), vec![]);
    assert_eq!(store_b.load(Some(&a)).await.unwrap(), for_a);
    assert_eq!(store_a.load(Some(&b)).await.unwrap(), for_b);
    let nobody = SinkId("sink-c".into());
    assert_eq!(store_a.load(Some(&nobody)).await.unwrap(), Coverage::new());
}

#[tokio::test]
async fn coverage_survives_a_restart_on_unity_catalog() {
    let stub = UcStub::start().await;
    // Results in chunks of two rows: a load fetches every chunk.
    stub.set_result_chunk_rows(2);
    let a = SinkId("sink-a".into());
    let mut covered = ranges(&[("orders", 0, 0, 99)]);
    {
        // Through the run-time choice of backend, as a configured pipeline opens it.
        let uc = AnyCatalog::Unity(Box::new(catalog(&stub)));
        let mut store = CoverageStore::open(uc, &raw(), a.clone()).await.unwrap();
        assert_eq!(store.save(&covered).await.unwrap(), 1);
        assert_eq!(store.save(&covered).await.unwrap(), 0, "nothing new");
        assert_eq!(inserts(&stub), 1, "nothing new, no statement");
        // Grown on both sides of a gap, and on other partitions: only the new pieces.
        covered.merge(&ranges(&[
            ("orders", 0, 100, 149),
            ("orders", 0, 200, 249),
            ("orders", 1, 0, 9),
            ("orders", 3, 7, 7),
        ]));
        assert_eq!(store.save(&covered).await.unwrap(), 4);
        // A save whose response is lost: the client retries, the rows are appended twice.
        stub.lose_next_statement_response();
        covered.merge(&ranges(&[("orders", 0, 250, 299)]));
        assert_eq!(store.save(&covered).await.unwrap(), 1);
        assert_eq!(stub.row_count(COVERAGE), 7, "the lost save ran twice");
    }

    // A restart: a new backend and a new store read back what the previous one wrote.
    let reopened = CoverageStore::open(catalog(&stub), &raw(), a.clone())
        .await
        .unwrap();
    assert_eq!(reopened.saved(), &covered, "duplicates merged away");
    assert_eq!(reopened.saved().gaps("orders", 0, 0, 299), vec![(150, 199)]);
    assert_eq!(reopened.load(None).await.unwrap(), covered);
    // Nothing left to save after the restart.
    let mut reopened = reopened;
    assert_eq!(reopened.save(&covered).await.unwrap(), 0);
    assert_eq!(stub.row_count(COVERAGE), 7);
    // Every statement the stub ran is one it parsed: the creation, the saves, the loads.
    let executed = stub.executed();
    assert!(
        executed
            .iter()
            .filter(|s| s.starts_with("SELECT"))
            .all(|s| s.contains("FROM `main`.`raw`.`orders__twg_coverage`")),
        "{executed:?}"
    );
}

#[tokio::test]
async fn coverage_on_unity_catalog_refuses_to_lead() {
    let stub = UcStub::start().await;
    let a = SinkId("sink-a".into());
    let mut store = CoverageStore::open(catalog(&stub), &raw(), a.clone())
        .await
        .unwrap();
    let first = ranges(&[("orders", 0, 0, 99)]);
    assert_eq!(store.save(&first).await.unwrap(), 1);

    // A save the warehouse refuses records nothing as saved: neither the store nor the table
    // claims it, and the next save sends it again.
    let mut grown = first.clone();
    grown.merge(&ranges(&[("orders", 0, 100, 199)]));
    stub.fail_next(&[400]);
    let err = store.save(&grown).await.unwrap_err();
    assert!(err.to_string().contains(COVERAGE), "{err}");
    assert_eq!(store.saved(), &first);
    assert_eq!(store.load(None).await.unwrap(), first);
    assert_eq!(store.save(&grown).await.unwrap(), 1);
    assert_eq!(store.load(None).await.unwrap(), grown);

    // A partition beyond the column's INT is refused before anything is sent, not wrapped.
    let huge = ranges(&[("orders", u32::MAX, 0, 1)]);
    let before = inserts(&stub);
    let err = store.save(&huge).await.unwrap_err();
    assert!(
        err.to_string().contains(COVERAGE) && err.to_string().contains("4294967295"),
        "{err}"
    );
    assert_eq!(inserts(&stub), before);
    assert_eq!(store.saved(), &grown);

    // A row no sink could have written (another writer's, with a negative partition) fails
    // the load, naming the table and the partition: never read as another partition.
    stub.execute_sql(
        "INSERT INTO `main`.`raw`.`orders__twg_coverage` (`sink`, `_twg_emit_ts`, \
         `_twg_source_topic`, `_twg_source_partition`, `_twg_source_start`, `_twg_source_end`, \
         `_twg_source_row`) VALUES ('sink-x', current_timestamp(), 'orders', -1, 0, 10, 0)",
    )
    .unwrap();
    let err = store.load(None).await.unwrap_err();
    assert!(
        matches!(&err, CatalogError::Delta { table, .. } if table == COVERAGE)
            && err.to_string().contains("partition -1"),
        "{err}"
    );
    // The stub itself refuses what a warehouse would: a NULL in a NOT NULL column, a string in
    // an integer column (so a save the catalog got wrong would fail, not pass).
    assert!(
        stub.execute_sql(
            "INSERT INTO `main`.`raw`.`orders__twg_coverage` (`sink`) VALUES ('sink-x')"
        )
        .unwrap_err()
        .contains("NOT_NULL")
    );
    assert!(
        stub.execute_sql(
            "INSERT INTO `main`.`raw`.`orders__twg_coverage` (`sink`, `_twg_emit_ts`, \
             `_twg_source_topic`, `_twg_source_partition`, `_twg_source_start`, \
             `_twg_source_end`, `_twg_source_row`) VALUES ('x', current_timestamp(), 'o', '0', \
             0, 1, 0)"
        )
        .unwrap_err()
        .contains("DATATYPE_MISMATCH")
    );
}
