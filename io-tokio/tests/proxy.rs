//! Streams through a loopback CONNECT proxy (a real one, written here: it parses the request
//! head, dials the target and splices bytes), plaintext and TLS inside the tunnel; a `no_proxy`
//! host bypasses it; a proxy that refuses is named in the failure, its credentials never.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Recorder, TABLE, config, emulator, orders, table};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zerobus_sink::{Raw, Token};
use zerobus_sink_tokio::{FlushError, ProxyConfig, Sink, ZerobusConfig, ZerobusSink};

/// What the proxy saw: each request head.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

/// A CONNECT proxy on loopback. `refuse`: answer 407 instead of tunnelling.
async fn proxy(refuse: bool) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://tunnel-user:tunnel-pass@{}",
        listener.local_addr().unwrap()
    );
    let seen = Seen::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    match client.read_u8().await {
                        Ok(b) => head.push(b),
                        Err(_) => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                record.0.lock().unwrap().push(head.clone());
                if refuse {
                    let _ = client
                        .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                        .await;
                    return;
                }
                let target = head
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                let Ok(mut upstream) = TcpStream::connect(&target).await else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                client
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (url, seen)
}

async fn run(cfg: ZerobusConfig, batches: i64) -> (Recorder, Result<(), FlushError>) {
    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::start(cfg, vec![table(1)], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    for b in 0..batches {
        let token = Token::raw("orders", 0, b * 10 + 9);
        let _receipt = sink.send(id, orders(b * 10, 10), token).await.unwrap();
    }
    let flushed = sink.flush().await;
    sink.close(Duration::from_secs(5)).await;
    (recorder, flushed)
}

fn via(url: &str, no_proxy: &str) -> ProxyConfig {
    ProxyConfig::Url {
        url: url.to_owned(),
        no_proxy: no_proxy.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_tunnel_through_the_proxy_with_its_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    let (url, seen) = proxy(false).await;
    let (recorder, flushed) = run(config(&emu).proxy(via(&url, "example.com")), 20).await;
    flushed.unwrap();
    assert_eq!(recorder.seen().committed.len(), 20);
    let heads = seen.0.lock().unwrap().clone();
    assert_eq!(
        heads.len() as u64,
        emu.stats().calls,
        "every call through the tunnel"
    );
    let target = emu.addr().to_string();
    assert!(
        heads[0].starts_with(&format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n")),
        "{heads:?}"
    );
    // base64("tunnel-user:tunnel-pass")
    assert!(
        heads[0].contains("Proxy-Authorization: Basic dHVubmVsLXVzZXI6dHVubmVsLXBhc3M=\r\n"),
        "{heads:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_runs_once_inside_the_tunnel() {
    let (cert, private) = common::self_signed();
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| {
        c.tls(cert.clone().into_bytes(), private.into_bytes())
    })
    .await;
    let (url, seen) = proxy(false).await;
    let cfg = config(&emu)
        .tls_ca_pem(cert.into_bytes())
        .proxy(via(&url, ""));
    let (recorder, flushed) = run(cfg, 10).await;
    flushed.unwrap();
    assert_eq!(recorder.seen().committed.len(), 10);
    assert!(
        !seen.0.lock().unwrap().is_empty(),
        "the TLS stream went through the tunnel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_proxy_host_connects_directly() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    let (url, seen) = proxy(false).await;
    let (recorder, flushed) = run(config(&emu).proxy(via(&url, "localhost, 127.0.0.1")), 5).await;
    flushed.unwrap();
    assert_eq!(recorder.seen().committed.len(), 5);
    assert!(seen.0.lock().unwrap().is_empty(), "bypassed");
    assert!(emu.stats().calls >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_proxy_is_named_and_its_credentials_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    let (url, seen) = proxy(true).await;
    let mut cfg = config(&emu).proxy(via(&url, ""));
    cfg.core.retry.max_attempts = 1;
    cfg.resubmit.max_attempts = 0;
    let (recorder, flushed) = run(cfg, 2).await;
    assert!(
        matches!(flushed, Err(FlushError::Failed { batches: 2 })),
        "{flushed:?}"
    );
    let failed = recorder.seen().failed.clone();
    assert!(
        failed
            .iter()
            .all(|(_, _, why)| why.contains("refused CONNECT") && why.contains("407")),
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .all(|(_, _, why)| !why.contains("tunnel-pass") && !why.contains("dHVubmVs")),
        "{failed:?}"
    );
    assert!(!seen.0.lock().unwrap().is_empty());
    assert_eq!(emu.stats().calls, 0, "nothing reached the service");
}
