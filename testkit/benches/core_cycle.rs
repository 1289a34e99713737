//! The core's own cost per submit + send + ack + confirm cycle, across shapes from one slot to
//! 64 tables x 4 slots, and 1,000 tables x 2 slots under a stream cap of 200, and the heap
//! allocations the core makes per cycle.
//!
//! The caller's own work is kept out of what is timed and counted: its tokens are built before
//! each timed chunk of 4,096 cycles and the committed positions dropped after it, the batch is a
//! synthetic `Copy` type (the adapter's `RecordBatch` clone is the adapter's choice of batch
//! type; see docs/performance.md), and what is left of the caller in the loop is a few index
//! operations on preallocated vectors. Streams are opened before timing. Allocations are
//! counted by `stats_alloc`'s instrumented allocator around each chunk.
//!
//! Run: `cargo bench -p zerobus-sink-testkit --bench core_cycle` (`ZEROBUS_BENCH_CYCLES`,
//! default 2,000,000 per shape; `ZEROBUS_BENCH_REPEAT`, default 5 repetitions per shape;
//! `ZEROBUS_BENCH_SHAPES`, e.g. `1x1,64x4,1000x2/200`, default every shape;
//! `ZEROBUS_BENCH_PER_ACK`, 1 or 64, default both).
//!
//! A shape `T x S / C` registers T tables of S slots under `max_open_streams = C`; the cycles
//! go round-robin over the C / S tables that fit (the rest registered, cold and idle), so the
//! cell shows what the registered tables and the cap cost a batch on a warm table. The turns
//! tables take under the cap (eviction, drain, open) are not in it: the `many_tables` example
//! measures those end to end.

use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use zerobus_sink::{
    Batch, ConnId, Handled, Input, Output, PoolSizing, Raw, SinkConfig, SinkCore, SlotId,
    SourcePosition, TableId, TableSpec, Time, Token,
};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A synthetic batch: rows and bytes, nothing to copy.
#[derive(Clone, Copy)]
struct Rows(u64);

impl Batch for Rows {
    fn rows(&self) -> u64 {
        self.0
    }
    fn bytes(&self) -> u64 {
        self.0 * 8
    }
    fn slice(&self, offset: u64, len: u64) -> Self {
        Rows(len.min(self.0.saturating_sub(offset)))
    }
}

/// Rows per batch: 64 batches per ack stay inside the default window's 60,000 rows.
const ROWS: u64 = 100;
/// Cycles per timed chunk: the tokens for a chunk are built before it.
const CHUNK: u64 = 4_096;

struct Shape {
    tables: u16,
    slots: u16,
    /// `max_open_streams`; `tables x slots` when `None`.
    cap: Option<u16>,
    per_ack: u64,
}

impl Shape {
    /// The tables the cycles go to: those whose streams fit under the cap.
    fn active(&self) -> u16 {
        self.cap
            .map_or(self.tables, |cap| (cap / self.slots).min(self.tables))
    }
}

struct Bench {
    sink: SinkCore<Raw, Rows>,
    /// The tables the cycles go to (the first `Shape::active` registered).
    tables: Vec<TableId>,
    /// Per slot: the live connection and the rows sent on it.
    conns: Vec<Option<(ConnId<Raw>, u64)>>,
    touched: Vec<SlotId>,
    /// Per slot: whether it is in `touched` (a flag, not a scan of `touched`: the caller's
    /// bookkeeping must not grow with the slots it spreads a chunk over).
    is_touched: Vec<bool>,
    committed: Vec<SourcePosition>,
}

impl Bench {
    fn new(shape: &Shape) -> Bench {
        let config = SinkConfig {
            max_open_streams: shape.cap.unwrap_or(shape.tables * shape.slots),
            ..SinkConfig::default()
        };
        let mut sink = SinkCore::<Raw, Rows>::new(config).expect("config");
        let mut tables: Vec<TableId> = (0..shape.tables)
            .map(|t| {
                let spec = TableSpec::new(format!("main.bench.t{t}"))
                    .sizing(PoolSizing::fixed(shape.slots));
                sink.add_table(spec).expect("table")
            })
            .collect();
        tables.truncate(usize::from(shape.active()));
        let slots = usize::from(shape.tables * shape.slots);
        let warm_slots = usize::from(shape.active() * shape.slots);
        let mut bench = Bench {
            sink,
            tables,
            conns: vec![None; slots],
            touched: Vec::with_capacity(slots),
            is_touched: vec![false; slots],
            committed: Vec::with_capacity(CHUNK as usize * 2),
        };
        // Open every stream before timing: one batch per slot.
        let warm: Vec<_> = (0..warm_slots as u64).map(token).collect();
        bench.round(warm, 1);
        bench.committed.clear();
        bench
    }

    /// Submits `tokens` round-robin over the tables, drains, acks every slot that sent,
    /// drains; `per_ack` batches between acks.
    fn round(&mut self, tokens: Vec<Token<Raw>>, per_ack: u64) {
        let mut tokens = tokens.into_iter();
        let mut k = 0usize;
        loop {
            let mut any = false;
            for _ in 0..per_ack {
                let Some(token) = tokens.next() else { break };
                let table = self.tables[k % self.tables.len()];
                k += 1;
                any = true;
                self.sink
                    .submit(Time::ZERO, table, Rows(ROWS), token)
                    .unwrap_or_else(|r| panic!("window has room: {:?}", r.reason));
            }
            if !any {
                break;
            }
            self.drain();
            while let Some(slot) = self.touched.pop() {
                self.is_touched[slot.index()] = false;
                let Some((conn, rows)) = self.conns[slot.index()] else {
                    continue;
                };
                let handled = self.sink.handle(Time::ZERO, Input::acked(conn, rows));
                assert!(matches!(handled, Handled::Applied), "ack: {handled:?}");
                self.drain();
            }
        }
    }

    fn drain(&mut self) {
        loop {
            match self.sink.poll_output(Time::ZERO) {
                Output::Open { conn, .. } => {
                    let handled = self.sink.handle(Time::ZERO, Input::ready(conn));
                    assert_eq!(handled, Handled::Applied);
                    self.conns[conn.slot().index()] = Some((conn, 0));
                }
                Output::Send(t) => {
                    let entry = self.conns[t.conn.slot().index()].as_mut().expect("open");
                    let slot = t.conn.slot();
                    if !self.is_touched[slot.index()] {
                        self.is_touched[slot.index()] = true;
                        self.touched.push(slot);
                    }
                    entry.1 += t.rows;
                    black_box(t.batch);
                }
                Output::Confirmed(burst) => {
                    for c in burst {
                        self.committed.push(c.commit());
                    }
                }
                Output::Timeout(_) => break,
                other => panic!("unexpected output {other:?}"),
            }
        }
    }
}

fn token(i: u64) -> Token<Raw> {
    Token::raw("bench", 0, i64::try_from(i).unwrap_or(0))
}

/// Nanoseconds and allocations per cycle over `cycles` cycles of `shape`.
fn measure(shape: &Shape, cycles: u64) -> (f64, f64) {
    let mut bench = Bench::new(shape);
    let (mut time, mut allocations) = (Duration::ZERO, 0);
    let mut done = 0;
    while done < cycles {
        let n = CHUNK.min(cycles - done);
        let tokens: Vec<_> = (done..done + n).map(token).collect();
        let before = GLOBAL.stats();
        let start = Instant::now();
        bench.round(tokens, shape.per_ack);
        time += start.elapsed();
        let after = GLOBAL.stats();
        allocations +=
            (after.allocations - before.allocations) + (after.reallocations - before.reallocations);
        assert_eq!(bench.committed.len() as u64, n, "every batch confirmed");
        bench.committed.clear();
        done += n;
    }
    (
        time.as_nanos() as f64 / cycles as f64,
        allocations as f64 / cycles as f64,
    )
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let cycles = env("ZEROBUS_BENCH_CYCLES", 2_000_000);
    let repeat = env("ZEROBUS_BENCH_REPEAT", 5);
    let shapes = [
        (1, 1, None),
        (1, 4, None),
        (1, 16, None),
        (16, 4, None),
        (64, 4, None),
        (1000, 2, Some(200)),
    ];
    let name = |(t, s, cap): &(u16, u16, Option<u16>)| match cap {
        Some(c) => format!("{t}x{s}/{c}"),
        None => format!("{t}x{s}"),
    };
    // `ZEROBUS_BENCH_SHAPES=1x1,64x4,1000x2/200` runs only those (e.g. under callgrind).
    let only = std::env::var("ZEROBUS_BENCH_SHAPES").ok();
    // `ZEROBUS_BENCH_PER_ACK=1` (or 64) runs only that column.
    let per_ack_only = std::env::var("ZEROBUS_BENCH_PER_ACK")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let shapes = shapes.into_iter().filter(|shape| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|o| o == name(shape)))
    });
    // Warm up.
    measure(
        &Shape {
            tables: 1,
            slots: 1,
            cap: None,
            per_ack: 1,
        },
        cycles / 10,
    );
    println!(
        "core cost per submit+send+ack+confirm cycle ({cycles} cycles, {repeat} runs, ns min / median / max, allocations per cycle):"
    );
    println!("| tables x slots | 1 batch per ack | allocs | 64 batches per ack | allocs |");
    println!("|---|---|---|---|---|");
    for (tables, slots, cap) in shapes {
        let mut row = match cap {
            Some(cap) => format!("| {tables} x {slots}, cap {cap} |"),
            None => format!("| {tables} x {slots} |"),
        };
        for per_ack in [1, 64] {
            if per_ack_only.is_some_and(|only| only != per_ack) {
                row += " - | - |";
                continue;
            }
            let shape = Shape {
                tables,
                slots,
                cap,
                per_ack,
            };
            let mut ns = Vec::new();
            let mut allocs = 0.0f64;
            for _ in 0..repeat {
                let (n, a) = measure(&shape, cycles);
                ns.push(n);
                allocs = allocs.max(a);
            }
            ns.sort_by(f64::total_cmp);
            row += &format!(
                " {:.0} / {:.0} / {:.0} | {allocs:.3} |",
                ns[0],
                ns[ns.len() / 2],
                ns[ns.len() - 1]
            );
        }
        println!("{row}");
    }
}
