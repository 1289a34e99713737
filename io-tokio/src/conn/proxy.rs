//! Outbound proxies, as the official client honours them: the first non-empty of `grpc_proxy`,
//! `GRPC_PROXY`, `https_proxy`, `HTTPS_PROXY`, `http_proxy`, `HTTP_PROXY` names the proxy; the
//! first non-empty of `no_grpc_proxy`, `NO_GRPC_PROXY`, `no_proxy`, `NO_PROXY` lists hosts
//! that bypass it (`*` for all; an entry matches the host and its subdomains). gRPC is HTTP/2,
//! so the proxy is always asked for a `CONNECT` tunnel, and the endpoint's TLS runs inside it,
//! once. Credentials in the proxy URL (`http://user:pass@proxy:3128`) are sent as
//! `Proxy-Authorization: Basic` and never appear in logs or errors.

use std::fmt;

use base64::Engine;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROXY_ENV: [&str; 6] = [
    "grpc_proxy",
    "GRPC_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "http_proxy",
    "HTTP_PROXY",
];
const NO_PROXY_ENV: [&str; 4] = ["no_grpc_proxy", "NO_GRPC_PROXY", "no_proxy", "NO_PROXY"];

/// How streams reach the endpoint.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyConfig {
    /// From the environment when the sink starts, as the official client does (the default).
    #[default]
    Environment,
    /// Directly, whatever the environment says.
    Direct,
    /// Through this proxy (`http://[user:pass@]host:port`), except for the hosts `no_proxy`
    /// lists (comma-separated, as the variable).
    Url {
        /// The proxy.
        url: String,
        /// Hosts that bypass it.
        no_proxy: String,
    },
}

impl fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyConfig::Environment => f.write_str("Environment"),
            ProxyConfig::Direct => f.write_str("Direct"),
            ProxyConfig::Url { url, no_proxy } => f
                .debug_struct("Url")
                .field("url", &redacted(url))
                .field("no_proxy", no_proxy)
                .finish(),
        }
    }
}

/// A proxy URL with any user information replaced by `***` (with or without a scheme); a long
/// value that is no URL at all (no `.`, `/` or `:`) as `…`: it may be a secret in the wrong
/// field.
fn redacted(url: &str) -> String {
    let start = url.find("://").map_or(0, |scheme| scheme + 3);
    match url.rfind('@') {
        Some(at) if at >= start => format!("{}***{}", &url[..start], &url[at..]),
        _ if start == 0 && url.len() >= 16 && !url.contains(['.', '/', ':']) => "…".to_owned(),
        _ => url.to_owned(),
    }
}

/// Why a proxy setting cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The URL is not `http://[user:pass@]host:port` (shown without its credentials).
    #[error("proxy {url}: {reason}")]
    Url {
        /// The URL, credentials replaced by `***`.
        url: String,
        /// What is wrong.
        reason: &'static str,
    },
}

/// A proxy to tunnel through.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Proxy {
    /// `host:port` of the proxy.
    pub(crate) addr: String,
    /// The `Proxy-Authorization` value, if the URL had credentials.
    authorization: Option<String>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("authorization", &self.authorization.as_ref().map(|_| "***"))
            .finish()
    }
}

impl ProxyConfig {
    /// Whether an explicit proxy URL can be used (the environment's is checked at start).
    #[cfg(feature = "config")]
    pub(crate) fn check(&self) -> Result<(), ProxyError> {
        match self {
            ProxyConfig::Url { url, .. } => parse(url).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// The proxy to use for `host`, if any: the environment read through `env`.
    pub(crate) fn resolve(
        &self,
        host: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Proxy>, ProxyError> {
        let first = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| env(n).filter(|v| !v.trim().is_empty()))
        };
        let (url, no_proxy) = match self {
            ProxyConfig::Direct => return Ok(None),
            ProxyConfig::Url { url, no_proxy } => (Some(url.clone()), no_proxy.clone()),
            ProxyConfig::Environment => {
                (first(&PROXY_ENV), first(&NO_PROXY_ENV).unwrap_or_default())
            }
        };
        match url {
            Some(url) if !bypasses(host, &no_proxy) => parse(&url).map(Some),
            _ => Ok(None),
        }
    }
}

/// Whether `host` is one `no_proxy` lists (the official client's rule).
pub(crate) fn bypasses(host: &str, no_proxy: &str) -> bool {
    if no_proxy.trim() == "*" {
        return true;
    }
    no_proxy.split(',').any(|entry| {
        let entry = entry.trim().trim_start_matches('.');
        !entry.is_empty() && (host == entry || host.ends_with(&format!(".{entry}")))
    })
}

fn parse(url: &str) -> Result<Proxy, ProxyError> {
    let refuse = |reason| ProxyError::Url {
        url: redacted(url),
        reason,
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| refuse("only http:// proxies are supported (the tunnel carries the TLS)"))?;
    let rest = rest.trim_end_matches('/');
    let (userinfo, addr) = match rest.rsplit_once('@') {
        Some((u, a)) => (Some(u), a),
        None => (None, rest),
    };
    if addr.is_empty() || addr.contains('/') {
        return Err(refuse("expected http://[user:pass@]host[:port]"));
    }
    let addr = if addr
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        addr.to_owned()
    } else {
        format!("{addr}:80")
    };
    let authorization = userinfo.map(|u| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(u.as_bytes())
        )
    });
    Ok(Proxy {
        addr,
        authorization,
    })
}

/// Opens a `CONNECT` tunnel to `target` (`host:port`) through `proxy`.
pub(crate) async fn tunnel(proxy: &Proxy, target: &str) -> std::io::Result<TokioIo<TcpStream>> {
    let mut stream = TcpStream::connect(&proxy.addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("proxy {}: {e}", proxy.addr)))?;
    stream.set_nodelay(true)?;
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &proxy.authorization {
        request.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    // The response head, byte by byte up to its blank line: nothing of the tunnel is read.
    let mut head = Vec::with_capacity(128);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8 * 1024 {
            return Err(std::io::Error::other(format!(
                "proxy {}: response head over 8 KiB",
                proxy.addr
            )));
        }
        let byte = stream.read_u8().await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("proxy {}: CONNECT {target}: {e}", proxy.addr),
            )
        })?;
        head.push(byte);
    }
    let status = String::from_utf8_lossy(&head);
    let line = status.lines().next().unwrap_or_default();
    let code = line.split_whitespace().nth(1).unwrap_or_default();
    if !code.starts_with('2') {
        return Err(std::io::Error::other(format!(
            "proxy {} refused CONNECT {target}: {line}",
            proxy.addr
        )));
    }
    Ok(TokioIo::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_environment_is_read_in_grpc_core_order() {
        let vars = [
            ("HTTPS_PROXY", "http://upper:3128"),
            ("https_proxy", "http://lower:3128"),
            ("http_proxy", "http://plain:3128"),
        ];
        let p = ProxyConfig::Environment
            .resolve("x.databricks.com", env(&vars))
            .unwrap();
        assert_eq!(p.unwrap().addr, "lower:3128");
        let vars = [
            ("grpc_proxy", "http://grpc:1"),
            ("https_proxy", "http://lower:3128"),
        ];
        let p = ProxyConfig::Environment
            .resolve("x.databricks.com", env(&vars))
            .unwrap();
        assert_eq!(p.unwrap().addr, "grpc:1");
        let vars = [("grpc_proxy", " "), ("http_proxy", "http://plain")];
        let p = ProxyConfig::Environment.resolve("x", env(&vars)).unwrap();
        assert_eq!(
            p.unwrap().addr,
            "plain:80",
            "empty values are skipped; port 80 by default"
        );
        assert_eq!(
            ProxyConfig::Environment.resolve("x", env(&[])).unwrap(),
            None
        );
    }

    #[test]
    fn no_proxy_matches_hosts_and_their_subdomains_as_the_official_client() {
        assert!(bypasses("ws.cloud.databricks.com", "databricks.com"));
        assert!(bypasses("databricks.com", ".databricks.com"));
        assert!(!bypasses("notdatabricks.com", "databricks.com"));
        assert!(bypasses("anything", " * "));
        assert!(bypasses("127.0.0.1", "localhost, 127.0.0.1"));
        assert!(!bypasses("example.com", ""));
        assert!(!bypasses("example.com", ",,"));
        let vars = [
            ("https_proxy", "http://p:1"),
            ("no_grpc_proxy", "example.com"),
            ("no_proxy", "other.com"),
        ];
        let env = env(&vars);
        assert_eq!(
            ProxyConfig::Environment
                .resolve("a.example.com", &env)
                .unwrap(),
            None
        );
        assert!(
            ProxyConfig::Environment
                .resolve("a.other.com", &env)
                .unwrap()
                .is_some(),
            "no_grpc_proxy comes first and hides no_proxy"
        );
    }

    #[test]
    fn credentials_become_basic_auth_and_never_show() {
        let config = ProxyConfig::Url {
            url: "http://user:s3cret@proxy.corp:3128/".into(),
            no_proxy: String::new(),
        };
        let p = config.resolve("x", |_| None).unwrap().unwrap();
        assert_eq!(p.addr, "proxy.corp:3128");
        assert_eq!(p.authorization.as_deref(), Some("Basic dXNlcjpzM2NyZXQ="));
        for shown in [format!("{config:?}"), format!("{p:?}")] {
            assert!(
                !shown.contains("s3cret") && !shown.contains("dXNlcjpzM2NyZXQ"),
                "{shown}"
            );
        }
        let bad = ProxyConfig::Url {
            url: "https://user:s3cret@proxy.corp:3128".into(),
            no_proxy: String::new(),
        };
        let err = bad.resolve("x", |_| None).unwrap_err().to_string();
        assert!(
            err.contains("only http://") && !err.contains("s3cret"),
            "{err}"
        );
        assert_eq!(
            ProxyConfig::Direct
                .resolve("x", |_| Some("http://p:1".into()))
                .unwrap(),
            None
        );
    }
}
