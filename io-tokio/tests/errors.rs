//! The adapter's error paths, each reached for real: a start that cannot happen, a send the
//! sink refuses or can no longer take, and a receipt that resolves to a failure.

mod common;

use std::sync::Arc;

use arrow_array::{ArrayRef, DictionaryArray, RecordBatch, types::Int32Type};
use common::{Recorder, TABLE, config, emulator, orders, table};
use zerobus_sink::{Raw, SinkConfig, TableId, Token};
use zerobus_sink_testkit::emulator::{Code, Fault};
use zerobus_sink_tokio::{
    DeliveryError, SendError, Sink, StartError, TableDef, ZerobusConfig, ZerobusSink,
};

#[test]
fn start_outside_a_runtime_is_refused() {
    let err = ZerobusSink::<Raw>::start(
        ZerobusConfig::new("http://127.0.0.1:1"),
        vec![table(1)],
        Recorder::default(),
    )
    .unwrap_err();
    assert!(matches!(err, StartError::NoRuntime), "{err}");
}

#[tokio::test]
async fn start_refuses_an_invalid_configuration_naming_the_field_and_the_table() {
    let bad = ZerobusConfig::new("http://127.0.0.1:1").core(SinkConfig {
        max_open_streams: 0,
        ..SinkConfig::default()
    });
    let err = ZerobusSink::<Raw>::start(bad, vec![table(1)], Recorder::default()).unwrap_err();
    assert!(matches!(err, StartError::Config(_)), "{err}");
    assert!(err.to_string().contains("max_open_streams"), "{err}");

    let keys: ArrayRef = Arc::new(DictionaryArray::<Int32Type>::from_iter(["a", "b", "a"]));
    let dict = RecordBatch::try_from_iter([("kind", keys)]).unwrap();
    let def = TableDef::new(TABLE, dict.schema());
    let err = ZerobusSink::<Raw>::start(
        ZerobusConfig::new("http://127.0.0.1:1"),
        vec![def],
        Recorder::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, StartError::Table { table, reason } if table == TABLE && reason.contains("kind")),
        "{err}"
    );
}

#[tokio::test]
async fn a_send_to_a_table_the_sink_does_not_have_comes_back_whole() {
    let sink = ZerobusSink::<Raw>::start(
        ZerobusConfig::new("http://127.0.0.1:1"),
        vec![table(1)],
        Recorder::default(),
    );
    let mut sink = sink.unwrap();
    let nowhere = TableId::from_index(7);
    let err = sink
        .send(nowhere, orders(0, 10), Token::raw("orders", 0, 9))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SendError::UnknownTable { table, .. } if *table == nowhere),
        "{err}"
    );
    let (batch, token) = err.into_parts().expect("the batch and token come back");
    assert_eq!((batch.num_rows(), token.position().offset), (10, 9));
}

#[test]
fn a_send_after_the_sinks_runtime_is_gone_is_stopped_and_gives_the_batch_back() {
    let gone = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut sink = gone
        .block_on(async {
            ZerobusSink::<Raw>::start(
                ZerobusConfig::new("http://127.0.0.1:1"),
                vec![table(1)],
                Recorder::default(),
            )
        })
        .unwrap();
    let id = sink.table(TABLE).unwrap();
    // The runtime the driver ran on shuts down: the driver task is dropped with it.
    drop(gone);
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = other
        .block_on(sink.send(id, orders(0, 10), Token::raw("orders", 0, 9)))
        .unwrap_err();
    assert!(matches!(err, SendError::Stopped { .. }), "{err}");
    let (batch, _) = err
        .into_parts()
        .expect("never reached the driver: it comes back");
    assert_eq!(batch.num_rows(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_resolves_to_the_failure_of_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let emu = emulator(&dir, |c| c).await;
    // The service refuses the table for good (permission): the table fails, the batch is
    // handed back, and its receipt says so.
    emu.inject(
        TABLE,
        Fault::RejectOpen {
            code: Code::NotFound,
        },
    );
    let recorder = Recorder::default();
    let def = TableDef::new(TABLE, common::schema());
    let mut sink = ZerobusSink::<Raw>::start(config(&emu), vec![def], recorder.clone()).unwrap();
    let id = sink.table(TABLE).unwrap();
    let receipt = sink
        .send(id, orders(0, 10), Token::raw("orders", 0, 9))
        .await
        .unwrap();
    match receipt.await {
        Err(DeliveryError::Failed {
            reason,
            durable_rows,
        }) => {
            assert_eq!(durable_rows, 0);
            assert!(reason.to_string().contains("NotFound"), "{reason}");
        }
        other => panic!("expected a failed delivery, got {other:?}"),
    }
    assert_eq!(
        recorder.seen().failed.len(),
        1,
        "the confirmer heard it too"
    );
    let report = sink.close(std::time::Duration::from_secs(5)).await;
    assert_eq!(report.failed_batches, 1);
}
