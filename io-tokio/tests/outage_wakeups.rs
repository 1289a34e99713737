//! The driver's wake-ups through a long outage follow the backoff schedule, never a busy loop.
//!
//! On tokio's paused clock, ten virtual minutes against an endpoint where nothing listens (and
//! against a token endpoint that is down) with 1 and 500 batches waiting. The clock is moved by
//! hand (`advance`), so a driver that spins cannot hang the test: it runs up its wake-ups and
//! fails the bound instead. The bound comes from the schedule: each round of a stream's
//! reconnects (the core's backoff) and each resubmission round (the resubmit policy) may wake
//! the driver a few times; a spinning driver wakes hundreds of times per virtual second.

mod common;

use std::time::Duration;

use common::{Recorder, orders, schema};
use zerobus_sink::{Raw, SinkConfig, Token};
use zerobus_sink_tokio::{
    Credentials, OAuth, ProxyConfig, ResubmitPolicy, Secret, Sink, TableDef, ZerobusConfig,
    ZerobusSink,
};

const TABLE: &str = "main.bronze.orders";
const OUTAGE: Duration = Duration::from_secs(600);

/// A loopback port where nothing listens (bound, then let go).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Wake-ups the schedule allows: a few per reopen the backoff paces within the outage, in each
/// round of resubmission; not per batch (the batches of a round are handed back, and wait,
/// together).
fn allowed(batches: u64) -> u64 {
    let policy = ResubmitPolicy::default();
    let retry = SinkConfig::default().retry;
    // Reopens within the outage if the backoff alone paced them (2 s doubling to 60 s).
    let (mut at, mut step, mut reopens) = (Duration::ZERO, retry.initial_backoff, 0u64);
    while at < OUTAGE {
        at += step;
        step = (step * 2).min(retry.max_backoff);
        reopens += 1;
    }
    let rounds = 1 + u64::from(policy.max_attempts);
    // Measured: 32-36 wake-ups with one batch, 47-49 with 500 (21,322 before the fix).
    let _ = batches;
    4 * reopens * rounds + 16
}

async fn outage(config: ZerobusConfig, batches: u64) -> (u64, u64, usize) {
    let table = TableDef::new(TABLE, schema());
    let recorder = Recorder::default();
    let mut sink = ZerobusSink::<Raw>::start(config, vec![table], recorder.clone()).unwrap();
    let observer = sink.observer();
    let id = sink.table(TABLE).unwrap();
    // The sends wait while the window is full: they run beside the clock.
    let sends = tokio::spawn(async move {
        // 1,000 rows a batch: 500 of them are more than a stream's window holds (60,000
        // rows), so handed-back batches find it full when they are resubmitted.
        for i in 0..batches as i64 {
            let token = Token::raw("o", 0, i * 1000 + 999);
            if sink.send(id, orders(i * 1000, 1000), token).await.is_err() {
                break;
            }
        }
        sink
    });
    // Each report asked wakes the driver once itself: those wake-ups are taken out.
    let step = Duration::from_secs(5);
    let (mut passed, mut asked) = (Duration::ZERO, 0);
    let mut wakeups = 0;
    while passed < OUTAGE {
        tokio::time::advance(step).await;
        passed += step;
        asked += 1;
        let woke = observer.report().await.expect("the driver answers").wakeups;
        wakeups = woke.saturating_sub(asked);
        // A spinning driver would pass any bound within a few virtual seconds: stop there.
        if wakeups > 100_000 {
            break;
        }
    }
    let sink = sends.await.unwrap();
    let failed = recorder.seen().failed.len();
    drop(sink);
    (wakeups, passed.as_secs(), failed)
}

fn down(port: u16) -> ZerobusConfig {
    ZerobusConfig::new(format!("http://127.0.0.1:{port}")).proxy(ProxyConfig::Direct)
}

async fn check(config: ZerobusConfig, batches: u64, what: &str) {
    let bound = allowed(batches);
    let (wakeups, secs, failed) = outage(config, batches).await;
    println!(
        "{what}, {batches} batches: {wakeups} wake-ups in {secs} s (bound {bound}), {failed} failed"
    );
    assert!(
        wakeups <= bound,
        "{what}, {batches} batches: the driver woke {wakeups} times in {secs} virtual seconds; \
         the backoff schedule allows {bound}"
    );
    // The outage outlasts every retry: each batch has been handed to the confirmer, none lost.
    assert!(
        failed >= 1,
        "{what}: no batch was handed back after a {secs} s outage"
    );
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_down_for_ten_minutes_wakes_the_driver_by_the_backoff_schedule() {
    let port = closed_port();
    check(down(port), 1, "endpoint down").await;
    check(down(port), 500, "endpoint down").await;
}

#[tokio::test(start_paused = true)]
async fn a_token_endpoint_down_for_ten_minutes_wakes_the_driver_by_the_backoff_schedule() {
    let (zerobus, tokens) = (closed_port(), closed_port());
    let oauth = |c: ZerobusConfig| {
        c.credentials(Credentials::OAuth(OAuth {
            unity_catalog_url: format!("http://127.0.0.1:{tokens}"),
            workspace_id: "1234567890123456".into(),
            client_id: "pipeline".into(),
            client_secret: Secret::new("not-a-real-secret"),
        }))
    };
    check(oauth(down(zerobus)), 1, "token endpoint down").await;
    check(oauth(down(zerobus)), 500, "token endpoint down").await;
}
