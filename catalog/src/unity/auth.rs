//! Credentials for Unity Catalog: a secret type that never prints, and OAuth machine-to-machine
//! tokens (client credentials) cached and refreshed before they expire.

use std::fmt;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::error::CatalogError;
use crate::unity::models::TokenResponse;

/// A secret: `Debug` and `Display` print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How the backend authenticates.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Auth {
    /// No `Authorization` header (the open-source server in anonymous mode).
    Anonymous,
    /// A fixed bearer token (a personal access token).
    Bearer(Secret),
    /// OAuth M2M: client credentials posted to `{workspace}/oidc/v1/token`.
    OAuthM2M {
        /// The service principal's client id.
        client_id: String,
        /// Its secret.
        client_secret: Secret,
    },
}

struct Cached {
    token: Secret,
    refresh_at: Instant,
    expires_at: Instant,
}

/// Tokens for [`Auth`], minted on first use and refreshed once their remaining life falls below
/// `min(5 minutes, ttl / 2)` (as the official client does).
pub(crate) struct TokenSource {
    auth: Auth,
    token_url: String,
    cache: Mutex<Option<Cached>>,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("auth", &self.auth)
            .field("token_url", &self.token_url)
            .finish()
    }
}

impl TokenSource {
    pub(crate) fn new(auth: Auth, token_url: String) -> TokenSource {
        TokenSource {
            auth,
            token_url,
            cache: Mutex::new(None),
        }
    }

    /// The `Authorization` header value, if any.
    pub(crate) async fn header(
        &self,
        http: &reqwest::Client,
    ) -> Result<Option<String>, CatalogError> {
        match &self.auth {
            Auth::Anonymous => Ok(None),
            Auth::Bearer(token) => Ok(Some(format!("Bearer {}", token.expose()))),
            Auth::OAuthM2M {
                client_id,
                client_secret,
            } => {
                let mut cache = self.cache.lock().await;
                let now = Instant::now();
                if let Some(c) = cache.as_ref().filter(|c| now < c.refresh_at) {
                    return Ok(Some(format!("Bearer {}", c.token.expose())));
                }
                match self.mint(http, client_id, client_secret).await {
                    Ok(fresh) => {
                        let header = format!("Bearer {}", fresh.token.expose());
                        *cache = Some(fresh);
                        Ok(Some(header))
                    }
                    // A refresh failed but the old token is still valid: keep serving it.
                    Err(e)
                        if e.is_retryable()
                            && cache.as_ref().is_some_and(|c| now < c.expires_at) =>
                    {
                        Ok(cache
                            .as_ref()
                            .map(|c| format!("Bearer {}", c.token.expose())))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Forgets the cached token (after the service refused it).
    pub(crate) async fn invalidate(&self) {
        *self.cache.lock().await = None;
    }

    async fn mint(
        &self,
        http: &reqwest::Client,
        client_id: &str,
        secret: &Secret,
    ) -> Result<Cached, CatalogError> {
        let started = Instant::now();
        let transport = |e: reqwest::Error| CatalogError::Transport {
            operation: "oauth token",
            target: self.token_url.clone(),
            message: crate::error::chain(&e.without_url()),
        };
        let response = http
            .post(&self.token_url)
            .basic_auth(client_id, Some(secret.expose()))
            .form(&[("grant_type", "client_credentials"), ("scope", "all-apis")])
            .send()
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(transport)?;
        if status >= 500 || status == 429 {
            return Err(CatalogError::Http {
                operation: "oauth token",
                target: self.token_url.clone(),
                status,
                code: None,
                message: body,
                retryable: true,
            });
        }
        if !(200..300).contains(&status) {
            let message = if status == 404 && body.trim().is_empty() {
                "nothing answers there: is the workspace URL right?".to_owned()
            } else {
                body
            };
            return Err(CatalogError::TokenRefused {
                target: self.token_url.clone(),
                status,
                message,
            });
        }
        let token: TokenResponse =
            serde_json::from_str(&body).map_err(|e| CatalogError::Decode {
                operation: "oauth token",
                target: self.token_url.clone(),
                message: e.to_string(),
            })?;
        let ttl = Duration::from_secs(u64::try_from(token.expires_in.unwrap_or(0)).unwrap_or(0));
        let margin = Duration::from_secs(300).min(ttl / 2);
        // No lifetime given: use the token once, mint again next time.
        let refresh_at = if ttl.is_zero() {
            started
        } else {
            started + ttl - margin
        };
        Ok(Cached {
            token: Secret::new(token.access_token),
            refresh_at,
            expires_at: started + ttl,
        })
    }
}
