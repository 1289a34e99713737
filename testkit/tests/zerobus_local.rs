//! The `zerobus-local` binary's flags: help and version, a bad value refused naming the flag,
//! the environment fallbacks taken, and a real start on an ephemeral port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

fn zerobus_local() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zerobus-local"));
    for (k, _) in std::env::vars() {
        if k.starts_with("ZEROBUS_LOCAL_") {
            c.env_remove(k);
        }
    }
    c
}

#[test]
fn help_lists_every_flag_with_its_environment_variable() {
    let out = zerobus_local().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for (flag, env) in [
        ("--addr", "ZEROBUS_LOCAL_ADDR"),
        ("--wal-dir", "ZEROBUS_LOCAL_WAL_DIR"),
        ("--tables", "ZEROBUS_LOCAL_TABLES"),
        ("--materialize-lag-ms", "ZEROBUS_LOCAL_MATERIALIZE_LAG_MS"),
        ("--ack-latency-ms", "ZEROBUS_LOCAL_ACK_LATENCY_MS"),
        (
            "--max-messages-per-ack",
            "ZEROBUS_LOCAL_MAX_MESSAGES_PER_ACK",
        ),
        (
            "--max-streams-per-table",
            "ZEROBUS_LOCAL_MAX_STREAMS_PER_TABLE",
        ),
        ("--metrics-addr", "ZEROBUS_LOCAL_METRICS_ADDR"),
        ("--stream-limits", "ZEROBUS_LOCAL_STREAM_LIMITS"),
        ("--max-unacked-rows", "ZEROBUS_LOCAL_MAX_UNACKED_ROWS"),
        ("--service-windows", "ZEROBUS_LOCAL_SERVICE_WINDOWS"),
        ("--realistic", "ZEROBUS_LOCAL_REALISTIC"),
        ("--s3-endpoint", "ZEROBUS_LOCAL_S3_ENDPOINT"),
        ("--s3-region", "ZEROBUS_LOCAL_S3_REGION"),
    ] {
        assert!(
            help.contains(flag) && help.contains(env),
            "{flag} {env}:\n{help}"
        );
    }
    let version = zerobus_local().arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8(version.stdout).unwrap().trim(),
        format!("zerobus-local {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn a_bad_value_is_refused_naming_its_flag() {
    let out = zerobus_local()
        .args(["--ack-latency-ms", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--ack-latency-ms"), "{err}");
}

#[test]
fn an_object_store_root_it_cannot_use_is_refused_naming_the_flag() {
    for root in ["s3://", "s3:///prefix-without-bucket"] {
        let out = zerobus_local()
            .args(["--addr", "127.0.0.1:0", "--tables", root])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{root}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains("--tables") && err.contains("s3://bucket"),
            "{err}"
        );
    }
}

/// With moto on loopback (`ZEROBUS_TEST_S3_ENDPOINT`, set by `scripts/with-object-storage`):
/// `--tables s3://bucket/prefix` serves the tables there (the end-to-end run on S3 is in
/// `io-tokio/tests/local_s3.rs`); without it the test prints `SKIPPED` and passes.
#[test]
fn it_serves_tables_on_s3_where_the_flags_and_environment_say() {
    let Some(moto) = std::env::var("ZEROBUS_TEST_S3_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        println!(
            "SKIPPED it_serves_tables_on_s3_where_the_flags_and_environment_say: ZEROBUS_TEST_S3_ENDPOINT is not set"
        );
        return;
    };
    let host = moto.trim_start_matches("http://").trim_end_matches('/');
    let bucket = format!("zerobus-local-bin-{}", std::process::id());
    let mut http = TcpStream::connect(host).unwrap();
    write!(
        http,
        "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    http.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let dir = tempfile::tempdir().unwrap();
    let mut child = zerobus_local()
        .args(["--addr", "127.0.0.1:0"])
        .args(["--wal-dir", &dir.path().join("wal").display().to_string()])
        .args(["--tables", &format!("s3://{bucket}/tables")])
        .env("ZEROBUS_LOCAL_S3_ENDPOINT", &moto)
        .env("AWS_ACCESS_KEY_ID", "AKIDMOTO")
        .env("AWS_SECRET_ACCESS_KEY", "moto-secret-do-not-print")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Its first two lines, read aside so that a missing line fails the test instead of
    // hanging it.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let mut two = Vec::new();
        while two.len() < 2 {
            match lines.next() {
                Some(Ok(line)) => two.push(line),
                _ => break,
            }
        }
        let _ = tx.send(two);
    });
    let lines = rx.recv_timeout(std::time::Duration::from_secs(30));
    child.kill().unwrap();
    child.wait().unwrap();
    let lines = lines.expect("two lines within 30 s");
    let [first, second] = lines.as_slice() else {
        panic!("it printed {lines:?}")
    };
    assert!(first.starts_with("zerobus-local listening on"), "{first}");
    assert_eq!(
        *second,
        format!(
            "tables: Delta tables under s3://{bucket}/tables/ (catalog/schema/table); acked rows land there"
        )
    );
    assert!(!second.contains("moto-secret"));
}

#[test]
fn it_starts_where_the_environment_says() {
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("from-env");
    let mut child = zerobus_local()
        .env("ZEROBUS_LOCAL_ADDR", "127.0.0.1:0")
        .env("ZEROBUS_LOCAL_TABLES", &tables)
        .args(["--wal-dir", &dir.path().join("wal").display().to_string()])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let second = lines.next().unwrap().unwrap();
    let third = lines.next().unwrap().unwrap();
    let metrics = third
        .strip_prefix("metrics: http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{third}"));
    let mut http = TcpStream::connect(metrics).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: zerobus-local\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut scrape = String::new();
    http.read_to_string(&mut scrape).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    assert!(
        scrape.contains("\nzerobus_local_calls_total 0\n"),
        "{scrape}"
    );
    assert!(
        scrape.contains("# TYPE zerobus_local_rows_total counter"),
        "{scrape}"
    );
    assert!(
        first.starts_with("zerobus-local listening on http://127.0.0.1:"),
        "{first}"
    );
    let port: u16 = first["zerobus-local listening on http://127.0.0.1:".len()..]
        .split(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    assert_ne!(port, 0, "an ephemeral port was bound: {first}");
    assert!(second.contains(&tables.display().to_string()), "{second}");
}

/// Starts it, reads the line that says where it listens, sends `signal` (`-TERM`, `-INT`) at
/// once, and returns how it ended and what it said after that line.
#[cfg(unix)]
fn signalled_right_after_start(signal: &str) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = zerobus_local()
        .args(["--addr", "127.0.0.1:0"])
        .args(["--wal-dir", &dir.path().join("wal").display().to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("zerobus-local listening on"), "{first}");
    let sent = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    (status, rest)
}

/// SIGTERM (what a container runtime sends to stop it) stops it as Ctrl-C does: gracefully,
/// exit 0, with the summary of what it served printed after it materialized its log.
#[cfg(unix)]
#[test]
fn sigterm_stops_it_gracefully() {
    let (status, rest) = signalled_right_after_start("-TERM");
    assert!(
        status.success(),
        "SIGTERM ended it with {status}; it said:\n{rest}"
    );
    assert!(rest.contains("calls"), "no summary after SIGTERM:\n{rest}");
}

/// A stop asked for the moment it says where it listens (a script or a test that starts it,
/// uses it briefly and stops it) is still graceful: the handlers are installed before that
/// line. Before, a SIGINT in that instant took the default action, killing it before it
/// materialized its log (found by the Python package's tests: acked rows missing from the
/// table). Five times, since a race is what it guards; the `kill` command takes about a
/// millisecond to start, so this catches the old race only rarely. The Python suite's
/// `test_kill9_mid_stream_...`, which signals from its own process in microseconds, failed
/// in about one run in three before the fix and in none of 10 after.
#[cfg(unix)]
#[test]
fn sigint_right_after_it_says_where_it_listens_is_still_graceful() {
    for _ in 0..5 {
        let (status, rest) = signalled_right_after_start("-INT");
        assert!(status.success(), "SIGINT ended it with {status}:\n{rest}");
        assert!(rest.contains("calls"), "no summary after SIGINT:\n{rest}");
    }
}
