//! Runs SQL statements against Zerobus tables from DataFusion, with a progress line while each
//! runs and a summary at the end: rows durable per table, and (against the zerobus-local this
//! example starts) the rows an independent Delta reader finds, duplicates counted by their
//! source positions.
//!
//! ```text
//! cd io-tokio/datafusion
//! cargo run --release --example sql -- --orders 1000000 \
//!   "CREATE EXTERNAL TABLE orders (order_id BIGINT NOT NULL, customer VARCHAR NOT NULL, amount DOUBLE NOT NULL)
//!      STORED AS ZEROBUS LOCATION 'main.bronze.orders'
//!      OPTIONS ('endpoint' '$ENDPOINT', 'catalog_root' '$TABLES', 'proxy' 'direct')" \
//!   "INSERT INTO orders SELECT * FROM '$ORDERS'"
//! ```
//!
//! - Without `--endpoint`, zerobus-local runs in this process on a loopback port, materializing
//!   its Delta tables under `--tables` (default: a temporary folder, removed at the end).
//!   With `--endpoint URL --tables DIR`, the statements go to a zerobus-local started apart
//!   (`cargo run -p zerobus-sink-testkit --bin zerobus-local -- --tables DIR`).
//! - `--orders N` first writes N order rows as four Parquet files (`$ORDERS`, a folder).
//! - In each statement `$ENDPOINT`, `$TABLES` and `$ORDERS` are replaced by those values.
//! - The catalog `main` resolves the tables that exist by their three-part name, so
//!   `INSERT INTO main.bronze.orders SELECT ...` needs no `CREATE` once the table is there.
//!
//! Exits non-zero, naming the statement, at the first that fails.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Int32Type, Int64Type};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_datafusion::{Sinks, ZerobusCatalog, ZerobusTableFactory, with_zerobus};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig, delta};
use zerobus_sink_tokio::{ProxyConfig, ZerobusConfig};

struct Args {
    endpoint: Option<String>,
    tables: Option<PathBuf>,
    orders: u64,
    statements: Vec<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        endpoint: None,
        tables: None,
        orders: 0,
        statements: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--endpoint" => a.endpoint = Some(value()?),
            "--tables" => a.tables = Some(PathBuf::from(value()?)),
            "--orders" => {
                let v = value()?;
                a.orders = v.parse().map_err(|e| format!("--orders {v}: {e}"))?;
            }
            "--help" | "-h" => return Err(String::new()),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            _ => a.statements.push(arg),
        }
    }
    if a.endpoint.is_some() && a.tables.is_none() {
        return Err("--endpoint needs --tables (the folder that zerobus-local serves)".into());
    }
    if a.statements.is_empty() && a.orders == 0 {
        return Err("no statement to run".into());
    }
    Ok(a)
}

const USAGE: &str = "usage: sql [--endpoint URL --tables DIR] [--orders N] STATEMENT...\n\
                     ($ENDPOINT, $TABLES and $ORDERS in a statement are replaced)";

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("sql: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(a).await {
        eprintln!("sql: {e}");
        std::process::exit(1);
    }
}

async fn run(a: Args) -> Result<(), String> {
    let scratch = tempfile::tempdir().map_err(|e| format!("a temporary folder: {e}"))?;
    let tables = a
        .tables
        .clone()
        .unwrap_or_else(|| scratch.path().join("tables"));
    // zerobus-local in this process, unless one was named.
    let (endpoint, emulator) = match &a.endpoint {
        Some(url) => (url.clone(), None),
        None => {
            let config = EmulatorConfig::new(scratch.path().join("wal"))
                .delta_root(tables.clone())
                .materialize_lag(Duration::from_millis(200));
            let emulator = Emulator::start(config)
                .await
                .map_err(|e| format!("starting zerobus-local: {e}"))?;
            (emulator.url(), Some(emulator))
        }
    };
    println!(
        "zerobus-local {endpoint}, tables under {}",
        tables.display()
    );

    let sinks = Sinks::default();
    let ctx = with_zerobus(
        SessionStateBuilder::new().with_default_features(),
        ZerobusTableFactory::new(sinks.clone()),
    )
    .enable_url_table();
    let config = ZerobusConfig::new(endpoint.clone()).proxy(ProxyConfig::Direct);
    let catalog = ZerobusCatalog::new("main", config, LocalDelta::new(&tables), sinks.clone());
    ctx.register_catalog("main", Arc::new(catalog));

    let orders = scratch.path().join("orders");
    if a.orders > 0 {
        let started = Instant::now();
        write_orders(&ctx, &orders, a.orders).await?;
        println!(
            "wrote {} order rows to {} in {:.1} s",
            a.orders,
            orders.display(),
            started.elapsed().as_secs_f64()
        );
    }

    let all = Instant::now();
    let mut written = HashSet::new();
    for (i, statement) in a.statements.iter().enumerate() {
        let sql = statement
            .replace("$ENDPOINT", &endpoint)
            .replace("$TABLES", &tables.display().to_string())
            .replace("$ORDERS", &format!("{}/", orders.display()));
        println!("[{}] {}", i + 1, one_line(&sql));
        let started = Instant::now();
        let batches = with_progress(&ctx, &sinks, &sql, started)
            .await
            .map_err(|e| format!("statement {} failed: {e}", i + 1))?;
        print_batches(&batches);
        println!("    done in {:.1} s", started.elapsed().as_secs_f64());
        for r in sinks.reports().await {
            written.extend(r.tables.iter().map(|t| t.name.clone()));
        }
    }

    println!("summary ({:.1} s):", all.elapsed().as_secs_f64());
    for r in sinks.reports().await {
        println!("  {r}");
    }
    if let Some(emulator) = &emulator {
        let mut names: Vec<_> = written.into_iter().collect();
        names.sort();
        for table in names {
            emulator.until_materialized(&table).await;
            let (batches, version) = delta::read_table(&tables, &table).await?;
            let (rows, distinct) = positions(&batches);
            println!(
                "  {table} as a Delta reader sees it (version {version}): {rows} rows, \
                 {distinct} distinct source positions, {} duplicates from replays",
                rows - distinct
            );
        }
    }
    Ok(())
}

/// Runs `sql` to its end, printing the sinks' progress every second meanwhile.
async fn with_progress(
    ctx: &SessionContext,
    sinks: &Sinks,
    sql: &str,
    started: Instant,
) -> Result<Vec<RecordBatch>, String> {
    let query = async { ctx.sql(sql).await?.collect().await };
    tokio::pin!(query);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last = (started, durable(sinks).await);
    loop {
        tokio::select! {
            done = &mut query => return done.map_err(|e| e.to_string()),
            _ = tick.tick() => {
                let rows = durable(sinks).await;
                let now = Instant::now();
                let rate = (rows - last.1) as f64 / (now - last.0).as_secs_f64().max(1e-3);
                println!(
                    "    {:>5.0} s  {rows:>12} rows durable  {rate:>10.0} rows/s",
                    started.elapsed().as_secs_f64()
                );
                last = (now, rows);
            }
        }
    }
}

/// Rows durable so far, over every sink.
async fn durable(sinks: &Sinks) -> u64 {
    sinks.reports().await.iter().map(|r| r.rows).sum()
}

/// `n` orders in four Parquet files under `dir`.
async fn write_orders(ctx: &SessionContext, dir: &Path, n: u64) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let per = n.div_ceil(4);
    for part in 0..4 {
        let (start, end) = (part * per, ((part + 1) * per).min(n));
        let file = dir.join(format!("part-{part}.parquet"));
        let sql = format!(
            "COPY (SELECT value AS order_id, \
                          'customer-' || CAST(value % 1000 AS VARCHAR) AS customer, \
                          CAST(value % 100000 AS DOUBLE) / 100 AS amount \
                   FROM range({start}, {end})) \
             TO '{}' STORED AS PARQUET",
            file.display()
        );
        ctx.sql(&sql)
            .await
            .map_err(|e| format!("writing {}: {e}", file.display()))?
            .collect()
            .await
            .map_err(|e| format!("writing {}: {e}", file.display()))?;
    }
    Ok(())
}

/// Rows, and distinct source positions (job, partition, offset), in a table's batches.
fn positions(batches: &[RecordBatch]) -> (u64, u64) {
    let mut seen = HashSet::new();
    let mut rows = 0;
    for b in batches {
        let cols = (
            b.column_by_name("_twg_source_topic"),
            b.column_by_name("_twg_source_partition"),
            b.column_by_name("_twg_source_start"),
            b.column_by_name("_twg_source_row"),
        );
        let (Some(topic), Some(partition), Some(start), Some(row)) = cols else {
            rows += b.num_rows() as u64;
            continue;
        };
        let topic = topic.as_string::<i32>();
        let partition = partition.as_primitive::<Int32Type>();
        let start = start.as_primitive::<Int64Type>();
        let row = row.as_primitive::<Int32Type>();
        for i in 0..b.num_rows() {
            rows += 1;
            seen.insert((
                topic.value(i).to_owned(),
                partition.value(i),
                start.value(i) + i64::from(row.value(i)),
            ));
        }
    }
    (rows, seen.len() as u64)
}

fn print_batches(batches: &[RecordBatch]) {
    let options = FormatOptions::default();
    for b in batches {
        let names: Vec<&str> = b
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        let formatters: Vec<_> = b
            .columns()
            .iter()
            .filter_map(|c| ArrayFormatter::try_new(c.as_ref(), &options).ok())
            .collect();
        for row in 0..b.num_rows() {
            let cells: Vec<String> = names
                .iter()
                .zip(&formatters)
                .map(|(n, f)| format!("{n} = {}", f.value(row)))
                .collect();
            println!("    {}", cells.join(", "));
        }
    }
}

fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}
