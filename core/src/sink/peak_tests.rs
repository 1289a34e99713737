//! A backlog's peak is given back once it drains (issue 50: the soak's live heap rose at each
//! `kill -9`, with the rows pending then, and stayed: queues kept their high-water marks).

use crate::{
    Handled, Input, Output, PoolSizing, Raw, SinkConfig, SinkCore, TableSpec, Time, Token,
};

#[test]
fn a_backlog_peak_does_not_stay_allocated_after_it_drains() {
    let mut sink = SinkCore::<Raw, Vec<u32>>::new(SinkConfig::default()).expect("config");
    let table = sink
        .add_table(TableSpec::new("main.peak.t").sizing(PoolSizing::fixed(2)))
        .expect("table");
    // A backlog built while no stream is open (as after a kill): the table's queue, then the
    // windows, then the outputs, each well past the room a steady state keeps.
    let mut admitted = 0u64;
    while admitted < 5_000
        && sink
            .submit(
                Time::ZERO,
                table,
                vec![0u32; 10],
                Token::raw("peak", 0, admitted as i64),
            )
            .is_ok()
    {
        admitted += 1;
    }
    assert!(admitted >= 2_000, "only {admitted} batches admitted");
    let mut confirmed = 0u64;
    let mut live: Vec<(crate::ConnId<Raw>, u64)> = Vec::new();
    for _ in 0..1_000 {
        loop {
            match sink.poll_output(Time::ZERO) {
                Output::Open { conn, .. } => {
                    assert_eq!(
                        sink.handle(Time::ZERO, Input::ready(conn)),
                        Handled::Applied
                    );
                    live.push((conn, 0));
                }
                Output::Send(t) => {
                    if let Some(c) = live.iter_mut().find(|(c, _)| *c == t.conn) {
                        c.1 += t.rows;
                    }
                }
                Output::Confirmed(burst) => confirmed += burst.len() as u64,
                Output::Timeout(_) => break,
                _ => {}
            }
        }
        if confirmed == admitted {
            break;
        }
        for &(conn, rows) in &live {
            let _ = sink.handle(Time::ZERO, Input::acked(conn, rows));
        }
    }
    assert_eq!(confirmed, admitted, "every batch confirmed");
    let t = &sink.tables[table.index()];
    assert!(
        t.queue.capacity() <= 256,
        "the queue kept room for {}",
        t.queue.capacity()
    );
    for slot in t.slots() {
        let kept = sink.slots[slot].pending_capacity();
        assert!(
            kept <= 256,
            "slot {slot} kept room for {kept} pending batches"
        );
    }
    assert!(
        sink.outputs.capacity() <= 256,
        "the outputs kept room for {}",
        sink.outputs.capacity()
    );
}
