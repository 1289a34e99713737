//! Credentials for the `authorization` header: none, a fixed bearer token, or OAuth
//! machine-to-machine tokens minted per table as PROTOCOL.md D describes (scoped with
//! `authorization_details`, cached, refreshed before expiry, invalidated when the service
//! refuses one). Secrets never appear in logs, errors or `Debug` output.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

/// A secret string: its `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }

    /// The secret itself, for the one place that must send it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// OAuth M2M client credentials (a Databricks service principal).
#[derive(Debug, Clone)]
pub struct OAuth {
    /// The workspace URL that serves `/oidc/v1/token`.
    pub unity_catalog_url: String,
    /// The workspace id (the first DNS label of the Zerobus endpoint).
    pub workspace_id: String,
    /// The client id.
    pub client_id: String,
    /// The client secret.
    pub client_secret: Secret,
}

/// How connections authenticate.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Credentials {
    /// No `authorization` header (a local emulator).
    #[default]
    None,
    /// A fixed bearer token.
    Bearer(Secret),
    /// OAuth M2M tokens, minted per table.
    OAuth(OAuth),
}

/// Why no token could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The token endpoint failed or could not be reached (retryable).
    #[error("token endpoint for table {table}: {reason}")]
    Fetch {
        /// The table the token was for.
        table: String,
        /// What happened (never the secret).
        reason: String,
    },
    /// The token endpoint refused the credentials (HTTP 4xx; not retryable).
    #[error("token endpoint refused the credentials for table {table}: HTTP {status}: {body}")]
    Refused {
        /// The table the token was for.
        table: String,
        /// The HTTP status.
        status: u16,
        /// What the endpoint said (its first 512 characters, the client secret removed).
        body: String,
    },
}

impl AuthError {
    /// Whether asking again may succeed.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, AuthError::Fetch { .. })
    }
}

/// How long before expiry a cached token is refreshed: `min(300 s, ttl / 2)` (PROTOCOL.md D).
const REFRESH_BUFFER: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct Cached {
    token: Secret,
    expires: Instant,
    refresh_at: Instant,
}

/// Tokens per table, shared by the connection tasks.
#[derive(Debug)]
pub(crate) struct TokenSource {
    presented: Presented,
    cache: Mutex<HashMap<String, Cached>>,
    /// Serialises minting, so concurrent connections of a table share one mint.
    minting: tokio::sync::Mutex<()>,
}

/// What a connection presents, from the [`Credentials`]. Only OAuth has an HTTP client: building
/// one loads the system's root certificates, which a sink without OAuth has no use for.
#[derive(Debug)]
enum Presented {
    Nothing,
    Bearer(Secret),
    OAuth { oauth: OAuth, http: reqwest::Client },
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
}

/// The `authorization_details` of a token scoped to write one table (PROTOCOL.md D).
pub(crate) fn authorization_details(table: &str) -> Option<String> {
    let parts: Vec<&str> = table.split('.').collect();
    let [c, s, t] = parts[..] else { return None };
    if [c, s, t].iter().any(|p| p.is_empty()) {
        return None;
    }
    let schema = format!("{c}.{s}");
    let full = format!("{c}.{s}.{t}");
    Some(
        serde_json::json!([
            {"type":"unity_catalog_privileges","privileges":["USE CATALOG"],"object_type":"CATALOG","object_full_path":c},
            {"type":"unity_catalog_privileges","privileges":["USE SCHEMA"],"object_type":"SCHEMA","object_full_path":schema},
            {"type":"unity_catalog_privileges","privileges":["SELECT","MODIFY"],"object_type":"TABLE","object_full_path":full,"operations":["zerobuswrite"]}
        ])
        .to_string(),
    )
}

impl TokenSource {
    pub(crate) fn new(credentials: Credentials) -> TokenSource {
        let presented = match credentials {
            Credentials::None => Presented::Nothing,
            Credentials::Bearer(secret) => Presented::Bearer(secret),
            Credentials::OAuth(oauth) => Presented::OAuth {
                oauth,
                http: reqwest::Client::new(),
            },
        };
        TokenSource {
            presented,
            cache: Mutex::new(HashMap::new()),
            minting: tokio::sync::Mutex::new(()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The token to present for `table`, if any.
    pub(crate) async fn token(&self, table: &str) -> Result<Option<Secret>, AuthError> {
        let (oauth, http) = match &self.presented {
            Presented::Nothing => return Ok(None),
            Presented::Bearer(s) => return Ok(Some(s.clone())),
            Presented::OAuth { oauth, http } => (oauth, http),
        };
        if let Some(fresh) = self.fresh(table) {
            return Ok(Some(fresh));
        }
        let _minting = self.minting.lock().await;
        if let Some(fresh) = self.fresh(table) {
            return Ok(Some(fresh));
        }
        let started = Instant::now();
        match Self::mint(http, oauth, table).await {
            Ok((token, ttl)) => {
                if let Some(ttl) = ttl.filter(|t| !t.is_zero()) {
                    let expires = started + ttl;
                    let refresh_at = expires - REFRESH_BUFFER.min(ttl / 2);
                    self.cache().insert(
                        table.to_owned(),
                        Cached {
                            token: token.clone(),
                            expires,
                            refresh_at,
                        },
                    );
                }
                tracing::debug!(table, "minted a token");
                Ok(Some(token))
            }
            Err(e) => {
                // A failed refresh keeps serving a still-valid token, backing off before the
                // next try: clamp(remaining / 2, 1 s, 5 s).
                let mut cache = self.cache();
                if let Some(c) = cache.get_mut(table).filter(|c| Instant::now() < c.expires) {
                    let remaining = c.expires - Instant::now();
                    let wait =
                        (remaining / 2).clamp(Duration::from_secs(1), Duration::from_secs(5));
                    c.refresh_at = Instant::now() + wait;
                    tracing::warn!(table, error = %e, "token refresh failed; using the cached token");
                    return Ok(Some(c.token.clone()));
                }
                Err(e)
            }
        }
    }

    fn fresh(&self, table: &str) -> Option<Secret> {
        let cache = self.cache();
        cache
            .get(table)
            .filter(|c| Instant::now() < c.refresh_at)
            .map(|c| c.token.clone())
    }

    /// Forgets the cached token of `table` (the service refused it); the next call mints anew.
    pub(crate) fn invalidate(&self, table: &str) {
        if self.cache().remove(table).is_some() {
            tracing::info!(table, "token invalidated after the service refused it");
        }
    }

    async fn mint(
        http: &reqwest::Client,
        oauth: &OAuth,
        table: &str,
    ) -> Result<(Secret, Option<Duration>), AuthError> {
        let fetch = |reason: String| AuthError::Fetch {
            table: table.to_owned(),
            reason,
        };
        let details = authorization_details(table)
            .ok_or_else(|| fetch("the table name must be catalog.schema.table".into()))?;
        let resource = format!(
            "api://databricks/workspaces/{}/zerobusDirectWriteApi",
            oauth.workspace_id
        );
        let url = format!(
            "{}/oidc/v1/token",
            oauth.unity_catalog_url.trim_end_matches('/')
        );
        let form = [
            ("scope", "all-apis"),
            ("resource", resource.as_str()),
            ("authorization_details", details.as_str()),
            ("grant_type", "client_credentials"),
        ];
        let response = http
            .post(&url)
            .basic_auth(&oauth.client_id, Some(oauth.client_secret.expose()))
            .form(&form)
            .send()
            .await
            // reqwest errors name the URL, never the credentials; their causes say why
            // (connection refused, DNS, TLS), which the top error alone does not.
            .map_err(|e| fetch(format!("request to {url} failed: {}", super::chain(&e))))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let body = said(&body, oauth.client_secret.expose());
            if status.is_server_error() {
                return Err(fetch(format!("HTTP {status} from {url}: {body}")));
            }
            return Err(AuthError::Refused {
                table: table.to_owned(),
                status: status.as_u16(),
                body,
            });
        }
        let body: TokenResponse = response
            .json()
            .await
            .map_err(|e| fetch(format!("unreadable token response from {url}: {e}")))?;
        let ttl = match body.expires_in {
            Some(serde_json::Value::Number(n)) => n.as_u64(),
            Some(serde_json::Value::String(s)) => s.parse().ok(),
            _ => None,
        }
        .map(Duration::from_secs);
        if body.access_token.is_empty() || http_value_invalid(&body.access_token) {
            return Err(fetch(format!(
                "token response from {url} has no usable access_token"
            )));
        }
        Ok((Secret::new(body.access_token), ttl))
    }
}

/// A token endpoint's answer as an error may carry it: one line, at most 512 characters, the
/// client secret removed should the endpoint echo it.
fn said(body: &str, secret: &str) -> String {
    let mut text: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if !secret.is_empty() {
        text = text.replace(secret, "***");
    }
    match text.char_indices().nth(512) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None if text.is_empty() => "(no body)".to_owned(),
        None => text,
    }
}

fn http_value_invalid(token: &str) -> bool {
    !token.bytes().all(|b| (0x21..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "Secret(***) ***");
        let c = Credentials::Bearer(s);
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn only_oauth_builds_an_http_client() {
        // Building a `reqwest::Client` reads the system's root certificates.
        let none = TokenSource::new(Credentials::None);
        assert!(matches!(none.presented, Presented::Nothing));
        let bearer = TokenSource::new(Credentials::Bearer(Secret::new("t")));
        assert!(matches!(bearer.presented, Presented::Bearer(_)));
        let oauth = TokenSource::new(Credentials::OAuth(OAuth {
            unity_catalog_url: "https://workspace.example".into(),
            workspace_id: "1".into(),
            client_id: "id".into(),
            client_secret: Secret::new("s"),
        }));
        assert!(matches!(oauth.presented, Presented::OAuth { .. }));
    }

    fn oauth(url: String, secret: &str) -> OAuth {
        OAuth {
            unity_catalog_url: url,
            workspace_id: "1".into(),
            client_id: "pipeline".into(),
            client_secret: Secret::new(secret),
        }
    }

    #[tokio::test]
    async fn an_unreachable_token_endpoint_is_named_with_its_cause() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let http = reqwest::Client::new();
        let secret = "s3cret-client-value";
        let e = TokenSource::mint(
            &http,
            &oauth(format!("http://127.0.0.1:{port}"), secret),
            "c.s.t",
        )
        .await
        .unwrap_err();
        let text = e.to_string();
        assert!(e.is_retryable(), "{text}");
        // The root cause, not only reqwest's "error sending request for url".
        assert!(text.to_lowercase().contains("connection refused"), "{text}");
        assert!(!text.contains(secret), "{text}");
    }

    #[tokio::test]
    async fn refused_credentials_carry_the_status_and_what_the_endpoint_said() {
        let stub = zerobus_sink_testkit::uc_stub::UcStub::start().await;
        let http = reqwest::Client::new();
        let secret = "wrong-client-secret";
        let e = TokenSource::mint(&http, &oauth(stub.url(), secret), "c.s.t")
            .await
            .unwrap_err();
        assert!(
            matches!(&e, AuthError::Refused { status: 401, body, .. } if body.contains("invalid_client")),
            "{e:?}"
        );
        assert!(!e.is_retryable());
        assert!(!format!("{e} {e:?}").contains(secret), "{e:?}");
        // An endpoint that echoes the secret has it removed.
        assert_eq!(
            said(&format!("bad secret {secret}"), secret),
            "bad secret ***"
        );
        assert_eq!(said("", secret), "(no body)");
    }

    #[test]
    fn authorization_details_scope_the_table() {
        let d: serde_json::Value =
            serde_json::from_str(&authorization_details("c.s.t").unwrap()).unwrap();
        assert_eq!(d[0]["object_full_path"], "c");
        assert_eq!(d[1]["object_full_path"], "c.s");
        assert_eq!(d[2]["object_full_path"], "c.s.t");
        assert_eq!(d[2]["operations"][0], "zerobuswrite");
        assert_eq!(d[2]["privileges"], serde_json::json!(["SELECT", "MODIFY"]));
        for bad in ["c.s", "c..t", "a.b.c.d", ""] {
            assert_eq!(authorization_details(bad), None, "{bad}");
        }
    }
}
