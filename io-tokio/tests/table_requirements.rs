//! A provisioned sink meets a table Zerobus cannot write (PROTOCOL.md E): the catalog refuses it
//! when it describes the table, and `send` hands the batch back naming the table and the
//! requirement, before any stream of it opens. Over loopback TCP against zerobus-local, with
//! real Delta tables made by the local catalog backend.

mod common;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use common::{Recorder, config};
use zerobus_sink::{Raw, Token};
use zerobus_sink_catalog::local::{LocalDelta, TABLE_TYPE_PROPERTY};
use zerobus_sink_catalog::{DesiredTable, Policy, Role, TableCatalog, TableRef};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};
use zerobus_sink_tokio::{Provisioning, SendError, Sink, TableDef, ZerobusSink};

const TABLE: &str = "main.bronze.events";

/// Events `start .. start + n`: an id and a name; with `amount`, a third column (a drift).
fn events(start: i64, n: i64, amount: bool) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + n));
    let names: ArrayRef = Arc::new(StringArray::from_iter_values(
        (start..start + n).map(|i| format!("event-{i}")),
    ));
    let mut columns = vec![("id", ids), ("name", names)];
    if amount {
        columns.push((
            "amount",
            Arc::new(Int64Array::from_iter_values(start..start + n)) as ArrayRef,
        ));
    }
    RecordBatch::try_from_iter(columns).unwrap()
}

fn table() -> TableRef {
    TableRef::parse(TABLE).unwrap()
}

/// Makes the table as a sink would for `events`, through a catalog of its own.
async fn make_table(root: &std::path::Path) {
    let desired =
        DesiredTable::from_arrow(table(), &events(0, 1, false).schema(), None, Role::Standard)
            .unwrap();
    LocalDelta::new(root)
        .reconcile(&desired, &Policy::default())
        .await
        .unwrap();
}

struct Rig {
    dir: tempfile::TempDir,
    emulator: Emulator,
}

impl Rig {
    async fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let emulator = Emulator::start(
            EmulatorConfig::new(dir.path().join("wal")).delta_root(dir.path().join("tables")),
        )
        .await
        .unwrap();
        // Tables change under the tests' hands: nothing is appended to them meanwhile.
        emulator.hold_materialization(true);
        Rig { dir, emulator }
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("tables")
    }

    fn sink(&self, recorder: &Recorder) -> ZerobusSink<Raw> {
        let def = TableDef::new(TABLE, events(0, 1, false).schema());
        let provisioning = Provisioning::new(LocalDelta::new(self.root()), "test-sink");
        ZerobusSink::start_provisioned(
            config(&self.emulator),
            vec![def],
            recorder.clone(),
            provisioning,
        )
        .unwrap()
    }
}

/// What the catalog said, from a batch `send` handed back as unreconcilable.
fn refusal(err: &SendError<Raw>) -> String {
    let SendError::Unreconcilable { table, columns, .. } = err else {
        panic!("expected the schema refused by the catalog, got {err}");
    };
    assert_eq!(table, TABLE);
    assert_eq!(columns.len(), 1, "{err}");
    columns[0].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_is_not_managed_is_refused_before_any_stream_opens() {
    let rig = Rig::new().await;
    make_table(&rig.root()).await;
    LocalDelta::new(rig.root())
        .set_properties(
            &table(),
            [(TABLE_TYPE_PROPERTY.to_owned(), "EXTERNAL".to_owned())],
        )
        .await
        .unwrap();
    let recorder = Recorder::default();
    let mut sink = rig.sink(&recorder);
    let handle = sink.table(TABLE).unwrap();
    let err = sink
        .send(handle, events(0, 10, false), Token::raw("events", 0, 9))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&err),
        "the catalog refused: main.bronze.events: Zerobus writes only to managed Delta tables; \
         this table is EXTERNAL"
    );
    let (batch, token) = err.into_parts().unwrap();
    assert_eq!((batch.num_rows(), token.position().offset), (10, 9));
    let report = sink.close(Duration::from_secs(5)).await;
    assert_eq!(report.tables[0].schemas_refused, 1, "{report}");
    assert_eq!(rig.emulator.stats().calls, 0, "no stream was opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_recreated_under_the_sink_is_refused_at_its_next_schema_naming_both_ids() {
    let rig = Rig::new().await;
    let recorder = Recorder::default();
    let mut sink = rig.sink(&recorder);
    let handle = sink.table(TABLE).unwrap();
    drop(
        sink.send(handle, events(0, 10, false), Token::raw("events", 0, 9))
            .await
            .unwrap(),
    );
    sink.flush().await.unwrap();
    let catalog = LocalDelta::new(rig.root());
    let first = catalog
        .describe(&table())
        .await
        .unwrap()
        .unwrap()
        .table_id
        .unwrap();
    // Dropped and made again by someone else while the sink runs.
    std::fs::remove_dir_all(catalog.location(&table())).unwrap();
    make_table(&rig.root()).await;
    let now = catalog
        .describe(&table())
        .await
        .unwrap()
        .unwrap()
        .table_id
        .unwrap();
    let calls = rig.emulator.stats().calls;
    // The drift asks the catalog again: it refuses the recreated table, naming both ids.
    let err = sink
        .send(handle, events(10, 10, true), Token::raw("events", 0, 19))
        .await
        .unwrap_err();
    let said = refusal(&err);
    assert!(
        said.starts_with("the catalog refused: main.bronze.events: the table was recreated")
            && said.contains(&first)
            && said.contains(&now),
        "{said}"
    );
    let report = sink.close(Duration::from_secs(5)).await;
    assert_eq!(
        (report.rows, report.tables[0].schemas_refused),
        (10, 1),
        "{report}"
    );
    assert_eq!(
        rig.emulator.stats().calls,
        calls,
        "no stream opened for the refused schema"
    );
}
