//! The one operation enum shared by the quickcheck properties and the fuzz target, and the
//! harness that applies operations to a core and checks the oracle after each. A fuzz finding is
//! a byte string; [`Op::decode_all`] turns it into the same operations a property would run, so
//! it becomes a regression test by pasting the bytes into `tests/fuzz_regressions.rs`.

use std::time::Duration;

use quickcheck::{Arbitrary, Gen};
use zerobus_sink::{
    Bound, Code, ConnGen, Input, Output, PoolSizing, Raw, RejectReason, RetryPolicy, SchemaCause,
    SinkConfig, SinkCore, SlotId, StreamError, TableId, TableSpec, Time, Token, WindowLimits,
};

use crate::batch::SimBatch;
use crate::oracle::{Oracle, Tally, Violation};

/// One step of a schedule: a submit, something a connection does, or time passing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Submit a batch of `rows` rows to the order-agnostic table (0 is rejected as empty).
    Submit {
        /// Rows in the batch.
        rows: u8,
    },
    /// Submit a batch of `rows` rows to the keyed table, with ordering key `key`.
    SubmitKeyed {
        /// The key's hash.
        key: u8,
        /// Rows in the batch.
        rows: u8,
    },
    /// The slot's opening connection reports READY.
    Ready {
        /// Slot index (taken modulo one more than the sink has, to reach an unknown slot).
        slot: u8,
    },
    /// The service makes `rows` more of what it received on the slot's live connection durable
    /// and acks the cumulative count.
    Ack {
        /// Slot index.
        slot: u8,
        /// More durable rows.
        rows: u16,
    },
    /// An ack with an arbitrary cumulative count: possibly forward, backward or before READY.
    RawAck {
        /// Slot index.
        slot: u8,
        /// The cumulative count claimed.
        up_to: u32,
    },
    /// An ack tagged with an earlier connection generation of the slot.
    StaleAck {
        /// Slot index.
        slot: u8,
        /// The cumulative count claimed.
        up_to: u16,
    },
    /// The slot's connection fails with error `kind` (see [`Op::error`]).
    Fail {
        /// Slot index.
        slot: u8,
        /// Which error.
        kind: u8,
    },
    /// The service ends the slot's call with OK.
    ServerClose {
        /// Slot index.
        slot: u8,
    },
    /// The service asks the slot's stream to rotate within `grace_ms`.
    Rotate {
        /// Slot index.
        slot: u8,
        /// The grace period in milliseconds.
        grace_ms: u16,
    },
    /// Time passes.
    Tick {
        /// Milliseconds.
        ms: u32,
    },
    /// The sink is asked to close within `grace_ms`.
    Close {
        /// Milliseconds until the close deadline.
        grace_ms: u16,
    },
}

const FIELD_BYTES: [usize; 11] = [1, 2, 1, 3, 5, 3, 2, 1, 3, 4, 2];

impl Op {
    /// Decodes a byte string into operations (the fuzz target's input format): a tag byte then
    /// the operation's fields, little-endian; a truncated tail is dropped.
    #[must_use]
    pub fn decode_all(mut data: &[u8]) -> Vec<Op> {
        let mut ops = Vec::new();
        while let Some((&tag, rest)) = data.split_first() {
            let kind = usize::from(tag) % FIELD_BYTES.len();
            let Some((f, rest)) = rest.split_at_checked(FIELD_BYTES[kind]) else {
                break;
            };
            let u16_at = |i: usize| u16::from_le_bytes([f[i], f[i + 1]]);
            let u32_at = |i: usize| u32::from_le_bytes([f[i], f[i + 1], f[i + 2], f[i + 3]]);
            ops.push(match kind {
                0 => Op::Submit { rows: f[0] },
                1 => Op::SubmitKeyed {
                    key: f[0],
                    rows: f[1],
                },
                2 => Op::Ready { slot: f[0] },
                3 => Op::Ack {
                    slot: f[0],
                    rows: u16_at(1),
                },
                4 => Op::RawAck {
                    slot: f[0],
                    up_to: u32_at(1),
                },
                5 => Op::StaleAck {
                    slot: f[0],
                    up_to: u16_at(1),
                },
                6 => Op::Fail {
                    slot: f[0],
                    kind: f[1],
                },
                7 => Op::ServerClose { slot: f[0] },
                8 => Op::Rotate {
                    slot: f[0],
                    grace_ms: u16_at(1),
                },
                9 => Op::Tick { ms: u32_at(0) },
                _ => Op::Close {
                    grace_ms: u16_at(0),
                },
            });
            data = rest;
        }
        ops
    }

    /// Encodes operations in the format [`decode_all`](Self::decode_all) reads, so a schedule
    /// can be turned into a fuzz seed and a fuzz finding printed as operations.
    #[must_use]
    pub fn encode_all(ops: &[Op]) -> Vec<u8> {
        let mut out = Vec::new();
        for op in ops {
            match *op {
                Op::Submit { rows } => out.extend([0, rows]),
                Op::SubmitKeyed { key, rows } => out.extend([1, key, rows]),
                Op::Ready { slot } => out.extend([2, slot]),
                Op::Ack { slot, rows } => {
                    out.extend([[3, slot].as_slice(), &rows.to_le_bytes()].concat())
                }
                Op::RawAck { slot, up_to } => {
                    out.extend([[4, slot].as_slice(), &up_to.to_le_bytes()].concat())
                }
                Op::StaleAck { slot, up_to } => {
                    out.extend([[5, slot].as_slice(), &up_to.to_le_bytes()].concat())
                }
                Op::Fail { slot, kind } => out.extend([6, slot, kind]),
                Op::ServerClose { slot } => out.extend([7, slot]),
                Op::Rotate { slot, grace_ms } => {
                    out.extend([[8, slot].as_slice(), &grace_ms.to_le_bytes()].concat())
                }
                Op::Tick { ms } => out.extend([[9].as_slice(), &ms.to_le_bytes()].concat()),
                Op::Close { grace_ms } => {
                    out.extend([[10].as_slice(), &grace_ms.to_le_bytes()].concat())
                }
            }
        }
        out
    }

    /// The error a [`Op::Fail`] of `kind` reports: one of each class the core tells apart.
    #[must_use]
    pub fn error(kind: u8) -> StreamError {
        let status = |code| StreamError::Status {
            code,
            message: format!("{code:?} (harness)"),
        };
        match kind % 8 {
            0 => StreamError::Eof,
            1 => status(Code::Unavailable),
            2 => status(Code::ResourceExhausted),
            3 => status(Code::Unauthenticated),
            4 => StreamError::Transport {
                message: "reset (harness)".into(),
            },
            5 => status(Code::Internal),
            6 => status(Code::NotFound),
            _ => StreamError::SchemaRejected {
                causes: vec![SchemaCause::FieldNotInTable],
                error_code: None,
                message: "harness".into(),
            },
        }
    }
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Op {
        let slot = u8::arbitrary(g) % 6;
        // Weighted towards the happy path so that schedules make progress; fatal errors rare.
        match u8::arbitrary(g) % 32 {
            0..=6 => Op::Submit {
                rows: u8::arbitrary(g) % 40,
            },
            7 | 8 => Op::SubmitKeyed {
                key: u8::arbitrary(g) % 5,
                rows: u8::arbitrary(g) % 40,
            },
            9..=11 => Op::Ready { slot },
            12..=18 => Op::Ack {
                slot,
                rows: u16::arbitrary(g) % 120,
            },
            19 => Op::RawAck {
                slot,
                up_to: u32::arbitrary(g) % 400,
            },
            20 => Op::StaleAck {
                slot,
                up_to: u16::arbitrary(g) % 400,
            },
            21 | 22 => Op::Fail {
                slot,
                kind: u8::arbitrary(g) % if bool::arbitrary(g) { 6 } else { 8 },
            },
            23 => Op::ServerClose { slot },
            24 => Op::Rotate {
                slot,
                grace_ms: u16::arbitrary(g) % 5_000,
            },
            25..=29 => Op::Tick {
                ms: u32::arbitrary(g) % 90_000,
            },
            _ => Op::Close {
                grace_ms: u16::arbitrary(g),
            },
        }
    }
}

#[derive(Debug, Default)]
struct SlotModel {
    opening: Option<ConnGen>,
    live: Option<ConnGen>,
    received: u64,
    acked: u64,
    old: Vec<ConnGen>,
}

/// Applies [`Op`]s to a small core and checks the [`Oracle`] after every one: an
/// order-agnostic table of 3 slots and a keyed table of 2, under a cap of 4 streams (so one
/// table is evicted when the other needs its pool), with tight windows so that backpressure,
/// timeouts and retry budgets are reached.
#[derive(Debug)]
pub struct Harness {
    sink: SinkCore<Raw, SimBatch>,
    oracle: Oracle,
    tables: [TableId; 2],
    slots: Vec<SlotModel>,
    now: Time,
    next_id: u64,
    closing: bool,
}

impl Default for Harness {
    fn default() -> Harness {
        Harness::new(Harness::config())
    }
}

impl Harness {
    /// The configuration the properties and the fuzz target use.
    #[must_use]
    pub fn config() -> SinkConfig {
        SinkConfig {
            window: WindowLimits {
                max_batches: 8,
                max_bytes: 2_000,
                max_rows: 100,
            },
            max_open_streams: 4,
            min_residency: Duration::from_secs(10),
            max_message_bytes: 64,
            ack_timeout: Duration::from_secs(60),
            open_timeout: Duration::from_secs(30),
            retry: RetryPolicy {
                max_attempts: 3,
                ..RetryPolicy::default()
            },
        }
    }

    /// A harness over a core built with `config`.
    ///
    /// # Panics
    /// If `config` is invalid or below 3 streams (a bug in the caller's test).
    #[must_use]
    pub fn new(config: SinkConfig) -> Harness {
        let mut sink = SinkCore::new(config).expect("harness configuration is valid");
        let plain = sink
            .add_table(TableSpec::new("main.sim.plain").sizing(PoolSizing::fixed(3)))
            .expect("table");
        let keyed = sink
            .add_table(
                TableSpec::new("main.sim.keyed")
                    .sizing(PoolSizing::fixed(2))
                    .keyed(),
            )
            .expect("table");
        let slots = sink.slot_ids().map(|_| SlotModel::default()).collect();
        Harness {
            sink,
            oracle: Oracle::new(config),
            tables: [plain, keyed],
            slots,
            now: Time::ZERO,
            next_id: 0,
            closing: false,
        }
    }

    /// Runs `ops` then [`finish`](Self::finish)es.
    pub fn run(ops: &[Op]) -> Result<Tally, Violation> {
        let mut h = Harness::default();
        for op in ops {
            h.apply(op)?;
        }
        h.finish()
    }

    fn slot(&self, slot: u8) -> SlotId {
        // One past the sink's slots reaches an unknown slot now and then.
        let n = u16::try_from(self.slots.len()).unwrap_or(u16::MAX);
        SlotId::from_index(u16::from(slot) % (n + 1))
    }

    /// Applies one operation, drains the core and checks the oracle.
    pub fn apply(&mut self, op: &Op) -> Result<(), Violation> {
        match *op {
            Op::Submit { rows } => self.submit(self.tables[0].into(), None, u64::from(rows))?,
            Op::SubmitKeyed { key, rows } => self.submit(
                self.tables[1].key(u64::from(key)),
                Some(key),
                u64::from(rows),
            )?,
            Op::Ready { slot } => {
                let slot = self.slot(slot);
                if let Some(conn) = self.model(slot).and_then(|m| m.opening) {
                    self.input(Input::Ready { slot, conn });
                }
            }
            Op::Ack { slot, rows } => {
                let slot = self.slot(slot);
                if let Some((conn, up_to)) = self
                    .model(slot)
                    .and_then(|m| Some((m.live?, (m.acked + u64::from(rows)).min(m.received))))
                {
                    self.ack(slot, conn, up_to);
                }
            }
            Op::RawAck { slot, up_to } => {
                let slot = self.slot(slot);
                let conn = self
                    .model(slot)
                    .and_then(|m| m.live.or(m.opening))
                    .unwrap_or(ConnGen::FIRST);
                self.ack(slot, conn, u64::from(up_to));
            }
            Op::StaleAck { slot, up_to } => {
                let slot = self.slot(slot);
                if let Some(&conn) = self.model(slot).and_then(|m| m.old.last()) {
                    self.ack(slot, conn, u64::from(up_to));
                }
            }
            Op::Fail { slot, kind } => {
                let slot = self.slot(slot);
                if let Some(conn) = self
                    .model(slot)
                    .and_then(|m| m.live.or(m.opening).or(m.old.last().copied()))
                {
                    self.input(Input::Failed {
                        slot,
                        conn,
                        error: Op::error(kind),
                    });
                }
            }
            Op::ServerClose { slot } => {
                let slot = self.slot(slot);
                if let Some(conn) = self
                    .model(slot)
                    .and_then(|m| m.live.or(m.opening).or(m.old.last().copied()))
                {
                    self.input(Input::Closed { slot, conn });
                }
            }
            Op::Rotate { slot, grace_ms } => {
                let slot = self.slot(slot);
                if let Some(conn) = self.model(slot).and_then(|m| m.live) {
                    self.input(Input::Rotate {
                        slot,
                        conn,
                        grace: Duration::from_millis(u64::from(grace_ms)),
                    });
                }
            }
            Op::Tick { ms } => self.now = self.now + Duration::from_millis(u64::from(ms)),
            Op::Close { grace_ms } => {
                self.closing = true;
                self.sink.close(
                    self.now,
                    self.now + Duration::from_millis(u64::from(grace_ms)),
                );
            }
        }
        self.drain()
    }

    fn model(&self, slot: SlotId) -> Option<&SlotModel> {
        self.slots.get(slot.index())
    }

    fn submit(
        &mut self,
        route: zerobus_sink::Route,
        key: Option<u8>,
        rows: u64,
    ) -> Result<(), Violation> {
        let id = self.next_id;
        self.next_id += 1;
        let table = route.table();
        let token = Token::raw("sim", 0, i64::try_from(id).unwrap_or(i64::MAX));
        match self
            .sink
            .submit(self.now, route, SimBatch::new(id, rows, 8), token)
        {
            Ok(_) => self.oracle.admitted(id, rows, table),
            Err(rejected) => {
                let w = self.sink.config().window;
                let held = match key {
                    Some(key) => {
                        let slots: Vec<SlotId> = self.sink.table_slots(table).collect();
                        let slot = slots[usize::from(key) % slots.len()];
                        (self.sink.in_flight(slot).unwrap_or_default(), 1)
                    }
                    None => (
                        self.sink.queued(table).unwrap_or_default(),
                        self.sink.table_slots(table).count() as u64,
                    ),
                };
                let (h, n) = held;
                let full = h.batches >= u64::from(w.max_batches) * n
                    || h.bytes + rows * 8 > w.max_bytes * n
                    || h.rows + rows > w.max_rows * n;
                let expected = match rejected.reason {
                    RejectReason::Empty => rows == 0,
                    RejectReason::Closed => self.closing,
                    RejectReason::TableFailed { .. } => self.sink.table_failed(table),
                    RejectReason::TooLarge {
                        bound: Bound::Rows, ..
                    } => rows > w.max_rows,
                    RejectReason::TooLarge { .. } => rows * 8 > w.max_bytes,
                    RejectReason::Full { .. } => full,
                    _ => false,
                };
                if expected {
                    Ok(())
                } else {
                    Err(Violation {
                        invariant: 1,
                        message: format!("submit of {rows} rows refused: {}", rejected.reason),
                    })
                }
            }
        }
    }

    fn ack(&mut self, slot: SlotId, conn: ConnGen, up_to: u64) {
        if self
            .sink
            .handle(
                self.now,
                Input::Acked {
                    slot,
                    conn,
                    up_to_records: up_to,
                },
            )
            .is_ok()
        {
            self.oracle.acked(slot, conn, up_to);
            if let Some(m) = self
                .slots
                .get_mut(slot.index())
                .filter(|m| m.live == Some(conn))
            {
                m.acked = m.acked.max(up_to.min(m.received));
            }
        }
    }

    fn input(&mut self, input: Input) {
        let (slot, conn) = input.target();
        let ready = matches!(input, Input::Ready { .. });
        if self.sink.handle(self.now, input).is_ok()
            && ready
            && let Some(m) = self
                .slots
                .get_mut(slot.index())
                .filter(|m| m.opening == Some(conn))
        {
            m.opening = None;
            m.live = Some(conn);
            m.received = 0;
            m.acked = 0;
        }
    }

    fn drain(&mut self) -> Result<(), Violation> {
        self.oracle.set_now(self.now);
        loop {
            let out = self.sink.poll_output(self.now);
            match &out {
                Output::Timeout(_) => break,
                Output::Open { slot, conn, .. } => {
                    if let Some(m) = self.slots.get_mut(slot.index()) {
                        m.opening = Some(*conn);
                    }
                }
                Output::Send(t) => {
                    if let Some(m) = self.slots.get_mut(t.slot.index()) {
                        m.received += t.rows;
                    }
                }
                Output::Close { slot, conn, .. } => {
                    if let Some(m) = self.slots.get_mut(slot.index()) {
                        m.opening = None;
                        m.live = None;
                        m.old.push(*conn);
                    }
                }
                _ => {}
            }
            self.oracle.output(out)?;
        }
        self.oracle.check(&self.sink)
    }

    /// Closes the sink (if the schedule did not), lets the close deadline pass and checks that
    /// every admitted batch ended exactly once (invariant 5).
    pub fn finish(mut self) -> Result<Tally, Violation> {
        self.apply(&Op::Close { grace_ms: 1_000 })?;
        self.apply(&Op::Tick { ms: 120_000 })?;
        self.oracle.finish(&self.sink)
    }
}
