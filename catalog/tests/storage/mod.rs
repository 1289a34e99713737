//! Real object storage for the tests: moto's S3 server and Azurite, started on loopback by
//! `.ci/run` (or by hand, see docs/testing.md) and named by environment variables; and a tiny
//! loopback fault proxy in front of moto (moto cannot be told to throttle or to expire a key).
//!
//! - `ZEROBUS_TEST_S3_ENDPOINT`: moto's URL, e.g. `http://127.0.0.1:5005`.
//! - `ZEROBUS_TEST_AZURITE_BLOB`: Azurite's blob URL with its account, e.g.
//!   `http://127.0.0.1:10000/devstoreaccount1`.
//!
//! Without them a test prints `SKIPPED` and why, and passes: CI always sets them.
#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

/// Azurite's well-known development account and key (public, not a secret).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The environment variable's value, or `None` after printing why the test is skipped.
pub fn endpoint(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v.trim_end_matches('/').to_owned()),
        _ => {
            println!(
                "SKIPPED {test}: {var} is not set (start moto / Azurite as docs/testing.md says)"
            );
            None
        }
    }
}

/// A name no other test run uses.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Makes bucket `bucket` on moto at `endpoint`.
pub async fn make_bucket(endpoint: &str, bucket: &str) {
    let r = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "creating bucket {bucket}: {}",
        r.status()
    );
}

/// Puts `bytes` at `key` in `bucket` on moto; returns the object's `s3://` location.
pub async fn put_s3(endpoint: &str, bucket: &str, key: String, bytes: Vec<u8>) -> String {
    let r = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}/{key}"))
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "putting {key}: {}", r.status());
    format!("s3://{bucket}/{key}")
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(key);
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

/// An account SAS for Azurite's development account, valid until `expiry` (`2099-01-01T00:00:00Z`
/// style): what Unity Catalog would vend, signed as Azure signs one.
pub fn azurite_sas(expiry: &str) -> String {
    let (permissions, services, types, version) = ("rwdlac", "b", "sco", "2019-12-12");
    let to_sign = format!(
        "{AZURITE_ACCOUNT}\n{permissions}\n{services}\n{types}\n\n{expiry}\n\nhttps,http\n{version}\n"
    );
    let key = STANDARD.decode(AZURITE_KEY).unwrap();
    let sig = STANDARD.encode(hmac_sha256(&key, to_sign.as_bytes()));
    let sig: String = url::form_urlencoded::byte_serialize(sig.as_bytes()).collect();
    format!(
        "sv={version}&ss={services}&srt={types}&sp={permissions}&se={expiry}&spr=https,http&sig={sig}"
    )
}

/// Makes container `container` on Azurite at `blob` (its URL with the account), with `sas`.
pub async fn make_container(blob: &str, container: &str, sas: &str) {
    let r = reqwest::Client::new()
        .put(format!("{blob}/{container}?restype=container&{sas}"))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "creating container {container}: {}",
        r.status()
    );
}

/// Puts `bytes` at `path` in `container` on Azurite; returns the blob's `abfss://` location.
pub async fn put_azure(
    blob: &str,
    container: &str,
    path: String,
    bytes: Vec<u8>,
    sas: &str,
) -> String {
    let r = reqwest::Client::new()
        .put(format!("{blob}/{container}/{path}?{sas}"))
        .header("x-ms-blob-type", "BlockBlob")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "putting {path}: {}", r.status());
    format!("abfss://{container}@{AZURITE_ACCOUNT}.dfs.core.windows.net/{path}")
}

/// What the fault proxy does and saw.
#[derive(Default)]
pub struct Faults {
    /// Answer the next this many GETs with 503 SlowDown (`u32::MAX`: every GET).
    pub slow_down: AtomicU32,
    /// 503s answered.
    pub slowed: AtomicU32,
    /// Access key ids storage refuses as expired (400 ExpiredToken).
    pub expired: Mutex<HashSet<String>>,
    /// Expire this key once it has served this many GETs: `(key, gets)`.
    pub expire_after: Mutex<Option<(String, u32)>>,
    /// ExpiredToken answers given.
    pub refused: AtomicU32,
    /// The access key id of every GET that reached moto, in order.
    pub served: Mutex<Vec<String>>,
}

/// A loopback proxy in front of moto at `upstream` that injects [`Faults`]; returns its URL.
pub async fn fault_proxy(upstream: String) -> (String, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let state = (upstream, faults.clone(), reqwest::Client::new());
    let app = axum::Router::new()
        .fallback(forward)
        .with_state(Arc::new(state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, faults)
}

type ProxyState = Arc<(String, Arc<Faults>, reqwest::Client)>;

fn s3_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    (status, [("content-type", "application/xml")], body).into_response()
}

/// The access key id a SigV4 `Authorization` header names.
fn access_key(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("Credential=").nth(1))
        .and_then(|v| v.split('/').next())
        .unwrap_or("")
        .to_owned()
}

async fn forward(
    State(state): State<ProxyState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (upstream, faults, client) = &*state;
    if method == Method::GET {
        let key = access_key(&headers);
        if faults.expired.lock().unwrap().contains(&key) {
            faults.refused.fetch_add(1, Ordering::SeqCst);
            return s3_error(
                StatusCode::BAD_REQUEST,
                "ExpiredToken",
                "The provided token has expired.",
            );
        }
        let slow = faults.slow_down.load(Ordering::SeqCst);
        if slow > 0 {
            if slow != u32::MAX {
                faults.slow_down.store(slow - 1, Ordering::SeqCst);
            }
            faults.slowed.fetch_add(1, Ordering::SeqCst);
            return s3_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "SlowDown",
                "Please reduce your request rate.",
            );
        }
        let mut served = faults.served.lock().unwrap();
        served.push(key.clone());
        let mut after = faults.expire_after.lock().unwrap();
        if let Some((k, n)) = after.as_ref()
            && *k == key
            && served.iter().filter(|s| **s == key).count() as u32 >= *n
        {
            faults.expired.lock().unwrap().insert(key);
            *after = None;
        }
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = client
        .request(method, format!("{upstream}{path}"))
        .body(body);
    for (name, value) in &headers {
        if name != "host" {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(r) => {
            let status = r.status();
            let headers = r.headers().clone();
            let body = r.bytes().await.unwrap_or_default();
            let mut response = (status, body).into_response();
            for (name, value) in &headers {
                if name != "content-length" && name != "transfer-encoding" {
                    response.headers_mut().insert(name, value.clone());
                }
            }
            response
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}
