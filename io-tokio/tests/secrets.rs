//! Secrets never leave: a bearer token the service refuses and an OAuth client secret (with
//! the tokens minted from it) are used on the wire, and then looked for in everything the sink
//! says: its logs at TRACE (spans included), the reasons batches were handed back, the flush
//! error, the report, the health tree and the configuration's `Debug`. None may hold them.
//! The same logs show the span tree: table > stream > connection, each with its id.

mod common;

use common::{Logs, Recorder, config, emulator, orders, table};
use zerobus_sink::{Raw, Token};
use zerobus_sink_testkit::uc_stub::UcStub;
use zerobus_sink_tokio::{Credentials, OAuth, Secret, Sink, ZerobusConfig, ZerobusSink};

const BEARER: &str = "dapi-SECRET-bearer-0123456789";

/// Runs 3 batches through a sink with `cfg`; returns everything it said.
async fn said(cfg: ZerobusConfig) -> String {
    let mut out = format!("{cfg:?}\n");
    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::start(cfg, vec![table(1)], recorder.clone()).unwrap();
    let id = sink.table(common::TABLE).unwrap();
    for b in 0..3 {
        match sink
            .send(id, orders(b * 10, 10), Token::raw("o", 0, b * 10 + 9))
            .await
        {
            Ok(receipt) => out.push_str(&format!("{:?}\n", receipt.await)),
            Err(e) => out.push_str(&format!("{e} {e:?}\n")),
        }
    }
    out.push_str(&format!("{:?}\n", sink.flush().await));
    if let Some(h) = sink.health().await {
        out.push_str(&h.to_json());
    }
    let report = sink.close(std::time::Duration::from_secs(5)).await;
    out.push_str(&format!("{report}\n{report:?}\n"));
    for (_, _, why) in &recorder.seen().failed {
        out.push_str(why);
        out.push('\n');
    }
    out
}

#[tokio::test]
async fn no_token_or_client_secret_appears_in_logs_errors_or_debug_output() {
    // A current-thread runtime: the driver, its connections and the emulator log here.
    let (logs, _guard) = Logs::capture(tracing::Level::TRACE);
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;

    // A bearer token the service refuses: the table fails after one refresh.
    emu.reject_token(BEARER);
    let bearer = config(&emu).credentials(Credentials::Bearer(Secret::new(BEARER)));
    let mut everything = said(bearer).await;
    assert!(
        everything.contains("Unauthenticated") || everything.contains("credentials"),
        "the refusal is reported: {everything}"
    );

    // OAuth: the first minted token is refused, the second serves.
    let uc = UcStub::start().await;
    emu.reject_token("stub-token-1");
    let oauth = OAuth {
        unity_catalog_url: uc.url(),
        workspace_id: "1234567890".into(),
        client_id: UcStub::CLIENT_ID.into(),
        client_secret: Secret::new(UcStub::CLIENT_SECRET),
    };
    everything.push_str(&said(config(&emu).credentials(Credentials::OAuth(oauth))).await);
    // The secrets were used (so the test can fail): each token reached the service.
    let presented = emu.stats().tokens;
    for token in [BEARER, "stub-token-1", "stub-token-2"] {
        assert!(
            presented.iter().any(|t| t == token),
            "{token} was presented"
        );
    }
    assert_eq!(uc.tokens_minted(), 2);

    let logged = logs.text();
    assert!(logged.lines().count() > 20, "the sink logged: {logged}");
    everything.push_str(&logged);
    for secret in [
        BEARER,
        UcStub::CLIENT_SECRET,
        "stub-token-1",
        "stub-token-2",
    ] {
        let at = everything.find(secret);
        assert!(
            at.is_none(),
            "{secret} leaked: ...{}...",
            at.map(|i| &everything[i.saturating_sub(200)..(i + 50).min(everything.len())])
                .unwrap_or_default()
        );
    }
    // The values derived at start are logged once per table.
    assert!(
        logged.contains("table registered") && logged.contains("streams=1"),
        "{logged}"
    );
    // The span tree, with every id.
    assert!(
        logged.contains("table{table=main.bronze.orders}:stream{slot=slot 0}:connection{conn="),
        "{logged}"
    );
}
