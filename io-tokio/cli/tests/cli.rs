//! The `zerobus-sinkctl` binary, run as a process: `check` (derived values, the catalog's plan,
//! refusals naming the key), `ingest` of an Arrow IPC file and a Parquet file into zerobus-local
//! (rows read back from the Delta table), `status` against a running sink's endpoint.

// The adapter's test rig (the emulator, a recorder, the orders schema), shared with its tests.
#[path = "../../tests/common.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use arrow_array::RecordBatch;
use common::{Recorder, orders, schema};
use zerobus_sink::{Raw, Token};
use zerobus_sink_catalog::TableRef;
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_testkit::emulator::Emulator;
use zerobus_sink_tokio::{Sink, TableDef, ZerobusSink, ops};

const TABLE: &str = "main.bronze.orders";

/// Runs the binary off the runtime's threads (the test's emulator keeps serving meanwhile).
async fn run(args: Vec<String>) -> Output {
    run_with(args, None).await
}

/// The same, with `SSL_CERT_FILE` (the platform store's override) set or cleared.
async fn run_with(args: Vec<String>, cert_file: Option<PathBuf>) -> Output {
    run_logged(args, cert_file, None).await
}

/// The same, with `RUST_LOG` set (or cleared).
async fn run_logged(
    args: Vec<String>,
    cert_file: Option<PathBuf>,
    log: Option<&'static str>,
) -> Output {
    tokio::task::spawn_blocking(move || {
        // A folder of its own: what the binary writes by default (an ingest's state file)
        // lands there, not in the package.
        let cwd = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_zerobus-sinkctl"));
        command.current_dir(cwd.path());
        match log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        command
            .args(&args)
            .env_remove("ZEROBUS_SINK_OPS_URL")
            .env_remove("SSL_CERT_DIR");
        for proxy in [
            "grpc_proxy",
            "GRPC_PROXY",
            "https_proxy",
            "HTTPS_PROXY",
            "http_proxy",
            "HTTP_PROXY",
        ] {
            command.env_remove(proxy);
        }
        match cert_file {
            Some(path) => command.env("SSL_CERT_FILE", path),
            None => command.env_remove("SSL_CERT_FILE"),
        };
        command.output().expect("the binary runs")
    })
    .await
    .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn write_config(dir: &Path, endpoint: &str, root: &Path, columns: bool) -> PathBuf {
    let columns = if columns {
        "columns = [\n  { name = \"order_id\", type = \"long\", nullable = false },\n  \
         { name = \"customer\", type = \"string\", nullable = false },\n  \
         { name = \"amount\", type = \"double\", nullable = false },\n]\n"
    } else {
        ""
    };
    // `coalesce_bytes = 0`: one wire message per batch, as a test below counts them.
    let path = dir.join("sink.toml");
    std::fs::write(
        &path,
        format!(
            "[sink]\nendpoint = \"{endpoint}\"\nname = \"cli\"\ncoalesce_bytes = 0\n[catalog]\nbackend = \"local\"\n\
             root = \"{}\"\n[shutdown]\ndrain = \"10s\"\n[[table]]\nname = \"{TABLE}\"\n\
             streams = 1\n{columns}",
            root.display()
        ),
    )
    .unwrap();
    path
}

/// Once materialized, the table holds `rows` distinct order ids, each once.
async fn landed_once(emu: &Emulator, root: &Path, rows: usize) {
    emu.until_materialized(TABLE).await;
    let (batches, _) = LocalDelta::new(root)
        .read_table(&TableRef::parse(TABLE).unwrap())
        .await
        .unwrap();
    let ids = common::ids(&batches);
    assert_eq!(ids.len(), rows);
    assert!(ids.values().all(|n| *n == 1), "each row once");
}

fn arrow_file(path: &Path, batches: &[RecordBatch]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = arrow_ipc::writer::FileWriter::try_new(file, &schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
}

fn parquet_file(path: &Path, batches: &[RecordBatch]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema(), None).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_prints_what_the_file_derives_and_what_the_catalog_would_do() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tables");
    let config = write_config(dir.path(), "http://127.0.0.1:1", &root, true);
    let out = run(vec!["check".into(), config.display().to_string()]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("config ok"), "{stdout}");
    assert!(
        stdout.contains("raw sink -> http://127.0.0.1:1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("window per stream 1000 batches"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{TABLE}  standard  1 stream(s)")),
        "{stdout}"
    );
    assert!(stdout.contains("catalog: local"), "{stdout}");
    assert!(stdout.contains(&format!("reconcile {TABLE}:")), "{stdout}");
    assert!(stdout.contains("create table ("), "{stdout}");
    // Planned, not executed: the table is still absent.
    let live = LocalDelta::new(&root);
    use zerobus_sink_catalog::TableCatalog;
    assert!(
        live.describe(&TableRef::parse(TABLE).unwrap())
            .await
            .unwrap()
            .is_none()
    );

    // A refused file: exit 1, the key named.
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[sink]\nendpoint = \"http://x\"\n[window]\nmax_rows = 0\n",
    )
    .unwrap();
    let out = run(vec!["check".into(), bad.display().to_string()]).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("window.max_rows"), "{stderr}");
    // A file naming an environment variable that is not set: --offline checks the file alone
    // and passes; online it is refused, and never called ok first.
    let unset = dir.path().join("unset.toml");
    std::fs::write(
        &unset,
        "[sink]\nendpoint = \"http://x\"\n[credentials]\nkind = \"bearer\"\n\
         token_env = \"ZEROBUS_SINKCTL_TEST_UNSET\"\n[[table]]\nname = \"main.a.b\"\n",
    )
    .unwrap();
    let out = run(vec![
        "check".into(),
        unset.display().to_string(),
        "--offline".into(),
    ])
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("file ok (offline"), "{stdout}");
    let out = run(vec!["check".into(), unset.display().to_string()]).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(" ok"),
        "called ok, then refused:\n{stdout}"
    );
    assert!(stderr.contains("credentials.token_env"), "{stderr}");
    // Usage errors: exit 2.
    let out = run(vec!["check".into()]).await;
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_loads_ipc_and_parquet_files_into_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let (emu, root) = common::with_tables(&dir, |c| c).await;
    let config = write_config(dir.path(), &emu.url(), &root, false);
    let ipc = dir.path().join("a.arrow");
    arrow_file(&ipc, &[orders(0, 300), orders(300, 200)]);
    let pq = dir.path().join("b.parquet");
    parquet_file(&pq, &[orders(500, 700)]);
    let out = run(vec![
        "ingest".into(),
        config.display().to_string(),
        "--table".into(),
        TABLE.into(),
        "--batch-rows".into(),
        "256".into(),
        ipc.display().to_string(),
        pq.display().to_string(),
    ])
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "{TABLE}: 1200 rows durable, 0 not durable, 0 refused"
        )),
        "{stdout}"
    );
    landed_once(&emu, &root, 1200).await;
    // The Parquet file went in 256-row batches: 3 of them, after the IPC file's 2.
    assert_eq!(emu.stats().messages, 5, "{:?}", emu.stats());

    // A table the file does not list: refused, named.
    let out = run(vec![
        "ingest".into(),
        config.display().to_string(),
        "--table".into(),
        "main.bronze.nope".into(),
        ipc.display().to_string(),
    ])
    .await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("main.bronze.nope") && stderr.contains(TABLE),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_reads_csv_and_json_lines_serves_metrics_and_refuses_other_formats() {
    let dir = tempfile::tempdir().unwrap();
    let (emu, root) = common::with_tables(&dir, |c| c).await;
    let config = write_config(dir.path(), &emu.url(), &root, true);
    let csv = dir.path().join("a.csv");
    let mut rows = String::from("order_id,customer,amount\n");
    for i in 0..150 {
        rows.push_str(&format!("{i},c{i},{i}.5\n"));
    }
    std::fs::write(&csv, rows).unwrap();
    let json = dir.path().join("b.jsonl");
    let mut rows = String::new();
    for i in 150..270 {
        rows.push_str(&format!(
            "{{\"order_id\":{i},\"customer\":\"c{i}\",\"amount\":{i}.25}}\n"
        ));
    }
    std::fs::write(&json, rows).unwrap();
    let ingest = |files: Vec<&Path>| {
        let mut args = vec![
            "ingest".to_owned(),
            config.display().to_string(),
            "--table".into(),
            TABLE.into(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
        ];
        args.extend(files.iter().map(|f| f.display().to_string()));
        run_logged(args, None, Some("zerobus_sink_tokio=info"))
    };
    let out = ingest(vec![&csv, &json]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // RUST_LOG is honoured: the sink's INFO line for the table it created.
    assert!(stderr.contains("table reconciled"), "{stderr}");
    // The operator endpoint was served; without a terminal, progress comes as lines, the
    // last one at the end.
    assert!(
        stderr.contains("operator endpoint: http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("progress: 270 rows read, 270 durable"),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!(
            "{TABLE}: 270 rows durable, 0 not durable, 0 refused"
        )),
        "{stdout}"
    );
    landed_once(&emu, &root, 270).await;

    // A Parquet file whose columns are not those the file declares: refused before anything
    // is sent, naming both.
    let narrow = dir.path().join("d.parquet");
    let ids: arrow_array::ArrayRef = std::sync::Arc::new(arrow_array::Int64Array::from(vec![1, 2]));
    let batch = RecordBatch::try_from_iter([("order_id", ids)]).unwrap();
    let file = std::fs::File::create(&narrow).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let out = ingest(vec![&narrow]).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("d.parquet: its columns (order_id Int64) are not those")
            && stderr.contains("(order_id Int64, customer Utf8, amount Float64)"),
        "{stderr}"
    );

    // Neither Parquet, Arrow, CSV nor JSON: refused before anything is sent, the formats named.
    let other = dir.path().join("c.txt");
    std::fs::write(&other, "order_id customer amount\n1 a 2.0\n").unwrap();
    let out = ingest(vec![&other]).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("c.txt")
            && stderr.contains("CSV")
            && stderr.contains("newline-delimited JSON"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_numbers_refused_rows_within_their_file_and_writes_them_to_the_reject_file() {
    let dir = tempfile::tempdir().unwrap();
    let (emu, root) = common::with_tables(&dir, |c| c).await;
    // Rows over 200 bytes are bad rows, isolated (the rest of their batch lands).
    // A 300-character customer makes a row of 316 bytes.
    let config = dir.path().join("sink.toml");
    std::fs::write(
        &config,
        format!(
            "[sink]\nendpoint = \"{}\"\nname = \"cli\"\nmax_row_bytes = 200\n[catalog]\n\
             backend = \"local\"\nroot = \"{}\"\n[shutdown]\ndrain = \"10s\"\n[[table]]\n\
             name = \"{TABLE}\"\nstreams = 1\nbad_rows = \"isolate\"\ncolumns = [\n  \
             {{ name = \"order_id\", type = \"long\", nullable = false }},\n  \
             {{ name = \"customer\", type = \"string\", nullable = false }},\n  \
             {{ name = \"amount\", type = \"double\", nullable = false }},\n]\n",
            emu.url(),
            root.display()
        ),
    )
    .unwrap();
    let csv = |name: &str, ids: std::ops::Range<i64>, long: &[i64]| {
        let path = dir.path().join(name);
        let mut rows = String::from("order_id,customer,amount\n");
        for i in ids {
            let customer = if long.contains(&i) {
                "x".repeat(300)
            } else {
                format!("c{i}")
            };
            rows.push_str(&format!("{i},{customer},1.5\n"));
        }
        std::fs::write(&path, rows).unwrap();
        path
    };
    let a = csv("a.csv", 0..5, &[]);
    // b.csv's rows 3 and 7 (from 0) are too large; in batches of 4, row 7 is the last batch's
    // fourth row.
    let b = csv("b.csv", 5..15, &[8, 12]);
    let rejects = dir.path().join("rejects.jsonl");
    let out = run(vec![
        "ingest".into(),
        config.display().to_string(),
        "--table".into(),
        TABLE.into(),
        "--batch-rows".into(),
        "4".into(),
        "--rejects".into(),
        rejects.display().to_string(),
        a.display().to_string(),
        b.display().to_string(),
    ])
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "{TABLE}: 13 rows durable, 0 not durable, 2 refused"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("2 refused rows written to"), "{stdout}");
    assert!(stderr.contains("b.csv: row 3: 316 bytes"), "{stderr}");
    assert!(stderr.contains("b.csv: row 7: 316 bytes"), "{stderr}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&rejects)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, (row, id)) in lines.iter().zip([(3, 8), (7, 12)]) {
        assert!(line["file"].as_str().unwrap().ends_with("b.csv"), "{line}");
        assert_eq!(line["row"], row, "{line}");
        assert_eq!(line["values"]["order_id"], id, "{line}");
        assert!(
            line["faults"][0].as_str().unwrap().contains("316 bytes"),
            "{line}"
        );
    }
    landed_once(&emu, &root, 13).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_prints_a_running_sinks_health_tree() {
    let prometheus = ops::install_prometheus().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let emu = common::emulator(&dir, |c| c).await;
    let table = TableDef::new(TABLE, schema()).streams(1);
    let mut sink =
        ZerobusSink::<Raw>::start(common::config(&emu), vec![table], Recorder::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(ops::serve(listener, sink.observer(), prometheus));
    let id = sink.table(TABLE).unwrap();
    let _receipt = sink
        .send(id, orders(0, 10), Token::raw("orders", 0, 9))
        .await
        .unwrap();
    sink.flush().await.unwrap();

    let out = run(vec!["status".into(), url.clone()]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("raw sink: healthy"), "{stdout}");
    assert!(stdout.contains(&format!("  {TABLE}: ok")), "{stdout}");
    assert!(stdout.contains("    stream 0: live, last ack "), "{stdout}");
    let out = run(vec!["status".into(), url.clone(), "--json".into()]).await;
    let tree: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(tree["tables"][0]["name"], TABLE);

    sink.close(Duration::from_secs(10)).await;
    let out = run(vec!["status".into(), url]).await;
    assert_eq!(out.status.code(), Some(1), "a closed sink is not healthy");
    server.abort();
    // Nothing listening: exit 2.
    let out = run(vec!["status".into(), "http://127.0.0.1:9".into()]).await;
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_platforms_root_certificates_are_trusted() {
    let (cert, private) = common::self_signed();
    let dir = tempfile::tempdir().unwrap();
    let (emu, root) = common::with_tables(&dir, |c| {
        c.tls(cert.clone().into_bytes(), private.into_bytes())
    })
    .await;
    assert!(emu.url().starts_with("https://"));
    let config = write_config(dir.path(), &emu.url(), &root, false);
    // Fail fast when the certificate is not trusted.
    let fast = std::fs::read_to_string(&config).unwrap().replace(
        "[shutdown]",
        "[retry]\ninitial_backoff = \"50ms\"\nmax_attempts = 1\n[resubmit]\nmax_attempts = 0\n\
         [timeouts]\nmin_residency = \"100ms\"\n[shutdown]",
    );
    std::fs::write(&config, fast).unwrap();
    let ipc = dir.path().join("a.arrow");
    arrow_file(&ipc, &[orders(0, 100)]);
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert).unwrap();
    let args = vec![
        "ingest".into(),
        config.display().to_string(),
        "--table".into(),
        TABLE.into(),
        ipc.display().to_string(),
    ];
    // The certificate in the platform's store (SSL_CERT_FILE stands for it): trusted.
    let out = run_with(args.clone(), Some(ca)).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("100 rows durable"), "{stdout}");
    // Not in it (and not in the file): the handshake fails, the rows are handed back.
    let out = run_with(args, None).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("0 rows durable, 100 not durable"),
        "{stdout}"
    );
}

/// The state file's committed offset of the load's first file, once it records one.
fn committed(state: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(state).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["files"][0]["committed"].as_i64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_killed_mid_file_resumes_and_lands_every_row_exactly_once() {
    const ROWS: i64 = 200_000;
    let dir = tempfile::tempdir().unwrap();
    // Acks 50 ms after a message arrives, and a window of 2,000 rows: about 40,000 rows/s,
    // so the load is mid-file for seconds, with rows acked (and in flight) at every instant.
    let (emu, root) = common::with_tables(&dir, |c| c.ack_latency(Duration::from_millis(50))).await;
    let config = write_config(dir.path(), &emu.url(), &root, false);
    let mut toml = std::fs::read_to_string(&config).unwrap();
    toml.push_str("[window]\nmax_rows = 2000\n");
    std::fs::write(&config, toml).unwrap();
    let pq = dir.path().join("orders.parquet");
    parquet_file(&pq, &[orders(0, ROWS)]);
    let state = dir.path().join("orders.state.json");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec![
            "ingest".into(),
            config.display().to_string(),
            "--table".into(),
            TABLE.into(),
            "--batch-rows".into(),
            "500".into(),
            "--state".into(),
            state.display().to_string(),
        ];
        v.extend(extra.iter().map(|s| (*s).to_owned()));
        v.push(pq.display().to_string());
        v
    };

    // The first run, killed with SIGKILL once a tenth of the file is durable.
    let mut child = Command::new(env!("CARGO_BIN_EXE_zerobus-sinkctl"))
        .args(args(&[]))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while committed(&state).is_none_or(|c| c < ROWS / 10) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the load ended before it could be killed"
        );
        assert!(waited.elapsed() < Duration::from_secs(120), "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let at_kill = committed(&state).unwrap();
    assert!(at_kill < ROWS - 1, "killed mid-file: {at_kill}");

    // Another file list: refused, naming the state file, nothing sent.
    let other = dir.path().join("other.parquet");
    parquet_file(&other, &[orders(ROWS, 10)]);
    let mut wrong = args(&[]);
    wrong.push(other.display().to_string());
    let out = run(wrong).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("orders.state.json"), "{stderr}");

    // The rerun (resume is the default): the rest, and nothing twice.
    let out = run(args(&["--publication-wait", "1s"])).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("resuming from"), "{stderr}");
    assert!(stdout.contains("(every file durable)"), "{stdout}");
    println!("{stdout}");
    landed_once(&emu, &root, ROWS as usize).await;

    // A third run has nothing to do.
    let out = run(args(&[])).await;
    let (stdout, _) = text(&out);
    assert!(
        out.status.success() && stdout.contains("nothing to do"),
        "{stdout}"
    );
    landed_once(&emu, &root, ROWS as usize).await;
    println!("killed at offset {at_kill}; {stdout}");
}
