//! The one operation enum shared by the quickcheck properties and the fuzz target, and the
//! harness that applies operations to a core and checks the oracle after each. A fuzz finding is
//! a byte string; [`Op::decode_all`] turns it into the same operations a property would run, so
//! it becomes a regression test by pasting the bytes into `tests/fuzz_regressions.rs`.

use std::time::Duration;

use quickcheck::{Arbitrary, Gen};
use zerobus_sink::{
    Bound, ConnGen, Input, Output, Raw, RejectReason, SinkConfig, SinkCore, SlotId, StreamError,
    Time, Token, WindowLimits,
};

use crate::batch::SimBatch;
use crate::oracle::{Oracle, Tally, Violation};

/// One step of a schedule: a submit, something a connection does, or time passing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Submit a batch of `rows` rows (0 is rejected as empty).
    Submit {
        /// Rows in the batch.
        rows: u8,
    },
    /// The slot's opening connection reports READY.
    Ready {
        /// Slot index (taken modulo a few more than the pool has, to reach unknown slots).
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
    /// The slot's connection fails.
    Fail {
        /// Slot index.
        slot: u8,
    },
    /// The service ends the slot's call with OK.
    ServerClose {
        /// Slot index.
        slot: u8,
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

impl Op {
    /// Decodes a byte string into operations (the fuzz target's input format): a tag byte then
    /// the operation's fields, little-endian; a truncated tail is dropped.
    #[must_use]
    pub fn decode_all(mut data: &[u8]) -> Vec<Op> {
        let mut ops = Vec::new();
        while let Some((&tag, rest)) = data.split_first() {
            let need = [1, 1, 3, 5, 3, 1, 1, 4, 2][usize::from(tag % 9)];
            let Some((f, rest)) = rest.split_at_checked(need) else {
                break;
            };
            let u16_at = |i: usize| u16::from_le_bytes([f[i], f[i + 1]]);
            let u32_at = |i: usize| u32::from_le_bytes([f[i], f[i + 1], f[i + 2], f[i + 3]]);
            ops.push(match tag % 9 {
                0 => Op::Submit { rows: f[0] },
                1 => Op::Ready { slot: f[0] },
                2 => Op::Ack {
                    slot: f[0],
                    rows: u16_at(1),
                },
                3 => Op::RawAck {
                    slot: f[0],
                    up_to: u32_at(1),
                },
                4 => Op::StaleAck {
                    slot: f[0],
                    up_to: u16_at(1),
                },
                5 => Op::Fail { slot: f[0] },
                6 => Op::ServerClose { slot: f[0] },
                7 => Op::Tick { ms: u32_at(0) },
                _ => Op::Close {
                    grace_ms: u16_at(0),
                },
            });
            data = rest;
        }
        ops
    }
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Op {
        let slot = u8::arbitrary(g) % 4;
        // Weighted towards the happy path so that schedules make progress.
        match u8::arbitrary(g) % 20 {
            0..=5 => Op::Submit {
                rows: u8::arbitrary(g) % 40,
            },
            6 | 7 => Op::Ready { slot },
            8..=12 => Op::Ack {
                slot,
                rows: u16::arbitrary(g) % 120,
            },
            13 => Op::RawAck {
                slot,
                up_to: u32::arbitrary(g) % 400,
            },
            14 => Op::StaleAck {
                slot,
                up_to: u16::arbitrary(g) % 400,
            },
            15 => Op::Fail { slot },
            16 => Op::ServerClose { slot },
            17 | 18 => Op::Tick {
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

/// Applies [`Op`]s to a small core (3 slots, tight windows, so backpressure and timeouts are
/// reached) and checks the [`Oracle`] after every one.
#[derive(Debug)]
pub struct Harness {
    sink: SinkCore<Raw, SimBatch>,
    oracle: Oracle,
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
            slots: 3,
            window: WindowLimits {
                max_batches: 8,
                max_bytes: 2_000,
                max_rows: 100,
            },
            max_message_bytes: 64,
            ack_timeout: Duration::from_secs(60),
            open_timeout: Duration::from_secs(30),
        }
    }

    /// A harness over a core built with `config`.
    ///
    /// # Panics
    /// If `config` is invalid (a bug in the caller's test).
    #[must_use]
    pub fn new(config: SinkConfig) -> Harness {
        Harness {
            sink: SinkCore::new(config).expect("harness configuration is valid"),
            oracle: Oracle::new(config),
            slots: (0..config.slots).map(|_| SlotModel::default()).collect(),
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
        // One past the pool reaches an unknown slot now and then.
        SlotId::from_index(u16::from(slot) % (self.sink.config().slots + 1))
    }

    /// Applies one operation, drains the core and checks the oracle.
    pub fn apply(&mut self, op: &Op) -> Result<(), Violation> {
        match *op {
            Op::Submit { rows } => self.submit(u64::from(rows))?,
            Op::Ready { slot } => {
                let slot = self.slot(slot);
                if let Some(conn) = self.model(slot).and_then(|m| m.opening) {
                    self.input(Input::Ready { slot, conn });
                }
            }
            Op::Ack { slot, rows } => {
                let slot = self.slot(slot);
                if let Some(m) = self.model(slot).filter(|m| m.live.is_some()) {
                    let up_to = (m.acked + u64::from(rows)).min(m.received);
                    let conn = m.live.unwrap_or(ConnGen::FIRST);
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
            Op::Fail { slot } => {
                let slot = self.slot(slot);
                if let Some(conn) = self.model(slot).and_then(|m| m.live.or(m.opening)) {
                    self.input(Input::Failed {
                        slot,
                        conn,
                        error: StreamError::Eof,
                    });
                }
            }
            Op::ServerClose { slot } => {
                let slot = self.slot(slot);
                if let Some(conn) = self.model(slot).and_then(|m| m.live.or(m.opening)) {
                    self.input(Input::Closed { slot, conn });
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

    fn submit(&mut self, rows: u64) -> Result<(), Violation> {
        let id = self.next_id;
        self.next_id += 1;
        let token = Token::raw("sim", 0, i64::try_from(id).unwrap_or(i64::MAX));
        match self
            .sink
            .submit(self.now, SimBatch::new(id, rows, 8), token)
        {
            Ok(admitted) => self
                .oracle
                .admitted(id, rows, admitted.slot, admitted.offset),
            Err(rejected) => {
                let config = *self.sink.config();
                let w = config.window;
                let every_slot_full = self.sink.slot_ids().all(|s| {
                    let held = self.sink.in_flight(s).unwrap_or_default();
                    held.batches >= u64::from(w.max_batches)
                        || held.bytes + rows * 8 > w.max_bytes
                        || held.rows + rows > w.max_rows
                });
                let expected = match rejected.reason {
                    RejectReason::Empty => rows == 0,
                    RejectReason::Closed => self.closing,
                    RejectReason::TooLarge {
                        bound: Bound::Rows, ..
                    } => rows > w.max_rows,
                    RejectReason::TooLarge { .. } => rows * 8 > w.max_bytes,
                    RejectReason::Full { .. } => every_slot_full,
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
        loop {
            let out = self.sink.poll_output(self.now);
            match &out {
                Output::Timeout(_) => break,
                Output::Open { slot, conn } => {
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
