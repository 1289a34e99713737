//! The one operation enum shared by the quickcheck properties and the fuzz target, and the
//! harness that applies operations to a core and checks the oracle after each. A fuzz finding is
//! a byte string; [`Op::decode_all`] turns it into the same operations a property would run, so
//! it becomes a regression test by pasting the bytes into `tests/fuzz_regressions.rs`.

use std::time::Duration;

use quickcheck::{Arbitrary, Gen};
use zerobus_sink::{
    Batch, Code, ConnId, ErrorInfo, Handled, Input, Output, PoolSizing, Raw, RetryPolicy, SchemaId,
    SinkConfig, SinkCore, SlotId, StreamError, TableId, TableSpec, Time, Token, WindowLimits,
};

use crate::batch::SimBatch;
use crate::oracle::{Checks, Oracle, Tally, Violation};

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
    /// The service acks again the count it last acked on the slot's live connection (the same
    /// offset repeated, official SDK issue #639): no progress, so it must not hold off the
    /// connection's ack deadline (the oracle's invariant 11 checks every `Timeout` against it).
    RepeatAck {
        /// Slot index.
        slot: u8,
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
    /// The source's schema for the provisioned table drifts: later submits carry a new one.
    /// With `hold`, the catalog does not answer reconciles until [`Op::Reconciled`].
    Drift {
        /// Hold the next reconcile answers.
        hold: bool,
    },
    /// The catalog answers the oldest held reconcile: reconciled, or refused.
    Reconciled {
        /// Reconciled (`false`: refused).
        ok: bool,
    },
    /// The caller flushes: the core deals each table's queue over its streams.
    Flush,
    /// The driver drains `poll_output` again at the same instant, `1 + times % 3` times, with
    /// no input in between: each drain must find nothing to do (invariant 13, a fixed point).
    PollAgain {
        /// How many more drains, modulo 3, less one.
        times: u8,
    },
}

const FIELD_BYTES: [usize; 11] = [1, 2, 1, 3, 5, 3, 2, 1, 3, 4, 2];
/// Tags from here on are the catalog's operations (below it, `tag % 11` as before, so older
/// fuzz findings decode as they did).
const CATALOG_TAGS: u8 = 242;
const RECONCILED_TAG: u8 = 249;
/// A repeated ack (it was the last of the drift tags, 242 to 248; it keeps that operation's one
/// field byte, so older inputs keep their length and framing).
const REPEAT_ACK_TAG: u8 = 248;
/// A drain again at the same instant (it was the last reconcile answer's tag; it keeps that
/// operation's one field byte, so an older input decodes op for op as before, each of its
/// tag-254 answers now a poll again).
const POLL_AGAIN_TAG: u8 = 254;
/// The last tag is a flush, which has no fields (it was a reconcile answer before flushes were
/// operations).
const FLUSH_TAG: u8 = 255;

impl Op {
    /// Decodes a byte string into operations (the fuzz target's input format): a tag byte then
    /// the operation's fields, little-endian; a truncated tail is dropped.
    #[must_use]
    pub fn decode_all(mut data: &[u8]) -> Vec<Op> {
        let mut ops = Vec::new();
        while let Some((&tag, rest)) = data.split_first() {
            if tag == FLUSH_TAG {
                ops.push(Op::Flush);
                data = rest;
                continue;
            }
            if tag >= CATALOG_TAGS {
                let Some((&f, rest)) = rest.split_first() else {
                    break;
                };
                ops.push(if tag == REPEAT_ACK_TAG {
                    Op::RepeatAck { slot: f }
                } else if tag < RECONCILED_TAG {
                    Op::Drift { hold: f & 1 == 1 }
                } else if tag == POLL_AGAIN_TAG {
                    Op::PollAgain { times: f }
                } else {
                    Op::Reconciled { ok: f & 1 == 1 }
                });
                data = rest;
                continue;
            }
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
                Op::Drift { hold } => out.extend([CATALOG_TAGS, u8::from(hold)]),
                Op::RepeatAck { slot } => out.extend([REPEAT_ACK_TAG, slot]),
                Op::Reconciled { ok } => out.extend([RECONCILED_TAG, u8::from(ok)]),
                Op::Flush => out.push(FLUSH_TAG),
                Op::PollAgain { times } => out.extend([POLL_AGAIN_TAG, times]),
            }
        }
        out
    }

    /// The error a [`Op::Fail`] of `kind` reports: one of each class the core tells apart.
    #[must_use]
    pub fn error(kind: u8) -> StreamError {
        let status = |code| StreamError::status(code, format!("{code:?} (harness)"));
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
            _ => StreamError::Status {
                code: Code::InvalidArgument,
                message: "harness".into(),
                info: Some(Box::new(ErrorInfo {
                    reason: "SCHEMA_VALIDATION_FAILED".into(),
                    domain: "zerobus.databricks.com".into(),
                    causes: Some("FIELD_NOT_IN_TABLE".into()),
                    error_code: Some("8001".into()),
                })),
            },
        }
    }
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Op {
        let slot = u8::arbitrary(g) % 6;
        // Weighted towards the happy path so that schedules make progress; fatal errors rare.
        // Now and then a value beyond the harness's caps (a batch above the row window, an ack
        // far beyond what was sent) and a jump of days.
        let rows = |g: &mut Gen| match u8::arbitrary(g) % 16 {
            0 => u8::arbitrary(g),
            _ => u8::arbitrary(g) % 40,
        };
        match u8::arbitrary(g) % 39 {
            0..=6 => Op::Submit { rows: rows(g) },
            7..=9 => Op::SubmitKeyed {
                key: u8::arbitrary(g) % 5,
                rows: rows(g),
            },
            10..=12 => Op::Ready { slot },
            13..=16 => Op::Ack {
                slot,
                rows: u16::arbitrary(g) % 120,
            },
            17 => Op::RawAck {
                slot,
                up_to: if bool::arbitrary(g) {
                    u32::arbitrary(g)
                } else {
                    u32::arbitrary(g) % 400
                },
            },
            18 | 19 => Op::StaleAck {
                slot,
                up_to: u16::arbitrary(g) % 400,
            },
            20..=22 => Op::Fail {
                slot,
                kind: u8::arbitrary(g) % if bool::arbitrary(g) { 6 } else { 8 },
            },
            23 | 24 => Op::Rotate {
                slot,
                grace_ms: u16::arbitrary(g) % 2_000,
            },
            25 => Op::ServerClose { slot },
            26..=30 => Op::Tick {
                ms: match u8::arbitrary(g) % 20 {
                    0 => u32::arbitrary(g),
                    1..=4 => u32::arbitrary(g) % 200_000,
                    5..=11 => u32::arbitrary(g) % 600,
                    _ => u32::arbitrary(g) % 10_000,
                },
            },
            31 => Op::Close {
                grace_ms: u16::arbitrary(g),
            },
            32 => Op::Drift {
                hold: bool::arbitrary(g),
            },
            33 | 34 => Op::Reconciled {
                ok: u8::arbitrary(g) % 4 != 0,
            },
            35 => Op::Flush,
            36 | 37 => Op::RepeatAck { slot },
            _ => Op::PollAgain {
                times: u8::arbitrary(g),
            },
        }
    }
}

#[derive(Debug, Default)]
struct SlotModel {
    opening: Option<ConnId<Raw>>,
    live: Option<ConnId<Raw>>,
    received: u64,
    acked: u64,
    old: Vec<ConnId<Raw>>,
    /// What the most recent old connection had received and acked when it stopped being live.
    old_received: u64,
    old_acked: u64,
}

/// How often a run reached the states the properties are meant to explore.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Rotations the core started.
    pub rotations: u64,
    /// Tables evicted under the stream cap.
    pub evictions: u64,
    /// Acks the core applied on a connection after the service asked it to rotate (while it
    /// drained, or after its half-close).
    pub late_acks: u64,
    /// Retry budgets spent.
    pub budgets_spent: u64,
    /// Tables failed fatally.
    pub tables_failed: u64,
    /// Forward acks (terminal for a connection's batches).
    pub forward_acks: u64,
    /// Submits refused because a window was full.
    pub backpressured: u64,
    /// Ack timeouts.
    pub ack_timeouts: u64,
    /// Inputs from another sink's connection, ignored.
    pub foreign_inputs: u64,
    /// Rows handed back (the non-durable part of each failed batch).
    pub handed_back_rows: u64,
    /// Rows of failed batches that were already durable (the prefixes sliced off).
    pub handed_back_durable: u64,
    /// Slots that drained and reopened for another schema.
    pub schema_switches: u64,
    /// Schemas the catalog refused.
    pub schemas_refused: u64,
    /// Schemas retired once nothing needed them (asked at each drift).
    pub schemas_retired: u64,
}

impl Coverage {
    /// The sum of two coverages.
    #[must_use]
    pub fn plus(self, o: Coverage) -> Coverage {
        Coverage {
            rotations: self.rotations + o.rotations,
            evictions: self.evictions + o.evictions,
            late_acks: self.late_acks + o.late_acks,
            budgets_spent: self.budgets_spent + o.budgets_spent,
            tables_failed: self.tables_failed + o.tables_failed,
            forward_acks: self.forward_acks + o.forward_acks,
            backpressured: self.backpressured + o.backpressured,
            ack_timeouts: self.ack_timeouts + o.ack_timeouts,
            foreign_inputs: self.foreign_inputs + o.foreign_inputs,
            handed_back_rows: self.handed_back_rows + o.handed_back_rows,
            handed_back_durable: self.handed_back_durable + o.handed_back_durable,
            schema_switches: self.schema_switches + o.schema_switches,
            schemas_refused: self.schemas_refused + o.schemas_refused,
            schemas_retired: self.schemas_retired + o.schemas_retired,
        }
    }
}

/// What a finished schedule did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// How batches ended.
    pub tally: Tally,
    /// What it reached.
    pub coverage: Coverage,
}

/// Applies [`Op`]s to a small core and checks the [`Oracle`] after every one: an
/// order-agnostic table of 3 slots, provisioned through a catalog (the harness answers its
/// reconciles at once unless an [`Op::Drift`] holds them), and a keyed table of 2, under a cap
/// of 4 streams (so one table is evicted when the other needs its pool), with tight windows so
/// that backpressure, timeouts and retry budgets are reached. A slot index one past the sink's
/// reaches a connection of another sink, which the core must ignore.
#[derive(Debug)]
pub struct Harness {
    sink: SinkCore<Raw, SimBatch>,
    oracle: Oracle,
    tables: [TableId; 2],
    slots: Vec<SlotModel>,
    /// A connection of another sink of the same lane.
    foreign: Option<ConnId<Raw>>,
    /// Connections the service asked to rotate.
    rotating: Vec<ConnId<Raw>>,
    now: Time,
    next_id: u64,
    closing: bool,
    late_acks: u64,
    foreign_inputs: u64,
    handed_back: (u64, u64),
    /// The provisioned table's current schema, whether reconciles are held, and the held ones.
    schema: u32,
    hold: bool,
    held: Vec<SchemaId>,
    /// Every schema below this one was retired; and how many were.
    retired_below: u32,
    schemas_retired: u64,
    /// What the core answered to each input of the last operation, in order (part of the
    /// [`snapshot`](Self::snapshot): the fast path's steady-state acks must be answered as
    /// the general dispatch answers them).
    handled: Vec<Handled>,
}

impl Default for Harness {
    fn default() -> Harness {
        Harness::new(Harness::config(), Checks::ALL)
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
                max_attempts: 2,
                ..RetryPolicy::default()
            },
            reconcile_timeout: Duration::from_secs(120),
        }
    }

    /// A harness over a core built with `config`, its oracle checking `checks`.
    ///
    /// # Panics
    /// If `config` is invalid or below 3 streams (a bug in the caller's test).
    #[must_use]
    pub fn new(config: SinkConfig, checks: Checks) -> Harness {
        let mut sink = SinkCore::new(config).expect("harness configuration is valid");
        let plain = sink
            .add_table(
                TableSpec::new("main.sim.plain")
                    .sizing(PoolSizing::fixed(3))
                    .reconciled(),
            )
            .expect("table");
        let keyed = sink
            .add_table(
                TableSpec::new("main.sim.keyed")
                    .sizing(PoolSizing::fixed(2))
                    .keyed(),
            )
            .expect("table");
        let mut oracle = Oracle::with_checks(config, checks);
        oracle.register_table(plain, 3);
        oracle.register_table(keyed, 2);
        oracle.provisioned(plain);
        let slots = sink.slot_ids().map(|_| SlotModel::default()).collect();
        Harness {
            sink,
            oracle,
            tables: [plain, keyed],
            slots,
            foreign: Harness::foreign_connection(config),
            rotating: Vec::new(),
            now: Time::ZERO,
            next_id: 0,
            closing: false,
            late_acks: 0,
            foreign_inputs: 0,
            handed_back: (0, 0),
            schema: 1,
            hold: false,
            held: Vec::new(),
            retired_below: 1,
            schemas_retired: 0,
            handled: Vec::new(),
        }
    }

    /// A connection opened by another sink, to feed to this one.
    fn foreign_connection(config: SinkConfig) -> Option<ConnId<Raw>> {
        let mut other = SinkCore::<Raw, SimBatch>::new(config).ok()?;
        let table = other.add_table(TableSpec::new("main.sim.other")).ok()?;
        other
            .submit(
                Time::ZERO,
                table,
                SimBatch::new(0, 1, 8),
                Token::raw("x", 0, 0),
            )
            .ok()?;
        match other.poll_output(Time::ZERO) {
            Output::Open { conn, .. } => Some(conn),
            _ => None,
        }
    }

    /// The same harness with the core's fast path off: every `poll_output` a full pass (see
    /// [`SinkCore::set_fast_path`]).
    #[must_use]
    pub fn full_passes_only(mut self) -> Harness {
        self.sink.set_fast_path(false);
        self
    }

    /// What the core holds, slot by slot and table by table, with its metrics and its answers
    /// to the last operation's inputs: two harnesses fed the same operations must agree on it
    /// whether the core took its fast path or not.
    #[must_use]
    pub fn snapshot(&self) -> String {
        let slots: Vec<_> = self
            .sink
            .slot_ids()
            .map(|s| (self.sink.slot_watermarks(s), self.sink.in_flight(s)))
            .collect();
        let tables: Vec<_> = self
            .tables
            .iter()
            .map(|&t| (self.sink.table_watermarks(t), self.sink.queued(t)))
            .collect();
        let metrics = zerobus_sink::Metrics {
            full_passes: 0,
            ..self.sink.metrics().clone()
        };
        format!(
            "slots {slots:?}\ntables {tables:?}\nopen {}\nclosed {}\nmetrics {metrics:?}\nanswered {:?}",
            self.sink.open_streams(),
            self.sink.is_closed(),
            self.handled,
        )
    }

    /// The core's full passes so far (see [`zerobus_sink::Metrics::full_passes`]).
    #[must_use]
    pub fn full_passes(&self) -> u64 {
        self.sink.metrics().full_passes
    }

    /// Runs `ops` with every check, then [`finish`](Self::finish)es.
    pub fn run(ops: &[Op]) -> Result<Tally, Violation> {
        Harness::run_checking(ops, Checks::ALL).map(|r| r.tally)
    }

    /// Runs `ops` with only `checks`, then finishes; says what the schedule reached.
    pub fn run_checking(ops: &[Op], checks: Checks) -> Result<Run, Violation> {
        let mut h = Harness::new(Harness::config(), checks);
        for op in ops {
            h.apply(op)?;
        }
        h.finish()
    }

    /// The slot a model index names: one past the sink's slots is `None` (another sink's).
    fn slot(&self, slot: u8) -> Option<SlotId> {
        let n = u16::try_from(self.slots.len()).unwrap_or(u16::MAX);
        let i = u16::from(slot) % (n + 1);
        (i < n).then(|| SlotId::from_index(i))
    }

    /// The connection `pick` chooses among the slot's, or another sink's.
    fn conn(
        &mut self,
        slot: u8,
        pick: fn(&SlotModel) -> Option<ConnId<Raw>>,
    ) -> Option<ConnId<Raw>> {
        match self.slot(slot) {
            Some(s) => self.slots.get(s.index()).and_then(pick),
            None => {
                self.foreign_inputs += u64::from(self.foreign.is_some());
                self.foreign
            }
        }
    }

    /// Applies one operation, drains the core and checks the oracle.
    pub fn apply(&mut self, op: &Op) -> Result<(), Violation> {
        self.handled.clear();
        match *op {
            Op::Submit { rows } => self.submit(
                self.tables[0].schema(SchemaId(self.schema)),
                None,
                u64::from(rows),
            )?,
            Op::SubmitKeyed { key, rows } => self.submit(
                self.tables[1].key(u64::from(key)),
                Some(key),
                u64::from(rows),
            )?,
            Op::Ready { slot } => {
                if let Some(conn) = self.conn(slot, |m| m.opening) {
                    self.input(Input::ready(conn));
                }
            }
            Op::Ack { slot, rows } => {
                let up = |m: &SlotModel| m.live;
                if let Some(conn) = self.conn(slot, up) {
                    let m = self.slots.get(conn.slot().index());
                    let up_to = m.map_or(0, |m| (m.acked + u64::from(rows)).min(m.received));
                    self.ack(conn, up_to);
                }
            }
            Op::RepeatAck { slot } => {
                if let Some(conn) = self.conn(slot, |m| m.live) {
                    let acked = self.slots.get(conn.slot().index()).map_or(0, |m| m.acked);
                    self.ack(conn, acked);
                }
            }
            Op::RawAck { slot, up_to } => {
                if let Some(conn) =
                    self.conn(slot, |m| m.live.or(m.opening).or(m.old.last().copied()))
                {
                    self.ack(conn, u64::from(up_to));
                }
            }
            Op::StaleAck { slot, up_to } => {
                // Even counts: a little more of what the old connection received (a late ack
                // on a half-closed call, or a stale one); odd: any count at all.
                // A slot without an old connection defers to the first that has one.
                let old = |m: &SlotModel| m.old.last().copied();
                let fallback = self.slots.iter().find_map(old);
                if let Some(conn) = self.conn(slot, old).or(fallback) {
                    let m = self.slots.get(conn.slot().index());
                    let up_to = match (m, up_to % 2) {
                        (Some(m), 0) => (m.old_acked + u64::from(up_to / 2)).min(m.old_received),
                        _ => u64::from(up_to),
                    };
                    self.ack(conn, up_to);
                }
            }
            Op::Fail { slot, kind } => {
                if let Some(conn) =
                    self.conn(slot, |m| m.live.or(m.opening).or(m.old.last().copied()))
                {
                    self.input(Input::Failed {
                        conn,
                        error: Op::error(kind),
                    });
                }
            }
            Op::ServerClose { slot } => {
                if let Some(conn) =
                    self.conn(slot, |m| m.live.or(m.opening).or(m.old.last().copied()))
                {
                    self.input(Input::Closed { conn });
                }
            }
            Op::Rotate { slot, grace_ms } => {
                if let Some(conn) = self.conn(slot, |m| m.live) {
                    self.oracle.rotation_requested(conn.slot());
                    self.rotating.push(conn);
                    let grace = Duration::from_millis(u64::from(grace_ms));
                    self.input(Input::rotate(conn, grace));
                }
            }
            Op::Tick { ms } => self.now = self.now + Duration::from_millis(u64::from(ms)),
            Op::Drift { hold } => {
                self.retire_old_schemas()?;
                self.schema += 1;
                self.hold = hold;
            }
            Op::Reconciled { ok } => {
                if !self.held.is_empty() {
                    let schema = self.held.remove(0);
                    self.answer(schema, ok);
                }
                self.hold = false;
            }
            Op::Flush => self.sink.flush(self.now),
            Op::PollAgain { times } => {
                for _ in 0..times % 3 {
                    self.drain()?;
                }
            }
            Op::Close { grace_ms } => {
                self.closing = true;
                self.oracle.closing();
                self.sink.close(
                    self.now,
                    self.now + Duration::from_millis(u64::from(grace_ms)),
                );
            }
        }
        self.drain()
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
        let slots: Vec<SlotId> = self.sink.table_slots(table).collect();
        let slot = key.map(|k| slots[usize::from(k) % slots.len().max(1)]);
        let token = Token::raw("sim", 0, i64::try_from(id).unwrap_or(i64::MAX));
        let batch = SimBatch::new(id, rows, 8).of_schema(route.schema_id().0);
        let bytes = batch.bytes();
        self.oracle.set_now(self.now);
        match self.sink.submit(self.now, route, batch, token) {
            Ok(_) => {
                if key.is_none() {
                    self.oracle.schema_of(id, table, route.schema_id().0);
                }
                self.oracle.admitted(id, rows, bytes, table, slot)
            }
            Err(rejected) => self.oracle.refused(
                &self.sink,
                rows,
                bytes,
                table,
                slot,
                slots.len() as u64,
                &rejected.reason,
            ),
        }
    }

    fn ack(&mut self, conn: ConnId<Raw>, up_to: u64) {
        let handled = self.sink.handle(self.now, Input::acked(conn, up_to));
        self.handled.push(handled.clone());
        // Late: on a connection after the service asked it to rotate (draining or
        // half-closed), and the core still applied it.
        if handled == Handled::Applied && self.rotating.contains(&conn) {
            self.late_acks += 1;
        }
        // The oracle decides for itself whether the ack counts (live or half-closed, within
        // what was sent); it does not take the core's word for it.
        self.oracle.acked(conn, up_to);
        if let Some(m) = self.slots.get_mut(conn.slot().index()) {
            if m.live == Some(conn) {
                m.acked = m.acked.max(up_to.min(m.received));
            } else if m.old.last() == Some(&conn) {
                m.old_acked = m.old_acked.max(up_to.min(m.old_received));
            }
        }
    }

    fn input(&mut self, input: Input<Raw>) {
        let conn = input.conn();
        let ready = input == Input::ready(conn);
        let handled = self.sink.handle(self.now, input);
        self.handled.push(handled.clone());
        if handled == Handled::Applied
            && ready
            && let Some(m) = self
                .slots
                .get_mut(conn.slot().index())
                .filter(|m| m.opening == Some(conn))
        {
            m.opening = None;
            m.live = Some(conn);
            m.received = 0;
            m.acked = 0;
        }
    }

    /// As a driver does at a drift: asks the core to retire each earlier schema not yet
    /// retired; the oracle checks that none it retires is still needed.
    fn retire_old_schemas(&mut self) -> Result<(), Violation> {
        let table = self.tables[0];
        for schema in self.retired_below..self.schema {
            if self.sink.retire_schema(table, SchemaId(schema)) == Handled::Applied {
                self.oracle.retired(table, schema)?;
                self.schemas_retired += 1;
                if schema == self.retired_below {
                    self.retired_below += 1;
                }
            }
        }
        Ok(())
    }

    /// The catalog's answer for the provisioned table's `schema`.
    fn answer(&mut self, schema: SchemaId, ok: bool) {
        let table = self.tables[0];
        self.oracle.reconciled(table, schema.0, ok);
        let outcome = if ok {
            Ok(())
        } else {
            Err(format!("column amount of {schema}: narrowing (harness)"))
        };
        let _ = self.sink.reconciled(self.now, table, schema, outcome);
    }

    fn drain(&mut self) -> Result<(), Violation> {
        self.oracle.set_now(self.now);
        loop {
            let out = self.sink.poll_output(self.now);
            let timeout = matches!(out, Output::Timeout(_));
            match &out {
                Output::Reconcile { schema, .. } if self.hold && !self.held.contains(schema) => {
                    self.held.push(*schema);
                }
                Output::Reconcile { .. } if self.hold => {}
                Output::Reconcile { schema, .. } => {
                    let schema = *schema;
                    // Answered after the oracle has seen the request.
                    self.oracle.output(out)?;
                    self.answer(schema, true);
                    continue;
                }
                Output::Open { conn, .. } => {
                    if let Some(m) = self.slots.get_mut(conn.slot().index()) {
                        m.opening = Some(*conn);
                    }
                }
                Output::Send(t) => {
                    if let Some(m) = self.slots.get_mut(t.slot().index()) {
                        m.received += t.rows;
                    }
                }
                Output::Failed(f) => {
                    for b in &f.batches {
                        self.handed_back.0 += b.batch.rows;
                        self.handed_back.1 += b.durable_rows;
                    }
                }
                Output::Close { conn, .. } => {
                    if let Some(m) = self.slots.get_mut(conn.slot().index())
                        && (m.live == Some(*conn) || m.opening == Some(*conn))
                    {
                        if m.live == Some(*conn) {
                            (m.old_received, m.old_acked) = (m.received, m.acked);
                        } else {
                            (m.old_received, m.old_acked) = (0, 0);
                        }
                        m.opening = None;
                        m.live = None;
                        m.old.push(*conn);
                    }
                }
                _ => {}
            }
            self.oracle.output(out)?;
            if timeout {
                break;
            }
        }
        self.oracle.check(&mut self.sink)
    }

    /// Batches admitted and not yet ended, by the oracle's count.
    #[must_use]
    pub fn pending(&self) -> u64 {
        let t = self.oracle.tally();
        t.admitted - t.confirmed - t.failed
    }

    /// What the run reached so far.
    #[must_use]
    pub fn coverage(&self) -> Coverage {
        let m = self.sink.metrics();
        Coverage {
            rotations: m.rotations,
            evictions: m.evictions,
            late_acks: self.late_acks,
            budgets_spent: m.retry_budgets_spent,
            tables_failed: m.tables_failed,
            forward_acks: m.protocol_errors,
            backpressured: m.backpressured,
            ack_timeouts: m.ack_timeouts,
            foreign_inputs: self.foreign_inputs,
            handed_back_rows: self.handed_back.0,
            handed_back_durable: self.handed_back.1,
            schema_switches: m.schema_switches,
            schemas_refused: m.schemas_refused,
            schemas_retired: self.schemas_retired,
        }
    }

    /// Closes the sink (if the schedule did not), lets the close deadline pass and checks that
    /// every admitted batch ended exactly once (invariant 5).
    pub fn finish(mut self) -> Result<Run, Violation> {
        self.apply(&Op::Close { grace_ms: 1_000 })?;
        self.apply(&Op::Tick { ms: 120_000 })?;
        let tally = self.oracle.finish(&self.sink)?;
        Ok(Run {
            tally,
            coverage: self.coverage(),
        })
    }
}
