//! The core's own cost, in wall-clock time on this machine: nanoseconds per submit + send + ack
//! + confirm cycle, for acks that confirm one batch each and for acks that coalesce 64.
//!
//! Run: `cargo bench -p zerobus-sink-testkit --bench core_cycle`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use zerobus_sink::{
    Handled, Input, Output, PoolSizing, Raw, SinkConfig, SinkCore, TableSpec, Time, Token,
    WindowLimits,
};

fn cycles(batch: &RecordBatch, total: u64, per_ack: u64) -> f64 {
    let window = WindowLimits {
        max_batches: 1_000,
        max_bytes: 1 << 30,
        max_rows: 1 << 30,
    };
    let mut sink = SinkCore::<Raw, RecordBatch>::new(SinkConfig {
        window,
        ..SinkConfig::default()
    })
    .expect("config");
    let table = sink
        .add_table(TableSpec::new("main.bench.orders").sizing(PoolSizing::fixed(1)))
        .expect("table");
    let now = Time::ZERO;
    let mut target = None;
    let mut rows_sent = 0;
    let start = Instant::now();
    let mut done = 0;
    while done < total {
        for i in 0..per_ack {
            let token = Token::raw("bench", 0, i64::try_from(done + i).unwrap_or(0));
            sink.submit(now, table, batch.clone(), token)
                .expect("window has room");
        }
        loop {
            match sink.poll_output(now) {
                Output::Open { conn, .. } => {
                    assert_eq!(sink.handle(now, Input::ready(conn)), Handled::Applied);
                }
                Output::Send(t) => {
                    rows_sent += t.rows;
                    target = Some(t.conn);
                    black_box(t.batch);
                }
                Output::Confirmed(burst) => {
                    for c in burst {
                        black_box(c.commit());
                    }
                }
                Output::Timeout(_) => break,
                _ => {}
            }
        }
        let conn = target.expect("sent");
        let handled = sink.handle(now, Input::acked(conn, rows_sent));
        assert_eq!(handled, Handled::Applied, "ack");
        while !matches!(sink.poll_output(now), Output::Timeout(_)) {}
        done += per_ack;
    }
    start.elapsed().as_nanos() as f64 / total as f64
}

fn main() {
    let col: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1_000));
    let batch = RecordBatch::try_from_iter([("id", col)]).expect("batch");
    let total = 2_000_000;
    // Warm up, then measure each shape once (repeat the command to see the spread).
    cycles(&batch, 100_000, 1);
    let one = cycles(&batch, total, 1);
    let many = cycles(&batch, total, 64);
    println!(
        "core cost per submit+send+ack+confirm cycle (1,000-row RecordBatch, {total} cycles):"
    );
    println!("  1 batch per ack:   {one:>8.1} ns");
    println!(
        "  64 batches per ack: {many:>8.1} ns  ({:.2}x cheaper per batch)",
        one / many
    );
}
