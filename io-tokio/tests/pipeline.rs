//! A pipeline written the way the README shows it: a source of three partitions whose records
//! fan out to two tables (orders, and two order lines per order), one `ZerobusSink`, positions
//! committed through the `SourceTracker`. In the middle, the local Zerobus crashes for three
//! seconds: long enough for every stream to spend its retry budget and hand its batches back,
//! which the sink's resubmission policy carries through. Checked for real, on disk:
//! - every commit is an unbroken durable run: when a partition's position is committed, every
//!   record up to it is in both tables' write-ahead logs;
//! - a partition's commits never go back;
//! - at the end each partition is committed to its last record, nothing was handed to the
//!   pipeline as failed, and every record is durable in both tables (duplicates from replays
//!   counted, at-least-once).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use zerobus_sink::{Confirmation, FailedBatch, FailureReason, Raw, SourceTracker};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig, wal};
use zerobus_sink_tokio::{Confirmer, IsolatedRows, ResubmitPolicy, Sink, TableDef, ZerobusSink};

const ORDERS: &str = "main.shop.orders";
const LINES: &str = "main.shop.order_lines";
const PARTITIONS: u32 = 3;
const CHUNKS: i64 = 30;
const PER_CHUNK: i64 = 50;

fn schema(column: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("partition", DataType::Int64, false),
        Field::new(column, DataType::Int64, false),
    ]))
}

/// The records `[start, start + n)` of a partition as one table's batch (`per` rows each).
fn batch(schema: &SchemaRef, partition: u32, start: i64, n: i64, per: i64) -> RecordBatch {
    let rows = n * per;
    let p: ArrayRef = Arc::new(Int64Array::from(vec![i64::from(partition); rows as usize]));
    let offsets: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..rows).map(|i| start + i / per),
    ));
    RecordBatch::try_new(schema.clone(), vec![p, offsets]).unwrap()
}

/// (partition, source offset) -> rows of it durable in `table`'s log.
fn durable(path: &std::path::Path) -> BTreeMap<(u32, i64), u32> {
    let mut out = BTreeMap::new();
    // The emulator may be appending while we read (a torn, not yet acked tail is left out);
    // any other failure to read is a failure of the test, never an empty log.
    let batches = wal::read_complete(path).unwrap_or_else(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Vec::new()
        } else {
            panic!("{}: {e}", path.display())
        }
    });
    for b in batches {
        let col = |i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
        for (p, o) in col(0).values().iter().zip(col(1).values()) {
            *out.entry((*p as u32, *o)).or_default() += 1;
        }
    }
    out
}

#[derive(Default)]
struct Books {
    tracker: SourceTracker,
    commits: Vec<(u32, i64)>,
    failed: Vec<String>,
    violations: Vec<String>,
}

/// The pipeline's confirmer: every confirmation goes through the tracker; a moved position is
/// checked against the logs on disk before it counts as committed.
#[derive(Clone)]
struct Pipeline {
    books: Arc<Mutex<Books>>,
    logs: [std::path::PathBuf; 2],
}

impl Confirmer<Raw> for Pipeline {
    fn confirmed(&mut self, _table: &str, c: Confirmation<Raw>) {
        let mut books = self.books.lock().unwrap();
        let moved = books.tracker.confirm(c);
        let Some(position) = moved.unwrap_or_else(|e| panic!("{e}")) else {
            return;
        };
        let (p, upto) = (position.partition, position.offset);
        let [orders, lines] = [durable(&self.logs[0]), durable(&self.logs[1])];
        for offset in 0..=upto {
            let (o, l) = (
                orders.get(&(p, offset)).copied().unwrap_or(0),
                lines.get(&(p, offset)).copied().unwrap_or(0),
            );
            if o < 1 || l < 2 {
                books.violations.push(format!(
                    "committed {p}@{upto} while record {offset} had {o} order and {l} order-line rows on disk"
                ));
                break;
            }
        }
        if let Some(&(_, last)) = books.commits.iter().rev().find(|(q, _)| *q == p)
            && upto <= last
        {
            books
                .violations
                .push(format!("partition {p} went from {last} to {upto}"));
        }
        books.commits.push((p, upto));
    }

    fn failed(&mut self, table: &str, b: FailedBatch<Raw, RecordBatch>, why: &FailureReason) {
        // A real pipeline fails (or parks the batch); here it is a finding.
        self.books.lock().unwrap().failed.push(format!(
            "{table}: {} rows at {:?}: {why}",
            b.batch.num_rows(),
            b.token.position()
        ));
    }
    fn isolated(&mut self, table: &str, rows: IsolatedRows<Raw>) {
        self.books.lock().unwrap().failed.push(format!(
            "{table}: {} rows isolated at {:?}: {:?}",
            rows.batch.num_rows(),
            rows.position,
            rows.faults
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_commits_only_unbroken_durable_runs_through_a_crash_of_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let wal_dir = dir.path().join("wal");
    let config = move || EmulatorConfig::new(&wal_dir).ack_latency(Duration::from_millis(5));
    let emu = Emulator::start(config()).await.unwrap();
    let addr = emu.addr();
    let (orders_schema, lines_schema) = (schema("order"), schema("order_of_line"));
    let pipeline = Pipeline {
        books: Arc::default(),
        logs: [emu.wal_path(ORDERS), emu.wal_path(LINES)],
    };
    let sink_config = common::config(&emu).resubmit(ResubmitPolicy {
        max_attempts: 20,
        backoff: Duration::from_millis(250),
    });
    let tables = vec![
        TableDef::new(ORDERS, orders_schema.clone()).streams(2),
        TableDef::new(LINES, lines_schema.clone()).streams(2),
    ];
    let mut sink = ZerobusSink::<Raw>::start(sink_config, tables, pipeline.clone()).unwrap();
    let (orders, lines) = (sink.table(ORDERS).unwrap(), sink.table(LINES).unwrap());
    let mut emu = Some(emu);
    let mut restarted = None;
    for chunk in 0..CHUNKS {
        if chunk == CHUNKS / 3 {
            // The service crashes and comes back three seconds later (on the same address,
            // serving the same logs); the source keeps sending meanwhile, as far as the windows
            // let it.
            let down = emu.take().unwrap();
            // Crash with some of what was sent already durable (and the rest in flight).
            down.until(|s| s.rows >= 10 * PER_CHUNK as u64).await;
            let config = config.clone();
            restarted = Some(tokio::spawn(async move {
                down.kill().await;
                tokio::time::sleep(Duration::from_secs(3)).await;
                Emulator::bind(addr, config()).await.unwrap()
            }));
        }
        for p in 0..PARTITIONS {
            let start = chunk * PER_CHUNK;
            let last = start + PER_CHUNK - 1;
            let [t_orders, t_lines] = pipeline
                .books
                .lock()
                .unwrap()
                .tracker
                .read("shop", p, last, 2)
                .unwrap()
                .try_into()
                .unwrap();
            let b = batch(&orders_schema, p, start, PER_CHUNK, 1);
            let _receipt = sink.send(orders, b, t_orders).await.unwrap();
            let b = batch(&lines_schema, p, start, PER_CHUNK, 2);
            let _receipt = sink.send(lines, b, t_lines).await.unwrap();
        }
    }
    sink.flush()
        .await
        .expect("every batch durable after the resends");
    let report = sink.close(Duration::from_secs(10)).await;
    let back = restarted.unwrap().await.unwrap();
    assert!(
        back.stats().recovered_messages > 0,
        "the restart served the earlier log"
    );
    let books = pipeline.books.lock().unwrap();
    assert!(books.violations.is_empty(), "{:#?}", books.violations);
    assert!(books.failed.is_empty(), "{:#?}", books.failed);
    for p in 0..PARTITIONS {
        assert_eq!(
            books.tracker.committed("shop", p),
            Some(CHUNKS * PER_CHUNK - 1),
            "partition {p} committed to its last record"
        );
    }
    let resubmitted: u64 = report.tables.iter().map(|t| t.resubmitted).sum();
    assert!(
        report.metrics.retry_budgets_spent > 0 && resubmitted > 0,
        "the outage must exhaust the streams' retries and the sink resubmit: {report}"
    );
    let (orders, lines) = (durable(&pipeline.logs[0]), durable(&pipeline.logs[1]));
    let mut duplicates = 0;
    for p in 0..PARTITIONS {
        for offset in 0..CHUNKS * PER_CHUNK {
            let (o, l) = (orders[&(p, offset)], lines[&(p, offset)]);
            assert!(o >= 1 && l >= 2, "{p}@{offset}: {o} orders, {l} lines");
            duplicates += u64::from(o - 1) + u64::from(l - 2);
        }
    }
    let partitions: BTreeSet<u32> = books.commits.iter().map(|(p, _)| *p).collect();
    assert_eq!(partitions.len(), PARTITIONS as usize);
    println!(
        "{} commits; {resubmitted} batches resubmitted; {} retry budgets spent; {duplicates} duplicate rows from replays",
        books.commits.len(),
        report.metrics.retry_budgets_spent
    );
}
