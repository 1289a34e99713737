//! OAuth client credentials, as a workspace's token endpoint grants them (PROTOCOL.md, "auth"):
//! `POST /oidc/v1/token` with the client id and secret as HTTP Basic and
//! `grant_type=client_credentials` mints a bearer token that lives [`OAuthClient::token_ttl`];
//! a `DoPut` without a live token is then refused `UNAUTHENTICATED`, the code the service and
//! the official client treat as an auth rejection (refresh once, then terminal). Off unless
//! configured ([`EmulatorConfig::oauth`](super::EmulatorConfig::oauth)), so that other tests
//! need no credentials. The service's exact words are not documented; these name the table
//! and what was wrong (no token, unknown, expired), never the token.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use tokio::task::JoinHandle;

use super::{Emulator, Shared};

/// The one client the token endpoint knows.
#[derive(Clone)]
pub struct OAuthClient {
    /// The client id (a service principal's application id).
    pub client_id: String,
    client_secret: String,
    /// How long a minted token is accepted.
    pub token_ttl: Duration,
}

impl OAuthClient {
    /// The client `client_id` with `client_secret`, its tokens living `token_ttl`.
    #[must_use]
    pub fn new(
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
        token_ttl: Duration,
    ) -> OAuthClient {
        OAuthClient {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            token_ttl,
        }
    }

    fn basic(&self) -> String {
        let pair = format!("{}:{}", self.client_id, self.client_secret);
        format!("Basic {}", STANDARD.encode(pair))
    }
}

impl fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClient")
            .field("client_id", &self.client_id)
            .field("client_secret", &"***")
            .field("token_ttl", &self.token_ttl)
            .finish()
    }
}

/// Why a `DoPut`'s token is not accepted, if it is not.
pub(super) fn refusal(
    shared: &Shared,
    minted: &std::collections::BTreeMap<String, Instant>,
    token: Option<&str>,
    table: &str,
) -> Option<String> {
    shared.config.oauth.as_ref()?;
    match token.map(|t| minted.get(t)) {
        None => Some(format!(
            "no bearer token for table {table}: mint one at /oidc/v1/token"
        )),
        Some(None) => Some(format!(
            "the bearer token for table {table} is not one this workspace issued"
        )),
        Some(Some(expiry)) if *expiry <= Instant::now() => {
            Some(format!("the bearer token for table {table} has expired"))
        }
        Some(Some(_)) => None,
    }
}

impl Emulator {
    /// Serves the token endpoint (`POST /oidc/v1/token`) on `addr` until the handle is aborted;
    /// returns the address bound (`unity_catalog_url` is `http://` and it).
    ///
    /// # Errors
    /// The listener could not be bound.
    pub async fn serve_token_endpoint(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<(SocketAddr, JoinHandle<std::io::Result<()>>)> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let app = self.token_routes();
        Ok((
            bound,
            tokio::spawn(async move { axum::serve(listener, app).await }),
        ))
    }

    /// The token endpoint's route, to merge into another router (zerobus-local serves it
    /// beside `/metrics`).
    pub fn token_routes(&self) -> axum::Router {
        axum::Router::new()
            .route("/oidc/v1/token", axum::routing::post(token))
            .with_state(self.shared.clone())
    }
}

async fn token(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: String) -> Response {
    let Some(client) = &shared.config.oauth else {
        return (
            StatusCode::NOT_FOUND,
            "this emulator requires no credentials",
        )
            .into_response();
    };
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if auth != client.basic() {
        let error =
            json!({"error": "invalid_client", "error_description": "Client authentication failed"});
        return (StatusCode::UNAUTHORIZED, axum::Json(error)).into_response();
    }
    if !body
        .split('&')
        .any(|kv| kv == "grant_type=client_credentials")
    {
        let error = json!({"error": "unsupported_grant_type"});
        return (StatusCode::BAD_REQUEST, axum::Json(error)).into_response();
    }
    let mut state = shared.lock();
    state.minted_count += 1;
    let token = format!("zerobus-local-token-{}", state.minted_count);
    state
        .minted
        .insert(token.clone(), Instant::now() + client.token_ttl);
    let answer = json!({
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": client.token_ttl.as_secs(),
        "scope": "all-apis",
    });
    axum::Json(answer).into_response()
}
