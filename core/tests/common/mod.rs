//! Helpers shared by the core's integration tests.
#![allow(dead_code)]

use zerobus_sink::{
    ConnId, Handled, Input, Output, PoolSizing, Raw, SinkConfig, SinkCore, SlotId, TableId,
    TableSpec, Time, Token,
};

pub type Sink = SinkCore<Raw, Vec<u8>>;
pub type Out = Output<Raw, Vec<u8>>;

pub fn t(ms: u64) -> Time {
    Time::from_millis(ms)
}

pub fn token(n: i64) -> Token<Raw> {
    Token::raw("orders", 0, n)
}

/// A sink with one order-agnostic table of `slots` slots, and no jitter.
pub fn sink(slots: u16) -> (Sink, TableId) {
    sink_with(slots, SinkConfig::default())
}

pub fn sink_with(slots: u16, mut config: SinkConfig) -> (Sink, TableId) {
    config.retry.jitter = 0.0;
    let mut s = SinkCore::new(config).unwrap();
    let table = s
        .add_table(TableSpec::new("main.bronze.orders").sizing(PoolSizing::fixed(slots)))
        .unwrap();
    (s, table)
}

/// Feeds an ack of `up_to_records` cumulative rows on `conn`; it must not be a violation.
pub fn ack(sink: &mut Sink, now: Time, conn: ConnId<Raw>, up_to_records: u64) {
    let handled = sink.handle(now, Input::acked(conn, up_to_records));
    assert!(
        !matches!(handled, Handled::Violation(_)),
        "ack of {up_to_records} on {conn}: {handled:?}"
    );
}

/// Feeds an input that must be applied.
pub fn apply(sink: &mut Sink, now: Time, input: Input<Raw>) {
    let handled = sink.handle(now, input.clone());
    assert_eq!(handled, Handled::Applied, "{input:?}");
}

/// Drains outputs, answering every Open with Ready at once; returns everything else.
pub fn drain(sink: &mut Sink, now: Time) -> Vec<Out> {
    let mut seen = Vec::new();
    loop {
        match sink.poll_output(now) {
            Output::Open { conn, .. } => apply(sink, now, Input::ready(conn)),
            Output::Timeout(_) => return seen,
            other => seen.push(other),
        }
    }
}

/// Drains outputs without answering anything.
pub fn drain_raw(sink: &mut Sink, now: Time) -> Vec<Out> {
    std::iter::from_fn(|| match sink.poll_output(now) {
        Output::Timeout(_) => None,
        o => Some(o),
    })
    .collect()
}

/// (slot, conn, wire offset, logical offset, rows) of every Send.
pub fn sends(outputs: &[Out]) -> Vec<(SlotId, ConnId<Raw>, u64, u64, u64)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send(t) => Some((
                t.conn.slot(),
                t.conn,
                t.wire_offset.get(),
                t.offset.get(),
                t.rows,
            )),
            _ => None,
        })
        .collect()
}

pub fn confirmed_positions(outputs: Vec<Out>) -> Vec<i64> {
    outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Confirmed(c) => {
                Some(c.into_iter().map(|c| c.commit().offset).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

pub fn failed(outputs: Vec<Out>) -> Vec<zerobus_sink::Failed<Raw, Vec<u8>>> {
    outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Failed(f) => Some(f),
            _ => None,
        })
        .collect()
}

/// A compact line per output, for transcript tests.
pub fn transcript(outputs: &[Out]) -> Vec<String> {
    outputs.iter().map(|o| format!("{o:?}")).collect()
}

/// The deadline of an `Output::Timeout`, `None` for any other output.
pub trait TimeoutOf {
    fn timeout(self) -> Option<Option<Time>>;
}

impl TimeoutOf for Out {
    fn timeout(self) -> Option<Option<Time>> {
        match self {
            Output::Timeout(at) => Some(at),
            _ => None,
        }
    }
}
