//! Shared setup of the end-to-end tests: order rows, a recording confirmer, an emulator.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use zerobus_sink::{
    Confirmation, FailedBatch, FailureReason, PoolSizing, Raw, RetryPolicy, SinkConfig,
};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::primary_raw::validate;
use zerobus_sink_catalog::{
    DesiredTable, Policy, PrimaryRawProof, PrimaryRawShape, Role, TableCatalog, TableRef,
};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig};
use zerobus_sink_tokio::{
    Confirmer, IsolatedRows, ProxyConfig, ResubmitPolicy, TableDef, ZerobusConfig,
};

pub const TABLE: &str = "main.bronze.orders";

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
    ]))
}

/// Orders `start .. start + n`.
pub fn orders(start: i64, n: i64) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + n));
    let customers: ArrayRef = Arc::new(StringArray::from_iter_values(
        (start..start + n).map(|i| format!("customer-{}", i % 97)),
    ));
    let amounts: ArrayRef = Arc::new(Float64Array::from_iter_values(
        (start..start + n).map(|i| (i % 1000) as f64 / 10.0),
    ));
    RecordBatch::try_new(schema(), vec![ids, customers, amounts]).expect("valid batch")
}

/// The order ids in `batches`, with how often each occurs.
pub fn ids(batches: &[RecordBatch]) -> BTreeMap<i64, u32> {
    let mut out = BTreeMap::new();
    for b in batches {
        let col = b
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("order_id is Int64");
        for v in col.values() {
            *out.entry(*v).or_default() += 1;
        }
    }
    out
}

/// What the confirmer saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Committed source offsets (the last order id of each batch), in confirmation order.
    pub committed: Vec<i64>,
    /// Failed batches: (first order id of the rows handed back, rows, reason).
    pub failed: Vec<(Option<i64>, usize, String)>,
    /// The table each failed batch was handed back for, as the confirmer was told.
    pub failed_tables: Vec<String>,
    /// Isolated rows: the table, the batch's position, the rows, and each fault in words.
    pub isolated: Vec<(String, i64, RecordBatch, Vec<String>)>,
}

/// A confirmer that records into shared state.
#[derive(Debug, Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Seen>>);

impl Recorder {
    pub fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap()
    }
}

impl Confirmer<Raw> for Recorder {
    fn confirmed(&mut self, _table: &str, confirmation: Confirmation<Raw>) {
        self.seen().committed.push(confirmation.commit().offset);
    }
    fn failed(
        &mut self,
        table: &str,
        batch: FailedBatch<Raw, RecordBatch>,
        reason: &FailureReason,
    ) {
        let first = batch
            .batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .and_then(|c| c.values().first().copied());
        let mut seen = self.seen();
        seen.failed_tables.push(table.to_owned());
        seen.failed
            .push((first, batch.batch.num_rows(), reason.to_string()));
    }
    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        let faults = rows.faults.iter().map(ToString::to_string).collect();
        self.seen()
            .isolated
            .push((table.to_owned(), rows.position.offset, rows.batch, faults));
    }
}

/// Collects what the sink logs.
#[derive(Clone, Debug, Default)]
pub struct Logs(pub Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub fn lines(&self, level: &str, containing: &str) -> usize {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines()
            .filter(|l| l.contains(level) && l.contains(containing))
            .count()
    }
}

impl Logs {
    /// Captures what this thread logs at `level` and above while the guard lives (use a
    /// current-thread runtime: the driver and its connections then log on it).
    pub fn capture(level: tracing::Level) -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// zerobus-local over the catalog root `dir/tables` (materializing every 20 ms), and the root.
pub async fn with_tables(
    dir: &tempfile::TempDir,
    f: impl FnOnce(EmulatorConfig) -> EmulatorConfig,
) -> (Emulator, std::path::PathBuf) {
    let root = dir.path().join("tables");
    let config = EmulatorConfig::new(dir.path().join("wal"))
        .delta_root(root.clone())
        .materialize_lag(Duration::from_millis(20));
    let emulator = Emulator::start(f(config)).await.expect("emulator starts");
    (emulator, root)
}

/// A self-signed certificate for 127.0.0.1: its PEM and its key's.
pub fn self_signed() -> (String, String) {
    let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    (key.cert.pem(), key.signing_key.serialize_pem())
}

pub async fn emulator(
    dir: &tempfile::TempDir,
    f: impl FnOnce(EmulatorConfig) -> EmulatorConfig,
) -> Emulator {
    Emulator::start(f(EmulatorConfig::new(dir.path().join("wal"))))
        .await
        .expect("emulator starts")
}

/// A config for the emulator, with fast retries so that failure tests take seconds.
pub fn config(emulator: &Emulator) -> ZerobusConfig {
    let core = SinkConfig {
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(400),
            ..RetryPolicy::default()
        },
        ..SinkConfig::default()
    };
    // Directly, whatever proxy the machine's environment names (tests/proxy.rs tests them).
    ZerobusConfig::new(emulator.url())
        .proxy(ProxyConfig::Direct)
        .core(core)
        .resubmit(ResubmitPolicy {
            max_attempts: 3,
            backoff: Duration::from_millis(100),
        })
}

/// [`config`] with every batch its own wire message (`coalesce_bytes(0)`), for the tests that
/// bound what one message holds: with small batches going together, how many messages a run
/// takes, and how many rows each, depends on timing. Faults are placed by rows
/// ([`Count::Rows`](zerobus_sink_testkit::emulator::Count)) and run with the default.
pub fn per_batch(emulator: &Emulator) -> ZerobusConfig {
    config(emulator).coalesce_bytes(0)
}

pub fn table(slots: u16) -> TableDef {
    TableDef::new(TABLE, schema()).sizing(PoolSizing::fixed(slots))
}

/// The raw table of the primary-raw and recovery tests.
pub const RAW: &str = "main.raw.orders";

pub fn raw() -> TableRef {
    TableRef::parse(RAW).unwrap()
}

/// `zerobus-local` over a catalog root (materializing every 50 ms), with the raw table created
/// for the primary-raw role through the local catalog.
#[derive(Debug)]
pub struct RawRig {
    pub dir: tempfile::TempDir,
    pub emulator: Emulator,
    pub catalog: LocalDelta,
}

impl RawRig {
    pub async fn new() -> RawRig {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tables");
        let emulator = Emulator::start(
            EmulatorConfig::new(dir.path().join("wal"))
                .delta_root(root.clone())
                .materialize_lag(Duration::from_millis(50)),
        )
        .await
        .unwrap();
        let catalog = LocalDelta::new(root);
        let desired = DesiredTable::from_arrow(raw(), &schema(), None, Role::PrimaryRaw).unwrap();
        catalog
            .reconcile(&desired, &Policy::default())
            .await
            .unwrap();
        RawRig {
            dir,
            emulator,
            catalog,
        }
    }

    /// The proof that the raw table meets the role, validated now.
    pub async fn proof(&self) -> PrimaryRawProof {
        validate(&self.catalog, &raw(), PrimaryRawShape::DeltaReadable)
            .await
            .expect("the table was created for the role")
    }
}

/// One sample of the scrape: its name, labels and value.
#[derive(Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the Prometheus text format (the subset the exporter writes: no escapes in values).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let labels = rest
                        .trim_end_matches('}')
                        .split("\",")
                        .filter(|kv| !kv.is_empty())
                        .map(|kv| {
                            let (k, v) = kv.split_once('=').expect("label=value");
                            (k.to_owned(), v.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), BTreeMap::new()),
            };
            Sample {
                name,
                labels,
                value: value.parse().expect("a number"),
            }
        })
        .collect()
}

/// The sum of a metric over the series of one table.
pub fn sum(samples: &[Sample], name: &str, table: &str) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && s.labels.get("table").map(String::as_str) == Some(table))
        .map(|s| s.value)
        .sum()
}
