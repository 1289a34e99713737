//! The Unity Catalog backend tells absent from misconfigured, describes what it cannot map,
//! vends every provider's credentials (or names the one it cannot), and stays idempotent under
//! races and retried requests. Against the loopback stub, which answers as Databricks does.
#![cfg(feature = "unity")]

mod common;

use common::with_reserved;

use std::collections::BTreeMap;
use std::time::Duration;

use arrow_schema::{DataType, Field, Schema};
use serde_json::json;
use zerobus_sink_catalog::unity::{Auth, Secret, UnityCatalog, UnityConfig};
use zerobus_sink_catalog::{
    Access, CatalogError, CloudCredentials, Contract, DeltaType, DesiredTable, Policy, Role,
    TableCatalog, TableRef,
};
use zerobus_sink_testkit::uc_stub::UcStub;

const TABLE: &str = "main.bronze.orders";

fn catalog_at(url: String, auth: Auth) -> UnityCatalog {
    let mut config = UnityConfig::new(url, "warehouse-1", auth);
    config.retry_backoff = Duration::from_millis(5);
    UnityCatalog::new(config).unwrap()
}

fn oauth() -> Auth {
    Auth::OAuthM2M {
        client_id: UcStub::CLIENT_ID.into(),
        client_secret: Secret::new(UcStub::CLIENT_SECRET),
    }
}

fn desired(table: &str, fields: Vec<Field>) -> DesiredTable {
    let contract = Contract {
        column_descriptions: BTreeMap::from([("id".into(), "Order id".into())]),
        ..Contract::default()
    };
    DesiredTable::from_arrow(
        TableRef::parse(table).unwrap(),
        &Schema::new(fields),
        Some(&contract),
        Role::Standard,
    )
    .unwrap()
}

fn fields() -> Vec<Field> {
    vec![
        Field::new("id", DataType::Int64, false),
        Field::new("note", DataType::Utf8, true),
    ]
}

/// The stub with [`TABLE`] created through the backend.
async fn with_table() -> (UcStub, UnityCatalog, TableRef) {
    let stub = UcStub::start().await;
    let uc = catalog_at(stub.url(), oauth());
    uc.reconcile(&desired(TABLE, fields()), &Policy::default())
        .await
        .unwrap();
    (stub, uc, TableRef::parse(TABLE).unwrap())
}

#[tokio::test]
async fn only_a_table_that_does_not_exist_is_absent() {
    let stub = UcStub::start().await;
    let uc = catalog_at(stub.url(), oauth());
    let table = TableRef::parse(TABLE).unwrap();
    assert_eq!(
        uc.describe(&table).await.unwrap(),
        None,
        "TABLE_DOES_NOT_EXIST"
    );
    for (parent, code) in [
        ("nocat", "CATALOG_DOES_NOT_EXIST"),
        ("main.noschema", "SCHEMA_DOES_NOT_EXIST"),
    ] {
        stub.missing_parent(parent, code);
        let t = TableRef::parse(&format!("{parent}.t").replace("nocat.t", "nocat.s.t")).unwrap();
        let err = uc.describe(&t).await.unwrap_err();
        assert!(
            matches!(&err, CatalogError::Http { status: 404, code: Some(c), .. } if c == code),
            "{err}"
        );
        assert!(err.to_string().contains(&t.full_name()), "{err}");
    }
    // A wrong base URL: a 404 with no error code, named as such, never "absent".
    // With OAuth the token endpoint is the first thing not found, and is named.
    let wrong = catalog_at(format!("{}/not-the-api", stub.url()), oauth());
    let err = wrong.describe(&table).await.unwrap_err();
    assert!(
        matches!(&err, CatalogError::TokenRefused { status: 404, .. })
            && err.to_string().contains("/not-the-api/oidc/v1/token")
            && err.to_string().contains("workspace URL"),
        "{err}"
    );
    let wrong = catalog_at(format!("{}/not-the-api", stub.url()), Auth::Anonymous);
    let err = wrong.describe(&table).await.unwrap_err();
    assert!(
        matches!(
            &err,
            CatalogError::Http {
                status: 404,
                code: None,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("/api/2.1/unity-catalog/tables/main.bronze.orders")
            && err.to_string().contains("workspace URL"),
        "{err}"
    );
    // Credentials for an absent table: a typed error, not an invented code.
    let err = uc.vend_credentials(&table, Access::Read).await.unwrap_err();
    assert!(
        matches!(&err, CatalogError::TableAbsent { table } if table == TABLE),
        "{err}"
    );
}

/// The open-source server answers a missing table, schema and catalog alike with the generic
/// `RESOURCE_NOT_FOUND` (checked against `uc-server` 0.0.11 in `uc_server.rs`): describe then
/// asks for the schema and the catalog, and only a missing table is absent.
#[tokio::test]
async fn a_generic_not_found_is_absent_only_when_the_schema_and_catalog_exist() {
    let stub = UcStub::start().await;
    let uc = catalog_at(stub.url(), oauth());
    stub.missing_parent("main.gone", "RESOURCE_NOT_FOUND");
    stub.missing_parent("nocat", "RESOURCE_NOT_FOUND");
    let err = uc
        .describe(&TableRef::parse("main.gone.t").unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CatalogError::Http { status: 404, code: Some(c), message, .. }
            if c == "RESOURCE_NOT_FOUND" && message == "schema main.gone does not exist"),
        "{err}"
    );
    let err = uc
        .describe(&TableRef::parse("nocat.s.t").unwrap())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("nocat.s.t")
            && err.to_string().contains("catalog nocat does not exist"),
        "{err}"
    );
    // The same generic answer for a table whose schema and catalog exist: absent.
    stub.missing_parent("main.here.t", "RESOURCE_NOT_FOUND");
    assert_eq!(
        uc.describe(&TableRef::parse("main.here.t").unwrap())
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_connection_error_names_the_url() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let uc = catalog_at(format!("http://127.0.0.1:{port}"), Auth::Anonymous);
    let err = uc
        .describe(&TableRef::parse(TABLE).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogError::Transport { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!(
            "http://127.0.0.1:{port}/api/2.1/unity-catalog/tables/{TABLE}"
        )),
        "{err}"
    );
    // The root cause, not only reqwest's "error sending request".
    assert!(refused(&err.to_string()), "{err}");
}

fn refused(text: &str) -> bool {
    text.to_lowercase().contains("connection refused")
}

#[tokio::test]
async fn a_token_endpoint_that_is_down_is_named_with_the_cause() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let uc = catalog_at(format!("http://127.0.0.1:{port}"), oauth());
    let err = uc
        .describe(&TableRef::parse(TABLE).unwrap())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, CatalogError::Transport { .. }), "{text}");
    assert!(text.contains("oauth token"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{port}/oidc/v1/token")),
        "{text}"
    );
    assert!(refused(&text), "{text}");
}

#[tokio::test]
async fn unknown_and_variant_columns_are_described_and_never_block_credentials() {
    let stub = UcStub::start().await;
    let uc = catalog_at(stub.url(), oauth());
    stub.put_table(
        TABLE,
        &[
            ("id", "long"),
            ("payload", "variant"),
            ("place", "geography(4326)"),
        ],
    );
    let table = TableRef::parse(TABLE).unwrap();
    let live = uc.describe(&table).await.unwrap().unwrap();
    assert_eq!(
        live.column("payload").unwrap().data_type,
        DeltaType::Variant
    );
    assert_eq!(
        live.column("place").unwrap().data_type,
        DeltaType::Unknown("geography(4326)".into())
    );
    let creds = uc.vend_credentials(&table, Access::Read).await.unwrap();
    assert!(matches!(creds.credentials, CloudCredentials::Aws { .. }));
    // A plan never changes the unknown column: writing to it is refused, naming it; the
    // others reconcile as usual.
    let wants_place = vec![
        Field::new("id", DataType::Int64, true),
        Field::new("place", DataType::Utf8, true),
    ];
    let err = uc
        .reconcile(&desired(TABLE, wants_place), &Policy::default())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("column place") && err.to_string().contains("geography(4326)"),
        "{err}"
    );
    let leaves_it = vec![
        Field::new("id", DataType::Int64, true),
        Field::new("note", DataType::Utf8, true),
    ];
    uc.reconcile(&desired(TABLE, leaves_it), &Policy::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn r2_credentials_are_modelled_and_an_unknown_provider_is_named() {
    let (stub, uc, table) = with_table().await;
    stub.answer_credentials_with(json!({"r2_temp_credentials": {
        "access_key_id": "R2KEY", "secret_access_key": "r2-secret", "session_token": "r2-session"
    }}));
    let creds = uc
        .vend_credentials(&table, Access::ReadWrite)
        .await
        .unwrap();
    assert!(
        matches!(&creds.credentials, CloudCredentials::R2 { access_key_id, .. } if access_key_id == "R2KEY")
    );
    assert!(!format!("{creds:?}").contains("r2-secret"));
    stub.answer_credentials_with(json!({"alibaba_oss_credentials": {"token": "x"}}));
    let err = uc.vend_credentials(&table, Access::Read).await.unwrap_err();
    assert!(
        matches!(&err, CatalogError::UnsupportedCredentials { provider, .. } if provider == "alibaba_oss_credentials"),
        "{err}"
    );
}

#[tokio::test]
async fn two_reconciles_racing_and_a_retried_statement_leave_the_table_as_wanted_once() {
    let stub = UcStub::start().await;
    let one = catalog_at(stub.url(), oauth());
    let two = catalog_at(stub.url(), oauth());
    let d = desired(TABLE, fields());
    let policy = Policy::default();
    let (a, b) = tokio::join!(one.reconcile(&d, &policy), two.reconcile(&d, &policy));
    a.unwrap();
    b.unwrap();
    let table = TableRef::parse(TABLE).unwrap();
    let live = one.describe(&table).await.unwrap().unwrap();
    let names: Vec<&str> = live.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, with_reserved(&["id", "note"]));
    // A lost response: the ADD COLUMN runs, the client sees a 503 and posts it again, which
    // fails as already done; the reconcile describes again and finds nothing left to do.
    let mut evolved = fields();
    evolved.push(Field::new("amount", DataType::Int32, true));
    stub.lose_next_statement_response();
    one.reconcile(&desired(TABLE, evolved.clone()), &Policy::default())
        .await
        .unwrap();
    let live = one.describe(&table).await.unwrap().unwrap();
    assert_eq!(
        live.columns.iter().filter(|c| c.name == "amount").count(),
        1
    );
    let again = one
        .reconcile(&desired(TABLE, evolved), &Policy::default())
        .await
        .unwrap();
    assert!(again.executed.is_empty(), "{:?}", again.executed);
}

#[tokio::test]
async fn the_protocol_is_read_from_the_table_properties() {
    let (stub, uc, table) = with_table().await;
    assert_eq!(uc.describe(&table).await.unwrap().unwrap().protocol, None);
    stub.set_properties(
        TABLE,
        &[
            ("delta.minReaderVersion", "3"),
            ("delta.minWriterVersion", "7"),
            ("delta.feature.columnMapping", "supported"),
            ("delta.feature.deletionVectors", "supported"),
        ],
    );
    let protocol = uc
        .describe(&table)
        .await
        .unwrap()
        .unwrap()
        .protocol
        .unwrap();
    assert_eq!(
        (protocol.min_reader_version, protocol.min_writer_version),
        (3, 7)
    );
    assert!(protocol.has("columnMapping") && protocol.has("deletionVectors"));
    // A primary-raw role on it: every unmet precondition named (properties and protocol).
    let d = DesiredTable::from_arrow(
        table.clone(),
        &Schema::new(fields()),
        None,
        Role::PrimaryRaw,
    )
    .unwrap();
    let err = uc.reconcile(&d, &Policy::default()).await.unwrap_err();
    let text = err.to_string();
    for says in [
        "delta.enableIcebergCompatV2",
        "icebergCompatV2",
        "primary-raw",
    ] {
        assert!(text.contains(says), "{text}\nshould name {says}");
    }
}

#[tokio::test]
async fn the_token_endpoints_own_5xx_is_retried_and_a_4xx_is_not() {
    let stub = UcStub::start().await;
    let uc = catalog_at(stub.url(), oauth());
    stub.fail_next_token(&[503, 502]);
    let table = TableRef::parse(TABLE).unwrap();
    assert_eq!(uc.describe(&table).await.unwrap(), None);
    assert_eq!(stub.token_requests().len(), 3, "two failures, then a token");
    assert_eq!(stub.tokens_minted(), 1);
    // A refusal (4xx) is permanent: one request, a typed error naming the endpoint.
    let stub = UcStub::start().await;
    let uc = catalog_at(stub.url(), oauth());
    stub.fail_next_token(&[400]);
    let err = uc.describe(&table).await.unwrap_err();
    assert!(
        matches!(&err, CatalogError::TokenRefused { status: 400, .. })
            && err.to_string().contains("/oidc/v1/token"),
        "{err}"
    );
    assert_eq!(stub.token_requests().len(), 1);
}
