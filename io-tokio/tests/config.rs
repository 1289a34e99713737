//! The TOML file: docs/configuration.md's example (every documented key) parsed and followed
//! into the sink's values; every kind of refusal with its key path; secrets only by
//! environment variable and never repeated; a sink started from a file against zerobus-local
//! with the local catalog, its rows read back from the Delta table.

mod common;

use std::time::Duration;

use arrow_array::RecordBatch;
use common::{Recorder, orders, schema};
use zerobus_sink::{Confirmation, Derived, FailedBatch, FailureReason, Raw, Token};
use zerobus_sink_catalog::local::LocalDelta;
use zerobus_sink_catalog::{PrimaryRawShape, TableCatalog, TableRef};
use zerobus_sink_tokio::settings::{ConfigFileError, SinkFile};
use zerobus_sink_tokio::{
    BadRows, Compression, Confirmer, Credentials, IsolatedRows, ProxyConfig, Sink, ZerobusSink,
};

/// A derived-lane confirmer, to be refused a raw file.
struct NoCoverage;

impl Confirmer<Derived> for NoCoverage {
    fn confirmed(&mut self, _: &str, _: Confirmation<Derived>) {}
    fn failed(&mut self, _: &str, _: FailedBatch<Derived, RecordBatch>, _: &FailureReason) {}
    fn isolated(&mut self, _: &str, _: IsolatedRows<Derived>) {}
}

/// The example block of docs/configuration.md.
fn documented() -> String {
    let doc = include_str!("../../docs/configuration.md");
    let start = doc.find("```toml\n").expect("the doc has a toml block") + "```toml\n".len();
    let end = start + doc[start..].find("```").expect("the block ends");
    doc[start..end].to_owned()
}

fn env(name: &str) -> Option<String> {
    (name == "DATABRICKS_CLIENT_SECRET").then(|| "s3cr3t-value".to_owned())
}

#[test]
fn every_documented_key_reaches_the_sink() {
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), b"-----BEGIN CERTIFICATE-----\n").unwrap();
    let text = documented().replace("/etc/ssl/private-ca.pem", &ca.path().display().to_string());
    let file = SinkFile::parse(&text).unwrap();
    let c = file.config_with_env(env).unwrap();
    assert_eq!(
        c.endpoint,
        "https://1234567890123456.zerobus.us-west-2.cloud.databricks.com"
    );
    assert_eq!(c.application_name.as_deref(), Some("orders-etl"));
    assert_eq!(c.compression, Compression::Zstd);
    assert_eq!(c.core.max_open_streams, 64);
    assert_eq!(c.core.max_message_bytes, 2_097_152);
    assert_eq!(c.max_row_bytes, 10_420_224);
    assert_eq!(c.handoffs, 64);
    assert_eq!(c.coalesce_bytes, 131_072);
    assert_eq!(
        c.tls_ca_pem.as_deref(),
        Some(&b"-----BEGIN CERTIFICATE-----\n"[..])
    );
    assert_eq!(c.primary_raw_recheck, Duration::from_secs(300));
    assert!(c.native_roots);
    assert_eq!(
        c.proxy,
        ProxyConfig::Url {
            url: "http://user:pass@proxy.corp:3128".into(),
            no_proxy: "localhost, .internal.corp".into()
        }
    );
    assert!(
        !format!("{c:?}").contains("user:pass"),
        "the proxy's credentials are redacted"
    );
    match &c.credentials {
        Credentials::OAuth(o) => {
            assert_eq!(o.unity_catalog_url, "https://dbc-1234.cloud.databricks.com");
            assert_eq!(o.workspace_id, "1234567890123456");
            assert_eq!(o.client_id, "6f0c-service-principal");
            assert_eq!(o.client_secret.expose(), "s3cr3t-value");
        }
        other => panic!("oauth expected, got {other:?}"),
    }
    assert!(
        !format!("{c:?}").contains("s3cr3t-value"),
        "Debug redacts the secret"
    );
    let w = c.core.window;
    assert_eq!(
        (w.max_batches, w.max_bytes, w.max_rows),
        (1000, 536_870_912, 60_000)
    );
    let r = c.core.retry;
    assert_eq!(r.initial_backoff, Duration::from_secs(2));
    assert_eq!(r.max_backoff, Duration::from_secs(60));
    assert_eq!((r.multiplier, r.jitter, r.max_attempts), (2.0, 0.2, 4));
    assert_eq!(r.drain_budget, Duration::from_millis(500));
    assert_eq!(c.resubmit.max_attempts, 3);
    assert_eq!(c.resubmit.backoff, Duration::from_secs(5));
    assert_eq!(c.core.ack_timeout, Duration::from_secs(60));
    assert_eq!(c.core.open_timeout, Duration::from_secs(30));
    assert_eq!(c.core.reconcile_timeout, Duration::from_secs(120));
    assert_eq!(c.core.min_residency, Duration::from_secs(10));
    assert_eq!(file.drain(), Duration::from_secs(30));
    assert_eq!(file.lane(), "raw");

    let catalog = file.catalog_with_env(env).unwrap().expect("a catalog");
    assert_eq!(catalog.backend(), "unity");
    assert_eq!(
        catalog.primary_raw_shape(),
        PrimaryRawShape::IcebergCompatV2
    );

    // The refunds table lists no columns: its schema comes from the pipeline.
    let tables = file
        .tables(|n| (n == "main.bronze.refunds").then(schema))
        .unwrap();
    assert_eq!(tables.len(), 2);
    let (orders_def, primary_raw) = &tables[0];
    assert!(!primary_raw);
    assert_eq!(orders_def.spec.name, "main.bronze.orders");
    assert_eq!(orders_def.bad_rows, BadRows::Isolate);
    assert!(orders_def.conversions.nested_to_json);
    assert!(!orders_def.conversions.zoned_to_utc_wall_time);
    let fields: Vec<_> = orders_def
        .schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().to_string(), f.is_nullable()))
        .collect();
    assert_eq!(
        fields,
        [
            ("order_id".into(), "Int64".into(), false),
            ("customer".into(), "Utf8".into(), true),
            ("amount".into(), "Decimal128(12, 2)".into(), true),
        ]
    );

    let effective = file.effective().unwrap();
    assert_eq!(effective.catalog, Some("unity"));
    let pools: Vec<_> = effective
        .tables
        .iter()
        .map(|(name, role, pool)| (name.as_str(), *role, pool.slots))
        .collect();
    // 150 MB/s at 100 MB/s per stream: 2 streams; 20,000 rows/s at 15,000: 2.
    assert_eq!(
        pools,
        [
            ("main.bronze.orders", "standard", 2),
            ("main.bronze.refunds", "standard", 2)
        ]
    );
    assert_eq!(effective.window, (1000, 536_870_912, 60_000));
}

/// The minimal file, with `extra` appended, parsed.
fn with(extra: &str) -> Result<SinkFile, ConfigFileError> {
    SinkFile::parse(&format!(
        "[sink]\nendpoint = \"http://127.0.0.1:1\"\n{extra}"
    ))
}

fn refused(extra: &str) -> (String, String) {
    match with(extra) {
        Err(ConfigFileError::Invalid { key, reason }) => (key, reason),
        other => panic!("expected a refusal for {extra:?}, got {other:?}"),
    }
}

#[test]
fn every_refusal_names_its_key_and_reason() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "batch_size = 10\n",
            "sink.batch_size",
            "unknown field `batch_size`",
        ),
        (
            "[window]\nmax_row = 1\n",
            "window.max_row",
            "unknown field `max_row`",
        ),
        ("[sink2]\nx = 1\n", "sink2", "unknown field `sink2`"),
        (
            "max_open_streams = \"two\"\n",
            "sink.max_open_streams",
            "invalid type",
        ),
        (
            "[retry]\ninitial_backoff = \"soon\"\n",
            "retry.initial_backoff",
            "is not a duration",
        ),
        (
            "compression = \"brotli\"\n",
            "sink.compression",
            "unknown variant `brotli`",
        ),
        (
            "lane = \"cooked\"\n",
            "sink.lane",
            "unknown variant `cooked`",
        ),
        ("[window]\nmax_rows = 0\n", "window.max_rows", "at least 1"),
        ("[retry]\njitter = 2.0\n", "retry.jitter", "within [0, 1]"),
        (
            "max_open_streams = 0\n",
            "sink.max_open_streams",
            "at least 1",
        ),
        ("handoffs = 0\n", "sink.handoffs", "at least 1"),
        (
            "[timeouts]\nack = \"0s\"\n",
            "timeouts.ack",
            "longer than zero",
        ),
        (
            "[timeouts]\nmin_residency = \"1s\"\n",
            "timeouts.min_residency",
            "at least retry.initial_backoff",
        ),
        (
            "[[table]]\nname = \"orders\"\n",
            "table[0].name",
            "catalog.schema.table",
        ),
        (
            "[[table]]\nname = \"main.a.b\"\n[[table]]\nname = \"main.a.b\"\n",
            "table[1].name",
            "listed twice",
        ),
        (
            "[[table]]\nname = \"main.a.b\"\nstreams = 2\npeak_mb_per_sec = 10.0\n",
            "table[0].streams",
            "not both",
        ),
        (
            "[[table]]\nname = \"main.a.b\"\nstreams = 0\n",
            "table[0].streams",
            "at least 1",
        ),
        (
            "[[table]]\nname = \"main.a.b\"\npeak_rows_per_sec = -1.0\n",
            "table[0].peak_rows_per_sec",
            "positive",
        ),
        (
            "[[table]]\nname = \"main.a.b\"\nbad_rows = \"drop\"\n",
            "table[0].bad_rows",
            "unknown variant `drop`",
        ),
        (
            "[[table]]\nname = \"main.a.b\"\nrole = \"primary_raw\"\n",
            "table[0].role",
            "needs a [catalog]",
        ),
        (
            "[catalog]\nbackend = \"local\"\nroot = \"/tmp/x\"\n[[table]]\nname = \"main.a.b\"\nkeyed = true\n",
            "table[0].keyed",
            "cannot be provisioned",
        ),
        (
            "[[table]]\nname = \"main.a.b\"\ncolumns = [{ name = \"id\", type = \"lng\" }]\n",
            "table[0].columns[0].type",
            "lng",
        ),
        (
            "[[table]]\nname = \"main.a.b\"\ncolumns = []\n",
            "table[0].columns",
            "no column",
        ),
        (
            "[catalog]\nbackend = \"oracle\"\n",
            "catalog.backend",
            "unknown variant `oracle`",
        ),
        (
            "[catalog]\nbackend = \"unity\"\nworkspace_url = \"http://x\"\nwarehouse_id = \"w\"\nclient_id = \"c\"\n",
            "catalog",
            "client_id with client_secret_env",
        ),
        (
            "[[table]]\nstreams = 1\n",
            "table[0]",
            "missing field `name`",
        ),
        (
            "no_proxy = \"x\"\n",
            "sink.no_proxy",
            "only with sink.proxy",
        ),
        (
            "proxy = \"https://u:p@proxy:1\"\n",
            "sink.proxy",
            "only http://",
        ),
        // The absurd: out of every range the service or the sink can use.
        (
            "max_message_bytes = 1\n",
            "sink.max_message_bytes",
            "1 is out of range: from 65536 to 10485760",
        ),
        ("max_row_bytes = 0\n", "sink.max_row_bytes", "out of range"),
        (
            "max_message_bytes = 131072\ncoalesce_bytes = 262144\n",
            "sink.coalesce_bytes",
            "of at most sink.max_message_bytes",
        ),
        (
            "[timeouts]\nack = \"1000y\"\n",
            "timeouts.ack",
            "out of range: from 0ns to one day",
        ),
        (
            "[shutdown]\ndrain = \"2days\"\n",
            "shutdown.drain",
            "out of range",
        ),
        // A rule across two keys is reported under both (not under a third the file never set).
        (
            "[retry]\ninitial_backoff = \"30s\"\nmax_backoff = \"5s\"\n",
            "retry.initial_backoff, retry.max_backoff",
            "the first backoff (30s) is longer than the longest (5s)",
        ),
    ];
    for (extra, key, reason) in cases {
        let (k, r) = refused(extra);
        assert_eq!(&k, key, "{extra:?}: {r}");
        assert!(r.contains(reason), "{extra:?}: {k}: {r}");
    }
    // A refusal made after parsing names the line too, as serde's do.
    for (extra, line) in [
        ("max_message_bytes = 1\n", 3),
        (
            "[retry]\ninitial_backoff = \"30s\"\nmax_backoff = \"5s\"\n",
            4,
        ),
        (
            "[[table]]\nname = \"main.a.b\"\n[[table]]\nname = \"main.a.c\"\nstreams = 0\n",
            7,
        ),
    ] {
        let (key, reason) = refused(extra);
        assert!(
            reason.ends_with(&format!("(line {line})")),
            "{extra:?}: {key}: {reason}"
        );
    }
    // A file that lists no table starts no sink and is checked for none.
    let none = with("").unwrap();
    let e = none.effective().unwrap_err();
    assert!(
        matches!(&e, ConfigFileError::Invalid { key, reason } if key == "table" && reason.contains("no [[table]]")),
        "{e}"
    );
    // The endpoint: missing, and without a scheme.
    let missing = SinkFile::parse("[sink]\nlane = \"raw\"\n").unwrap_err();
    assert!(
        matches!(&missing, ConfigFileError::Invalid { key, reason } if key == "sink" && reason.contains("missing field `endpoint`")),
        "{missing}"
    );
    let scheme = SinkFile::parse("[sink]\nendpoint = \"zerobus.example\"\n").unwrap_err();
    assert!(matches!(&scheme, ConfigFileError::Invalid { key, .. } if key == "sink.endpoint"));
    // The line of a type error is named.
    let (_, reason) = refused("\n\nmax_open_streams = \"two\"\n");
    assert!(reason.contains("(line 5)"), "{reason}");
}

#[test]
fn secrets_come_from_the_environment_and_are_never_repeated() {
    for (section, key) in [
        (
            "[credentials]\nkind = \"bearer\"\ntoken = \"dapi-inline-secret\"\n",
            "credentials.token",
        ),
        (
            "[credentials]\nkind = \"oauth\"\nworkspace_url = \"u\"\nworkspace_id = \"1\"\nclient_id = \"c\"\nclient_secret = \"dapi-inline-secret\"\n",
            "credentials.client_secret",
        ),
    ] {
        let err = with(section).unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("dapi-inline-secret"), "{shown}");
        assert!(
            matches!(&err, ConfigFileError::Invalid { key: k, reason } if k == key && reason.contains("_env")),
            "{shown}"
        );
    }
    let file = with("[credentials]\nkind = \"bearer\"\ntoken_env = \"ZEROBUS_TOKEN\"\n").unwrap();
    let unset = file.config_with_env(|_| None).unwrap_err();
    assert!(
        matches!(&unset, ConfigFileError::Env { key, variable } if key == "credentials.token_env" && variable == "ZEROBUS_TOKEN"),
        "{unset}"
    );
    let empty = file.config_with_env(|_| Some(String::new())).unwrap_err();
    assert!(matches!(empty, ConfigFileError::Env { .. }));
    let c = file
        .config_with_env(|n| (n == "ZEROBUS_TOKEN").then(|| "tok-from-env".into()))
        .unwrap();
    assert!(matches!(&c.credentials, Credentials::Bearer(s) if s.expose() == "tok-from-env"));
    assert!(!format!("{c:?}").contains("tok-from-env"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_started_from_a_file_lands_rows_in_a_table_its_catalog_created() {
    let dir = tempfile::tempdir().unwrap();
    let (emu, root) = common::with_tables(&dir, |c| c).await;
    let text = format!(
        r#"
[sink]
endpoint = "{}"
name = "from-file"
proxy = "direct"
[catalog]
backend = "local"
root = "{}"
[retry]
initial_backoff = "50ms"
[timeouts]
min_residency = "100ms"
[[table]]
name = "main.bronze.orders"
streams = 1
"#,
        emu.url(),
        root.display()
    );
    // A derived sink refuses a raw file, naming the lanes.
    let lane = ZerobusSink::<Derived>::from_toml(&text, |_| Some(schema()), NoCoverage)
        .await
        .unwrap_err();
    assert!(
        matches!(
            lane,
            ConfigFileError::Lane {
                file: "raw",
                sink: "derived"
            }
        ),
        "{lane}"
    );
    // No schema for the table: named.
    let none = ZerobusSink::<Raw>::from_toml(&text, |_| None, Recorder::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&none, ConfigFileError::Invalid { key, .. } if key == "table[0].columns"),
        "{none}"
    );

    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::from_toml(&text, |_| Some(schema()), recorder.clone())
        .await
        .unwrap();
    let id = sink.table("main.bronze.orders").unwrap();
    for b in 0..5 {
        let token = Token::raw("orders", 0, b * 100 + 99);
        let _receipt = sink.send(id, orders(b * 100, 100), token).await.unwrap();
    }
    sink.flush().await.unwrap();
    let report = sink.close(Duration::from_secs(10)).await;
    assert_eq!(report.rows, 500);
    assert_eq!(recorder.seen().committed, [99, 199, 299, 399, 499]);
    let catalog = LocalDelta::new(&root);
    let table = TableRef::parse("main.bronze.orders").unwrap();
    let live = catalog
        .describe(&table)
        .await
        .unwrap()
        .expect("the catalog created it");
    assert!(
        live.properties.keys().any(|k| k.contains("from-file")),
        "registered as the file's writer: {:?}",
        live.properties
    );
    emu.until_materialized("main.bronze.orders").await;
    let (batches, _version) = catalog.read_table(&table).await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 500);
}
