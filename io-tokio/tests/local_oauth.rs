//! Credentials tried locally: zerobus-local requiring OAuth client credentials (its token
//! endpoint on loopback, one client id and secret) lands the rows of a sink that has them, and
//! refuses one with a wrong secret (the token endpoint's 401, named with what it said) and one
//! presenting a token it never minted or one that has expired (`UNAUTHENTICATED`, naming
//! which); no secret or token in anything said.

mod common;

use std::time::Duration;

use common::{Recorder, config, orders, table};
use zerobus_sink::{Raw, Token};
use zerobus_sink_testkit::emulator::{Emulator, EmulatorConfig, OAuthClient};
use zerobus_sink_tokio::{Credentials, OAuth, Secret, Sink, ZerobusConfig, ZerobusSink};

const CLIENT: &str = "pipeline";
const SECRET: &str = "local-client-secret-0123456789";

/// zerobus-local requiring `CLIENT` and `SECRET`, and its token endpoint's URL.
async fn requiring_oauth(dir: &tempfile::TempDir) -> (Emulator, String) {
    let client = OAuthClient::new(CLIENT, SECRET, Duration::from_secs(3600));
    let emu = Emulator::start(EmulatorConfig::new(dir.path().join("wal")).oauth(client))
        .await
        .unwrap();
    let (addr, _server) = emu
        .serve_token_endpoint("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    (emu, format!("http://{addr}"))
}

fn oauth(url: &str, secret: &str) -> Credentials {
    Credentials::OAuth(OAuth {
        unity_catalog_url: url.to_owned(),
        workspace_id: "1234567890123456".into(),
        client_id: CLIENT.into(),
        client_secret: Secret::new(secret),
    })
}

/// Sends 3 batches of 10 rows; returns the recorder and everything the sink said.
async fn run(cfg: ZerobusConfig) -> (Recorder, String) {
    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::start(cfg, vec![table(1)], recorder.clone()).unwrap();
    let id = sink.table(common::TABLE).unwrap();
    let mut said = String::new();
    for b in 0..3 {
        if let Err(e) = sink
            .send(id, orders(b * 10, 10), Token::raw("o", 0, b * 10 + 9))
            .await
        {
            said.push_str(&format!("{e} {e:?}\n"));
        }
    }
    said.push_str(&format!("{:?}\n", sink.flush().await));
    let report = sink.close(Duration::from_secs(5)).await;
    said.push_str(&format!("{report}\n"));
    for (_, _, why) in &recorder.seen().failed {
        said.push_str(why);
        said.push('\n');
    }
    (recorder, said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_with_the_client_credentials_lands_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (emu, url) = requiring_oauth(&dir).await;
    let (recorder, said) = run(config(&emu).credentials(oauth(&url, SECRET))).await;
    assert_eq!(recorder.seen().committed, vec![9, 19, 29], "{said}");
    assert!(
        emu.stats()
            .tokens
            .iter()
            .all(|t| t.starts_with("zerobus-local-token-"))
    );
    assert!(!said.contains(SECRET), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_refused_by_the_token_endpoint_naming_what_it_said() {
    let dir = tempfile::tempdir().unwrap();
    let (emu, url) = requiring_oauth(&dir).await;
    let wrong = "not-the-client-secret-987654321";
    let (recorder, said) = run(config(&emu).credentials(oauth(&url, wrong))).await;
    assert!(recorder.seen().committed.is_empty(), "{said}");
    // The first batch fails the table (a refused credential is not retryable); the sends
    // after it are refused at once: nothing is lost silently.
    assert!(!recorder.seen().failed.is_empty(), "{said}");
    assert!(
        said.contains("HTTP 401") && said.contains("invalid_client"),
        "{said}"
    );
    assert!(!said.contains(wrong) && !said.contains(SECRET), "{said}");
    // No stream got through without a token.
    let stats = emu.stats();
    assert_eq!(stats.ready, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_it_never_minted_is_refused_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    let (emu, _url) = requiring_oauth(&dir).await;
    let forged = "forged-token-0123456789";
    let cfg = config(&emu).credentials(Credentials::Bearer(Secret::new(forged)));
    let (recorder, said) = run(cfg).await;
    assert!(recorder.seen().committed.is_empty(), "{said}");
    assert!(!recorder.seen().failed.is_empty(), "{said}");
    assert!(said.contains("Unauthenticated"), "{said}");
    assert!(said.contains("not one this workspace issued"), "{said}");
    assert!(!said.contains(forged), "{said}");
    assert!(
        emu.stats()
            .refused
            .get("Unauthenticated")
            .is_some_and(|n| *n >= 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refused_unauthenticated_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // Tokens that expire as they are minted: every one the sink presents has expired.
    let client = OAuthClient::new(CLIENT, SECRET, Duration::ZERO);
    let emu = Emulator::start(EmulatorConfig::new(dir.path().join("wal")).oauth(client))
        .await
        .unwrap();
    let (addr, _server) = emu
        .serve_token_endpoint("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = format!("http://{addr}");
    let (recorder, said) = run(config(&emu).credentials(oauth(&url, SECRET))).await;
    assert!(recorder.seen().committed.is_empty(), "{said}");
    assert!(!recorder.seen().failed.is_empty(), "{said}");
    assert!(said.contains("Unauthenticated"), "{said}");
    assert!(said.contains("has expired"), "{said}");
    assert!(!said.contains(SECRET), "{said}");
    // The sink asked for a fresh token after the refusal (the official client's one refresh)
    // and gave up when that one was refused too: no storm of token requests.
    let presented = emu.stats().tokens.len();
    assert!(
        (1..=4).contains(&presented),
        "{presented} tokens presented\n{said}"
    );
    assert!(
        !emu.stats().tokens.iter().any(|t| said.contains(t.as_str())),
        "{said}"
    );
}
